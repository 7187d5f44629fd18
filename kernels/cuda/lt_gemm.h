// bf16 GEMMs through cuBLASLt, row-major like kernels/cpu's sgemm_parallel:
//   C[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C
// A and B are bf16; C is bf16 (activations) or fp32 (weight gradients, which
// accumulate across micro-batches with beta = 1); compute and scale are fp32.
// The matmul descriptor, the three layouts and the heuristic's algorithm are
// created once per distinct call shape and cached: creating them costs tens of
// microseconds, a large share of a small GEMM. The shape includes the
// operands' pointer alignment: cuBLASLt's heuristic otherwise assumes 256-byte
// aligned operands, and attention's per-head views start at head_dim·2 bytes.
#pragma once

#include <cublasLt.h>      // cublasLtHandle_t, descriptors, cublasLtMatmul
#include <cuda_runtime.h>  // cudaStream_t

#include <cstdint>  // int64_t
#include <map>      // the descriptor cache
#include <tuple>    // the cache key

#include "kernels/cuda/device_buffer.h"  // the workspace

namespace trainbench::cuda {

enum class GemmOutput { kBf16, kFp32 };

class LtGemm {
 public:
  // workspace_bytes: scratch cuBLASLt may use per call (32 MiB is what NVIDIA
  // recommends for Hopper).
  explicit LtGemm(size_t workspace_bytes = 32u << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  size_t workspace_bytes() const { return workspace_.bytes(); }

  void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
            const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
            int64_t ldc, GemmOutput output, cudaStream_t stream);

  // `batch` independent GEMMs of one shape in one launch: operand i of call
  // b starts stride_i elements after call b−1's (cuBLASLt's strided batch).
  // Attention uses it across the micro-batch, one launch per head instead of
  // one per (sequence, head): at GPT-2's shapes the per-call overhead of
  // B·H small GEMMs otherwise dominates the layer.
  void gemm_strided_batched(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const void* a, int64_t lda, int64_t stride_a,
                            const void* b, int64_t ldb, int64_t stride_b, float beta, void* c,
                            int64_t ldc, int64_t stride_c, int64_t batch, GemmOutput output,
                            cudaStream_t stream);

  size_t cached_shapes() const { return plans_.size(); }

 private:
  // Everything cuBLASLt needs for one call shape, created once.
  struct Plan {
    cublasLtMatmulDesc_t matmul = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // transpose_a, transpose_b, m, n, k, lda, ldb, ldc, output, pointer
  // alignment, batch, stride_a, stride_b, stride_c.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                         uint32_t, int64_t, int64_t, int64_t, int64_t>;
  const Plan& plan_for(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
  std::map<Key, Plan> plans_;
};

// A row length rounded up to a multiple of 64 elements (128 bytes of bf16):
// the leading dimension cuBLASLt's fast kernels need. GPT-2's vocabulary of
// 50257 as a leading dimension ran the LM head at 95 TFLOP/s on an H200
// against 800 at 50304 (docs/perf.md), so the logits rows are padded to this.
inline int64_t padded_leading_dimension(int64_t elements) { return (elements + 63) / 64 * 64; }

// Sustained bf16 GEMM rate (FLOP/s) for [m, k] · [n, k]ᵀ → bf16, the forward
// projection's shape, with the output's rows padded as the engine pads its
// logits (padded_leading_dimension), on random operands (zeros run about 13%
// faster on an H200 than real data), timed with CUDA events over about
// `seconds`: the best repeat. The measured ceiling MFU is reported against besides the datasheet.
double measure_lt_gemm_flops(LtGemm& gemm, int64_t m, int64_t n, int64_t k, double seconds,
                             cudaStream_t stream);

}  // namespace trainbench::cuda
