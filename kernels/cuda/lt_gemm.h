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

  void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
            const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
            int64_t ldc, GemmOutput output, cudaStream_t stream);

  size_t cached_shapes() const { return plans_.size(); }

 private:
  // Everything cuBLASLt needs for one call shape, created once.
  struct Plan {
    cublasLtMatmulDesc_t matmul = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // transpose_a, transpose_b, m, n, k, lda, ldb, ldc, output, pointer alignment.
  using Key =
      std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, uint32_t>;
  const Plan& plan_for(const Key& key);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
  std::map<Key, Plan> plans_;
};

// Sustained bf16 GEMM rate (FLOP/s) for [m, k] · [n, k]ᵀ → bf16, the forward
// projection's shape, timed with CUDA events over about `seconds`: the best
// repeat. The measured ceiling MFU is reported against besides the datasheet.
double measure_lt_gemm_flops(LtGemm& gemm, int64_t m, int64_t n, int64_t k, double seconds,
                             cudaStream_t stream);

}  // namespace trainbench::cuda
