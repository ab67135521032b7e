// Renames every name of an ONNX model (tests: hostile names must not change
// what mtc emits). Included by tests/onnx_edit.c and tests/fuzz/fuzz_names.c.
//
// The graph's name, node names, value names (graph inputs and outputs,
// initializers, value_info, node inputs and outputs: one new name per old
// name, wherever it occurs) and dim_params each take the name `pick` gives
// for (kind, index of the distinct old name, the old name). Models with subgraphs (If, Loop)
// are refused: their names would need the same map.
#ifndef MTC_TESTS_ONNX_RENAME_H
#define MTC_TESTS_ONNX_RENAME_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

enum { RENAME_GRAPH, RENAME_NODE, RENAME_VALUE, RENAME_DIM };

typedef const char *(*rename_pick)(void *ctx, int kind, int index, const char *old);

typedef struct RenameMap {
  int kind, n, cap;
  char **old, **new_;
  rename_pick pick;
  void *ctx;
} RenameMap;

static char *rename_dup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = (char *)malloc(n);
  if (p)
    memcpy(p, s, n);
  return p;
}

// *name takes its new name (the empty name, an absent optional input, stays).
static void rename_one(RenameMap *m, char **name) {
  if (!*name || !**name)
    return;
  int i = 0;
  while (i < m->n && strcmp(m->old[i], *name))
    i++;
  if (i == m->n) {
    if (m->n == m->cap) {
      m->cap = m->cap ? 2 * m->cap : 64;
      m->old = (char **)realloc(m->old, (size_t)m->cap * sizeof *m->old);
      m->new_ = (char **)realloc(m->new_, (size_t)m->cap * sizeof *m->new_);
      if (!m->old || !m->new_)
        abort();
    }
    m->old[i] = rename_dup(*name);
    m->new_[i] = rename_dup(m->pick(m->ctx, m->kind, i, *name));
    m->n++;
  }
  free(*name);  // protobuf-c's unpacked strings come from malloc (the default allocator)
  *name = rename_dup(m->new_[i]);
}

static void rename_free(RenameMap *m) {
  for (int i = 0; i < m->n; i++)
    free(m->old[i]), free(m->new_[i]);
  free(m->old), free(m->new_);
}

static void rename_type_dims(RenameMap *dims, Onnx__TypeProto *t) {
  if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type ||
      !t->tensor_type->shape)
    return;
  Onnx__TensorShapeProto *s = t->tensor_type->shape;
  for (size_t i = 0; i < s->n_dim; i++)
    if (s->dim[i]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
      rename_one(dims, &s->dim[i]->dim_param);
}

static void rename_infos(RenameMap *values, RenameMap *dims, Onnx__ValueInfoProto **v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    rename_one(values, &v[i]->name);
    rename_type_dims(dims, v[i]->type);
  }
}

// Returns false for a model it cannot rename (no graph, a subgraph).
static bool onnx_rename(Onnx__ModelProto *model, rename_pick pick, void *ctx) {
  Onnx__GraphProto *g = model->graph;
  if (!g)
    return false;
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t a = 0; a < g->node[i]->n_attribute; a++)
      if (g->node[i]->attribute[a]->g || g->node[i]->attribute[a]->n_graphs)
        return false;
  RenameMap graph = {RENAME_GRAPH, 0, 0, NULL, NULL, pick, ctx};
  RenameMap nodes = {RENAME_NODE, 0, 0, NULL, NULL, pick, ctx};
  RenameMap values = {RENAME_VALUE, 0, 0, NULL, NULL, pick, ctx};
  RenameMap dims = {RENAME_DIM, 0, 0, NULL, NULL, pick, ctx};
  rename_one(&graph, &g->name);
  rename_infos(&values, &dims, g->input, g->n_input);
  rename_infos(&values, &dims, g->output, g->n_output);
  rename_infos(&values, &dims, g->value_info, g->n_value_info);
  for (size_t i = 0; i < g->n_initializer; i++)
    rename_one(&values, &g->initializer[i]->name);
  for (size_t i = 0; i < g->n_node; i++) {
    Onnx__NodeProto *n = g->node[i];
    rename_one(&nodes, &n->name);
    for (size_t k = 0; k < n->n_input; k++)
      rename_one(&values, &n->input[k]);
    for (size_t k = 0; k < n->n_output; k++)
      rename_one(&values, &n->output[k]);
  }
  rename_free(&graph), rename_free(&nodes), rename_free(&values), rename_free(&dims);
  return true;
}

#endif
