// Edits ONNX files for the tests that feed mtc hostile ones.
//
//   onnx_edit names IN.onnx OUT.onnx [OLD=NEW ...]
//   onnx_edit external IN.onnx OUT.onnx
//   onnx_edit fix IN.onnx OUT.onnx NAME=VALUE ...
//
// names: IN with every name replaced by one of a list of hostile names
// (tests/hostile_names.sh): C's punctuation,
// quotes, backslashes (one at the end), trigraphs, newlines with code after
// them, control characters and non-ASCII UTF-8, C keywords and macros, and the names
// model.c and the runtime define. Values take the list in order (then the list
// again with a number); nodes and the graph the list from its other end;
// each dim_param OLD given as OLD=NEW becomes NEW (the others stay).
//
// external: IN with every initializer's raw data moved to data.bin beside
// OUT (ONNX's external data: location, offset, length).
//
// fix: IN with each dim_param NAME given a fixed size VALUE wherever a type names it (a model
// exported with a dynamic batch, as one exported with a fixed batch).
#include <stdio.h>

#include "onnx_rename.h"

static const char *const hostile[] = {
    "mm\n{ extern int puts(const char *); puts(\"PWNED\"); }\n//",
    "x\\",
    "a\"b",
    "a\\b",
    "q\?\?/",
    "\?\?=define",
    "/* c */",
    "*/",
    "tab\there",
    "ctl\001\002",
    "\xc3\xa9t\xc3\xa9",
    "\xf0\x9f\x98\x80\xe2\x80\xae",  // an emoji, a right-to-left override
    "int", "_Bool", "_Generic", "SIZE_MAX", "__attribute__", "NULL", "size_t", "l", "b", "hb",
    "h", "arena", "host", "forward", "backward", "update", "Buffers", "HostBuffers", "bind",
    "dims", "params", "inputs", "rt_matmul", "RT_ADD", "mtc_model", "main", "INT8_C",
    "UINT64_MAX", "offsetof", "bool", "true", "linux", "printf", "errno", "EOF", "stdout",
    "a b", "a_b", "a-b", "a.b", "0", "9lives", "%s%n", "$(reboot)", "`id`", "'", ";", "{", "}",
    "#include <stdio.h>", "\\\n#define x", "x\?\?/\nputs(\"PWNED\");",
};
#define NHOSTILE (int)(sizeof hostile / sizeof hostile[0])

typedef struct {
  int ndims;
  char **dims;  // OLD=NEW
  char buf[256];
} Ctx;

static const char *pick(void *ctx, int kind, int index, const char *old) {
  Ctx *c = (Ctx *)ctx;
  if (kind == RENAME_DIM) {
    size_t n = strlen(old);
    for (int i = 0; i < c->ndims; i++)
      if (!strncmp(c->dims[i], old, n) && c->dims[i][n] == '=')
        return c->dims[i] + n + 1;
    return old;
  }
  if (kind == RENAME_VALUE) {
    if (index < NHOSTILE)
      return hostile[index];
    snprintf(c->buf, sizeof c->buf, "%s%d", hostile[index % NHOSTILE], index / NHOSTILE);
    return c->buf;
  }
  return hostile[NHOSTILE - 1 - index % NHOSTILE];
}

// Every initializer's raw data into DIR/data.bin, the tensors pointing at it.
static int externalize(Onnx__ModelProto *m, const char *out) {
  char path[4096];
  const char *slash = strrchr(out, '/');
  snprintf(path, sizeof path, "%.*sdata.bin", slash ? (int)(slash - out + 1) : 0, out);
  FILE *f = fopen(path, "wb");
  if (!f)
    return perror(path), 1;
  long off = 0;
  for (size_t i = 0; i < m->graph->n_initializer; i++) {
    Onnx__TensorProto *t = m->graph->initializer[i];
    if (!t->has_raw_data || !t->raw_data.len)
      continue;
    fwrite(t->raw_data.data, 1, t->raw_data.len, f);
    char offset[32], length[32];
    snprintf(offset, sizeof offset, "%ld", off);
    snprintf(length, sizeof length, "%zu", t->raw_data.len);
    off += (long)t->raw_data.len;
    const char *kv[3][2] = {{"location", "data.bin"}, {"offset", offset}, {"length", length}};
    t->external_data = (Onnx__StringStringEntryProto **)calloc(3, sizeof *t->external_data);
    for (int k = 0; k < 3; k++) {
      Onnx__StringStringEntryProto *e =
          (Onnx__StringStringEntryProto *)malloc(sizeof *e);
      onnx__string_string_entry_proto__init(e);
      e->key = rename_dup(kv[k][0]);
      e->value = rename_dup(kv[k][1]);
      t->external_data[k] = e;
    }
    t->n_external_data = 3;
    free(t->raw_data.data);
    t->raw_data.data = NULL;
    t->raw_data.len = 0;
    t->has_raw_data = 0;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  }
  return fclose(f) ? 1 : 0;
}

static void fix_dims(Onnx__ValueInfoProto **v, size_t n, int nfix, char **fixes) {
  for (size_t i = 0; i < n; i++) {
    Onnx__TypeProto *t = v[i]->type;
    if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type ||
        !t->tensor_type->shape)
      continue;
    Onnx__TensorShapeProto *s = t->tensor_type->shape;
    for (size_t d = 0; d < s->n_dim; d++) {
      Onnx__TensorShapeProto__Dimension *dim = s->dim[d];
      if (dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
        continue;
      size_t len = strlen(dim->dim_param);
      for (int k = 0; k < nfix; k++)
        if (!strncmp(fixes[k], dim->dim_param, len) && fixes[k][len] == '=') {
          long long size = atoll(fixes[k] + len + 1);
          free(dim->dim_param);
          dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
          dim->dim_value = size;
          break;
        }
    }
  }
}

// Every dim_param NAME given as NAME=VALUE becomes the fixed size VALUE.
static void fix(Onnx__ModelProto *m, int nfix, char **fixes) {
  Onnx__GraphProto *g = m->graph;
  fix_dims(g->input, g->n_input, nfix, fixes);
  fix_dims(g->output, g->n_output, nfix, fixes);
  fix_dims(g->value_info, g->n_value_info, nfix, fixes);
}

int main(int argc, char **argv) {
  if (argc < 4 ||
      (strcmp(argv[1], "names") && strcmp(argv[1], "external") && strcmp(argv[1], "fix"))) {
    fprintf(stderr, "usage: onnx_edit names IN.onnx OUT.onnx [OLD=NEW ...]\n"
                    "       onnx_edit external IN.onnx OUT.onnx\n"
                    "       onnx_edit fix IN.onnx OUT.onnx NAME=VALUE ...\n");
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f)
    return perror(argv[2]), 1;
  static unsigned char data[64 << 20];
  size_t n = fread(data, 1, sizeof data, f);
  fclose(f);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, data);
  Ctx ctx = {argc - 4, argv + 4, {0}};
  bool names = !strcmp(argv[1], "names"), fixed = !strcmp(argv[1], "fix");
  if (!m || !m->graph || (names && !onnx_rename(m, pick, &ctx)) ||
      (!names && !fixed && externalize(m, argv[3]))) {
    fprintf(stderr, "onnx_edit: %s: not a model this tool can edit\n", argv[2]);
    return 1;
  }
  if (fixed)
    fix(m, argc - 4, argv + 4);
  size_t len = onnx__model_proto__get_packed_size(m);
  unsigned char *out = (unsigned char *)malloc(len);
  onnx__model_proto__pack(m, out);
  f = fopen(argv[3], "wb");
  if (!f || fwrite(out, 1, len, f) != len || fclose(f))
    return perror(argv[3]), 1;
  free(out);
  onnx__model_proto__free_unpacked(m, NULL);
  return 0;
}
