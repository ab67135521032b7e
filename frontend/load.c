// The one loader: a model file by its kind (ONNX, IR text, or the DSL), and
// the text reader the text formats share.
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend.h"

#define MAX_FILE (16 << 20)  // largest text file read

char *fe_read_text(const char *path, IrDiag *d) {
  IrLoc top = {path, 1, 1};
  FILE *f = ir_open_file(path, top, d);
  if (!f)
    return NULL;
  // Read at most MAX_FILE + 1 bytes so that a larger file is noticed.
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (!buf) {
      fclose(f);
      ir_error(d, top, "cannot read %s: out of memory", path);
      return NULL;
    }
    size_t want = cap - len;
    size_t got = fread(buf + len, 1, want, f);
    len += got;
    if (got < want || len > MAX_FILE)
      break;
    cap *= 2;
    char *nb = realloc(buf, cap + 1);
    if (!nb)
      free(buf);
    buf = nb;
  }
  int err = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (err) {
    free(buf);
    ir_error(d, top, "cannot read %s: %s", path, strerror(err));
    return NULL;
  }
  if (len > MAX_FILE) {
    free(buf);
    ir_error(d, top, "%s is larger than %d MiB; is it really a model?", path, MAX_FILE >> 20);
    return NULL;
  }
  buf[len] = '\0';
  // A NUL byte would end the text early: report where it is.
  char *nul = memchr(buf, '\0', len);
  if (nul) {
    IrLoc at = {path, 1, 1};
    for (char *p = buf; p < nul; p++) {
      if (*p == '\n') {
        at.line++;
        at.col = 1;
      } else {
        at.col++;
      }
    }
    free(buf);
    ir_error(d, at, "NUL byte in the source (is this a binary file?)");
    return NULL;
  }
  return buf;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

// IR text, as `mtc inspect` prints it; -D rebinds its dims.
static IrGraph *load_ir(const char *path, const FeLoadOptions *opt, IrDiag *d) {
  char *text = fe_read_text(path, d);
  IrGraph *g = text ? ir_parse(text, path, d) : NULL;
  free(text);
  for (int i = 0; g && i < opt->ndefines; i++) {
    int var = symtab_find(&g->syms, opt->defines[i].name);
    if (var < 0) {
      ir_error(d, (IrLoc){0}, "-D %s: the model has no dim %s", opt->defines[i].name,
               opt->defines[i].name);
      ir_graph_free(g);
      return NULL;
    }
    symtab_bind(&g->syms, var, opt->defines[i].value);
  }
  return g;
}

IrGraph *fe_load(const char *path, const FeLoadOptions *opt, IrDiag *d) {
  static const FeLoadOptions none = {0};
  if (!opt)
    opt = &none;
  if (ends_with(path, ".onnx")) {
    FeOnnxOptions o = {.defines = opt->defines, .ndefines = opt->ndefines, .loss = opt->loss,
                       .labels = opt->labels, .seed = opt->seed};
    return fe_onnx_load(path, &o, d);
  }
  if (opt->loss || opt->labels) {
    ir_error(d, (IrLoc){0}, "--loss and --labels apply to ONNX models; %s states its loss", path);
    return NULL;
  }
  if (ends_with(path, ".ir"))
    return load_ir(path, opt, d);
  return fe_dsl_load(path, opt->defines, opt->ndefines, opt->seed, d);
}
