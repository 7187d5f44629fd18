// bf16 GEMMs through cuBLASLt, row-major like kernels/cpu's sgemm_parallel:
//   C[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C
// A and B are bf16; C is bf16 (activations) or fp32 (weight gradients, which
// accumulate across micro-batches with beta = 1); compute and scale are fp32.
// The matmul descriptor, the three layouts and the heuristic's algorithm are
// created once per distinct call shape and cached: creating them costs tens of
// microseconds, a large share of a small GEMM. The shape includes the
// operands' pointer alignment: cuBLASLt's heuristic otherwise assumes 256-byte
// aligned operands, and attention's per-head views start at head_dim·2 bytes.
//
// The algorithm is cuBLASLt's heuristic's first choice, or, with
// `time_candidates`, the fastest of its first kMaxCandidates choices timed on
// the shape's first call (as cuBLASLt's LtSgemmSimpleAutoTuning sample and
// PyTorch's TunableOp do). A later candidate replaces the first choice only
// when it is kSwitchMargin faster twice: in the first round, and again with
// the two timed alternately, so that noise among equals does not switch
// algorithms nor count as a saving. Timing is what makes the choice differ
// from run to run, so it is for runs that need not repeat bit for bit
// (train.deterministic=false); every algorithm is itself deterministic.
//
// One LtGemm serves one stream at a time, from one thread: every call uses
// its one workspace (cuBLASLt's split-K keeps counters there) and its cache
// has no lock. The engine issues all its GEMMs on the compute stream; a
// second stream needs its own LtGemm.
#pragma once

#include <cublasLt.h>      // cublasLtHandle_t, descriptors, cublasLtMatmul
#include <cuda_runtime.h>  // cudaStream_t

#include <cstdint>  // int64_t
#include <map>      // the descriptor cache
#include <string>   // GemmTuning::untimed
#include <tuple>    // the cache key
#include <vector>   // a shape's candidate algorithms

#include "kernels/cuda/device_buffer.h"  // the workspace
#include "kernels/cuda/scratch_sizes.h"  // padded_leading_dimension, kGemmWorkspaceBytes

namespace trainbench::cuda {

enum class GemmOutput { kBf16, kFp32 };

// What timing the candidates chose, over the shapes seen so far. Times are
// each algorithm's timed seconds per call times the calls made since, so the
// ratio weighs a shape by how much of the run's GEMM time it takes.
struct GemmTuning {
  int64_t shapes = 0;            // shapes whose candidates were timed
  int64_t changed = 0;           // of those, where a later candidate won by the margin, twice
  int64_t single_candidate = 0;  // shapes the heuristic offered one algorithm for: nothing to time
  double first_choice_seconds = 0;  // Σ calls × the heuristic's first choice's time
  double chosen_seconds = 0;        // Σ calls × the chosen algorithm's time
  std::string untimed;              // why a shape kept the first choice untimed, "" when none did
};

class LtGemm {
 public:
  // workspace_bytes: scratch cuBLASLt may use per call (32 MiB is what NVIDIA
  // recommends for Hopper). time_candidates: see the top of this file.
  static constexpr size_t kDefaultWorkspaceBytes = kGemmWorkspaceBytes;
  static constexpr int kMaxCandidates = 8;
  static constexpr float kSwitchMargin = 0.03f;
  explicit LtGemm(size_t workspace_bytes = kDefaultWorkspaceBytes, bool time_candidates = false);
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
  bool times_candidates() const { return time_candidates_; }
  GemmTuning tuning() const;
  // Calls made while off are not counted in tuning()'s weights: a
  // calibration's hundreds of repeats of one shape are not the run's mix.
  void count_calls(bool on) { counting_calls_ = on; }
  bool counting_calls() const { return counting_calls_; }

 private:
  // Everything cuBLASLt needs for one call shape, created once.
  struct Plan {
    cublasLtMatmulDesc_t matmul = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    // The heuristic's choices, best first, until the first call times them.
    std::vector<cublasLtMatmulAlgo_t> candidates;
    bool timed = false;
    bool single_candidate = false;
    float first_choice_ms = 0, chosen_ms = 0;  // per call, when timed
    int64_t calls = 0;
  };
  // One call's operands, for timing the candidates on them.
  struct Call {
    const void *a, *b;
    void* c;
    float alpha, beta;
    size_t c_span_bytes;  // from C's first element to its last, strided batch included
  };
  // transpose_a, transpose_b, m, n, k, lda, ldb, ldc, output, pointer
  // alignment, batch, stride_a, stride_b, stride_c.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                         uint32_t, int64_t, int64_t, int64_t, int64_t>;
  Plan& plan_for(const Key& key);
  void time_candidates(Plan& plan, const Call& call, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
  bool time_candidates_ = false;
  bool counting_calls_ = true;
  std::map<Key, Plan> plans_;
  std::string untimed_;  // the last reason a shape was left untimed
};

// Bytes from a row-major output's first element to just past its last:
// `m` rows of `n` elements, `ldc` apart, and in a strided batch `batch`
// such outputs `stride_c` elements apart. What a timing run may write.
inline size_t output_span_bytes(int64_t m, int64_t n, int64_t ldc, int64_t batch, int64_t stride_c,
                                size_t element_bytes) {
  return static_cast<size_t>((batch - 1) * stride_c + (m - 1) * ldc + n) * element_bytes;
}


// Sustained bf16 GEMM rate (FLOP/s) for [m, k] · [n, k]ᵀ → bf16, the forward
// projection's shape, with the output's rows padded as the engine pads its
// logits (padded_leading_dimension), on random operands (zeros run about 13%
// faster on an H200 than real data), timed with CUDA events over about
// `seconds`: the best repeat. The measured ceiling MFU is reported against besides the datasheet.
// 0 when the device has not the free memory for the operands.
double measure_lt_gemm_flops(LtGemm& gemm, int64_t m, int64_t n, int64_t k, double seconds,
                             cudaStream_t stream);

}  // namespace trainbench::cuda
