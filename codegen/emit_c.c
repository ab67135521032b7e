// The C emitter: writes a self-contained training program.
//
//   DIR/model.c      generated: dims, the memory plan (arena and host region),
//                    forward/backward/update
//   DIR/runtime/     train.c (main), kernels, headers: copied from mtc's runtime/
//   DIR/Makefile     `make` (nvcc, NCCL) and `make cpu` (cc, OpenMP) build ./train
//   DIR/weights.bin  initial parameters, float32, in the order of model.c's table (only for a
//                    model that gives them, e.g. ONNX; the program draws the others)
//   DIR/README.md    how to build and run, and the plan
#define _GNU_SOURCE
#include "codegen.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

// ---- output helpers ----------------------------------------------------------------------

// A run of identical blocks (passes/repeat.c) that is written as one loop:
// every call of each block is its first block's, with each buffer at a
// constant stride per block and each integer that differs affine in the block.
typedef struct Loop {
  const PassRun *run;
  int base, other;     // stretches: the lowest block's, and its neighbour
  int other2;          // ... and the block after that (-1: the run has two)
  int lo, hi;          // layers l = block - 1 it runs over
} Loop;

typedef struct Emit {
  IrGraph *g;
  const CgOptions *opt;
  const MemPlan *m;     // the memory plan (opt->mem)
  FILE *f;
  const char **cname;   // cname[v->id]: the C identifier of each buffer
  SymTab csyms;         // the graph's dims under their C identifiers (cg_ident)
  const char *ind;      // indentation of a statement
  bool *used;           // used[v->id]: the code names the buffer
  const IrNode **adamw; // adamw[v->id]: the AdamW update of parameter value v, or NULL
  // loops
  PassRun *runs;
  int nruns;
  Loop *loop;           // loop[r]: run r as a loop (loop[r].run NULL: written out)
                        // base: the stretch of the lowest block; other: of the next
  int64_t *stride;      // stride[v->id]: bytes per block of a loop's base buffer, or 0
  int64_t *alt;         // ... and bytes more at every other block (two buffers in turn), or 0
  int *layers;          // ... and its layers (0: not a base)
  bool *covered;        // the buffer is a loop's base buffer at another block
  const Loop *in;       // the loop being written
  int64_t scratch;      // the most device scratch one call needs (GPU build)
  // train --profile: the op kinds the nodes with kernels run, in order of first use
  // (kind[op]: its index + 1, 0: none yet)
  int kind[OP_COUNT];
  IrOp kinds[OP_COUNT];
  int nkinds;
} Emit;

__attribute__((format(printf, 2, 3))) static void println(Emit *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->f, fmt, ap);
  va_end(ap);
  fputc('\n', e->f);
}

static void blank(Emit *e) { fputc('\n', e->f); }

// A formula in C, over the dims' C identifiers.
static const char *sym_text(Emit *e, const Sym *s) { return sym_str(&e->g->arena, s, &e->csyms); }

// "[B,T,C]" over the dims' C identifiers (for comments).
static const char *c_shape(Emit *e, const IrValue *v) {
  char buf[1024];
  size_t len = 0;
  buf[len++] = '[';
  for (int i = 0; i < v->rank && len < sizeof buf - 2; i++) {
    if (i)
      buf[len++] = ',';
    len += (size_t)sym_print(buf + len, sizeof buf - len, v->shape[i], &e->csyms);
    if (len >= sizeof buf - 2)
      len = sizeof buf - 2;
  }
  buf[len++] = ']';
  buf[len] = '\0';
  return ir_strdup(&e->g->arena, buf);
}

// A formula as C: the formula itself when every term is an integer under the
// bindings (so C's integer arithmetic is exact), otherwise its value.
static void print_int(Emit *e, const Sym *s) {
  bool exact = true;
  for (int t = 0; t < s->n && exact; t++) {
    Sym *one = ir_alloc(&e->g->arena, sizeof *one + sizeof one->t[0]);
    one->n = 1;
    one->t[0] = s->t[t];
    int64_t v;
    exact = sym_eval(one, &e->g->syms, &v) == 0;
  }
  if (exact && s->n <= 3)
    fputs(sym_text(e, s), e->f);
  else
    fprintf(e->f, "%lld", (long long)ir_eval(e->g, s));
}

// A float literal: "0.5f", "1e-05f", "0.0f".
static const char *float_literal(char *buf, size_t n, double x) {
  if (isinf(x)) // -inf fills masks (ONNX Where); plain C has no literal for it
    return x < 0 ? "(-__builtin_inff())" : "__builtin_inff()";
  snprintf(buf, n - 4, "%.9g", x);
  if (!strpbrk(buf, ".eE"))
    strcat(buf, ".0");
  strcat(buf, "f");
  return buf;
}

static void print_float(Emit *e, double x) {
  char buf[64];
  fputs(float_literal(buf, sizeof buf, x), e->f);
}

// C identifiers for every dim and every buffer (cg_ident), all distinct: a
// buffer is a member (b.x) and a dim a file-scope constant, which C would let
// share a name, but then a tensor's name would decide whether model.c reads
// `b.B` beside the dim `B` or `b.t_38` (one spelling per model, whatever its names).
// Dims first, so that they keep their names.
static void name_buffers(Emit *e) {
  IrGraph *g = e->g;
  IrStrSet taken = {0};
  // dims: room for cg_ident's prefix and suffixes in SYM_NAMELEN
  e->csyms = g->syms;
  for (int i = 0; i < g->syms.n; i++)
    snprintf(e->csyms.name[i], SYM_NAMELEN, "%s",
             cg_ident(&g->arena, g->syms.name[i], &taken, SYM_NAMELEN - 8));
  e->cname = calloc((size_t)g->nvalues, sizeof *e->cname);
  IR_ASSERT(e->cname);
  for (int i = 0; i < g->nvalues; i++)
    e->cname[i] = cg_ident(&g->arena, g->values[i]->name, &taken, SIZE_MAX);
  ir_strset_free(&taken);
}

// The runtime's name of a dtype: RT_F32, RT_I32, RT_BF16 (runtime/dtypes.def).
static const char *rt_dtype(IrDType dt) {
  static const char *const names[] = {
#define DT(name, text, bytes, ctype) "RT_" #name,
#include "dtypes.def"
  };
  return names[dt];
}

static const char *role_name(IrRole r) {
  static const char *const names[] = {"input", "param", "act", "grad", "state", "const",
                                      "bucket", "copy"};
  return names[r];
}

// "(B, T, C) = (4, 64, 128)"
static const char *shape_values(Emit *e, const IrValue *v) {
  char a[512] = "(", b[512] = "(";
  for (int i = 0; i < v->rank; i++) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)ir_eval(e->g, v->shape[i]));
    strncat(a, sym_text(e, v->shape[i]), sizeof a - strlen(a) - 4);
    strncat(b, num, sizeof b - strlen(b) - 4);
    if (i + 1 < v->rank)
      strcat(a, ", "), strcat(b, ", ");
  }
  strcat(a, ")"), strcat(b, ")");
  char out[1100];
  snprintf(out, sizeof out, "%s = %s", a, b);
  return ir_strdup(&e->g->arena, out);
}

// The models of the program (CgOptions.nmodels; 0 reads as 1).
static int nmodels(const CgOptions *o) { return o->nmodels > 1 ? o->nmodels : 1; }

// Model k's file and the symbol of its table: model.c and mtc_model, then model_gK.c and
// mtc_model_gK.
static void model_file(char *buf, size_t n, int k) {
  if (k)
    snprintf(buf, n, "model_g%d.c", k);
  else
    snprintf(buf, n, "model.c");
}
static void model_symbol(char *buf, size_t n, int k) {
  if (k)
    snprintf(buf, n, "mtc_model_g%d", k);
  else
    snprintf(buf, n, "mtc_model");
}

// ---- model.c -------------------------------------------------------------------------------

static void emit_header(Emit *e, const char *source) {
  IrGraph *g = e->g;
  fputs("// model.c: the training step of ", e->f);
  cg_put_comment_name(e->f, g->name);
  fputs(", generated by mtc from ", e->f);
  cg_put_comment_name(e->f, source ? source : "an IR graph");
  fputs(".\n", e->f);
  println(e, "// Do not edit: recompile the model instead.");
  println(e, "//");
  println(e, "// Memory plan: one arena of %lld bytes; persistent %lld bytes (inputs, parameters,",
          (long long)e->m->arena_bytes, (long long)e->m->persistent_bytes);
  println(e, "// optimizer state), then transient buffers placed by liveness. Peak live bytes:");
  println(e, "// %lld, at step %d of the schedule, = %s.", (long long)e->m->peak_live_bytes,
          e->m->peak_at, sym_text(e, e->m->peak_formula));
  if (e->m->host_bytes)
    println(e, "// Host region (offloaded model state, swapped activations; role h:...): %lld "
            "bytes, apart from the arena.", (long long)e->m->host_bytes);
  println(e, "//");
  println(e, "// Identical blocks run as loops; their buffers are at a constant stride per");
  println(e, "// block: \"+ l * S\" below is the buffer of layer l (block l + 1, or use l of");
  println(e, "// a block's shared layers), or in two taken in turn: \"+ (l & 1) * S\".");
  println(e, "//");
  println(e, "//   %-28s %-6s %-22s %12s %12s  %s", "buffer", "role", "shape", "bytes", "offset",
          "live");
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (e->covered[i] && !e->layers[i])
      continue;  // a loop's buffer for another block: in its base buffer's row
    char role[16], per[64] = "";
    snprintf(role, sizeof role, "%s%s", v->host ? "h:" : "", role_name(v->role));
    if (e->layers[i] && e->alt[i])   // two buffers in turn
      snprintf(per, sizeof per, " %c (l & 1) * %lld (%d layers)", e->alt[i] < 0 ? '-' : '+',
               (long long)llabs(e->alt[i]), e->layers[i]);
    else if (e->layers[i])
      snprintf(per, sizeof per, " %c l * %lld (%d layers)", e->stride[i] < 0 ? '-' : '+',
               (long long)llabs(e->stride[i]), e->layers[i]);
    println(e, "//   %-28s %-6s %-22s %12lld %12lld  [%d, %d]%s", e->cname[i], role,
            c_shape(e, v), (long long)e->m->bytes[i], (long long)e->m->offset[i],
            e->m->first_use[i], e->m->last_use[i], per);
  }
  println(e, "#include <stddef.h>  // NULL: an absent optional tensor");
  blank(e);
  println(e, "#include \"dist.h\"");
  println(e, "#include \"kernels.h\"");
  println(e, "#include \"model_api.h\"");
  blank(e);
}

// Does `word` occur in text as a whole identifier?
static bool uses_word(const char *text, const char *word) {
  size_t n = strlen(word);
  for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
    bool start = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.');
    bool end = !(isalnum((unsigned char)p[n]) || p[n] == '_');
    if (start && end)
      return true;
  }
  return false;
}

// The dims the code uses become constants; the others are listed in a comment.
static void emit_dims(Emit *e, const char *code) {
  IrGraph *g = e->g;
  println(e, "// dims");
  for (int i = 0; i < g->syms.n; i++) {
    if (!g->syms.bound[i])
      continue;
    const char *name = e->csyms.name[i];
    if (uses_word(code, name))
      println(e, "static const long %s = %lld;", name, (long long)g->syms.value[i]);
    else
      println(e, "// %s = %lld (no size in the code uses it)", name, (long long)g->syms.value[i]);
  }
  blank(e);
}

static bool has_host_values(const Emit *e) { return e->m->host_bytes > 0; }

// Whether n reads or writes host memory (host), or device memory.
static bool node_uses(const IrNode *n, bool host) {
  for (int k = 0; k < n->nin + n->nout; k++)
    if ((k < n->nin ? n->in[k] : n->out[k - n->nin])->host == host)
      return true;
  return false;
}

// Whether a node of `phase` reads or writes host memory (forward and
// backward: swapped activations' copies; backward: gradient offload's copies
// and sums; the update: offload's), or (device) the arena (not the update of
// a program whose every update is offloaded with its parameters).
static bool phase_uses(const Emit *e, IrPhase phase, bool device) {
  for (int i = 0; i < e->g->nnodes; i++)
    if (e->g->nodes[i]->phase == phase &&
        node_uses(e->g->nodes[i], !device))
      return true;
  return false;
}

// The struct of the tensors in one memory (the device arena, or the host
// region) and the function that binds it to the memory's base.
static void emit_bind(Emit *e, bool host) {
  IrGraph *g = e->g;
  const char *type = host ? "HostBuffers" : "Buffers", *base = host ? "host" : "arena";
  println(e, "typedef struct %s {", type);
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->host == host && e->used[i])
      println(e, "  %s *%s; // %s %s", ir_dtype_ctype(v->dtype), e->cname[i],
              role_name(v->role), c_shape(e, v));
  }
  println(e, "} %s;", type);
  blank(e);
  println(e, "static %s bind%s(char *%s) {", type, host ? "_host" : "", base);
  println(e, "  %s b;", type);
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->host == host && e->used[i])
      println(e, "  b.%s = (%s *)(%s + %lld);", e->cname[i], ir_dtype_ctype(v->dtype),
              base, (long long)e->m->offset[i]);
  }
  println(e, "  return b;");
  println(e, "}");
  blank(e);
}

// The buffers the code names (a loop names its base block's).
static void emit_buffers(Emit *e) {
  println(e, "// Every tensor is a fixed offset in the arena.");
  emit_bind(e, false);
  if (!has_host_values(e))
    return;
  println(e, "// Offload: the tensors in host memory, each a fixed offset in the host region.");
  emit_bind(e, true);
}

// In a loop, "(l - lo) * " (or "l * ") before a per-block step.
static void emit_layer_times(Emit *e) {
  if (e->in->lo)
    fprintf(e->f, "(l - %d) * ", e->in->lo);
  else
    fputs("l * ", e->f);
}

// 1 at every other layer from the loop's first, times (a buffer of two taken in turn)
static void emit_layer_parity(Emit *e) {
  if (e->in->lo)
    fprintf(e->f, "((l - %d) & 1) * ", e->in->lo);
  else
    fputs("(l & 1) * ", e->f);
}

// How an argument moves per block in the loop being written: step a block, and alt more at
// every other block from the base's.
typedef struct Move {
  int64_t step, alt;
} Move;

// The move of something that goes `one` from the base's block to the next and `two` to the one
// after: a step, and what the next block has more (alt, nonzero in two buffers taken in turn).
static Move move_of(int64_t one, int64_t two) { return (Move){two / 2, one - two / 2}; }

static Move arg_move(Emit *e, const CgArg *a, const CgArg *next, const CgArg *next2);

// The rank whose part of a bucket an argument is: along dp, over every rank, or over a sub
// block's replicas (runtime/dist.h).
static const char *rank_of(const CgArg *a) {
  if (a->rank_axis == ir_rt_axis(IR_MESH_SUBREP))
    return "rt_axis_rank(RT_AXIS_SUBREP)";
  IR_ASSERT(a->rank_axis == ir_rt_axis(IR_MESH_DP) || a->rank_axis == ir_rt_axis(IR_MESH_ALL));
  return a->rank_axis == ir_rt_axis(IR_MESH_DP) ? "rt_dist.dp_rank" : "rt_dist.rank";
}

// This rank's start in a bucket of parts (CgArg.rank_stride): r * stride, or over uneven parts
// (r - first) * stride + base.
static void emit_rank_start(Emit *e, const CgArg *a) {
  if (a->rank_first)
    fprintf(e->f, "(%s - %d) * ", rank_of(a), a->rank_first);
  else
    fprintf(e->f, "%s * ", rank_of(a));
  print_int(e, a->rank_stride);
  if (a->rank_base && !sym_is_zero(a->rank_base)) {
    fputs(" + ", e->f);
    print_int(e, a->rank_base);
  }
}

static void emit_arg(Emit *e, const CgArg *a, const CgArg *next, const CgArg *next2) {
  Move mv = next ? arg_move(e, a, next, next2) : (Move){0, 0};
  int64_t step = mv.step;
  switch (a->kind) {
  case CG_BUF:
    e->used[a->buf->id] = true;
    fprintf(e->f, "%s.%s", a->buf->host ? "hb" : "b", e->cname[a->buf->id]);
    if (a->rank_stride) { // this rank's part of a bucket
      fputs(" + ", e->f);
      emit_rank_start(e, a);
    }
    if (a->elem_off) { // a range of it
      fputs(" + ", e->f);
      print_int(e, a->elem_off);
    }
    if (step) { // the block's own, in a loop
      int64_t elems = step / ir_dtype_size(a->buf->dtype);
      fputs(elems < 0 ? " - " : " + ", e->f);
      emit_layer_times(e);
      if (elems == ir_eval(e->g, ir_numel(e->g, a->buf)))
        print_int(e, ir_numel(e->g, a->buf));
      else
        fprintf(e->f, "%lld", (long long)llabs(elems));
    }
    if (mv.alt) { // the other of its two buffers, at every other block
      int64_t elems = mv.alt / ir_dtype_size(a->buf->dtype);
      fputs(elems < 0 ? " - " : " + ", e->f);
      emit_layer_parity(e);
      fprintf(e->f, "%lld", (long long)llabs(elems));
    }
    break;
  case CG_INT:
    IR_ASSERT(!mv.alt);   // (loop_check: integers move by steps)
    if (step || a->rank_stride)
      fputc('(', e->f);
    print_int(e, a->i);
    if (a->rank_stride) { // less this rank's start
      fputs(a->rank_base ? " - (" : " - ", e->f);
      emit_rank_start(e, a);
      if (a->rank_base)
        fputc(')', e->f);
    }
    if (step) {
      fputs(" + ", e->f);
      emit_layer_times(e);
      fprintf(e->f, "%lld", (long long)step);
    }
    if (step || a->rank_stride)
      fputc(')', e->f);
    break;
  case CG_ENUM: fputs(a->name, e->f); break;
  case CG_FLOAT: print_float(e, a->f); break;
  case CG_INTS:
    fputs("(long[]){", e->f);
    for (int k = 0; k < a->n; k++) {
      if (k)
        fputs(", ", e->f);
      print_int(e, a->ints[k]);
    }
    fputc('}', e->f);
    break;
  case CG_HPARAM: fprintf(e->f, "h->%s", a->name); break;
  case CG_NONE: fputs("NULL", e->f); break;
  }
}

// The node as a comment: "%x = layernorm(%h, %w, %b)  gpt2.mtc:14:11"
// (names from the model are written by cg_put_comment_name: nothing in one
// can end the comment or continue it onto the next line), after the profile's mark of its op
// when it runs kernels (runtime/profile.h; kind: its index, -1: none).
static void emit_node_comment(Emit *e, const IrNode *n, int kind) {
  fputs(e->ind, e->f);
  if (kind >= 0)
    fprintf(e->f, "RT_OP(%d);  ", kind);
  fputs("// ", e->f);
  for (int i = 0; i < n->nout; i++) {
    fputs(i ? ", " : "", e->f);
    cg_put_comment_name(e->f, n->out[i]->name);
  }
  fprintf(e->f, "%s%s(", n->nout ? " = " : "", ir_op_name(n->op));
  for (int i = 0; i < n->nin; i++) {
    fputs(i ? ", " : "", e->f);
    cg_put_comment_name(e->f, n->in[i]->name);
  }
  fputc(')', e->f);
  if (n->loc.file) {
    fputs(n->loc.line > 0 ? "  " : "  node ", e->f);
    cg_put_comment_name(e->f, n->loc.file);
    if (n->loc.line > 0)
      fprintf(e->f, ":%d:%d", n->loc.line, n->loc.col);
  }
  fputc('\n', e->f);
}

// A call; in a loop, next is the same call of the next block, next2 of the one after (NULL: the
// loop has two).
static void emit_call(Emit *e, const CgCall *c, const CgCall *next, const CgCall *next2) {
  int64_t need = cg_call_scratch(e->g, c);
  e->scratch = need > e->scratch ? need : e->scratch;
  fprintf(e->f, "%srt_%s%s(", e->ind, cg_kernel_name(c->k), cg_call_suffix(c));
  for (int j = 0; j < c->nargs; j++) {
    if (j)
      fputs(", ", e->f);
    emit_arg(e, &c->args[j], next ? &next->args[j] : NULL, next2 ? &next2->args[j] : NULL);
  }
  fputs(");\n", e->f);
}

// The GPU build's device memory beside the arena: the GEMM library's
// workspace and the largest scratch of one kernel, each 256-byte aligned.
static int64_t workspace_bytes(const Emit *e) {
  return RT_GEMM_WORKSPACE_BYTES + (e->scratch + 255) / 256 * 256;
}

static bool has_op(const IrGraph *g, IrOp op) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == op)
      return true;
  return false;
}

// A graph compiled for AdamW can also run SGD: each AdamW call switches on
// h->optimizer (the rest of the update, collectives and copies, runs either way).
static void emit_adamw_call(Emit *e, const CgCall *calls, const CgCall *next,
                            const CgCall *next2) {
  println(e, "%sif (h->optimizer == RT_OPT_SGD)", e->ind);
  fputs("  ", e->f);
  emit_call(e, &calls[1], next ? &next[1] : NULL, next2 ? &next2[1] : NULL);
  println(e, "%selse", e->ind);
  fputs("  ", e->f);
  emit_call(e, &calls[0], next ? &next[0] : NULL, next2 ? &next2[0] : NULL);
}

// ---- loops over identical blocks ---------------------------------------------------------

// The calls that execute node n: cg_lower's, then (AdamW) the SGD step it
// switches to. Returns how many, or -1.
static int lower_node(Emit *e, const IrNode *n, CgCall *calls, int max, IrDiag *d) {
  int nc = cg_lower(e->g, e->m, n, calls, max - 1, d);
  if (nc >= 0 && n->op == OP_ADAMW)
    cg_lower_adamw_as_sgd(e->g, n, &calls[nc++]);
  return nc;
}

static bool same_sym(const Sym *a, const Sym *b) { return a == b || (a && b && sym_eq(a, b)); }

// How argument y differs from x, the same argument of another block's call:
// *delta is 0 when equal, the byte distance of two buffers otherwise, or the
// difference of two integer constants. false when they differ otherwise.
static bool arg_delta(const MemPlan *m, const CgArg *x, const CgArg *y, int64_t *delta) {
  *delta = 0;
  if (x->kind != y->kind)
    return false;
  switch (x->kind) {
  case CG_BUF:
    *delta = m->offset[y->buf->id] - m->offset[x->buf->id];
    return x->buf->host == y->buf->host && x->buf->dtype == y->buf->dtype &&
           same_sym(x->rank_stride, y->rank_stride) && x->rank_axis == y->rank_axis &&
           x->rank_first == y->rank_first && same_sym(x->rank_base, y->rank_base) &&
           same_sym(x->elem_off, y->elem_off) && *delta % ir_dtype_size(x->buf->dtype) == 0;
  case CG_INT: {
    int64_t a, b;
    if (!same_sym(x->rank_stride, y->rank_stride) || x->rank_axis != y->rank_axis ||
        x->rank_first != y->rank_first || !same_sym(x->rank_base, y->rank_base))
      return false;
    if (sym_eq(x->i, y->i))
      return true;
    if (!sym_is_const(x->i, &a) || !sym_is_const(y->i, &b))
      return false;
    *delta = b - a;
    return true;
  }
  case CG_ENUM: return !strcmp(x->name, y->name);
  case CG_FLOAT: return x->f == y->f || (isnan(x->f) && isnan(y->f));
  case CG_HPARAM: return !strcmp(x->name, y->name);
  case CG_NONE: return true;
  case CG_INTS: return x->n == y->n && sym_list_eq(x->ints, y->ints, x->n);
  }
  return false;
}

// Per block, in the loop being written: how the argument moves (next is the same argument in
// the block after the base block, next2 in the one after that, or NULL).
static Move arg_move(Emit *e, const CgArg *a, const CgArg *next, const CgArg *next2) {
  int64_t one, two;
  IR_ASSERT(arg_delta(e->m, a, next, &one));
  if (!next2)
    return (Move){one, 0};
  IR_ASSERT(arg_delta(e->m, a, next2, &two));
  return move_of(one, two);
}

static const IrNode *stretch_node(const IrGraph *g, const PassRun *r, int j, int i) {
  return g->nodes[r->first + j * r->len + i];
}

#define MAXCALLS 64

// Do calls x and y match: the same kernels, each argument the same or (a
// buffer, an integer) moved? The block one on (blocks 1) sets each argument's move a block, the
// one after (2) splits it into a step and, for a buffer, an alternation (a buffer of two taken
// in turn moves by alt, then back); each argument of a further block must be x's moved by
// `blocks` steps and, at an odd distance, alt.
static bool calls_match(Emit *e, const CgCall *x, const CgCall *y, int nc, Move mv[][CG_MAXARGS],
                        int blocks) {
  for (int c = 0; c < nc; c++) {
    if (x[c].k != y[c].k || x[c].nargs != y[c].nargs)
      return false;
    for (int a = 0; a < x[c].nargs; a++) {
      int64_t delta;
      Move *m = &mv[c][a];
      if (!arg_delta(e->m, &x[c].args[a], &y[c].args[a], &delta))
        return false;
      if (blocks == 1) {
        *m = (Move){delta, 0};
      } else if (blocks == 2) {
        if (delta % 2 || (delta != 2 * m->step && x[c].args[a].kind != CG_BUF))
          return false;
        *m = move_of(m->step, delta);
      } else if (delta != m->step * blocks + (blocks & 1) * m->alt) {
        return false;
      }
    }
  }
  return true;
}

// Can run r be a loop? Every call of every block must be the base block's
// with each argument moved by (block - base block) times its step (and, where it alternates,
// its alt at an odd distance), the moves being what the two blocks after the base give.
static bool loop_check(Emit *e, const PassRun *r, Loop *L, IrDiag *d) {
  *L = (Loop){.run = r, .base = r->step > 0 ? 0 : r->count - 1};
  int dir = L->base == 0 ? 1 : -1;   // from the base's stretch to the next block's
  L->other = L->base + dir;
  L->other2 = r->count > 2 ? L->base + 2 * dir : -1;
  L->lo = pass_run_index(r, L->base) - !r->by_use;  // l: the layer (block l + 1), or the use
  L->hi = L->lo + r->count - 1;
  CgCall *cb = malloc(2 * MAXCALLS * sizeof *cb), *cj = cb + MAXCALLS;
  Move (*mv)[CG_MAXARGS] = malloc(MAXCALLS * sizeof *mv);
  IR_ASSERT(cb && mv);
  bool ok = true;
  int bb = pass_run_index(r, L->base);
  for (int i = 0; i < r->len && ok; i++) {
    int nb = lower_node(e, stretch_node(e->g, r, L->base, i), cb, MAXCALLS, d);
    ok = nb >= 0;
    for (int k = 1; k < r->count && ok; k++) {   // by distance from the base
      int j = L->base + k * dir;
      int nj = lower_node(e, stretch_node(e->g, r, j, i), cj, MAXCALLS, d);
      ok = nj == nb && calls_match(e, cb, cj, nb, mv, pass_run_index(r, j) - bb);
    }
  }
  free(cb), free(mv);
  if (!ok)
    L->run = NULL;
  return ok;
}

// Decides which runs are loops, and marks their buffers for the memory-plan
// table: a loop's base buffers with their stride, the others as covered.
static void plan_loops(Emit *e, IrDiag *d) {
  IrGraph *g = e->g;
  e->runs = pass_find_runs(g, &e->nruns);
  e->loop = calloc((size_t)e->nruns + 1, sizeof *e->loop);
  e->stride = calloc((size_t)g->nvalues + 1, sizeof *e->stride);
  e->alt = calloc((size_t)g->nvalues + 1, sizeof *e->alt);
  e->layers = calloc((size_t)g->nvalues + 1, sizeof *e->layers);
  e->covered = calloc((size_t)g->nvalues + 1, sizeof *e->covered);
  IR_ASSERT(e->loop && e->stride && e->alt && e->layers && e->covered);
  for (int r = 0; r < e->nruns; r++) {
    Loop *L = &e->loop[r];
    const PassRun *run = &e->runs[r];
    if (!loop_check(e, run, L, d))
      continue;
    for (int p = 0, np = pass_run_places(g, run); p < np; p++) {
      IrValue *v = pass_run_value(g, run, L->base, p), *w = pass_run_value(g, run, L->other, p);
      if (v == w)
        continue;
      int64_t one = e->m->offset[w->id] - e->m->offset[v->id], two = 2 * one;
      if (L->other2 >= 0)
        two = e->m->offset[pass_run_value(g, run, L->other2, p)->id] - e->m->offset[v->id];
      Move mv = move_of(one, two);
      e->stride[v->id] = mv.step;
      e->alt[v->id] = mv.alt;
      e->layers[v->id] = run->count;
      for (int j = 0; j < run->count; j++)
        if (j != L->base)
          e->covered[pass_run_value(g, run, j, p)->id] = true;
    }
  }
}

// (next, next2: in a loop, the node's calls in the next two blocks, as emit_call takes them)
static void emit_node(Emit *e, const IrNode *n, const CgCall *calls, int nc,
                      const CgCall *next, const CgCall *next2) {
  if (nc > 0 && !e->kind[n->op]) {
    e->kinds[e->nkinds++] = n->op;
    e->kind[n->op] = e->nkinds;
  }
  emit_node_comment(e, n, nc > 0 ? e->kind[n->op] - 1 : -1);
  if (n->op == OP_ADAMW) {
    IR_ASSERT(nc == 2);
    emit_adamw_call(e, calls, next, next2);
  } else {
    for (int c = 0; c < nc; c++)
      emit_call(e, &calls[c], next ? &next[c] : NULL, next2 ? &next2[c] : NULL);
  }
}

// Run L as: for (int l = lo; l <= hi; l++) { the base block's calls }.
static int emit_loop(Emit *e, const Loop *L, IrDiag *d) {
  const PassRun *r = L->run;
  if (r->by_use)
    println(e, "%s// ---- block %d, its shared layers' uses %d to %d: one loop, use l", e->ind,
            r->block, pass_run_index(r, 0), pass_run_index(r, r->count - 1));
  else
    println(e, "%s// ---- blocks %d to %d: one loop, layer l is block l + 1", e->ind,
            pass_run_index(r, 0), pass_run_index(r, r->count - 1));
  if (r->step > 0)
    println(e, "%sfor (int l = %d; l <= %d; l++) {", e->ind, L->lo, L->hi);
  else
    println(e, "%sfor (int l = %d; l >= %d; l--) {", e->ind, L->hi, L->lo);
  const char *outer = e->ind;
  e->ind = "    ";
  e->in = L;
  CgCall *cb = malloc(3 * MAXCALLS * sizeof *cb), *co = cb + MAXCALLS, *co2 = co + MAXCALLS;
  IR_ASSERT(cb);
  int rc = 0;
  for (int i = 0; i < r->len && !rc; i++) {
    const IrNode *n = stretch_node(e->g, r, L->base, i);
    int nb = lower_node(e, n, cb, MAXCALLS, d);
    int no = lower_node(e, stretch_node(e->g, r, L->other, i), co, MAXCALLS, d);
    int no2 = L->other2 < 0 ? nb : lower_node(e, stretch_node(e->g, r, L->other2, i), co2,
                                              MAXCALLS, d);
    if (nb < 0 || no != nb || no2 != nb)
      rc = -1;
    else
      emit_node(e, n, cb, nb, co, L->other2 < 0 ? NULL : co2);
  }
  free(cb);
  e->in = NULL;
  e->ind = outer;
  println(e, "%s}", e->ind);
  return rc;
}

static int emit_phase(Emit *e, IrPhase phase, const char *signature, IrDiag *d) {
  IrGraph *g = e->g;
  println(e, "static void %s {", signature);
  println(e, phase_uses(e, phase, true) ? "  Buffers b = bind(arena);" : "  (void)arena;");
  if (phase_uses(e, phase, false))
    println(e, "  HostBuffers hb = bind_host(host);");
  else
    println(e, "  (void)host;");
  int block = -1, r = 0;
  CgCall calls[MAXCALLS];
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    while (r < e->nruns && e->runs[r].first < i)
      r++;
    if (n->phase != phase)
      continue;
    if (r < e->nruns && e->runs[r].first == i && e->loop[r].run) {
      if (emit_loop(e, &e->loop[r], d))
        return -1;
      i += e->runs[r].len * e->runs[r].count - 1;
      block = -1;
      continue;
    }
    if (n->block != block && n->block > 0)
      println(e, "  // ---- block %d", n->block);
    block = n->block;
    int nc = lower_node(e, n, calls, MAXCALLS, d);
    if (nc < 0)
      return -1;
    emit_node(e, n, calls, nc, NULL, NULL);
  }
  println(e, "  RT_OP_END();");
  println(e, "}");
  blank(e);
  return 0;
}

// Uneven batch shares with collectives every micro-batch (ZeRO 2, 3, gradient offload): a
// replica that runs fewer micro-batches than the most joins the others' bucket collectives for
// each one it does not run, after its own (train.c), with a ghost micro-batch: a grads bucket
// zeroed, each shard placed in its gathered bucket, the collectives over buckets and their
// waits, the accumulations of what they reduce (its shard: the others' gradients; a whole
// bucket: zeros; offloaded: copied to the host and added there), in forward's order and
// (train) backward's, no compute. Its collectives that wait for the last micro-batch (ZeRO 0,
// 1: the accumulated gradients) run in the last ghost (dist.c).
// (slots, copies: the collectives' and copies' in the ghost so far, whose waits are in it; NULL:
// no wait)
static bool in_ghost(const IrNode *n, const bool *slots, const bool *copies) {
  switch (n->op) {
  case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_REDUCE:
    return n->in[0]->role == ROLE_BUCKET;
  case OP_COMM_WAIT: return slots && slots[ir_attr_i(n, "slot")];
  case OP_COPY_WAIT: return copies && copies[ir_attr_i(n, "slot")];
  case OP_UNSHARD: return true;
  case OP_FILL: return n->out[0]->role == ROLE_BUCKET;
  case OP_ACCUMULATE: return n->in[0]->role == ROLE_BUCKET;
  case OP_TO_HOST: return n->in[0]->role == ROLE_BUCKET;   // (gradient offload)
  default: return false;
  }
}

static bool has_ghost(const Emit *e) {
  const PassLowered *lw = e->opt->lowered;
  for (int b = 0; lw && lw->plan.replica_micro && b < lw->nbuckets; b++)
    if (lw->bucket[b].zero >= 2 || plan_block(&lw->plan, lw->bucket[b].block)->offload_grads)
      return true;
  return false;
}

static int emit_ghost(Emit *e, IrDiag *d) {
  IrGraph *g = e->g;
  println(e, "static void ghost(char *arena, char *host, int train) {");
  println(e, "  Buffers b = bind(arena);");
  bool host = false;   // parameter offload: shards placed from host memory
  for (int i = 0; i < g->nnodes; i++)
    host |= g->nodes[i]->phase <= PHASE_BACKWARD && in_ghost(g->nodes[i], NULL, NULL) &&
            node_uses(g->nodes[i], true);
  println(e, host ? "  HostBuffers hb = bind_host(host);" : "  (void)host;");
  bool *slots = calloc((size_t)e->opt->lowered->nslots + 1, sizeof *slots);
  int ncopies = 0;   // the copies' slots (passes/copies.c numbers them from 0)
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_COPY_WAIT && ir_attr_i(g->nodes[i], "slot") >= ncopies)
      ncopies = (int)ir_attr_i(g->nodes[i], "slot") + 1;
  bool *copies = calloc((size_t)ncopies + 1, sizeof *copies);
  IR_ASSERT(slots && copies);
  CgCall calls[MAXCALLS];
  int rc = 0;
  for (int phase = PHASE_FORWARD; phase <= PHASE_BACKWARD && !rc; phase++) {
    if (phase == PHASE_BACKWARD)
      println(e, "  if (!train) {\n    RT_OP_END();\n    return;\n  }");
    for (int i = 0; i < g->nnodes && !rc; i++) {
      const IrNode *n = g->nodes[i];
      if ((int)n->phase != phase || !in_ghost(n, slots, copies))
        continue;
      if (n->op == OP_ALL_GATHER || n->op == OP_REDUCE_SCATTER || n->op == OP_ALL_REDUCE)
        slots[ir_attr_i(n, "slot")] = true;
      if (n->op == OP_TO_HOST && ir_attr_i(n, "slot") >= 0)
        copies[ir_attr_i(n, "slot")] = true;
      int nc = lower_node(e, n, calls, MAXCALLS, d);
      if (nc < 0)
        rc = -1;
      else
        emit_node(e, n, calls, nc, NULL, NULL);
    }
  }
  free(slots), free(copies);
  println(e, "  RT_OP_END();");
  println(e, "}");
  blank(e);
  return rc;
}

// A to_device whose host value must start as the device's: the parameters
// the host updates (float32 offload), not the bf16 copies the host makes.
static bool inits_host(const IrNode *n) { return n->op == OP_TO_DEVICE && !n->in[1]->producer; }

static bool has_init_host(const Emit *e) {
  for (int i = 0; i < e->g->nnodes; i++)
    if (inits_host(e->g->nodes[i]))
      return true;
  return false;
}

// Offload: the host's copies of device values (the parameters the host
// updates) start as those values: each to_device of the update, backwards.
static int emit_init_host(Emit *e, IrDiag *d) {
  IrGraph *g = e->g;
  println(e, "static void init_host(char *arena, char *host) {");
  println(e, "  Buffers b = bind(arena);");
  println(e, "  HostBuffers hb = bind_host(host);");
  CgCall calls[4];
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if (!inits_host(n))
      continue;
    if (cg_lower(g, e->m, n, calls, 4, d) != 1)
      return -1;
    CgCall back = calls[0];
    back.k = CG_K_to_host;
    back.args[0] = calls[0].args[1];
    back.args[1] = calls[0].args[0];
    back.args[3].i = sym_const(&g->arena, -1);   // done on return
    emit_call(e, &back, NULL, NULL);
  }
  println(e, "}");
  blank(e);
  return 0;
}

// bf16 mixed precision: the parameters' working copies start as the parameters,
// each written as the update writes it: its assign node, (offload) the host's
// cast of its masters and their copy to the device (and its wait), and (ZeRO 1-2, where a
// rank writes its part of the copies) the all-gather of the copies.
static bool writes_copies(const Emit *e, const IrNode *n) {
  if (n->op == OP_ASSIGN || (n->op == OP_CAST && n->phase == PHASE_UPDATE && n->in[0]->host))
    return true;
  const PassLowered *lw = e->opt->lowered;
  if (n->phase != PHASE_UPDATE || !lw ||
      (n->op != OP_ALL_GATHER && n->op != OP_COMM_WAIT && n->op != OP_TO_DEVICE &&
       n->op != OP_COPY_WAIT))
    return false;
  for (int b = 0; b < lw->nbuckets; b++)
    if (lw->bucket[b].copies && n->in[0] == lw->bucket[b].copies)
      return true;
  return false;
}

static bool has_copies(const Emit *e) {
  for (int i = 0; i < e->g->nvalues; i++)
    if (e->g->values[i]->role == ROLE_COPY)
      return true;
  return false;
}

static int emit_init_copies(Emit *e, IrDiag *d) {
  IrGraph *g = e->g;
  println(e, "static void init_copies(char *arena, char *host) {");
  bool host = false, device = false;   // (parameter offload: the copies may all be the host's)
  for (int i = 0; i < g->nnodes; i++)
    if (writes_copies(e, g->nodes[i])) {
      host |= node_uses(g->nodes[i], true);
      device |= node_uses(g->nodes[i], false);
    }
  println(e, device ? "  Buffers b = bind(arena);" : "  (void)arena;");
  println(e, host ? "  HostBuffers hb = bind_host(host);" : "  (void)host;");
  CgCall calls[MAXCALLS];
  for (int i = 0; i < g->nnodes; i++) {
    const IrNode *n = g->nodes[i];
    if (!writes_copies(e, n))
      continue;
    int nc = cg_lower_alone(e->g, e->m, n, calls, MAXCALLS, d);
    if (nc < 0)
      return -1;
    emit_node(e, n, calls, nc, NULL, NULL);
  }
  println(e, "}");
  blank(e);
  return 0;
}

static const char *input_kind(IrInputKind k) {
  static const char *const names[] = {"RT_IN_RANDN", "RT_IN_CLASSES", "RT_IN_TOKENS",
                                      "RT_IN_TARGETS", "RT_IN_MASK", "RT_IN_LABELS"};
  return names[k];
}


// The dim of v padded but whole on every rank (a bf16 program's vocabulary), or -1.
static int padded_whole_dim(const IrValue *v) {
  for (int d = 0; d < v->rank; d++)
    if (v->layout[d].axis == IR_MESH_NONE && v->layout[d].valid)
      return d;
  return -1;
}

// A params-table entry's rt_split[2]: v's dims split over ranks, {dim, axis,
// pieces, pad} each ({-1, 0, 1, 0}: none), then a padded dim that is not
// split (axis RT_AXIS_NONE). Pieces are the tp or column split's
// (passes/tp.c).
static void split_table(Emit *e, const IrValue *v, char *buf, size_t n) {
  int len = snprintf(buf, n, "{"), k = 0;
  for (int a = IR_MESH_TP; a <= IR_MESH_NAXES; a++) {
    bool split = a < IR_MESH_NAXES;
    int d = v->role == ROLE_INPUT ? -1
            : split               ? ir_split_dim(v, (IrMeshAxis)a)
                                  : padded_whole_dim(v);
    if (d < 0)
      continue;
    IR_ASSERT(k < 2);
    const IrDimLayout *l = &v->layout[d];
    int64_t pad = l->valid ? ir_eval(e->g, l->whole) - ir_eval(e->g, l->valid) : 0;
    IrMeshAxis axis = split ? (IrMeshAxis)a : IR_MESH_NONE;
    len += snprintf(buf + len, n - (size_t)len, "%s{%d, %s, %d, %lld}", k++ ? ", " : "", d,
                    cg_rt_axis_name(axis), ir_mesh_pieces(axis) ? v->pieces : 1, (long long)pad);
  }
  for (; k < 2; k++)
    len += snprintf(buf + len, n - (size_t)len, "%s{-1, 0, 1, 0}", k ? ", " : "");
  snprintf(buf + len, n - (size_t)len, "}");
}

// "{4, 64, 128}" ("{0}" for a scalar)
static const char *shape_sizes(Emit *e, const IrValue *v) {
  char s[512] = "{";
  if (v->rank == 0)
    return "{0}";
  for (int i = 0; i < v->rank; i++) {
    char num[32];
    snprintf(num, sizeof num, "%s%lld", i ? ", " : "", (long long)ir_eval(e->g, v->shape[i]));
    strncat(s, num, sizeof s - strlen(s) - 2);
  }
  strcat(s, "}");
  return ir_strdup(&e->g->arena, s);
}

// The bucket a parameter lives in (its index in the buckets table), or -1:
// the one its gradient is in.
static int bucket_index(Emit *e, const IrValue *v) {
  const PassLowered *lw = e->opt->lowered;
  for (int b = 0; v->grad && lw && b < lw->nbuckets; b++)
    if (v->grad->bucket == lw->bucket[b].grads)
      return b;
  return -1;
}

static int64_t numel_of(Emit *e, const IrValue *v) { return ir_eval(e->g, ir_numel(e->g, v)); }

// Per rank, in host memory: the host's copies of parameters and gradients, and
// optimizer state (offload; acts false), or swapped activations (acts true).
static int64_t host_bytes_of(const Emit *e, bool acts) {
  int64_t total = 0;
  for (int i = 0; i < e->g->nvalues; i++)
    if (e->g->values[i]->host && (e->g->values[i]->role == ROLE_ACT) == acts)
      total += e->m->bytes[i];
  return total;
}

// Per rank, on the device: parameters, reduced gradients and optimizer
// state, as allocated (not dropout's step counter, an integer state value that
// is no parameter's).
static int64_t model_state_bytes(Emit *e) {
  const PassLowered *lw = e->opt->lowered;
  int64_t total = 0;
  for (int b = 0; lw && b < lw->nbuckets; b++) {
    const PassBucket *k = &lw->bucket[b];
    const IrValue *p = k->pshard ? k->pshard : k->params;  // (bf16 offload: the device's range)
    total += numel_of(e, p) * ir_dtype_size(p->dtype);
    if (!k->reduced->host)  // (gradient offload: the host's)
      total += numel_of(e, k->reduced) * ir_dtype_size(k->reduced->dtype);
    if (k->copies && !k->copies->host)  // bf16: the working copies (not offloaded)
      total += e->m->bytes[k->copies->id];
  }
  for (int i = 0; i < e->g->nvalues; i++)
    if (e->g->values[i]->role == ROLE_STATE && !e->g->values[i]->host &&
        e->g->values[i]->dtype != DT_I32)
      total += e->m->bytes[i];
  return total;
}

// The AdamW update of parameter value p (a parameter, a bucket or the host's
// part of one), or NULL.
static const IrNode *adamw_of(const Emit *e, const IrValue *p) { return e->adamw[p->id]; }

// The byte offsets of an update's moments (m, v; the host region's for the
// host's update), or -1, -1 without one.
static void moment_offsets(const Emit *e, const IrNode *u, long long *m, long long *v) {
  *m = u ? (long long)e->m->offset[u->in[2]->id] : -1;
  *v = u ? (long long)e->m->offset[u->in[3]->id] : -1;
}

static void emit_buckets(Emit *e) {
  const PassLowered *lw = e->opt->lowered;
  if (!lw)
    return;
  println(e, "// The blocks' parameters, gradients and AdamW moments as flat buckets (offsets in bytes).");
  println(e, "static const rt_bucket buckets[] = {");
  for (int b = 0; b < lw->nbuckets; b++) {
    const PassBucket *k = &lw->bucket[b];
    const IrValue *p = k->pshard ? k->pshard : k->params;
    fputs("  {", e->f);
    cg_put_string(e->f, k->name);
    // bf16 offload, parameter offload: the host's masters are the only ones
    bool cut = (k->copies || k->params_host) && k->host_params;
    long long m, v, hm, hv;
    moment_offsets(e, adamw_of(e, p), &m, &v);
    moment_offsets(e, k->host_params ? adamw_of(e, k->host_params) : NULL, &hm, &hv);
    println(e, ", %lld, %d, %lld, %d, %lld, %d, %d, %lld, %lld, %lld, %d, %lld, %lld, %lld, %lld, "
            "%lld, %s}, // block %d", (long long)k->numel,
            k->zero, (long long)e->m->offset[p->id], k->pshard != NULL,
            (long long)e->m->offset[k->reduced->id], k->reduced_sharded, k->reduced->host,
            (long long)numel_of(e, k->reduced), (long long)(cut ? k->host_numel : 0),
            (long long)(cut ? e->m->offset[k->host_params->id] : 0), k->part != k->numel,
            (long long)(k->nstate ? k->host_numel : 0), m, v, hm, hv, cg_rt_axis_name(k->axis),
            k->block);
  }
  println(e, "};");
  blank(e);
}

// Per parameter outside buckets, the byte offsets of its AdamW moments m and
// v (-1: none: SGD, a bucket's, a constant).
static void emit_adam_offsets(Emit *e) {
  IrGraph *g = e->g;
  println(e, "static const long adam_offsets[] = {");
  int n = 0;  // sixteen pairs a line, in the params table's order
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < g->nvalues; i++) {
      const IrValue *v = g->values[i];
      if (v->role != (pass ? ROLE_CONST : ROLE_PARAM) || v->producer)
        continue;
      long long m, vv;
      moment_offsets(e, pass ? NULL : adamw_of(e, v), &m, &vv);
      fprintf(e->f, "%s%lld, %lld,", n % 16 ? " " : "  ", m, vv);
      if (++n % 16 == 0)
        fputc('\n', e->f);
    }
  println(e, "%s-1, -1,", n % 16 ? " " : "  ");
  println(e, "};");
  blank(e);
}

// The label a loss reading `in` as its targets (through views) skips, if any.
static bool ignored_label(const IrGraph *g, const IrValue *in, int64_t *ignore) {
  for (int i = 0; i < g->nnodes; i++) {
    IrNode *n = g->nodes[i];
    if ((n->op == OP_NLL_LOSS || n->op == OP_CROSS_ENTROPY || n->op == OP_VP_CROSS_ENTROPY ||
         n->op == OP_CROSS_ENTROPY_FUSED) &&
        ir_view_root(n->in[1]) == in) {
      *ignore = ir_attr_i(n, "ignore_index");
      return true;
    }
  }
  return false;
}

// Whether the model gives initial values (an ONNX model's initializers): then
// they go into weights.bin; otherwise the program draws them.
static bool has_given_weights(const IrGraph *g) {
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if ((v->role == ROLE_PARAM || v->role == ROLE_CONST) && !v->producer &&
        v->init.kind == INIT_DATA)
      return true;
  }
  return false;
}

// The rows (samples) of a micro-batch of the model's replicas (ir_batch_rows): the value of
// dim B; where the model's batch is fixed, the split inputs' first dim (whole), or 1 where none
// is split (a row is one whole set of the inputs).
static int64_t batch_rows(IrGraph *g) {
  int64_t rows = 1;
  if (g->batch_sym >= 0) {
    sym_eval(sym_var(&g->arena, g->batch_sym), &g->syms, &rows);
    return rows;
  }
  const IrValue *fed = ir_fed_input(g);
  if (fed) {
    IrValue global = ir_whole(fed);
    return ir_eval(g, global.shape[0]);
  }
  return rows;
}

// The params table lists the trainable parameters, then the constants
// (ONNX initializers that are not trained: kind RT_PARAM_CONST); weights.bin holds both
// in this order.
static void emit_table(Emit *e, const char *name, IrRole role) {
  IrGraph *g = e->g;
  println(e, "static const rt_tensor %s[] = {", name);
  int count = 0;
  for (int pass = 0; pass < (role == ROLE_PARAM ? 2 : 1); pass++) {
    for (int i = 0; i < g->nvalues; i++) {
      const IrValue *v = g->values[i];
      if (v->role != (pass ? ROLE_CONST : role) || v->producer)
        continue;
      int64_t range = 0;
      if (role == ROLE_INPUT && v->range)
        range = ir_eval(g, v->range);
      // a parameter split over ranks is named and saved whole; an input is fed this rank's part
      IrValue whole = role == ROLE_INPUT ? *v : ir_whole(v), global = ir_whole(v);
      int batched = role == ROLE_INPUT ? ir_batch_rows(g, v) : pass && ir_batched(g, &global);
      char splits[160];
      split_table(e, v, splits, sizeof splits);
      int64_t ignore = 0;
      bool ignores = role == ROLE_INPUT && v->dtype == DT_I32 && ignored_label(g, v, &ignore);
      fputs("  {", e->f);
      cg_put_string(e->f, v->name);
      fprintf(e->f, ", %lld, %lld, %s, %s, %lld, ", (long long)e->m->offset[i],
              (long long)ir_eval(g, ir_numel(g, &whole)),
              rt_dtype(v->dtype),
              role == ROLE_INPUT ? input_kind(v->input_kind)
              : pass              ? "RT_PARAM_CONST"
                                  : "RT_PARAM_TRAINED",
              (long long)range);
      cg_put_string(e->f, shape_values(e, &whole));
      static const char *const inits[] = {[INIT_NONE] = "RT_INIT_ZEROS",
                                          [INIT_ZEROS] = "RT_INIT_ZEROS",
                                          [INIT_ONES] = "RT_INIT_ONES",
                                          [INIT_NORMAL] = "RT_INIT_NORMAL",
                                          [INIT_DATA] = "RT_INIT_DATA"};
      char std[64];
      println(e, ", %d, %s, %d, %d, %lld, %s, %d, %lld, %s, %s},", v->rank,
              shape_sizes(e, &whole), batched, bucket_index(e, v),
              (long long)(v->bucket ? v->bucket_off / 4 : 0), splits, ignores, (long long)ignore,
              role == ROLE_INPUT ? "RT_INIT_ZEROS" : inits[v->init.kind],
              float_literal(std, sizeof std, v->init.kind == INIT_NORMAL ? v->init.std : 0.0));
      count++;
    }
  }
  if (!count)
    println(e, "  {0},");
  println(e, "};");
  blank(e);
}

// Where each parameter's gradient is, in the order of the params table (for
// train --dump-grads).
static void emit_grad_offsets(Emit *e) {
  IrGraph *g = e->g;
  println(e, "static const long grad_offsets[] = {");
  int count = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role != ROLE_PARAM || v->producer)
      continue;
    IR_ASSERT(v->grad && e->m->offset[v->grad->id] >= 0);
    println(e, "  %lld, // %s", (long long)e->m->offset[v->grad->id], e->cname[v->grad->id]);
    count++;
  }
  for (int i = 0; i < g->nvalues; i++) { // constants: no gradient; their own buffer
    const IrValue *v = g->values[i];
    if (v->role != ROLE_CONST || v->producer)
      continue;
    println(e, "  %lld, // %s (a constant)", (long long)e->m->offset[i], e->cname[i]);
    count++;
  }
  if (!count)
    println(e, "  0,");
  println(e, "};");
  blank(e);
}

static int count_role(const IrGraph *g, IrRole role) {
  int n = 0;
  for (int i = 0; i < g->nvalues; i++)
    n += g->values[i]->role == role && !g->values[i]->producer;
  return n;
}

// Rows that count as tokens for tok/s: the token input's elements, else the
// first dim of the first input.
static int64_t tokens_per_step(IrGraph *g) {
  const IrValue *first = NULL;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->role != ROLE_INPUT)
      continue;
    if (v->input_kind == INPUT_TOKENS)
      return ir_eval(g, ir_numel(g, v));
    if (!first)
      first = v;
  }
  return first && first->rank > 0 ? ir_eval(g, first->shape[0]) : 1;
}

// The logits a sampler reads (train --sample): the input of the
// cross-entropy over a token input's next tokens, whose rows run over the
// batch's sequences, `rows` per sequence (T, or T - 1 where the model shifts
// its labels itself), each of `vocab` values. NULL when there is none: no
// such loss, or one whose logits are split over tensor-parallel ranks.
static const IrValue *sample_logits(IrGraph *g, int64_t *rows, int64_t *vocab) {
  const IrValue *tokens = NULL, *logits = NULL;
  for (int i = 0; i < g->nvalues; i++)
    if (g->values[i]->role == ROLE_INPUT && g->values[i]->input_kind == INPUT_TOKENS && !tokens)
      tokens = g->values[i];
  for (int i = 0; i < g->nnodes && !logits; i++)
    if ((g->nodes[i]->op == OP_CROSS_ENTROPY || g->nodes[i]->op == OP_CROSS_ENTROPY_FUSED) &&
        g->nodes[i]->phase == PHASE_FORWARD)
      logits = g->nodes[i]->in[0];
  if (!tokens || tokens->rank != 2 || !logits || logits->rank < 1)
    return NULL;
  int64_t batch = ir_eval(g, tokens->shape[0]), per_seq = ir_eval(g, tokens->shape[1]);
  *vocab = ir_eval(g, logits->shape[logits->rank - 1]);
  int64_t all = ir_eval(g, ir_numel(g, logits)) / *vocab;
  *rows = all / batch;
  if (all % batch || (*rows != per_seq && *rows != per_seq - 1))
    return NULL;
  return logits;
}

// The dropout masks' step counter (the state tick advances), or NULL.
static const IrValue *dropout_counter(const IrGraph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_TICK)
      return g->nodes[i]->in[0];
  return NULL;
}

static double total_flops(IrGraph *g) {
  double f = 0;
  for (int i = 0; i < g->nnodes; i++)
    f += sym_evalf(ir_flops(g, g->nodes[i]), &g->syms);
  return f;
}

// `static const int NAME[] = {...};`, one value per replica of the plan.
static void emit_per_replica(Emit *e, const char *name, const int *values) {
  fprintf(e->f, "static const int %s[] = {", name);
  for (int d = 0; d < e->opt->lowered->plan.mesh.size[IR_MESH_DP]; d++)
    fprintf(e->f, "%s%d", d ? ", " : "", values[d]);
  println(e, "};");
  blank(e);
}

// train --profile's rows: the op kinds the functions mark (RT_OP), and the planner's price
// of their nodes where it gave one.
static void emit_op_kinds(Emit *e) {
  println(e, "// train --profile: the ops the marks (RT_OP) name%s", e->opt->op_micro_s ?
          ", and the planner's price of their nodes in seconds per micro-batch and per step "
          "(-1: none)" : "");
  fputs("static const char *const op_kinds[] = {", e->f);
  for (int k = 0; k < e->nkinds; k++) {
    fputs(k ? ", " : "", e->f);
    cg_put_string(e->f, ir_op_name(e->kinds[k]));
  }
  println(e, "%s};", e->nkinds ? "" : "0");
  if (!e->opt->op_micro_s)
    return;
  const double *by[2] = {e->opt->op_micro_s, e->opt->op_step_s};
  for (int t = 0; t < 2; t++) {
    fprintf(e->f, "static const double op_%s_s[] = {", t ? "step" : "micro");
    for (int k = 0; k < e->nkinds; k++)
      fprintf(e->f, "%s%.6g", k ? ", " : "", by[t][e->kinds[k]]);
    println(e, "%s};", e->nkinds ? "" : "0");
  }
}

static int emit_model(Emit *e, const char *source, IrDiag *d) {
  IrGraph *g = e->g;
  plan_loops(e, d);
  emit_header(e, source);
  // The functions go to memory first, so that only the dims they use are
  // defined and only the buffers they name are bound.
  FILE *out = e->f;
  char *code = NULL;
  size_t len = 0;
  e->f = open_memstream(&code, &len);
  IR_ASSERT(e->f);
  int rc = emit_phase(e, PHASE_FORWARD, "forward(char *arena, char *host)", d) ||
           emit_phase(e, PHASE_BACKWARD, "backward(char *arena, char *host)", d) ||
           emit_phase(e, PHASE_UPDATE, "update(char *arena, char *host, const rt_hparams *h)", d) ||
           (has_init_host(e) && emit_init_host(e, d)) ||
           (has_copies(e) && emit_init_copies(e, d)) || (has_ghost(e) && emit_ghost(e, d));
  fclose(e->f);
  e->f = out;
  if (!rc) {
    emit_dims(e, code);
    emit_buffers(e);
    fputs(code, e->f);
  }
  free(code);
  if (rc)
    return -1;
  emit_op_kinds(e);
  println(e, "static const rt_dim dims[] = {");
  for (int i = 0; i < g->syms.n; i++)
    if (g->syms.bound[i]) {
      fputs("  {", e->f);
      cg_put_string(e->f, g->syms.name[i]);
      println(e, ", %lld},", (long long)g->syms.value[i]);
    }
  println(e, "  {0},");
  println(e, "};");
  blank(e);
  emit_table(e, "inputs", ROLE_INPUT);
  emit_table(e, "params", ROLE_PARAM);
  emit_grad_offsets(e);
  emit_adam_offsets(e);
  emit_buckets(e);
  const PassLowered *lw = e->opt->lowered;
  if (lw && lw->plan.replica_micro)   // uneven batch shares
    emit_per_replica(e, "replica_micro", lw->plan.replica_micro);
  if (lw && lw->plan.replica_parts)   // uneven state shares
    emit_per_replica(e, "dp_parts", lw->plan.replica_parts);
  if (lw && lw->plan.replica_rows)   // unequal micro-batch sizes
    emit_per_replica(e, "replica_rows", lw->plan.replica_rows);
  char model[32];
  model_symbol(model, sizeof model, e->opt->model);
  println(e, "const rt_model %s = {", model);
  fputs("    .name = ", e->f);
  cg_put_string(e->f, g->name);
  println(e, ",");
  int ndims = 0;
  for (int i = 0; i < g->syms.n; i++)
    ndims += g->syms.bound[i];
  println(e, "    .n_dims = %d,", ndims);
  println(e, "    .dims = dims,");
  println(e, "    .arena_bytes = %lld,", (long long)e->m->arena_bytes);
  println(e, "    .persistent_bytes = %lld,", (long long)e->m->persistent_bytes);
  println(e, "    .peak_live_bytes = %lld,", (long long)e->m->peak_live_bytes);
  println(e, "    .workspace_bytes = %lld,", (long long)workspace_bytes(e));
  println(e, "    .n_inputs = %d,", count_role(g, ROLE_INPUT));
  println(e, "    .inputs = inputs,");
  println(e, "    .n_params = %d,", count_role(g, ROLE_PARAM) + count_role(g, ROLE_CONST));
  println(e, "    .params = params,");
  println(e, "    .weights_file = %d,", has_given_weights(g));
  println(e, "    .init_seed = %lluull,", (unsigned long long)e->opt->seed);
  println(e, "    .loss_offset = %lld,", (long long)e->m->offset[g->loss->id]);
  println(e, "    .tokens_per_step = %lld,", (long long)tokens_per_step(g));
  int64_t rows = 0, vocab = 0;
  const IrValue *logits = sample_logits(g, &rows, &vocab);
  println(e, "    .logits_offset = %lld,", logits ? (long long)e->m->offset[logits->id] : -1LL);
  println(e, "    .logits_dtype = %s,", rt_dtype(logits ? logits->dtype : DT_F32));
  println(e, "    .logits_rows = %lld,", (long long)rows);
  println(e, "    .logits_vocab = %lld,", (long long)vocab);
  println(e, "    .flops_per_step = %.6g,", total_flops(g));
  rt_hparams h = cg_default_hparams(g);
  char f[5][64];
  println(e, "    .defaults = {%s, %s, %s, %s, %s, %s, 1, 1.0f},",
          h.optimizer == RT_OPT_SGD ? "RT_OPT_SGD" : "RT_OPT_ADAMW",
          float_literal(f[0], 64, h.lr), float_literal(f[1], 64, h.beta1),
          float_literal(f[2], 64, h.beta2), float_literal(f[3], 64, h.eps),
          float_literal(f[4], 64, h.weight_decay));
  println(e, "    .has_adam_state = %d,", has_op(g, OP_ADAMW));
  println(e, "    .forward = forward,");
  println(e, "    .backward = backward,");
  println(e, "    .update = update,");
  println(e, "    .ghost = %s,", has_ghost(e) ? "ghost" : "0");
  println(e, "    .host_bytes = %lld,", (long long)e->m->host_bytes);
  println(e, "    .init_host = %s,", has_init_host(e) ? "init_host" : "0");
  println(e, "    .init_copies = %s,", has_copies(e) ? "init_copies" : "0");
  println(e, "    .grad_offsets = grad_offsets,");
  println(e, "    .grad_dtype = %s,", rt_dtype(ir_grad_dtype(g)));
  println(e, "    .adam_offsets = adam_offsets,");
  const IrValue *counter = dropout_counter(g);
  println(e, "    .dropout_step_offset = %lld,", counter ? (long long)e->m->offset[counter->id] : -1LL);
  println(e, "    .dp = %d,", lw ? lw->plan.mesh.size[IR_MESH_DP] : 1);
  println(e, "    .tp = %d,", lw ? lw->plan.mesh.size[IR_MESH_TP] : 1);
  // a grid inside tp (2D beside 1D) is the 2D blocks' only: the replica's inputs are whole
  const Mesh *m = lw ? &lw->plan.mesh : NULL;
  bool in_tp = m && m->size[IR_MESH_TP] > 1;
  println(e, "    .grid_side = %d,", m && !in_tp ? m->size[IR_MESH_ROW] : 1);
  println(e, "    .tp_sub = %d,", m ? m->size[IR_MESH_SUB] : 1);
  println(e, "    .tp_grid = %d,", in_tp ? m->size[IR_MESH_ROW] : 1);
  println(e, "    .micro_batches = %d,", lw ? lw->plan.micro_batches : 1);
  if (lw && lw->plan.replica_micro)
    println(e, "    .replica_micro = replica_micro,");
  if (lw && lw->plan.replica_parts)
    println(e, "    .dp_parts = dp_parts,");
  println(e, "    .batch_rows = %lld,", (long long)batch_rows(g));
  if (lw && lw->plan.replica_rows)
    println(e, "    .replica_rows = replica_rows,");
  int ranks = lw ? mesh_ranks(&lw->plan.mesh) : 1;
  println(e, "    .rank_end = %d,", e->opt->rank_end ? e->opt->rank_end : ranks);
  fputs("    .layout = ", e->f);
  cg_put_string(e->f, e->opt->layout ? e->opt->layout : "one rank");
  println(e, ",");
  println(e, "    .n_buckets = %d,", lw ? lw->nbuckets : 0);
  println(e, "    .buckets = %s,", lw ? "buckets" : "0");
  println(e, "    .n_slots = %d,", lw ? lw->nslots : 0);
  println(e, "    .model_state_bytes = %lld,", (long long)model_state_bytes(e));
  println(e, "    .model_host_bytes = %lld,", (long long)host_bytes_of(e, false));
  println(e, "    .swap_host_bytes = %lld,", (long long)host_bytes_of(e, true));
  println(e, "    .planner_state_bytes = %lld,", (long long)e->opt->planner_state_bytes);
  println(e, "    .planner_host_bytes = %lld,", (long long)e->opt->planner_host_bytes);
  println(e, "    .planner_swap_bytes = %lld,", (long long)e->opt->planner_swap_bytes);
  println(e, "    .planner_comm_bytes = %lld,", (long long)e->opt->planner_comm_bytes);
  println(e, "    .planner_comm_micro_bytes = %lld,", (long long)e->opt->planner_comm_micro_bytes);
  if (has_ghost(e))
    println(e, "    .planner_comm_ghost_bytes = %lld,",
            (long long)e->opt->planner_comm_ghost_bytes);
  if (e->opt->planner_device) {
    fputs("    .planner_device = ", e->f);
    cg_put_string(e->f, e->opt->planner_device);
    println(e, ",");
    println(e, "    .planner_step_s = %.9g,", e->opt->planner_step_s);
    fputs("    .planner_time_s = {", e->f);
    for (int i = 0; i < RT_PLANNER_NTIMES; i++)
      fprintf(e->f, "%s%.9g", i ? ", " : "", e->opt->planner_time_s[i]);
    println(e, "},");
  }
  println(e, "    .n_op_kinds = %d,", e->nkinds);
  println(e, "    .op_kinds = op_kinds,");
  if (e->opt->op_micro_s)
    println(e, "    .op_micro_s = op_micro_s,\n    .op_step_s = op_step_s,\n"
            "    .op_outside_s = %.6g,", e->opt->op_outside_s);
  if (lw && lw->loss_partial) {
    fputs("    .loss_partial_axes = ", e->f);
    for (int a = IR_MESH_TP, k = 0; a < IR_MESH_NAXES; a++)
      if (lw->loss_partial & (1u << a))
        fprintf(e->f, "%s1 << %s", k++ ? " | " : "", cg_rt_axis_name((IrMeshAxis)a));
    println(e, ",");
  }
  println(e, "};");
  if (e->opt->model)
    return 0;
  blank(e);   // the program's models (train.c picks the rank's)
  int n = nmodels(e->opt);
  for (int k = 1; k < n; k++) {
    model_symbol(model, sizeof model, k);
    println(e, "extern const rt_model %s;", model);
  }
  println(e, "const int mtc_nmodels = %d;", n);
  fputs("const rt_model *const mtc_models[] = {", e->f);
  for (int k = 0; k < n; k++) {
    model_symbol(model, sizeof model, k);
    fprintf(e->f, "%s&%s", k ? ", " : "", model);
  }
  println(e, "};");
  return 0;
}

// ---- files ------------------------------------------------------------------------------------

static int copy_file(const char *from, const char *to, IrDiag *d) {
  FILE *in = fopen(from, "rb");
  if (!in)
    return ir_error(d, (IrLoc){0}, "cannot read %s: %s (set MTC_RUNTIME_DIR to mtc's runtime/)",
                    from, strerror(errno));
  FILE *out = fopen(to, "wb");
  if (!out) {
    fclose(in);
    return ir_error(d, (IrLoc){0}, "cannot write %s: %s", to, strerror(errno));
  }
  char buf[1 << 16];
  size_t n;
  bool ok = true;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
    ok = fwrite(buf, 1, n, out) == n;
  fclose(in);
  int rc = fclose(out) || !ok;
  return rc ? ir_error(d, (IrLoc){0}, "cannot write %s: %s", to, strerror(errno)) : 0;
}

static FILE *open_out(const char *dir, const char *name, IrDiag *d) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f)
    ir_error(d, (IrLoc){0}, "cannot write %s: %s", path, strerror(errno));
  return f;
}

// Closes a file this emitter wrote; any failed write to it (a full disk) is an error.
static int close_out(FILE *f, const char *name, IrDiag *d) {
  bool failed = ferror(f);
  if (fclose(f) || failed)
    return ir_error(d, (IrLoc){0}, "cannot write %s: %s", name, strerror(errno ? errno : EIO));
  return 0;
}

static int make_dir(const char *path, IrDiag *d) {
  if (mkdir(path, 0755) == 0 || errno == EEXIST)
    return 0;
  return ir_error(d, (IrLoc){0}, "cannot create directory %s: %s", path, strerror(errno));
}

// The bytes of every parameter and constant, whole, as weights.bin holds them.
static int64_t weights_bytes(IrGraph *g) {
  int64_t total = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if ((v->role == ROLE_PARAM || v->role == ROLE_CONST) && !v->producer) {
      IrValue whole = ir_whole(v);
      total += ir_eval(g, ir_nbytes(g, &whole));
    }
  }
  return total;
}

// weights.bin must fit on the disk before a byte of it is written (a big
// model's takes hundreds of GB and minutes to draw).
static int check_space(IrGraph *g, const CgOptions *opt, IrDiag *d) {
  struct statvfs fs;
  if (statvfs(opt->outdir, &fs) != 0)
    return 0;  // nothing to say: the writes are checked as they happen
  int64_t need = weights_bytes(g) + (16 << 20), have = (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
  if (need > have)
    return ir_error(d, (IrLoc){0}, "the program needs %.3g GB on disk (weights.bin: the initial "
                    "parameters in float32), and the output folder's disk has %.3g GB free",
                    (double)need / 1e9, (double)have / 1e9);
  return 0;
}

static int write_weights(IrGraph *g, const CgOptions *opt, IrDiag *d) {
  FILE *f = open_out(opt->outdir, "weights.bin", d);
  if (!f)
    return -1;
  int index = 0, rc = 0;
  for (int pass = 0; pass < 2 && !rc; pass++) { // parameters, then constants, as in the table
    for (int i = 0; i < g->nvalues && !rc; i++) {
      const IrValue *v = g->values[i];
      if (v->role != (pass ? ROLE_CONST : ROLE_PARAM) || v->producer)
        continue;
      IrValue whole = ir_whole(v);  // tensors split over tp: whole, as one rank has them
      size_t bytes = (size_t)ir_eval(g, ir_nbytes(g, &whole));
      float *data = malloc(bytes + 4);
      if (!data) {
        rc = ir_error(d, v->loc, "cannot allocate %zu bytes for the initial values of '%s'",
                      bytes, v->name);
        break;
      }
      cg_init_param(g, v, pass ? 0 : index++, opt->seed, data);
      if (fwrite(data, 1, bytes, f) != bytes)
        rc = ir_error(d, (IrLoc){0}, "cannot write weights.bin: %s", strerror(errno));
      free(data);
    }
  }
  return close_out(f, "weights.bin", d) || rc ? -1 : 0;
}

// `make cpu`: cc and OpenMP with the one-rank comm, or (a program for several
// ranks) mpicc and comm_mpi.c. `make gpu` (and `make`): the kernels built by
// nvcc (CUDA_ARCH picks the GPUs), the host code by cc or mpicc, linked with
// the CUDA runtime and cuBLAS; a program for several ranks runs its
// collectives on device memory over NCCL (comm_mpi.c with RT_COMM_NCCL, and
// comm_nccl.c). Both builds go to build/<kind>/train and are copied to ./train.
// bf16: the program keeps working copies of its parameters (a bf16 program); its
// kernels need not round as the CPU build does, so nvcc may contract a*b + c.
static int write_makefile(const CgOptions *opt, int ranks, bool bf16, IrDiag *d) {
  FILE *f = open_out(opt->outdir, "Makefile", d);
  if (!f)
    return -1;
  bool mpi = ranks > 1;
  fputs("# Built by mtc. `make` (or `make gpu`) builds ./train for NVIDIA GPUs with nvcc\n"
        "# (CUDA_ARCH picks them: sm_80 and sm_90 by default); `make cpu` for the CPU with OpenMP.\n",
        f);
  if (mpi)
    fprintf(f, "# This program runs on %d ranks: mpirun -np %d ./train (on GPUs, one per rank:\n"
               "# the collectives run over NCCL).\n"
               "CC = mpicc\n", ranks, ranks);
  else
    fputs("CC ?= cc\n", f);
  fputs("CFLAGS ?= " CG_CPU_CFLAGS "\n"
        "LDLIBS = -lcjson -lm -lpthread\n", f);
  fputs("MODELS =", f);   // the model of each group of ranks with a static plan of its own
  for (int k = 0; k < nmodels(opt); k++) {
    char file[32];
    model_file(file, sizeof file, k);
    fprintf(f, " %s", file);
  }
  fputs("\n", f);
  fputs("include runtime/runtime.mk\n"
        "# the runtime of each build (an archive of the same sources, built with the same flags,\n"
        "# may be given instead)\n", f);
  fprintf(f, "CPU_RUNTIME ?= $(RT_SRC) $(RT_COMM_%s) $(RT_CPU_SRC)\n", mpi ? "MPI" : "SINGLE");
  fprintf(f, "GPU_RUNTIME ?= $(RT_SRC) %s\n",
          mpi ? "$(RT_COMM_MPI) $(RT_COMM_NCCL)" : "$(RT_COMM_SINGLE)");
  fputs("\n"
        "CUDA ?= /usr/local/cuda\n"
        "NVCC ?= $(CUDA)/bin/nvcc\n"
        "CUDA_ARCH ?= " CG_CUDA_ARCH "\n",
        f);
  fputs(bf16 ? "# bf16: no --fmad=false (that is for fp32 programs, to round as the CPU build does)\n"
               "NVCCFLAGS ?= " CG_NVCC_FLAGS "\n"
             : "# --fmad=false: the fp32 kernels round as the CPU build does\n"
               "NVCCFLAGS ?= " CG_NVCC_FLAGS " --fmad=false\n", f);
  fputs("GPU_CFLAGS ?= " CG_GPU_CFLAGS "\n"
        "# the kernels' objects (a prebuilt archive of the same sources may be given instead)\n"
        "CUDA_OBJS ?= build/gpu/kernels_cuda.o build/gpu/device_cuda.o\n", f);
  if (mpi)
    fputs("GPU_DEFS = -DRT_COMM_NCCL -I$(CUDA)/include\n"
          "CUDA_LIBS = -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lnccl -lcublasLt -lcublas -lcudart -lstdc++\n",
          f);
  else
    fputs("GPU_DEFS =\n"
          "CUDA_LIBS = -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lcublasLt -lcublas -lcudart -lstdc++\n", f);
  fputs("\n"
        "all: gpu\n"
        "cpu: build/cpu/train\n"
        "\tcp build/cpu/train train\n"
        "gpu: build/gpu/train\n"
        "\tcp build/gpu/train train\n"
        "\n"
        "build/cpu/train: $(MODELS) $(CPU_RUNTIME) $(RT_HDR)\n", f);
  const char *need_mpi = "\t@command -v $(CC) >/dev/null || { echo \"make: this program runs on "
                         "several ranks and needs MPI: apt-get install openmpi-bin libopenmpi-dev\" "
                         ">&2; exit 1; }\n";
  if (mpi)
    fputs(need_mpi, f);
  fputs("\t@mkdir -p build/cpu\n"
        "\t$(CC) $(CFLAGS) -Iruntime -o $@ $(MODELS) $(CPU_RUNTIME) $(LDLIBS)\n"
        "\n"
        "build/gpu/train: $(MODELS) $(GPU_RUNTIME) $(CUDA_OBJS) $(RT_HDR)\n", f);
  if (mpi)
    fputs(need_mpi, f);
  fputs("\t@mkdir -p build/gpu\n"
        "\t$(CC) $(GPU_CFLAGS) $(GPU_DEFS) -Iruntime -o $@ $(MODELS) $(GPU_RUNTIME) $(CUDA_OBJS) "
        "$(CUDA_LIBS) $(LDLIBS)\n"
        "build/gpu/%.o: runtime/%.cu $(RT_CUDA_HDR) $(RT_HDR)\n"
        "\t@test -x $(NVCC) || { echo \"make: no nvcc at $(NVCC): install the CUDA toolkit or "
        "set CUDA=its folder; make cpu builds for the CPU\" >&2; exit 1; }\n"
        "\t@mkdir -p build/gpu\n"
        "\t$(NVCC) $(NVCCFLAGS) $(CUDA_ARCH) -Iruntime -c -o $@ $<\n"
        "clean:\n"
        "\trm -rf train build\n"
        ".PHONY: all cpu gpu clean\n", f);
  return close_out(f, "Makefile", d);
}

static int write_readme(IrGraph *g, const CgOptions *opt, int64_t workspace, IrDiag *d) {
  const MemPlan *m = opt->mem;
  FILE *f = open_out(opt->outdir, "README.md", d);
  if (!f)
    return -1;
  fprintf(f, "# %s, compiled by mtc\n\n", g->name);
  fprintf(f, "Generated from `%s`. Build and train:\n\n", opt->source ? opt->source : "?");
  fprintf(f, "    make cpu                     # or make gpu: nvcc, for NVIDIA GPUs (fp32)\n"
             "    ./train --steps 30           # synthetic data: one fixed batch\n");
  fprintf(f, "    ./train --data shard.bin --steps 1000 --lr 3e-4\n");
  fprintf(f, "    ./train --inputs batch.safetensors --load w.safetensors --save w2.safetensors\n");
  fprintf(f, "    ./train --inputs batch.safetensors --steps 1 --lr 0 --dump-grads g.safetensors"
             "\n\n");
  fprintf(f, "- `model.c`: dims, the memory plan (as a table at the top), `forward`, `backward`, "
             "`update`.\n");
  fprintf(f, "- `runtime/`: the training main (`train.c`), the CPU kernels and their CUDA twins.\n");
  if (has_given_weights(g))
    fprintf(f, "- `weights.bin`: the initial parameters (float32, the model's own values).\n\n");
  else
    fprintf(f, "- no weights file: the program draws the initial parameters itself (seed %llu, "
            "the values `mtc compile --seed %llu` would have written).\n\n",
            (unsigned long long)opt->seed, (unsigned long long)opt->seed);
  fprintf(f, "Memory: arena %lld bytes (persistent %lld), peak live %lld bytes = `%s`.\n",
          (long long)m->arena_bytes, (long long)m->persistent_bytes, (long long)m->peak_live_bytes,
          sym_str(&g->arena, m->peak_formula, &g->syms));
  fprintf(f, "On a GPU the program also takes a workspace of %lld bytes (GEMMs, kernels' "
             "scratch) beside the arena.\n", (long long)workspace);
  if (m->host_bytes)
    fprintf(f, "Host memory: %lld bytes of offloaded model state and swapped activations (an "
               "offloaded update runs on the host's threads; MTC_HOST_THREADS sets how "
               "many).\n", (long long)m->host_bytes);
  return close_out(f, "README.md", d);
}

int cg_emit_c(IrGraph *g, const CgOptions *opt, IrDiag *d) {
  if (!g->loss || !opt->mem || opt->mem->arena_bytes <= 0)
    return ir_error(d, (IrLoc){0}, "codegen: the graph has no loss or no memory plan");
  for (int i = 0; i < g->syms.n; i++)
    if (!g->syms.bound[i])
      return ir_error(d, (IrLoc){0}, "codegen: dim %s has no value: pass -D %s=VALUE",
                      g->syms.name[i], g->syms.name[i]);
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (v->init.kind == INIT_DATA && !v->data)
      return ir_error(d, v->loc, "codegen: '%s' takes its values from data the IR text does not "
                      "carry (a parameter's initial weights): compile the model it was printed from",
                      v->name);
  }
  char rtdir[4096], file[32];
  snprintf(rtdir, sizeof rtdir, "%s/runtime", opt->outdir);
  model_file(file, sizeof file, opt->model);
  if (!opt->model && (make_dir(opt->outdir, d) || make_dir(rtdir, d)))
    return -1;
  static const char *const runtime_files[] = {
      "kernels.h", "kernels.def", "kernels_kinds.h", "dtypes.def", "bf16.h", "cpu_variants.h", "cpu_variant.h",
      "kernels_cpu_t.h", "dist_cpu_t.h", "kernels_cpu.c", "adamw_cpu.h", "exp_cpu.h", "scan_cpu.h", "coalesce.h", "copy_slots.h", "pool.h", "host.c", "dist_cpu.c",
      "device.h", "device_cpu.c", "device_cuda.cu", "kernels_cuda.cu", "move_cuda.cuh", "elementwise_cuda.cuh",
      "matmul_cuda.cuh", "nn_cuda.cuh", "attention_cuda.cuh", "mma_cuda.cuh", "optim_cuda.cuh",
      "onnx_cuda.cuh", "dist_cuda.cuh", "cuda_common.h",
      "comm_nccl.h", "comm_nccl.c", "model_api.h", "rng.h", "safetensors.c", "safetensors.h",
      "shard.h", "parts.h", "schedule.h", "schedule.c", "profile.h", "profile.c", "log.h", "log.c", "tokenizer.h", "tokenizer.c", "data.h", "data.c", "checkpoint.h", "checkpoint.c", "train.c", "comm.h", "comm_single.c", "comm_mpi.c", "dist.h", "dist.c", "runtime.mk", NULL};
  for (int i = 0; !opt->model && runtime_files[i]; i++) {
    char from[4096], to[4200];
    snprintf(from, sizeof from, "%s/%s", opt->runtime_dir, runtime_files[i]);
    snprintf(to, sizeof to, "%s/%s", rtdir, runtime_files[i]);
    if (copy_file(from, to, d))
      return -1;
  }
  Emit e = {.g = g, .opt = opt, .m = opt->mem, .ind = "  "};
  e.used = calloc((size_t)g->nvalues + 1, sizeof *e.used);
  e.adamw = calloc((size_t)g->nvalues + 1, sizeof *e.adamw);
  IR_ASSERT(e.used && e.adamw);
  for (int i = 0; i < g->nnodes; i++)  // one pass: the tables look each parameter up
    if (g->nodes[i]->op == OP_ADAMW && !e.adamw[g->nodes[i]->in[0]->id])
      e.adamw[g->nodes[i]->in[0]->id] = g->nodes[i];
  name_buffers(&e);
  e.f = open_out(opt->outdir, file, d);
  int rc = e.f ? emit_model(&e, opt->source, d) : -1;
  int64_t workspace = workspace_bytes(&e);
  if (e.f && close_out(e.f, file, d) && !rc)
    rc = -1;
  free(e.cname), free(e.used), free(e.adamw), free(e.runs), free(e.loop), free(e.stride), free(e.layers);
  free(e.alt), free(e.covered);
  if (rc || opt->model)
    return rc ? -1 : 0;
  int ranks = opt->lowered ? mesh_ranks(&opt->lowered->plan.mesh) : 1;
  if (write_makefile(opt, ranks, has_copies(&e), d))
    return -1;
  bool given = has_given_weights(g);
  if ((given && (check_space(g, opt, d) || write_weights(g, opt, d))) ||
      write_readme(g, opt, workspace, d))
    return -1;
  return 0;
}
