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
#include <string.h>

int pass_freeze(IrGraph *g, PassCtx *ctx, bool *changed) {
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
