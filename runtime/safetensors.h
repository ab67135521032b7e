// Reading and writing safetensors files (prefix rt_st_), the format of
// Hugging Face's safetensors library:
//
//   8 bytes   N, the header's length, a little-endian unsigned 64-bit integer
//   N bytes   JSON: {"NAME": {"dtype": "F32", "shape": [2, 3],
//                              "data_offsets": [BEGIN, END]}, ...,
//                    "__metadata__": {"KEY": "VALUE", ...}}
//   the rest  the tensors' bytes, little-endian, row-major; BEGIN and END
//             count from the start of this part, which the tensors cover
//             exactly, without holes or overlaps
//
// The training main uses it for --inputs, --dump-grads, --save and --load.
// Library code: every function returns 0 or -1 with a message in `err`
// (which names the file); the caller decides what to do.
#ifndef MTC_RT_SAFETENSORS_H
#define MTC_RT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define RT_ST_MAXRANK 8

// The dtypes of the format (the names are the JSON strings without RT_ST_).
typedef enum rt_st_dtype {
  RT_ST_BOOL,
  RT_ST_U8,
  RT_ST_I8,
  RT_ST_I16,
  RT_ST_U16,
  RT_ST_F16,
  RT_ST_BF16,
  RT_ST_I32,
  RT_ST_U32,
  RT_ST_F32,
  RT_ST_F64,
  RT_ST_I64,
  RT_ST_U64,
  RT_ST_NDTYPES
} rt_st_dtype;

typedef struct rt_st_tensor {
  const char *name;
  rt_st_dtype dtype;
  int rank;
  long shape[RT_ST_MAXRANK];
  long numel;        // product of shape (1 for rank 0)
  const void *data;  // numel elements, little-endian; when read: in the
                     // file's mapping, not necessarily aligned
} rt_st_tensor;

typedef struct rt_st_file {
  int n;
  rt_st_tensor *tensors;  // in the header's order
  char *names;            // storage of the tensors' names
  void *map;              // the whole file, mapped read-only
  size_t map_bytes;
} rt_st_file;

const char *rt_st_dtype_name(rt_st_dtype dt);  // "F32"
size_t rt_st_dtype_size(rt_st_dtype dt);       // bytes per element

// Maps and validates the file: the header length against the file size, the
// JSON, every entry's dtype, shape and offsets, duplicate names, and that the
// offsets cover the data exactly.
int rt_st_read(rt_st_file *f, const char *path, char *err, size_t cap);
const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name);  // NULL if absent
void rt_st_close(rt_st_file *f);

// t's values as float32; t must be F32.
void rt_st_to_f32(const rt_st_tensor *t, float *out);
// t's values as int32; t must be I32 or I64 (each value checked to fit).
int rt_st_to_i32(const rt_st_tensor *t, int32_t *out, char *err, size_t cap);

// Writes n tensors and the metadata (pairs of strings: key, value, ..., NULL;
// or NULL) to path, atomically: a temporary file next to it, then rename.
int rt_st_write(const char *path, const rt_st_tensor *t, int n, const char *const *metadata,
                char *err, size_t cap);

#endif
