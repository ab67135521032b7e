// Frontends: read a model and build its forward graph in mtc's IR.
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

// Reads a DSL file (at most 16 MiB, no NUL bytes) and evaluates it into a
// forward graph: nodes in PHASE_FORWARD, g->loss set, the dims as symbols
// bound to their values. Returns NULL and fills d (when non-NULL) on any
// error; d->loc.file is then `path`. Never exits; frees everything on error.
IrGraph *fe_dsl_load(const char *path, const FeDefine *defs, int ndefs, IrDiag *d);

// The same for a NUL-terminated text; filename (may be NULL) names it in
// locations, and its stem is the model's default name.
IrGraph *fe_dsl_parse(const char *text, const char *filename, const FeDefine *defs, int ndefs,
                      IrDiag *d);

#endif
