// Data movement: fills, copies, casts, strided copies, slices and the reductions over dims. The
// CUDA build's kernels, each family's launchers after its kernels; included by kernels_cuda.cu
// after the helpers every family shares (ld, to, Pack, the block sums; grid_for, scratch, dev,
// RT_CUDA_KT).

// ---- data movement

template <typename T>
__global__ void fill_kernel(T *out, long n, T value) {
  GRID_LOOP(i, n) out[i] = value;
}

// out[i] = x[i] in another element type
template <typename T, typename U>
__global__ void cast_kernel(U *out, const T *x, long n) {
  GRID_LOOP(i, n) out[i] = to<U>(ld(x[i]));
}

// out[i] = x[offset of i through d.s0]
template <typename T>
__global__ void strided_copy_kernel(T *out, const T *x, long n, Dims d) {
  GRID_LOOP(i, n) {
    long xo, unused;
    dims_offsets(d, i, &xo, &unused);
    out[i] = x[xo];
  }
}

// ... a pack a thread (packable(d, n, ...)): a head's transpose moves 16 bytes at a time
template <typename T>
__global__ void strided_copy_packs_kernel(T *out, const T *x, long n, Dims d) {
  constexpr int N = Pack<T>::N;
  GRID_LOOP(p, n / N) {
    long xo, unused;
    dims_offsets(d, p * N, &xo, &unused);
    *(Pack<T> *)(out + p * N) = load_pack(x + xo, d.s0[d.rank - 1]);
  }
}

// The dims of reduce_sum split into kept ones (ostride != 0) and reduced ones
// (ostride == 0); x is contiguous.
struct ReduceDims {
  int nk, nr;
  long ksh[RT_MAXRANK], kx[RT_MAXRANK], ko[RT_MAXRANK];  // kept: shape, x stride, out stride
  long rsh[RT_MAXRANK], rx[RT_MAXRANK];                 // reduced: shape, x stride
};

__device__ inline void reduce_kept(const ReduceDims &rd, long k, long *xo, long *oo) {
  long a = 0, b = 0;
  for (int d = rd.nk - 1; d >= 0; d--) {
    long q = k / rd.ksh[d], r = k - q * rd.ksh[d];
    a += r * rd.kx[d];
    b += r * rd.ko[d];
    k = q;
  }
  *xo = a;
  *oo = b;
}

__device__ inline long reduce_inner(const ReduceDims &rd, long j) {
  long a = 0;
  for (int d = rd.nr - 1; d >= 0; d--) {
    long q = j / rd.rsh[d];
    a += (j - q * rd.rsh[d]) * rd.rx[d];
    j = q;
  }
  return a;
}

// One thread per kept index: its R reduced elements summed in double, added
// to out (zeroed by the launcher; each out element gets one addition unless
// two kept indices share it). out is float32 (a bf16 result is rounded from
// it by the launcher).
template <typename T>
__global__ void reduce_sum_threads_kernel(float *out, const T *x, ReduceDims rd, long K, long R,
                                          float scale) {
  GRID_LOOP(k, K) {
    long xo, oo;
    reduce_kept(rd, k, &xo, &oo);
    double s = 0.0;
    for (long j = 0; j < R; j++) s += ld(x[xo + reduce_inner(rd, j)]);
    atomicAdd(out + oo, (float)(scale * s));
  }
}

// The same with one block per kept index (long reductions).
template <typename T>
__global__ void reduce_sum_blocks_kernel(float *out, const T *x, ReduceDims rd, long K, long R,
                                         float scale) {
  for (long k = blockIdx.x; k < K; k += gridDim.x) {
    long xo, oo;
    reduce_kept(rd, k, &xo, &oo);
    double s = 0.0;
    for (long j = threadIdx.x; j < R; j += blockDim.x) s += ld(x[xo + reduce_inner(rd, j)]);
    s = block_sum(s);
    if (threadIdx.x == 0) atomicAdd(out + oo, (float)(scale * s));
  }
}

// ---- data movement: launchers

template <typename T>
static void fill(T *out, long n, float value) {
  if (n <= 0) return;
  RT_LAUNCH(fill_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, n, to<T>(value));
  LAUNCHED();
}
RT_CUDA_KT(fill, (T *out, long n, float value), (dev(out), n, value))

// memmove semantics: overlapping ranges are copied in chunks no longer than
// the distance between them, in the order that reads before it overwrites.
template <typename T>
static void copy(T *out, const T *x, long n) {
  if (n <= 0 || out == x) return;
  long dist = out > x ? (long)(out - x) : (long)(x - out);
  if (dist >= n) {
    cudaCheck(cudaMemcpyAsync(out, x, (size_t)n * sizeof(T), cudaMemcpyDeviceToDevice,
                              rt_cuda_stream));
  } else if (out < x) {
    for (long i = 0; i < n; i += dist) {
      long len = n - i < dist ? n - i : dist;
      cudaCheck(cudaMemcpyAsync(out + i, x + i, (size_t)len * sizeof(T),
                                cudaMemcpyDeviceToDevice, rt_cuda_stream));
    }
  } else {
    for (long hi = n; hi > 0; hi -= dist) {
      long lo = hi - dist > 0 ? hi - dist : 0;
      cudaCheck(cudaMemcpyAsync(out + lo, x + lo, (size_t)(hi - lo) * sizeof(T),
                                cudaMemcpyDeviceToDevice, rt_cuda_stream));
    }
  }
}
RT_CUDA_KT(copy, (T *out, const T *x, long n), (dev(out), dev(x), n))

// float32 to bf16 rounds to nearest even, bf16 to float32 is exact; between
// two buffers of one type it is rt_copy
template <typename T, typename U>
static void cast(U *out, const T *x, long n) {
  if constexpr (std::is_same<T, U>::value) {
    copy(out, x, n);
  } else {
    if (n <= 0) return;
    RT_LAUNCH(cast_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n);
    LAUNCHED();
  }
}
RT_CUDA_KTU(cast, (U *out, const T *x, long n), (dev(out), dev(x), n))

template <typename T>
static void strided_copy(T *out, const T *x, int rank, const long *shape, const long *xstride) {
  check_rank(rank, "rt_strided_copy");
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  Dims d = make_dims(rank, shape, xstride, NULL);
  if (d.rank == 1 && d.s0[0] == 1) {  // contiguous
    copy(out, x, n);
    return;
  }
  if (packable<T>(d, n, out, x, NULL)) {
    long packs = n / Pack<T>::N;
    RT_LAUNCH(strided_copy_packs_kernel, grid_for(packs, NT), NT, 0, rt_cuda_stream, out, x, n,
              d);
  } else {
    RT_LAUNCH(strided_copy_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, d);
  }
  LAUNCHED();
}
RT_CUDA_KT(strided_copy, (T *out, const T *x, int rank, const long *shape, const long *xstride),
           (dev(out), dev(x), rank, shape, xstride))

void rt_strided_copy_i32(int *out, const int *x, int rank, const long *shape,
                         const long *xstride) {
  strided_copy(out, x, rank, shape, xstride);
}

template <typename T>
static void reduce_sum(float *out, const T *x, int rank, const long *shape, const long *ostride,
                       long onumel, float scale) {
  check_rank(rank, "rt_reduce_sum");
  if (onumel > 0)
    cudaCheck(cudaMemsetAsync(out, 0, (size_t)onumel * sizeof(float), rt_cuda_stream));
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  long sh[RT_MAXRANK], os[RT_MAXRANK], unused[RT_MAXRANK], xs[RT_MAXRANK];
  int r = coalesce(rank, shape, ostride, NULL, sh, os, unused);
  xs[r - 1] = 1;  // x is contiguous
  for (int d = r - 2; d >= 0; d--) xs[d] = xs[d + 1] * sh[d + 1];
  ReduceDims rd = {};
  long K = 1, R = 1;
  for (int d = 0; d < r; d++) {
    if (os[d] != 0) {
      rd.ksh[rd.nk] = sh[d];
      rd.kx[rd.nk] = xs[d];
      rd.ko[rd.nk] = os[d];
      rd.nk++;
      K *= sh[d];
    } else {
      rd.rsh[rd.nr] = sh[d];
      rd.rx[rd.nr] = xs[d];
      rd.nr++;
      R *= sh[d];
    }
  }
  if (rd.nk == 1 && rd.kx[0] == 1 &&  // x [R, K]: the sums of its columns
      col_sums<1>(out, (float *)NULL, R, K, rd.ko[0], scale, ColumnOf<T>{x, K}))
    return;
  if (R >= 256) {
    RT_LAUNCH(reduce_sum_blocks_kernel, grid_rows(K), 512, 0, rt_cuda_stream, out, x, rd, K, R,
              scale);
  } else {
    RT_LAUNCH(reduce_sum_threads_kernel, grid_for(K, NT), NT, 0, rt_cuda_stream, out, x, rd, K, R,
              scale);
  }
  LAUNCHED();
}

// a bf16 out: summed in float32 (the kernels add with atomics), rounded once
template <typename T>
static void reduce_sum(__nv_bfloat16 *out, const T *x, int rank, const long *shape,
                       const long *ostride, long onumel, float scale) {
  if (onumel <= 0) return;
  float *f = temp_f32(onumel, "reduce_sum");
  reduce_sum(f, x, rank, shape, ostride, onumel, scale);
  cast(out, f, onumel);
}
RT_CUDA_KTU(reduce_sum,
            (U *out, const T *x, int rank, const long *shape, const long *ostride, long onumel,
             float scale),
            (dev(out), dev(x), rank, shape, ostride, onumel, scale))

// rows_copy_kernel over elements, or over 16-byte packs where every row,
// offset and pointer falls in whole packs
template <typename T>
static void rows_copy(T *out, const T *x, long outer, long len, long oinner, long ooff,
                      long xinner, long xoff) {
  if (len <= 0 || outer <= 0) return;
  constexpr long N = Pack<T>::N;
  if (len % N == 0 && oinner % N == 0 && ooff % N == 0 && xinner % N == 0 && xoff % N == 0 &&
      aligned16(out) && aligned16(x)) {
    RT_LAUNCH(rows_copy_kernel, grid_for(outer * len / N, NT), NT, 0, rt_cuda_stream,
              (Pack<T> *)out, (const Pack<T> *)x, outer, len / N, oinner / N, ooff / N,
              xinner / N, xoff / N);
  } else {
    RT_LAUNCH(rows_copy_kernel, grid_for(outer * len, NT), NT, 0, rt_cuda_stream, out, x, outer,
              len, oinner, ooff, xinner, xoff);
  }
  LAUNCHED();
}

template <typename T>
static void slice(T *out, const T *x, long outer, long xinner, long off, long len) {
  rows_copy(out, x, outer, len, len, 0L, xinner, off);
}
RT_CUDA_KT(slice, (T *out, const T *x, long outer, long xinner, long off, long len),
           (dev(out), dev(x), outer, xinner, off, len))

template <typename T>
static void unslice(T *out, const T *x, long outer, long oinner, long off, long len) {
  rows_copy(out, x, outer, len, oinner, off, len, 0L);
}
RT_CUDA_KT(unslice, (T *out, const T *x, long outer, long oinner, long off, long len),
           (dev(out), dev(x), outer, oinner, off, len))

void rt_unslice_i32(int *out, const int *x, long outer, long oinner, long off, long len) {
  unslice(out, x, outer, oinner, off, len);
}
