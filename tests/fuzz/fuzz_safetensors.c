// The emitted program's safetensors reader (--inputs, --load): a file that
// reads has every tensor's data inside it, and converts.
#include "fuzz.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".safetensors");
  if (!path)
    return 0;
  rt_st_file f;
  char err[512] = "";
  if (rt_st_read(&f, path, err, sizeof err)) {
    if (!err[0])
      __builtin_trap(); // every failure says why
    return 0;
  }
  for (int i = 0; i < f.n; i++) {
    const rt_st_tensor *t = &f.tensors[i];
    if (rt_st_find(&f, t->name) != t)
      __builtin_trap();
    size_t bytes = (size_t)t->numel * rt_st_dtype_size(t->dtype);
    const char *lo = f.map, *at = t->data;
    if (at < lo || at + bytes > lo + f.map_bytes)
      __builtin_trap(); // the data lies inside the file
    void *out = malloc((size_t)t->numel * 4 + 4);
    if (!out)
      continue;
    if (t->dtype == RT_ST_F32)
      rt_st_to_f32(t, out);
    else if (t->dtype == RT_ST_I32 || t->dtype == RT_ST_I64)
      rt_st_to_i32(t, out, err, sizeof err);
    free(out);
  }
  rt_st_close(&f);
  return 0;
}
