// --freeze REGEX: the parameters whose names the pattern matches (POSIX
// extended) are not trained. Before autodiff, each becomes a constant of the
// model (ROLE_CONST, its initial values as they were: the model's data, or
// drawn): autodiff makes it no gradient, the optimizer no update and no
// state, the lowering no bucket, and the program loads and saves it with the
// weights (kind RT_PARAM_CONST), as PyTorch treats a tensor with
// requires_grad=False. ONNX cannot say which initializers PyTorch trains, so
// a buffer exported as an initializer (BART's final_logits_bias) is named
// here.
#include "passes.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --padding-idx REGEX=ROW: each embedding whose table's name the pattern
// matches gives row ROW no gradient (its attribute padding_idx, which
// autodiff reads), as PyTorch's nn.Embedding(padding_idx=ROW) does; ONNX's
// Gather cannot say so, and torch.onnx.export warns that it drops it.
static int padding_rows(IrGraph *g, const char *spec, IrDiag *d) {
  const char *eq = strrchr(spec, '=');
  char *end = NULL;
  long long row = eq && eq[1] ? strtoll(eq + 1, &end, 10) : -1;
  if (!eq || eq == spec || !end || *end || row < 0)
    return ir_error(d, (IrLoc){0}, "--padding-idx '%s': write REGEX=ROW, ROW a row of the "
                    "table (e.g. --padding-idx 'embed_tokens=1')", spec);
  char pattern[512];
  snprintf(pattern, sizeof pattern, "%.*s", (int)(eq - spec), spec);
  regex_t re;
  if (pass_regex(&re, "--padding-idx", pattern, d))
    return -1;
  int n = 0, rc = 0;
  for (int i = 0; i < g->nnodes && !rc; i++) {
    IrNode *e = g->nodes[i];
    if (e->op != OP_EMBEDDING || regexec(&re, e->in[0]->name, 0, NULL, 0) != 0)
      continue;
    int64_t rows;
    if (sym_eval(e->in[0]->shape[0], &g->syms, &rows) == 0 && row >= rows)
      rc = ir_error(d, e->loc, "--padding-idx '%s': table '%s' has %lld rows, none of them %lld",
                    spec, e->in[0]->name, (long long)rows, row);
    ir_set_int(g, e, "padding_idx", row);
    n++;
  }
  regfree(&re);
  if (!rc && !n)
    rc = ir_error(d, (IrLoc){0}, "--padding-idx '%s': '%s' matches no embedding table's name "
                  "(`mtc inspect MODEL` lists them: the first input of each embedding)", spec,
                  pattern);
  return rc;
}

int pass_freeze(IrGraph *g, PassCtx *ctx, bool *changed) {
  if (ctx->opt.padding_idx) {
    if (padding_rows(g, ctx->opt.padding_idx, ctx->diag))
      return -1;
    *changed = true;
  }
  const char *pattern = ctx->opt.freeze;
  if (!pattern)
    return 0;
  regex_t re;
  if (pass_regex(&re, "--freeze", pattern, ctx->diag))
    return -1;
  // each match made a constant here; a pattern refused below fails the compile
  int nparams = 0, nfrozen = 0;
  const char *first = NULL;
  for (int i = 0; i < g->nvalues; i++) {
    IrValue *v = g->values[i];
    if (v->role != ROLE_PARAM || v->producer)
      continue;
    nparams++;
    first = first ? first : v->name;
    if (regexec(&re, v->name, 0, NULL, 0) == 0) {
      v->role = ROLE_CONST;
      v->frozen = *changed = true;
      nfrozen++;
    }
  }
  regfree(&re);
  int rc = 0;
  if (!nfrozen)
    rc = ir_error(ctx->diag, (IrLoc){0}, "--freeze '%s' matches none of the %d parameters' names "
                  "(the first is '%s'; `mtc inspect MODEL` lists them)", pattern, nparams,
                  first ? first : "");
  else if (nfrozen == nparams)
    rc = ir_error(ctx->diag, (IrLoc){0}, "--freeze '%s' matches every parameter: nothing would "
                  "train; name fewer", pattern);
  return rc;
}

int pass_frozen(const IrGraph *g, char *names, size_t cap, int64_t *elems) {
  *elems = 0;
  if (cap)
    names[0] = '\0';
  int n = 0;
  size_t len = 0;
  for (int i = 0; i < g->nvalues; i++) {
    const IrValue *v = g->values[i];
    if (!v->frozen)
      continue;
    int64_t k;
    const Sym *numel = ir_numel((IrGraph *)g, v);
    if (!sym_eval(numel, &g->syms, &k))
      *elems += k;
    if (len + 1 < cap) {
      int w = snprintf(names + len, cap - len, "%s'%s'", n ? ", " : "", v->name);
      len = w > 0 && len + (size_t)w < cap ? len + (size_t)w : cap - 1;
    }
    n++;
  }
  return n;
}
