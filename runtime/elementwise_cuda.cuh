// The elementwise kernels: binary ops with broadcasting, scales, the activations and the unary ops.
// The CUDA build's kernels, each family's launchers after its kernels; included by kernels_cuda.cu
// after the helpers every family shares (ld, to, Pack, the block sums; grid_for, scratch, dev,
// RT_CUDA_KT).

// ---- elementwise

// a op b for op RT_ADD .. RT_MAX (binary() launches no other)
__device__ inline float binary_op(int op, float a, float b) {
  switch (op) {
    case RT_ADD: return a + b;
    case RT_SUB: return a - b;
    case RT_MUL: return a * b;
    case RT_DIV: return a / b;
    case RT_MIN: return a < b || a != a ? a : b;
    default: return a > b || a != a ? a : b;  // RT_MAX
  }
}

// out[i] = a[.] op b[.], a through d.s0, b through d.s1
template <typename T>
__global__ void binary_kernel(int op, T *out, const T *a, const T *b, long n, Dims d) {
  GRID_LOOP(i, n) {
    long ao, bo;
    dims_offsets(d, i, &ao, &bo);
    out[i] = to<T>(binary_op(op, ld(a[ao]), ld(b[bo])));
  }
}

// ... a pack a thread (packable(d, n, ...)): residual and bias adds
template <typename T>
__global__ void binary_packs_kernel(int op, T *out, const T *a, const T *b, long n, Dims d) {
  constexpr int N = Pack<T>::N;
  GRID_LOOP(p, n / N) {
    long ao, bo;
    dims_offsets(d, p * N, &ao, &bo);
    Pack<T> x = load_pack(a + ao, d.s0[d.rank - 1]), y = load_pack(b + bo, d.s1[d.rank - 1]), r;
#pragma unroll
    for (int k = 0; k < N; k++) r.v[k] = to<T>(binary_op(op, ld(x.v[k]), ld(y.v[k])));
    *(Pack<T> *)(out + p * N) = r;
  }
}

template <typename T>
__global__ void scale_kernel(T *out, const T *x, long n, float s, float b) {
  GRID_LOOP(i, n) out[i] = to<T>(s * ld(x[i]) + b);
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_COEF 0.044715f
#define GELU_TAIL 20.0f

// The activations, each a function of one element (forward: f(x); backward:
// f(dy, x)) that map_kernel runs over a tensor.

// the CPU's form: 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), u clamped at +-20
struct GeluFwd {
  __device__ float operator()(float xi) const {
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    float uc = u > GELU_TAIL ? GELU_TAIL : (u < -GELU_TAIL ? -GELU_TAIL : u);
    float s = 1.0f / (1.0f + expf(-2.0f * uc));
    return u > GELU_TAIL ? xi : (u < -GELU_TAIL ? 0.0f : xi * s);
  }
};

struct GeluBwd {
  __device__ float operator()(float dy, float xi) const {
    float u = GELU_SCALE * (xi + GELU_COEF * xi * xi * xi);
    float uc = u > GELU_TAIL ? GELU_TAIL : (u < -GELU_TAIL ? -GELU_TAIL : u);
    float e = expf(-2.0f * uc);
    float s = 1.0f / (1.0f + e);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_COEF * xi * xi);
    float grad = s + 2.0f * xi * s * (e * s) * du;
    grad = u > GELU_TAIL ? 1.0f : (u < -GELU_TAIL ? 0.0f : grad);
    return grad * dy;
  }
};

struct ReluFwd {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};

struct ReluBwd {
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : 0.0f; }
};

template <typename T>
__global__ void cast_i32_f32_kernel(T *out, const int *x, long n) {
  GRID_LOOP(i, n) out[i] = to<T>((float)x[i]);
}

struct Unary {
  int op;
  float p;
  __device__ float operator()(float v) const {
    switch (op) {
      case RT_EXP: return expf(v);
      case RT_LOG: return logf(v);
      case RT_SQRT: return sqrtf(v);
      case RT_TANH: return tanhf(v);
      case RT_ERF: return erff(v);
      case RT_POW: return powf(v, p);
      case RT_SIN: return sinf(v);
      case RT_COS: return cosf(v);
      case RT_ABS: return fabsf(v);
      case RT_SIGN: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v;
      default: return 1.0f / (1.0f + expf(-v));  // RT_SIGMOID
    }
  }
};

struct GeluErfFwd {
  __device__ float operator()(float xi) const {
    return 0.5f * xi * (1.0f + erff(xi * 0.70710678118654752f));
  }
};

struct GeluErfBwd {
  __device__ float operator()(float dy, float xi) const {
    const float inv_sqrt_2pi = 0.3989422804014327f;
    float cdf = 0.5f * (1.0f + erff(xi * 0.70710678118654752f));
    float pdf = inv_sqrt_2pi * expf(-0.5f * xi * xi);
    return dy * (cdf + xi * pdf);
  }
};

struct SiluFwd {
  __device__ float operator()(float xi) const { return xi / (1.0f + expf(-xi)); }
};

struct SiluBwd {
  __device__ float operator()(float dy, float xi) const {
    float s = 1.0f / (1.0f + expf(-xi));
    return dy * s * (1.0f + xi * (1.0f - s));
  }
};

// y = f(x...) elementwise over one or two inputs x (an activation's x, or its
// backward's dy and x): an element a thread, or with PACK a 16-byte pack a
// thread (n whole packs, the pointers aligned).
template <typename F, typename T, int M>
__device__ inline float map_at(F f, const Pack<T> (&in)[M], int k) {
  if constexpr (M == 1)
    return f(ld(in[0].v[k]));
  else
    return f(ld(in[0].v[k]), ld(in[1].v[k]));
}

template <bool PACK, typename T, typename F, typename... X>
__global__ void map_kernel(T *y, long n, F f, const X *...x) {
  if constexpr (PACK) {
    GRID_LOOP(i, n / Pack<T>::N) {
      const Pack<T> in[] = {((const Pack<T> *)x)[i]...};
      Pack<T> r;
#pragma unroll
      for (int k = 0; k < Pack<T>::N; k++) r.v[k] = to<T>(map_at(f, in, k));
      ((Pack<T> *)y)[i] = r;
    }
  } else {
    GRID_LOOP(i, n) y[i] = to<T>(f(ld(x[i])...));
  }
}

// one thread per (row, position, pair); the angle in double, as on the CPU
template <typename T>
__global__ void rope_kernel(T *out, const T *x, long rows, long t, long hs, float theta,
                            int inverse) {
  long half = hs / 2;
  GRID_LOOP(k, rows * t * half) {
    long i = k % half, rp = k / half, p = rp % t;
    double a = (double)p * pow((double)theta, -2.0 * (double)i / (double)hs);
    float c = (float)cos(a), s = inverse ? -(float)sin(a) : (float)sin(a);
    const T *xr = x + rp * hs;
    float x1 = ld(xr[i]), x2 = ld(xr[i + half]);
    out[rp * hs + i] = to<T>(x1 * c - x2 * s);
    out[rp * hs + i + half] = to<T>(x2 * c + x1 * s);
  }
}

// ---- elementwise: launchers

template <typename T>
static void binary(int op, T *out, const T *a, const T *b, int rank, const long *shape,
                   const long *astride, const long *bstride) {
  check_rank(rank, "rt_binary");
  long n = numel_of(rank, shape);
  if (n <= 0) return;
  if (op < RT_ADD || op > RT_MAX) return;  // the CPU leaves out alone
  Dims d = make_dims(rank, shape, astride, bstride);
  if (packable(d, n, out, a, b)) {
    long packs = n / Pack<T>::N;
    RT_LAUNCH(binary_packs_kernel, grid_for(packs, NT), NT, 0, rt_cuda_stream, op, out, a, b, n,
              d);
  } else {
    RT_LAUNCH(binary_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, op, out, a, b, n, d);
  }
  LAUNCHED();
}
RT_CUDA_KT(binary,
           (int op, T *out, const T *a, const T *b, int rank, const long *shape,
            const long *astride, const long *bstride),
           (op, dev(out), dev(a), dev(b), rank, shape, astride, bstride))

template <typename T>
static void scale(T *out, const T *x, long n, float s, float b) {
  if (n <= 0) return;
  RT_LAUNCH(scale_kernel, grid_for(n, NT), NT, 0, rt_cuda_stream, out, x, n, s, b);
  LAUNCHED();
}
RT_CUDA_KT(scale, (T *out, const T *x, long n, float s, float b), (dev(out), dev(x), n, s, b))

// map_kernel's launch: packs where n and the pointers allow
template <typename T, typename F, typename... X>
static void map(T *y, long n, F f, const X *...x) {
  if (n <= 0) return;
  if (n % Pack<T>::N == 0 && aligned16(y) && (aligned16(x) && ...))
    RT_LAUNCH((map_kernel<true, T, F, X...>), grid_for(n / Pack<T>::N, NT), NT, 0,
              rt_cuda_stream, y, n, f, x...);
  else
    RT_LAUNCH((map_kernel<false, T, F, X...>), grid_for(n, NT), NT, 0, rt_cuda_stream, y, n, f,
              x...);
  LAUNCHED();
}

template <typename T>
static void gelu_fwd(T *y, const T *x, long n) {
  map(y, n, GeluFwd(), x);
}
RT_CUDA_KT(gelu_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void gelu_bwd(T *dx, const T *dy, const T *x, long n) {
  map(dx, n, GeluBwd(), dy, x);
}
RT_CUDA_KT(gelu_bwd, (T *dx, const T *dy, const T *x, long n), (dev(dx), dev(dy), dev(x), n))

template <typename T>
static void relu_fwd(T *y, const T *x, long n) {
  map(y, n, ReluFwd(), x);
}
RT_CUDA_KT(relu_fwd, (T *y, const T *x, long n), (dev(y), dev(x), n))

template <typename T>
static void relu_bwd(T *dx, const T *dy, const T *x, long n) {
  map(dx, n, ReluBwd(), dy, x);
}
RT_CUDA_KT(relu_bwd, (T *dx, const T *dy, const T *x, long n), (dev(dx), dev(dy), dev(x), n))
