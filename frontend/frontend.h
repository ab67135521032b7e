// Frontends: read a model and build its forward graph in mtc's IR: the
// mtc DSL, an ONNX file (see fe_onnx_load below), or IR text. fe_load reads
// any of them.
//
// The DSL (frontend/dsl.l, dsl.y, dsl.c) reads mtc's small model language:
//
//   model mlp;
//   dim B = 32, D = 64, K = 10;
//   input x: [B, D];
//   input y: i32[B] classes(K);
//   param w: [D, K] = normal(0.02);
//   loss cross_entropy(x @ w, y);
//
// examples/*.mtc show the whole language; dsl.y has the grammar and dsl.c
// the built-in functions.
#ifndef MTC_FRONTEND_H
#define MTC_FRONTEND_H

#include <stdint.h>

#include "ir.h"

// A command-line `-D NAME=VALUE`: overrides the default of `dim NAME = INT`.
typedef struct FeDefine {
  const char *name;
  int64_t value;
} FeDefine;

// How to read a model (frontend/load.c).
typedef struct FeLoadOptions {
  const FeDefine *defines;  // -D NAME=VALUE: the dims' values
  int ndefines;
  const char *loss, *labels; // ONNX only: see FeOnnxOptions
  uint64_t seed;            // dropout masks
} FeLoadOptions;

// Reads a model by its file's kind: `.onnx` (fe_onnx_load), `.ir` (IR text
// as `mtc inspect` prints it, ir_parse; -D rebinds its dims), else the DSL
// (fe_dsl_load). opt may be NULL. NULL and d on any error; never exits.
IrGraph *fe_load(const char *path, const FeLoadOptions *opt, IrDiag *d);

// A text file (at most 16 MiB, no NUL bytes, not a directory), NUL-terminated
// and malloc'd; NULL and d (at the file, or at the NUL byte) on error.
char *fe_read_text(const char *path, IrDiag *d);

// Reads a DSL file (at most 16 MiB, no NUL bytes) and evaluates it into a
// forward graph: nodes in PHASE_FORWARD, g->loss set, the dims as symbols
// bound to their values; seed the dropouts' masks'. Returns NULL and fills d (when non-NULL)
// on any error; d->loc.file is then `path`. Never exits; frees everything on error.
IrGraph *fe_dsl_load(const char *path, const FeDefine *defs, int ndefs, uint64_t seed, IrDiag *d);

// The same for a NUL-terminated text; filename (may be NULL) names it in
// locations, and its stem is the model's default name.
IrGraph *fe_dsl_parse(const char *text, const char *filename, const FeDefine *defs, int ndefs,
                      uint64_t seed, IrDiag *d);

// ---- ONNX (frontend/onnx.c, onnx_fold.c, onnx_ops.c) -------------------------------

// How to read an ONNX model.
typedef struct FeOnnxOptions {
  const FeDefine *defines;  // values of the inputs' symbolic dims (dim_param), -D B=4
  int ndefines;
  const char *loss;         // NULL: a scalar float output is the loss; "cross-entropy" | "mse"
  const char *labels;       // --loss over this graph output (NULL: the only output)
  uint64_t seed;            // dropout masks
} FeOnnxOptions;

// Reads an ONNX model (opsets 13..17; external data relative to the file)
// into a forward graph: graph inputs become IR inputs (dim_param symbols
// bound by the defines; int64 inputs i32 tokens/classes with the range their
// use implies), float initializers parameters with their values (INIT_DATA),
// other initializers and folded tensors constants, shape subgraphs evaluated
// at compile time. Node names are the locations (IrLoc {name, 0, 0}).
// Returns NULL and fills d on any error; never exits.
IrGraph *fe_onnx_load(const char *path, const FeOnnxOptions *opt, IrDiag *d);

#endif
