// The optimizers, the gradients' norm and the finite checks, and offload's copies to and from host
// memory. The CUDA build's kernels, each family's launchers after its kernels; included by
// kernels_cuda.cu after the helpers every family shares (ld, to, Pack, the block sums; grid_for,
// scratch, dev, RT_CUDA_KT).

// ---- optimizers (float32 master weights and moments; the gradient float32 or bf16)

// The optimizers take W elements a thread: 4 (16 bytes of p, m and v a load)
// where n and the pointers allow it, else 1.
#define OPT_W 4

// torch.optim.AdamW in the CPU's order of operations (rt_adamw in kernels_cpu.c); with c, the
// updated p rounded into it (bf16 mixed precision's working copy: rt_adamw_copy)
template <int W, typename G>
__global__ void adamw_kernel(float *p, const G *g, float *m, float *v, long n, float beta1,
                             float beta2, float eps, float step_size, float bc2_sqrt,
                             float decay, float gscale, long decay_n, __nv_bfloat16 *c) {
  GRID_LOOP(t, n / W) {
    long i0 = t * W;
    float pv[W], gv[W], mv[W], vv[W];
    load_run<W>(pv, p + i0);
    load_run<W>(gv, g + i0);
    load_run<W>(mv, m + i0);
    load_run<W>(vv, v + i0);
#pragma unroll
    for (int k = 0; k < W; k++) {
      float gi = gv[k] * gscale;
      mv[k] = beta1 * mv[k] + (1.0f - beta1) * gi;
      vv[k] = beta2 * vv[k] + (1.0f - beta2) * gi * gi;
      float denom = sqrtf(vv[k]) / bc2_sqrt + eps;
      pv[k] = pv[k] * (i0 + k < decay_n ? decay : 1.0f) - step_size * (mv[k] / denom);
    }
    store_run<W>(p + i0, pv);
    store_run<W>(m + i0, mv);
    store_run<W>(v + i0, vv);
    if (c) store_run<W>(c + i0, pv);
  }
}

template <int W, typename G>
__global__ void sgd_kernel(float *p, const G *g, long n, float lr, float wd, float gscale,
                           long decay_n, __nv_bfloat16 *c) {
  GRID_LOOP(t, n / W) {
    long i0 = t * W;
    float pv[W], gv[W];
    load_run<W>(pv, p + i0);
    load_run<W>(gv, g + i0);
#pragma unroll
    for (int k = 0; k < W; k++)
      pv[k] = pv[k] - lr * (gv[k] * gscale + (i0 + k < decay_n ? wd : 0.0f) * pv[k]);
    store_run<W>(p + i0, pv);
    if (c) store_run<W>(c + i0, pv);
  }
}

// out[0] = sqrt(sum x^2) in float64, deterministic: norm2_parts_kernel's
// blocks (their number a function of n alone, at most NORM2_BLOCKS) each sum
// a fixed part of x, every thread NORM2_UNROLL loads in flight at a time,
// then a tree over the threads in a fixed order, into norm2_part;
// norm2_kernel sums the parts the same way.
#define NORM2_THREADS 256
#define NORM2_BLOCKS 1024
#define NORM2_UNROLL 4
__device__ double norm2_part[NORM2_BLOCKS];

// the sum over the block of each thread's v, in a fixed tree, to thread 0
__device__ double norm2_tree(double v) {
  __shared__ double part[NORM2_THREADS];
  __syncthreads();  // the previous tree's part[0] is read
  part[threadIdx.x] = v;
  __syncthreads();
  for (int w = NORM2_THREADS / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

template <typename T>
__global__ void norm2_parts_kernel(const T *x, long n) {
  long stride = (long)gridDim.x * NORM2_THREADS;
  double s = 0.0;
  for (long i = blockIdx.x * NORM2_THREADS + threadIdx.x; i < n; i += NORM2_UNROLL * stride) {
    float v[NORM2_UNROLL];
    for (int u = 0; u < NORM2_UNROLL; u++)
      v[u] = i + u * stride < n ? ld(x[i + u * stride]) : 0.0f;
    for (int u = 0; u < NORM2_UNROLL; u++) s += (double)v[u] * (double)v[u];
  }
  double b = norm2_tree(s);
  if (threadIdx.x == 0) norm2_part[blockIdx.x] = b;
}

__global__ void norm2_kernel(float *out, int parts) {
  double b = norm2_tree(threadIdx.x < parts ? norm2_part[threadIdx.x] : 0.0);
  for (int p = NORM2_THREADS; p < parts; p += NORM2_THREADS)  // whole trees, in order
    b += norm2_tree(threadIdx.x + p < parts ? norm2_part[threadIdx.x + p] : 0.0);
  if (threadIdx.x == 0) out[0] = (float)sqrt(b);
}

// ---- checks

// at (set to 0xffffffff before: -1 as an int) <- the least i with x[i] NaN or
// infinite: each thread's first is its least, so it stops there.
template <typename T>
__global__ void find_nonfinite_kernel(unsigned *at, const T *x, long n) {
  GRID_LOOP(i, n) {
    if (!isfinite(ld(x[i]))) {
      atomicMin(at, (unsigned)i);
      break;
    }
  }
}

// ---- optimizers: launchers

// whether an update of n elements takes OPT_W a thread: n whole runs, each pointer (NULL:
// none) aligned to a run of its type
template <typename G>
static bool opt_runs(long n, const float *p, const G *g, const float *m, const float *v,
                     const __nv_bfloat16 *c) {
  auto at = [](const void *q, size_t bytes) { return q == NULL || (uintptr_t)q % bytes == 0; };
  return n % OPT_W == 0 && at(p, OPT_W * 4) && at(m, OPT_W * 4) && at(v, OPT_W * 4) &&
         at(g, OPT_W * sizeof(G)) && at(c, OPT_W * sizeof(*c));
}

// the CPU's adamw_step, on the host; c: NULL, or the bf16 copy written
template <typename G>
static void adamw(float *p, const G *g, float *m, float *v, long n, float lr, float beta1,
                  float beta2, float eps, float wd, int t, float gscale, long decay_n,
                  __nv_bfloat16 *c) {
  if (n <= 0) return;
  double bc1 = 1.0 - pow((double)beta1, (double)t);
  double bc2 = 1.0 - pow((double)beta2, (double)t);
  float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  float decay = 1.0f - lr * wd;
  if (opt_runs(n, p, g, m, v, c))
    RT_LAUNCH((adamw_kernel<OPT_W, G>), grid_for(n / OPT_W, NT), NT, 0, rt_cuda_stream, p, g, m, v,
              n, beta1, beta2, eps, step_size, bc2_sqrt, decay, gscale, decay_n, c);
  else
    RT_LAUNCH((adamw_kernel<1, G>), grid_for(n, NT), NT, 0, rt_cuda_stream, p, g, m, v, n, beta1,
              beta2, eps, step_size, bc2_sqrt, decay, gscale, decay_n, c);
  LAUNCHED();
}

RT_CUDA_KT(adamw,
           (float *p, const T *g, float *m, float *v, long n, float lr, float beta1, float beta2,
            float eps, float wd, int t, float gscale, long decay_n),
           (p, dev(g), m, v, n, lr, beta1, beta2, eps, wd, t, gscale, decay_n,
            (__nv_bfloat16 *)NULL))
// (RT_CUDA_KT calls the function of the kernel's name: the updates that write the copies are
// the same launchers under another)
template <typename G, typename... A>
static void adamw_copy(float *p, const G *g, A... rest) { adamw(p, g, rest...); }
RT_CUDA_KT(adamw_copy,
           (float *p, const T *g, float *m, float *v, long n, float lr, float beta1, float beta2,
            float eps, float wd, int t, float gscale, long decay_n, rt_bf16 *c),
           (p, dev(g), m, v, n, lr, beta1, beta2, eps, wd, t, gscale, decay_n, dev(c)))

template <typename G>
static void sgd(float *p, const G *g, long n, float lr, float wd, float gscale, long decay_n,
                __nv_bfloat16 *c) {
  if (n <= 0) return;
  if (opt_runs(n, p, g, (float *)NULL, (float *)NULL, c))
    RT_LAUNCH((sgd_kernel<OPT_W, G>), grid_for(n / OPT_W, NT), NT, 0, rt_cuda_stream, p, g, n, lr,
              wd, gscale, decay_n, c);
  else
    RT_LAUNCH((sgd_kernel<1, G>), grid_for(n, NT), NT, 0, rt_cuda_stream, p, g, n, lr, wd, gscale,
              decay_n, c);
  LAUNCHED();
}

RT_CUDA_KT(sgd, (float *p, const T *g, long n, float lr, float wd, float gscale, long decay_n),
           (p, dev(g), n, lr, wd, gscale, decay_n, (__nv_bfloat16 *)NULL))
template <typename G, typename... A>
static void sgd_copy(float *p, const G *g, A... rest) { sgd(p, g, rest...); }
RT_CUDA_KT(sgd_copy,
           (float *p, const T *g, long n, float lr, float wd, float gscale, long decay_n,
            rt_bf16 *c),
           (p, dev(g), n, lr, wd, gscale, decay_n, dev(c)))

template <typename T>
static void norm2(float *out, const T *x, long n) {
  long per = (long)NORM2_THREADS * NORM2_UNROLL, parts = (n + per - 1) / per;
  parts = parts < 1 ? 1 : parts > NORM2_BLOCKS ? NORM2_BLOCKS : parts;
  RT_LAUNCH(norm2_parts_kernel, (unsigned)parts, NORM2_THREADS, 0, rt_cuda_stream, x, n);
  LAUNCHED();
  RT_LAUNCH(norm2_kernel, 1, NORM2_THREADS, 0, rt_cuda_stream, out, (int)parts);
  LAUNCHED();
}
RT_CUDA_KT(norm2, (float *out, const T *x, long n), (out, dev(x), n))

template <typename T>
static void find_nonfinite(int *at, const T *x, long n) {
  cudaCheck(cudaMemsetAsync(at, 0xff, sizeof *at, rt_cuda_stream));
  if (n <= 0) return;
  RT_LAUNCH(find_nonfinite_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, (unsigned *)at, x, n);
  LAUNCHED();
}
RT_CUDA_KT(find_nonfinite, (int *at, const T *x, long n), (at, dev(x), n))

// ---- offload: host memory
//
// rt_adamw_host, rt_cast_host, rt_accumulate_host and rt_host_threads are host code over host
// memory (runtime/host.c in every build). The host region is pinned (device_cuda.cu). A copy
// without a slot waits for the stream, as the host reads or rewrites `host` right after. A copy
// with a slot runs on the copy stream once the kernels launched before it have finished, beside
// those launched after it; copy_wait(slot, host) makes the kernels launched after the wait wait
// for it, and where the host reads what came (host), the host too. A copy's host source is not
// written again before the step's end waits for the device (train.c).

static rt_copy_slots copy_slots;
static cudaStream_t copy_stream;
static cudaEvent_t kernels_before_copy;  // reused: each record is queued before the next

static void copy_start(int slot, void *dst, const void *src, size_t bytes,
                       cudaMemcpyKind kind) {
  if (slot < 0) {
    if (!bytes) return;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, rt_cuda_stream));
    cudaCheck(cudaStreamSynchronize(rt_cuda_stream));
    return;
  }
  rt_copy_slot *c = rt_copy_slot_start(&copy_slots, slot);
  if (!copy_stream) {
    cudaCheck(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&kernels_before_copy, cudaEventDisableTiming));
  }
  cudaEvent_t done = (cudaEvent_t)c->event;
  if (!done) {
    cudaCheck(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    c->event = done;
  }
  cudaCheck(cudaEventRecord(kernels_before_copy, rt_cuda_stream));
  cudaCheck(cudaStreamWaitEvent(copy_stream, kernels_before_copy, 0));
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream));
  cudaCheck(cudaEventRecord(done, copy_stream));
}

extern "C" void rt_copy_wait(int slot, int host) {
  cudaEvent_t done = (cudaEvent_t)rt_copy_slot_wait(&copy_slots, slot)->event;
  cudaCheck(cudaStreamWaitEvent(rt_cuda_stream, done, 0));
  if (host) cudaCheck(cudaEventSynchronize(done));
}

extern "C" int rt_copies_pending(void) { return rt_copy_slots_pending(&copy_slots); }

template <typename T>
static void to_host(T *host, const T *x, long n, int slot) {
  copy_start(slot, host, x, (size_t)(n > 0 ? n : 0) * sizeof(T), cudaMemcpyDeviceToHost);
}
RT_CUDA_KT(to_host, (T *host, const T *x, long n, int slot), (dev(host), dev(x), n, slot))

template <typename T>
static void to_device(T *x, const T *host, long n, int slot) {
  copy_start(slot, x, host, (size_t)(n > 0 ? n : 0) * sizeof(T), cudaMemcpyHostToDevice);
}
RT_CUDA_KT(to_device, (T *x, const T *host, long n, int slot), (dev(x), dev(host), n, slot))
