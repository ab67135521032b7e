// Cluster files (--cluster): what parses is a cluster the planner can use.
#include <math.h>

#include "fuzz.h"
#include "solver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text)
    return 0;
  SvCluster c;
  IrDiag d = {0};
  int rc = sv_cluster_parse(&c, text, "fuzz.json", &d);
  free(text);
  if (rc) {
    if (!d.msg[0])
      __builtin_trap(); // every failure says why
    return 0;
  }
  if (c.ngroups < 1 || sv_cluster_gpus(&c) < 1)
    __builtin_trap();
  for (int i = 0; i < c.ngroups; i++) {
    const SvDevice *v = &c.group[i].dev;
    if (!isfinite(v->mem) || !(v->mem > c.group[i].reserve) || !isfinite(v->intra_bw) ||
        !(v->intra_bw > 0) || !isfinite(v->flops_bf16))
      __builtin_trap(); // a usable device
  }
  return 0;
}
