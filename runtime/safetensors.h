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
// Library code: every function returns 0 (or a count) or -1 with a message
// in `err` (which names the file); the caller decides what to do.
#ifndef MTC_RT_SAFETENSORS_H
#define MTC_RT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

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

// Opens path for reading when it is a regular file: a descriptor, or -1 when it cannot be opened
// (errno kept: ENOENT for a missing file) and -2 when it is a folder, FIFO, socket or device
// ("PATH is a FIFO, not a regular file"), with the message in err. Never waits on a FIFO. train
// opens its other inputs with it too.
int rt_st_open_regular(const char *path, struct stat *st, char *err, size_t cap);

// Maps and validates the file: the header length against the file size, the
// JSON, every entry's dtype, shape and offsets, duplicate names, and that the
// offsets cover the data exactly.
int rt_st_read(rt_st_file *f, const char *path, char *err, size_t cap);
const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name);  // NULL if absent
void rt_st_close(rt_st_file *f);

// t's values as float32; t must be F32 or BF16 (widened exactly).
void rt_st_to_f32(const rt_st_tensor *t, float *out);
// t's values as int32; t must be I32 or I64 (each value checked to fit).
int rt_st_to_i32(const rt_st_tensor *t, int32_t *out, char *err, size_t cap);

// Writes n tensors and the metadata (pairs of strings: key, value, ..., NULL;
// or NULL) to path, atomically and durably: a temporary file in path's folder
// (.NAME.mtc-tmp.HOST.PID, created exclusively), written and synced, renamed
// over path, and the folder synced. A path that exists and is not a regular
// file (a symbolic link, a folder, a FIFO, a device) is refused, not
// replaced. On any error the temporary file is removed and path is as it was.
int rt_st_write(const char *path, const rt_st_tensor *t, int n, const char *const *metadata,
                char *err, size_t cap);

// Whether rt_st_write could write path, found before the work that makes the
// tensors: path is absent or a regular file, and a file can be created in its
// folder (one is created and removed).
int rt_st_check_target(const char *path, char *err, size_t cap);

// Removes the temporary files of rt_st_write calls on path, from this host,
// whose process has ended (a save killed before its rename): the count, their
// paths in `removed` (comma-separated, as many as fit), or -1.
int rt_st_remove_stale(const char *path, char *removed, size_t rcap, char *err, size_t cap);

// Removes the temporary file of the rt_st_write in progress, if any.
// Async-signal-safe: for a program's SIGINT or SIGTERM handler, which then
// re-raises the signal.
void rt_st_abandon(void);

#endif
