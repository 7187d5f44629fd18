// The CUDA ops of one training step (declared in cuda_ops.h), each the same
// maths as its twin in kernels/cpu/cpu_ops.cpp on bf16 activations with fp32
// accumulation. Every reduction sums fixed partials in a fixed order and no
// kernel uses floating-point atomics, so every op repeats bit for bit.
#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>     // __nv_bfloat16 conversions
#include <cuda_runtime.h>  // kernel launches

#include <algorithm>  // std::min
#include <cmath>      // std::pow, std::sqrt (host-side constants)
#include <cstdint>    // int64_t, int32_t, uintptr_t
#include <limits>     // std::numeric_limits (rope's launch bounds)
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::to_string
#include <type_traits>  // std::integral_constant (visit_grid_stride's pack width)

#include "kernels/cuda/cuda_check.h"  // TRAINBENCH_CUDA_CHECK
#include "kernels/engine.h"           // kCudaMaxHeadDim: RoPE's limit, checked before allocation

namespace trainbench::cuda {
namespace {

// 256 threads: 8 warps, enough to hide memory latency per block while letting
// several blocks share an SM on H100/H200. The block reductions below assume a
// multiple of 32.
constexpr int kThreads = 256;
static_assert(kThreads == kOpBlockThreads, "scratch_sizes.h sizes the partials for this block size");
constexpr int kWarps = kThreads / 32;
// Grid-stride loops cap their grid here: ~15 blocks of 256 per SM on 132 SMs
// already fills the machine; more blocks only add scheduling.
constexpr int64_t kMaxGridStrideBlocks = 2048;
// Blocks in rmsnorm_backward's and sum_of_squares's first pass:
// kRmsnormBackwardMaxBlocks and kSumOfSquaresMaxBlocks (scratch_sizes.h).
// rope's inverse frequencies travel by value in the kernel's parameters
// (computed on the host exactly as the CPU does), which bounds head_dim.
constexpr int kRopeMaxHalf = static_cast<int>(kCudaMaxHeadDim / 2);  // what the CLI checks (engine.h)

// A grid of one block per row: CUDA's grid.x holds at most 2^31 − 1 blocks,
// and a larger count cast to unsigned launched a wrapped grid that left rows
// unwritten (the memory plan keeps the engine's below it; a direct caller
// may not).
unsigned row_blocks(const char* op, int64_t rows) {
  if (rows > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(rows) +
                                " rows are more than one launch covers (2^31 - 1 blocks)");
  return static_cast<unsigned>(rows);
}

int grid_stride_blocks(int64_t count) {
  return static_cast<int>(std::min((count + kThreads - 1) / kThreads, kMaxGridStrideBlocks));
}

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16(x); }  // nearest even

template <typename T>
__device__ __forceinline__ T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Sum over the block, returned to every thread. Each thread adds the warp
// totals in warp order, so the result is fixed for a given input. The leading
// __syncthreads lets a kernel call this repeatedly (one row after another).
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T warp_totals[kWarps];
  value = warp_sum(value);
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = value;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kWarps; ++w) total += warp_totals[w];
  return total;
}

__device__ float block_max(float value) {
  __shared__ float warp_maxima[kWarps];
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.x / 32] = value;
  __syncthreads();
  float result = warp_maxima[0];
  for (int w = 1; w < kWarps; ++w) result = fmaxf(result, warp_maxima[w]);
  return result;
}

// A running softmax denominator: sum = Σ exp(x − max) over the values seen.
struct OnlineSum {
  float max, sum;
};

// Merges two running sums. A side that saw nothing (max = −inf) contributes 0
// rather than exp(−inf − −inf) = NaN.
__device__ __forceinline__ OnlineSum merge(OnlineSum a, OnlineSum b) {
  const float max = fmaxf(a.max, b.max);
  const float sum_a = a.max == -INFINITY ? 0.0f : a.sum * expf(a.max - max);
  const float sum_b = b.max == -INFINITY ? 0.0f : b.sum * expf(b.max - max);
  return {max, sum_a + sum_b};
}

__device__ OnlineSum block_online_sum(OnlineSum value) {
  __shared__ OnlineSum warp_values[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) {
    const OnlineSum other{__shfl_xor_sync(0xffffffffu, value.max, offset),
                          __shfl_xor_sync(0xffffffffu, value.sum, offset)};
    value = merge(value, other);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = value;
  __syncthreads();
  OnlineSum total = warp_values[0];
  for (int w = 1; w < kWarps; ++w) total = merge(total, warp_values[w]);
  return total;
}

// ---- 16-byte packs ----

// Eight bf16 values moved by one 16-byte load or store: scalar 2-byte loads
// keep too few bytes in flight to reach HBM bandwidth. Used where every
// pointer is 16-byte aligned (checked on the host); the rest goes element by
// element.
constexpr int kPack = 8;
struct alignas(16) Bf16Pack {
  bf16 value[kPack];
};

bool aligned_for_packs(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % sizeof(Bf16Pack) == 0;
}

template <int N>
struct Floats {
  float value[N];
};

// N = kPack: one 16-byte load at an aligned address; N = 1: one element.
template <int N>
__device__ __forceinline__ Floats<N> load(const bf16* source) {
  Floats<N> out;
  if constexpr (N == kPack) {
    const Bf16Pack pack = *reinterpret_cast<const Bf16Pack*>(source);
    for (int k = 0; k < N; ++k) out.value[k] = to_float(pack.value[k]);
  } else {
    for (int k = 0; k < N; ++k) out.value[k] = to_float(source[k]);
  }
  return out;
}

template <int N>
__device__ __forceinline__ void store(bf16* destination, const Floats<N>& values) {
  if constexpr (N == kPack) {
    Bf16Pack pack;
    for (int k = 0; k < N; ++k) pack.value[k] = to_bf16(values.value[k]);
    *reinterpret_cast<Bf16Pack*>(destination) = pack;
  } else {
    for (int k = 0; k < N; ++k) destination[k] = to_bf16(values.value[k]);
  }
}

// The fp32 flavour for the optimizer's buffers: kPack floats as two 16-byte
// loads (float4), so a thread keeps 32 bytes of each buffer in flight.
static_assert(kPack % 4 == 0, "fp32 packs are whole 16-byte quads");
struct alignas(16) Fp32Quad {
  float value[4];
};

template <int N>
__device__ __forceinline__ Floats<N> load(const float* source) {
  Floats<N> out;
  if constexpr (N == kPack) {
    for (int q = 0; q < N / 4; ++q) {
      const Fp32Quad quad = reinterpret_cast<const Fp32Quad*>(source)[q];
      for (int k = 0; k < 4; ++k) out.value[4 * q + k] = quad.value[k];
    }
  } else {
    for (int k = 0; k < N; ++k) out.value[k] = source[k];
  }
  return out;
}

template <int N>
__device__ __forceinline__ void store(float* destination, const Floats<N>& values) {
  if constexpr (N == kPack) {
    for (int q = 0; q < N / 4; ++q) {
      Fp32Quad quad;
      for (int k = 0; k < 4; ++k) quad.value[k] = values.value[4 * q + k];
      reinterpret_cast<Fp32Quad*>(destination)[q] = quad;
    }
  } else {
    for (int k = 0; k < N; ++k) destination[k] = values.value[k];
  }
}

// ---- elementwise ----

// This thread's share of elements [0, count) in a grid-stride loop:
// visit(width, i) for width = kPack elements at i while whole packs remain
// (when `packed`), then width = 1 for the tail, or for everything when some
// pointer is not 16-byte aligned. `width` is a std::integral_constant, so
// the visitor can instantiate load<width>/store<width>.
template <typename Visit>
__device__ __forceinline__ void visit_grid_stride(int64_t count, bool packed, Visit&& visit) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail_begin = 0;
  if (packed) {
    const int64_t packs = count / kPack;
    for (int64_t p = first; p < packs; p += stride) visit(std::integral_constant<int, kPack>{}, p * kPack);
    tail_begin = packs * kPack;
  }
  for (int64_t i = tail_begin + first; i < count; i += stride) visit(std::integral_constant<int, 1>{}, i);
}

// Applies op to elements [0, count) (visit_grid_stride). Each op reads all
// its inputs before it writes, so outputs may alias inputs.
template <typename Op>
__global__ void elementwise_kernel(Op op, int64_t count, bool packed) {
  visit_grid_stride(count, packed, [&](auto width, int64_t i) { op.template apply<decltype(width)::value>(i); });
}

template <typename Op>
void launch_elementwise(const Op& op, int64_t count, bool packed, cudaStream_t stream) {
  if (count == 0) return;
  const int64_t work_items = packed ? (count + kPack - 1) / kPack : count;
  elementwise_kernel<<<grid_stride_blocks(work_items), kThreads, 0, stream>>>(op, count, packed);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

// ---- embedding ----

// out[i] for i = row·d + col is embedding[tokens[row]·d + col]. With packs
// (d a multiple of kPack), a pack never straddles two rows.
struct EmbeddingGather {
  bf16* out;
  const int32_t* tokens;
  const bf16* embedding;
  int64_t d;
  template <int N>
  __device__ void apply(int64_t i) const {
    const int64_t row = i / d, col = i - row * d;
    store<N>(out + i, load<N>(embedding + static_cast<int64_t>(tokens[row]) * d + col));
  }
};

// Block (g, c): group g's token row, columns c·blockDim … ; each thread adds
// the group's rows in row order into a register, read once and written once.
__global__ void embedding_backward_kernel(float* d_embedding, const bf16* d_out, const int32_t* rows,
                                          const int32_t* offsets, const int32_t* group_tokens, int64_t d) {
  const int64_t group = blockIdx.x;
  const int64_t col = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= d) return;
  float* target = d_embedding + static_cast<int64_t>(group_tokens[group]) * d + col;
  float sum = *target;
  for (int32_t i = offsets[group]; i < offsets[group + 1]; ++i)
    sum += to_float(d_out[static_cast<int64_t>(rows[i]) * d + col]);
  *target = sum;
}

// ---- rmsnorm ----

// Sums each of R values over the block, returned to every thread: block_sum
// for R rows at once (one pair of barriers instead of R), each value summed
// in block_sum's order, so R = 1 gives block_sum's bits.
template <int R>
__device__ void block_sum_each(float (&values)[R]) {
  __shared__ float warp_totals[kWarps][R];
  for (int k = 0; k < R; ++k) values[k] = warp_sum(values[k]);
  __syncthreads();
  if (threadIdx.x % 32 == 0)
    for (int k = 0; k < R; ++k) warp_totals[threadIdx.x / 32][k] = values[k];
  __syncthreads();
  for (int k = 0; k < R; ++k) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_totals[w][k];
    values[k] = total;
  }
}

// The row's values at [i, i + N) and the sum of their squares. With
// kAddFirst the values are residual + addend rounded to bf16, and are stored
// back into residual (bf16 in a float is exact, so the store does not round
// again).
template <bool kAddFirst, int N>
__device__ __forceinline__ float load_row_squared(const bf16* x, bf16* residual, const bf16* addend,
                                                  int64_t i) {
  Floats<N> v = load<N>(x + i);
  if constexpr (kAddFirst) {
    const Floats<N> a = load<N>(addend + i);
    for (int k = 0; k < N; ++k) v.value[k] = to_float(to_bf16(v.value[k] + a.value[k]));
    store<N>(residual + i, v);
  }
  float sum = 0.0f;
  for (int k = 0; k < N; ++k) sum += v.value[k] * v.value[k];
  return sum;
}

template <int N>
__device__ __forceinline__ void store_normalised(bf16* y, const bf16* x, const bf16* weight, float r,
                                                 int64_t i) {
  const Floats<N> v = load<N>(x + i), w = load<N>(weight + i);
  Floats<N> out;
  for (int k = 0; k < N; ++k) out.value[k] = v.value[k] * r * w.value[k];
  store<N>(y + i, out);
}

// One warp per row, kWarps rows per block: out = x · rsqrt(mean(x²) + eps) ·
// weight, the sum a warp_sum, so no barrier holds a row back and an SM keeps
// 64 rows in flight (one 256-thread block per row kept 8, and GPT-2's
// 768-wide rows waited on memory latency). Lanes take 16-byte packs where
// every row is 16-byte aligned (`packed`), elements otherwise. With kAddFirst,
// x (`in`, which is `residual` then) is residual + addend, rounded and
// written back on the way (residual_add_rmsnorm_forward); each lane reads
// back only what it wrote, and since both variants share this code the fused
// op's bits are those of add_inplace followed by the plain norm.
template <bool kAddFirst>
__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* in, bf16* residual,
                                       const bf16* addend, const bf16* weight, int64_t n, int64_t d,
                                       float eps, bool packed) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= n) return;  // the whole warp: the row is the warp's
  const int lane = threadIdx.x % 32;
  const int64_t begin = row * d;
  const bf16* x = in + begin;
  bf16* x_out = kAddFirst ? residual + begin : nullptr;
  const bf16* a = kAddFirst ? addend + begin : nullptr;
  const int64_t packs = packed ? d / kPack : 0;
  float sum_sq = 0.0f;
  for (int64_t p = lane; p < packs; p += 32)
    sum_sq += load_row_squared<kAddFirst, kPack>(x, x_out, a, p * kPack);
  for (int64_t i = packs * kPack + lane; i < d; i += 32)
    sum_sq += load_row_squared<kAddFirst, 1>(x, x_out, a, i);
  sum_sq = warp_sum(sum_sq);
  const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
  if (lane == 0) rstd[row] = r;
  bf16* y = out + begin;
  for (int64_t p = lane; p < packs; p += 32) store_normalised<kPack>(y, x, weight, r, p * kPack);
  for (int64_t i = packs * kPack + lane; i < d; i += 32) store_normalised<1>(y, x, weight, r, i);
}

// Rows a block of rmsnorm_backward_kernel takes at once: their loads are in
// flight together and their sums share one pair of barriers. At GPT-2's
// 768-wide rows a block otherwise waited out a memory latency and two
// barriers per row, 64 rows in a row.
constexpr int kRmsnormBackwardRowsAtOnce = 4;

// Block b handles rows b, b + gridDim.x, … (kRmsnormBackwardRowsAtOnce at a
// time, in that order). dx_i = r·w_i·dy_i − x_i·r³/d · Σ_j dy_j·w_j·x_j is
// added to d_in; when weight_partials is set, the block's own row of it (one
// float per column, owned by the thread that owns the column) collects
// Σ dy_i·x_i·r over the block's rows, in row order, for
// rmsnorm_weight_grad_kernel.
__global__ void rmsnorm_backward_kernel(bf16* d_in, float* weight_partials, const bf16* d_out,
                                        const bf16* in, const bf16* weight, const float* rstd,
                                        int64_t n, int64_t d) {
  constexpr int R = kRmsnormBackwardRowsAtOnce;
  float* partial = weight_partials != nullptr ? weight_partials + blockIdx.x * d : nullptr;
  if (partial != nullptr)
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) partial[i] = 0.0f;
  const int64_t stride = gridDim.x;
  for (int64_t first = blockIdx.x; first < n; first += R * stride) {
    int64_t rows[R];
    float r[R], dots[R];
    for (int k = 0; k < R; ++k) {
      rows[k] = first + k * stride;  // rows[k] >= n: no row, skipped below
      r[k] = rows[k] < n ? rstd[rows[k]] : 0.0f;
      dots[k] = 0.0f;
    }
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float w = to_float(weight[i]);
      for (int k = 0; k < R; ++k)
        if (rows[k] < n)
          dots[k] += to_float(d_out[rows[k] * d + i]) * w * to_float(in[rows[k] * d + i]);
    }
    block_sum_each<R>(dots);
    float coef[R];
    for (int k = 0; k < R; ++k) coef[k] = dots[k] * r[k] * r[k] * r[k] / static_cast<float>(d);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float w = to_float(weight[i]);
      for (int k = 0; k < R; ++k) {
        if (rows[k] >= n) continue;
        const int64_t at = rows[k] * d + i;
        const float x_i = to_float(in[at]), dy_i = to_float(d_out[at]);
        d_in[at] = to_bf16(to_float(d_in[at]) + r[k] * w * dy_i - x_i * coef[k]);
        if (partial != nullptr) partial[i] += dy_i * x_i * r[k];
      }
    }
  }
}

// d_weight[c] += Σ_b partials[b, c]: a block takes 32 columns; its warp w
// sums partial rows w, w + kWarps, … in order (each load a coalesced row of
// 32 columns), then one thread per column adds the warps' sums in warp
// order — a fixed order, with kWarps chains per column where one thread per
// column walked all `blocks` rows.
__global__ void rmsnorm_weight_grad_kernel(float* d_weight, const float* partials, int64_t blocks,
                                           int64_t d) {
  __shared__ float warp_sums[kWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float total = 0.0f;
  if (col < d)
    for (int64_t b = warp; b < blocks; b += kWarps) total += partials[b * d + col];
  warp_sums[warp][lane] = total;
  __syncthreads();
  if (warp != 0 || col >= d) return;
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) sum += warp_sums[w][lane];
  d_weight[col] += sum;
}

// ---- rope ----

struct RopeInverseFrequencies {
  float value[kRopeMaxHalf];
};

// One block per token row (b, t) of x[batch, seq_len, n_heads, head_dim]:
// the angles t·inv_freq[i], i < head_dim/2, are the same for every head of
// the row, so the block takes their sines and cosines once into shared
// memory and then rotates the row's n_heads·head_dim/2 pairs. (One thread per
// pair evaluated sincosf and three 64-bit divisions for each, n_heads times
// the sines needed: at GPT-2's 12 heads the kernel spent more on that
// arithmetic than on its bytes.) direction −1 rotates back (backward).
__global__ void rope_kernel(bf16* x, int64_t seq_len, int n_heads, int head_dim,
                            RopeInverseFrequencies inv_freq, float direction) {
  __shared__ float sines[kRopeMaxHalf], cosines[kRopeMaxHalf];
  const int half = head_dim / 2;
  const int64_t row = blockIdx.x;
  const int64_t t = row % seq_len;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    // sincosf, not __sincosf: positions reach thousands of radians, where the
    // fast intrinsic's argument reduction loses digits.
    float s, c;
    sincosf(static_cast<float>(t) * inv_freq.value[i], &s, &c);
    sines[i] = s * direction;
    cosines[i] = c;
  }
  __syncthreads();
  bf16* row_values = x + row * n_heads * head_dim;
  for (int p = threadIdx.x; p < n_heads * half; p += blockDim.x) {
    const int head = p / half, i = p - head * half;
    bf16* v = row_values + static_cast<int64_t>(head) * head_dim;
    const float s = sines[i], c = cosines[i];
    const float x1 = to_float(v[i]), x2 = to_float(v[i + half]);
    v[i] = to_bf16(x1 * c - x2 * s);
    v[i + half] = to_bf16(x2 * c + x1 * s);
  }
}

void rope_rotate(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                 double theta, float direction, cudaStream_t stream) {
  if (head_dim % 2 != 0 || head_dim / 2 > kRopeMaxHalf)
    throw std::invalid_argument("rope: head_dim must be even and at most " +
                                std::to_string(2 * kRopeMaxHalf) + ", got " +
                                std::to_string(head_dim));
  const int64_t pairs = batch * seq_len * n_heads * (head_dim / 2);
  if (pairs == 0) return;
  RopeInverseFrequencies inv_freq{};
  for (int64_t i = 0; i < head_dim / 2; ++i)
    // As cpu::rope_forward: the float of the double pow, as PyTorch computes it.
    inv_freq.value[i] =
        1.0f / static_cast<float>(std::pow(theta, static_cast<double>(2 * i) / head_dim));
  const int64_t rows = batch * seq_len;
  if (rows > std::numeric_limits<int32_t>::max() || n_heads * head_dim > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("rope: " + std::to_string(rows) + " rows of " + std::to_string(n_heads) +
                                " heads are more than one launch covers");
  rope_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      x, seq_len, static_cast<int>(n_heads), static_cast<int>(head_dim), inv_freq, direction);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

// ---- causal softmax ----

// One block per row of scores[heads_times_batch · seq_len, seq_len]; row r is
// query position i = r % seq_len and keeps entries j ≤ i.
__global__ void causal_softmax_forward_kernel(bf16* scores_to_probs, int64_t seq_len, float scale) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % seq_len;
  bf16* x = scores_to_probs + row * seq_len;
  float max_score = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    max_score = fmaxf(max_score, to_float(x[j]) * scale);
  max_score = block_max(max_score);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    sum += expf(to_float(x[j]) * scale - max_score);
  sum = block_sum(sum);  // its leading barrier also orders the reads above before the writes below
  const float inv_sum = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < seq_len; j += blockDim.x)
    x[j] = to_bf16(j <= i ? expf(to_float(x[j]) * scale - max_score) * inv_sum : 0.0f);
}

__global__ void causal_softmax_backward_kernel(bf16* d_probs_to_d_scores, const bf16* probs,
                                               int64_t seq_len, float scale) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % seq_len;
  bf16* d = d_probs_to_d_scores + row * seq_len;
  const bf16* p = probs + row * seq_len;
  float weighted = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) weighted += to_float(p[j]) * to_float(d[j]);
  weighted = block_sum(weighted);
  // Above the diagonal P is 0, so is the gradient; written explicitly so
  // whatever the GEMM left there (even a non-finite value) does not leak.
  for (int64_t j = threadIdx.x; j < seq_len; j += blockDim.x)
    d[j] = to_bf16(j <= i ? to_float(p[j]) * (to_float(d[j]) - weighted) * scale : 0.0f);
}

// ---- SwiGLU and residual adds (launch_elementwise) ----

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct SwigluForward {
  bf16* out;
  const bf16 *gate, *up;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Floats<N> g = load<N>(gate + i), u = load<N>(up + i);
    Floats<N> y;
    for (int k = 0; k < N; ++k) y.value[k] = g.value[k] * sigmoid(g.value[k]) * u.value[k];
    store<N>(out + i, y);
  }
};

struct SwigluBackward {
  bf16 *d_gate, *d_up;
  const bf16 *d_out, *gate, *up;
  template <int N>
  __device__ void apply(int64_t i) const {
    const Floats<N> dy = load<N>(d_out + i), g = load<N>(gate + i), u = load<N>(up + i);
    Floats<N> dg, du;
    for (int k = 0; k < N; ++k) {
      const float sig = sigmoid(g.value[k]);
      du.value[k] = dy.value[k] * g.value[k] * sig;
      dg.value[k] = dy.value[k] * u.value[k] * sig * (1.0f + g.value[k] * (1.0f - sig));
    }
    store<N>(d_up + i, du);
    store<N>(d_gate + i, dg);
  }
};

struct AddInplace {
  bf16* out;
  const bf16* in;
  template <int N>
  __device__ void apply(int64_t i) const {
    Floats<N> sum = load<N>(out + i);
    const Floats<N> addend = load<N>(in + i);
    for (int k = 0; k < N; ++k) sum.value[k] += addend.value[k];
    store<N>(out + i, sum);
  }
};

// Runs once at start-up, so plain scalar loads are enough.
__global__ void copy_fp32_to_bf16_kernel(bf16* dst, const float* src, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = to_bf16(src[i]);
}

// A 32-bit integer hash (Wellons' lowbias32) of seed and index: independent
// uniform bits per element, no state, the same on every run.
__global__ void fill_uniform_bf16_kernel(bf16* dst, int64_t count, float scale, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) ^ (static_cast<uint32_t>(i >> 32) * 0x9e3779b9u) ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    const float unit = static_cast<float>(x >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    dst[i] = to_bf16((2.0f * unit - 1.0f) * scale);
  }
}

// ---- cross-entropy ----

// A logit of −inf adds exp(−inf) = 0; skipped, so a thread that has seen
// nothing else yet does not compute exp(−inf − −inf) = NaN (the CPU op's sum
// stays finite there).
__device__ __forceinline__ void online_add(OnlineSum& running, float value) {
  if (value == -INFINITY) return;
  if (value > running.max) {
    running.sum = running.sum * expf(running.max - value) + 1.0f;
    running.max = value;
  } else {
    running.sum += expf(value - running.max);
  }
}

// One block per row; one pass over the vocabulary with a running max and sum
// (online softmax), so a 128256-wide row is read once. `packed`: every row
// starts 16-byte aligned (aligned logits, vocab a multiple of kPack).
// One block per row. Rows are `row_stride` elements apart (the logits buffer
// pads each row to a multiple of 64 so the LM head's GEMMs stay on cuBLASLt's
// aligned kernels; the padding is never read). When rows start on 16 bytes,
// the first vocab/kPack·kPack entries go in 16-byte packs and the rest, fewer
// than kPack, one by one: GPT-2's odd 50257 no longer falls back entirely.
__global__ void cross_entropy_forward_kernel(float* losses, float* logsumexp, const bf16* logits,
                                             const int32_t* targets, int64_t vocab,
                                             int64_t row_stride, bool packed) {
  const int64_t row = blockIdx.x;
  const bf16* x = logits + row * row_stride;
  OnlineSum running{-INFINITY, 0.0f};
  const int64_t packs = packed ? vocab / kPack : 0;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Floats<kPack> values = load<kPack>(x + p * kPack);
    for (int k = 0; k < kPack; ++k) online_add(running, values.value[k]);
  }
  for (int64_t j = packs * kPack + threadIdx.x; j < vocab; j += blockDim.x)
    online_add(running, to_float(x[j]));
  const OnlineSum total = block_online_sum(running);
  if (threadIdx.x == 0) {
    const float lse = total.max + logf(total.sum);
    logsumexp[row] = lse;
    losses[row] = lse - to_float(x[targets[row]]);
  }
}

__global__ void cross_entropy_backward_kernel(bf16* logits_to_dlogits, const float* logsumexp,
                                              const int32_t* targets, int64_t vocab,
                                              int64_t row_stride, float d_loss, bool packed) {
  const int64_t row = blockIdx.x;
  bf16* x = logits_to_dlogits + row * row_stride;
  const float lse = logsumexp[row];
  const int64_t target = targets[row];
  // (softmax − onehot) · d_loss in fp32, rounded once.
  auto dlogit = [&](float logit, int64_t j) {
    const float grad = expf(logit - lse) * d_loss;
    return j == target ? grad - d_loss : grad;
  };
  const int64_t packs = packed ? vocab / kPack : 0;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    Floats<kPack> values = load<kPack>(x + p * kPack);
    for (int k = 0; k < kPack; ++k) values.value[k] = dlogit(values.value[k], p * kPack + k);
    store<kPack>(x + p * kPack, values);
  }
  for (int64_t j = packs * kPack + threadIdx.x; j < vocab; j += blockDim.x)
    x[j] = to_bf16(dlogit(to_float(x[j]), j));
}

// Packs need every row to start on 16 bytes: an aligned base and a stride
// that is a whole number of packs.
bool cross_entropy_packed(const bf16* logits, int64_t row_stride) {
  return aligned_for_packs(logits) && row_stride % kPack == 0;
}

void check_row_stride(const char* what, int64_t vocab, int64_t row_stride) {
  if (row_stride < vocab)
    throw std::invalid_argument(std::string(what) + ": row_stride " + std::to_string(row_stride) +
                                " is less than vocab " + std::to_string(vocab));
}

// ---- gradient norm ----

// Pass 1: block b sums the squares of its grid-stride share in double and
// writes partials[b]. With `packed` (x 16-byte aligned) each thread reads
// kPack floats at a time as two 16-byte loads: with the grid fixed at
// kSumOfSquaresMaxBlocks, one float per thread kept too few bytes in flight
// to stream Llama-3-8B's 7.7 GB of gradients at HBM speed.
__global__ void sum_of_squares_partials_kernel(double* partials, const float* x, int64_t count,
                                               bool packed) {
  double total = 0.0;
  visit_grid_stride(count, packed, [&](auto width, int64_t i) {
    const Floats<decltype(width)::value> values = load<decltype(width)::value>(x + i);
    for (const float v : values.value) total += static_cast<double>(v) * v;
  });
  total = block_sum(total);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2: one block sums the partials.
__global__ void sum_of_squares_final_kernel(double* result, const double* partials,
                                            int64_t blocks) {
  double total = 0.0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) total += partials[b];
  total = block_sum(total);
  if (threadIdx.x == 0) *result = total;
}


// Mirrors CpuEngine::optimizer_step's clipping, in double like it.
__global__ void clip_scale_kernel(float* grad_scale, float* grad_norm, const double* sum_sq,
                                  double max_norm) {
  const double norm = sqrt(*sum_sq);
  *grad_norm = static_cast<float>(norm);
  *grad_scale = max_norm > 0.0 && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

// ---- AdamW ----

// The constants cpu::adamw_update derives from the step, derived the same way
// on the host.
struct AdamWConstants {
  float beta1, beta2, eps;
  float step_size;              // lr / (1 − β1^t)
  float bias_correction2_sqrt;  // sqrt(1 − β2^t)
  float decay;                  // 1 − lr·wd
};

// One element's AdamW update, cpu::adamw_update's formula with every
// rounding spelled out: __fmul_rn and __fadd_rn are never contracted into an
// FMA, so the packed and the element-by-element instantiations below give
// the same bits whatever the compiler does with either. They must: a ZeRO-1
// shard that starts unaligned updates element by element what the unsharded
// engine updates in packs, and the two are compared bit for bit.
__device__ __forceinline__ void adamw_element(float g, float scale, const AdamWConstants& k, float& m, float& v,
                                              float& p) {
  const float g_scaled = __fmul_rn(g, scale);
  m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(1.0f - k.beta1, g_scaled));
  v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(__fmul_rn(1.0f - k.beta2, g_scaled), g_scaled));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bias_correction2_sqrt), k.eps);
  p = __fsub_rn(__fmul_rn(p, k.decay), __fdiv_rn(__fmul_rn(k.step_size, m), denom));
}

// AdamW over a run of elements: packs of kPack (16-byte loads and stores of
// the four fp32 buffers and the bf16 copy) where every pointer allows. 30
// bytes move per parameter, 57 GB a step at Llama-3-8B's 4 layers: scalar
// 4-byte accesses left HBM bandwidth unused.
struct AdamwUpdate {
  float* master;
  bf16* params;
  const float* grads;
  float *m, *v;
  AdamWConstants k;
  const float* grad_scale;  // on the device: clipping needs no host round trip
  template <int N>
  __device__ void apply(int64_t i) const {
    const float scale = *grad_scale;
    const Floats<N> g = load<N>(grads + i);
    Floats<N> m_i = load<N>(m + i), v_i = load<N>(v + i), p_i = load<N>(master + i);
    for (int j = 0; j < N; ++j) adamw_element(g.value[j], scale, k, m_i.value[j], v_i.value[j], p_i.value[j]);
    store<N>(m + i, m_i);
    store<N>(v + i, v_i);
    store<N>(master + i, p_i);
    store<N>(params + i, p_i);
  }
};

}  // namespace

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* embedding, int64_t n,
                       int64_t d, cudaStream_t stream) {
  const bool packed = d % kPack == 0 && aligned_for_packs(out) && aligned_for_packs(embedding);
  launch_elementwise(EmbeddingGather{out, tokens, embedding, d}, n * d, packed, stream);
}

void embedding_backward(float* d_embedding, const bf16* d_out, const TokenGroups& groups, int64_t d,
                        cudaStream_t stream) {
  if (groups.count == 0 || d == 0) return;
  const dim3 grid(row_blocks("embedding_backward", groups.count), static_cast<unsigned>((d + kThreads - 1) / kThreads));
  embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(d_embedding, d_out, groups.rows, groups.offsets,
                                                           groups.tokens, d);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

namespace {
// Both RMSNorm forwards: rows read from `in`; with kAddFirst `in` is
// `residual`, and `addend` is added into it first.
template <bool kAddFirst>
void launch_rmsnorm_forward(bf16* out, float* rstd, const bf16* in, bf16* residual, const bf16* addend,
                            const bf16* weight, int64_t n, int64_t d, float eps, cudaStream_t stream) {
  if (n == 0) return;
  const bool packed = d % kPack == 0 && aligned_for_packs(out) && aligned_for_packs(in) &&
                      aligned_for_packs(weight) && (addend == nullptr || aligned_for_packs(addend));
  rmsnorm_forward_kernel<kAddFirst><<<row_blocks("rmsnorm_forward", (n + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      out, rstd, in, residual, addend, weight, n, d, eps, packed);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void rmsnorm_forward(bf16* out, float* rstd, const bf16* in, const bf16* weight, int64_t n,
                     int64_t d, float eps, cudaStream_t stream) {
  launch_rmsnorm_forward<false>(out, rstd, in, nullptr, nullptr, weight, n, d, eps, stream);
}

void residual_add_rmsnorm_forward(bf16* residual, const bf16* addend, bf16* out, float* rstd,
                                  const bf16* weight, int64_t n, int64_t d, float eps,
                                  cudaStream_t stream) {
  launch_rmsnorm_forward<true>(out, rstd, residual, residual, addend, weight, n, d, eps, stream);
}

void rmsnorm_backward(bf16* d_in, float* d_weight, const bf16* d_out, const bf16* in,
                      const bf16* weight, const float* rstd, int64_t n, int64_t d, float* scratch,
                      cudaStream_t stream) {
  if (n == 0 || d == 0) return;
  // The gain's gradient is summed from per-block partials in `scratch`
  // (rmsnorm_backward_scratch_floats): without it the kernel writes through null.
  if (d_weight != nullptr && scratch == nullptr)
    throw std::invalid_argument("rmsnorm_backward: a gain gradient needs scratch");
  const int64_t blocks = rmsnorm_backward_blocks(n);
  float* partials = d_weight != nullptr ? scratch : nullptr;
  rmsnorm_backward_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      d_in, partials, d_out, in, weight, rstd, n, d);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
  if (d_weight == nullptr) return;
  const int column_blocks = static_cast<int>((d + 31) / 32);
  rmsnorm_weight_grad_kernel<<<column_blocks, kThreads, 0, stream>>>(d_weight, partials, blocks,
                                                                     d);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void rope_forward(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                  double theta, cudaStream_t stream) {
  rope_rotate(x, batch, seq_len, n_heads, head_dim, theta, 1.0f, stream);
}

void rope_backward(bf16* d_x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                   double theta, cudaStream_t stream) {
  rope_rotate(d_x, batch, seq_len, n_heads, head_dim, theta, -1.0f, stream);
}

void causal_softmax_forward(bf16* scores_to_probs, int64_t heads_times_batch, int64_t seq_len,
                            float scale, cudaStream_t stream) {
  const int64_t rows = heads_times_batch * seq_len;
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<row_blocks("causal_softmax_forward", rows), kThreads, 0, stream>>>(
      scores_to_probs, seq_len, scale);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void causal_softmax_backward(bf16* d_probs_to_d_scores, const bf16* probs,
                             int64_t heads_times_batch, int64_t seq_len, float scale,
                             cudaStream_t stream) {
  const int64_t rows = heads_times_batch * seq_len;
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<row_blocks("causal_softmax_backward", rows), kThreads, 0, stream>>>(
      d_probs_to_d_scores, probs, seq_len, scale);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t count,
                    cudaStream_t stream) {
  const bool packed = aligned_for_packs(out) && aligned_for_packs(gate) && aligned_for_packs(up);
  launch_elementwise(SwigluForward{out, gate, up}, count, packed, stream);
}

void swiglu_backward(bf16* d_gate, bf16* d_up, const bf16* d_out, const bf16* gate,
                     const bf16* up, int64_t count, cudaStream_t stream) {
  const bool packed = aligned_for_packs(d_gate) && aligned_for_packs(d_up) &&
                      aligned_for_packs(d_out) && aligned_for_packs(gate) && aligned_for_packs(up);
  launch_elementwise(SwigluBackward{d_gate, d_up, d_out, gate, up}, count, packed, stream);
}

void add_inplace(bf16* out, const bf16* in, int64_t count, cudaStream_t stream) {
  const bool packed = aligned_for_packs(out) && aligned_for_packs(in);
  launch_elementwise(AddInplace{out, in}, count, packed, stream);
}

void cross_entropy_forward(float* losses, float* logsumexp, const bf16* logits,
                           const int32_t* targets, int64_t n, int64_t vocab, int64_t row_stride,
                           cudaStream_t stream) {
  check_row_stride("cross_entropy_forward", vocab, row_stride);
  if (n == 0) return;
  cross_entropy_forward_kernel<<<row_blocks("cross_entropy_forward", n), kThreads, 0, stream>>>(
      losses, logsumexp, logits, targets, vocab, row_stride,
      cross_entropy_packed(logits, row_stride));
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(bf16* logits_to_dlogits, const float* logsumexp,
                            const int32_t* targets, int64_t n, int64_t vocab, int64_t row_stride,
                            float d_loss, cudaStream_t stream) {
  check_row_stride("cross_entropy_backward", vocab, row_stride);
  if (n == 0) return;
  cross_entropy_backward_kernel<<<row_blocks("cross_entropy_backward", n), kThreads, 0, stream>>>(
      logits_to_dlogits, logsumexp, targets, vocab, row_stride, d_loss,
      cross_entropy_packed(logits_to_dlogits, row_stride));
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void sum_of_squares(double* result, const float* x, int64_t count, double* scratch,
                    cudaStream_t stream) {
  const int64_t blocks = sum_of_squares_blocks(count);
  if (blocks > 0) {
    sum_of_squares_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        scratch, x, count, aligned_for_packs(x));
    TRAINBENCH_CUDA_CHECK(cudaGetLastError());
  }
  // Runs even for count 0 (blocks 0), so *result is always written.
  sum_of_squares_final_kernel<<<1, kThreads, 0, stream>>>(result, scratch, blocks);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}


void clip_scale_from_sum_of_squares(float* grad_scale, float* grad_norm, const double* sum_sq,
                                    double max_norm, cudaStream_t stream) {
  clip_scale_kernel<<<1, 1, 0, stream>>>(grad_scale, grad_norm, sum_sq, max_norm);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void adamw_update(float* master, bf16* params, const float* grads, float* m, float* v,
                  int64_t count, const AdamWStep& step, const float* grad_scale,
                  cudaStream_t stream) {
  if (count == 0) return;
  // As cpu::adamw_update: bias corrections in double, then the float constants.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(step.beta1), step.step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(step.beta2), step.step);
  const AdamWConstants constants{step.beta1,
                                 step.beta2,
                                 step.eps,
                                 static_cast<float>(step.lr / bias_correction1),
                                 static_cast<float>(std::sqrt(bias_correction2)),
                                 1.0f - step.lr * step.weight_decay};
  const bool packed = aligned_for_packs(master) && aligned_for_packs(params) && aligned_for_packs(grads) &&
                      aligned_for_packs(m) && aligned_for_packs(v);
  launch_elementwise(AdamwUpdate{master, params, grads, m, v, constants, grad_scale}, count, packed, stream);
}

void copy_fp32_to_bf16(bf16* dst, const float* src, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  copy_fp32_to_bf16_kernel<<<grid_stride_blocks(count), kThreads, 0, stream>>>(dst, src, count);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

void fill_uniform_bf16(bf16* dst, int64_t count, float scale, uint32_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_uniform_bf16_kernel<<<grid_stride_blocks(count), kThreads, 0, stream>>>(dst, count, scale,
                                                                              seed);
  TRAINBENCH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainbench::cuda
