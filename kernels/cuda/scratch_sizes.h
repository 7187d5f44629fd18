// Sizes the CUDA engine's kernels and GEMMs impose on its buffers, as plain
// host arithmetic with no CUDA header: the memory plan needs them in a build
// without CUDA too (`trainbench plan` on a login node without the toolkit).
#pragma once

#include <algorithm>  // std::min
#include <cstdint>    // int64_t

namespace trainbench::cuda {

// Threads per block of cuda_ops.cu's kernels (its kThreads).
inline constexpr int64_t kOpBlockThreads = 256;
// Blocks in rmsnorm_backward's and sum_of_squares's first pass. A fixed number
// (not derived from the device) so the partials, and therefore the bits of the
// result, are the same on every GPU.
inline constexpr int64_t kRmsnormBackwardMaxBlocks = 512;
inline constexpr int64_t kSumOfSquaresMaxBlocks = 1024;

inline int64_t rmsnorm_backward_blocks(int64_t n) { return std::min(n, kRmsnormBackwardMaxBlocks); }
// fp32 elements of rmsnorm_backward's gain-gradient partials: one row of d per block.
inline int64_t rmsnorm_backward_scratch_floats(int64_t n, int64_t d) { return rmsnorm_backward_blocks(n) * d; }

inline int64_t sum_of_squares_blocks(int64_t count) {
  return std::min((count + kOpBlockThreads - 1) / kOpBlockThreads, kSumOfSquaresMaxBlocks);
}
// doubles of sum_of_squares' per-block partials.
inline int64_t sum_of_squares_scratch_doubles(int64_t count) { return sum_of_squares_blocks(count); }

// cuBLASLt's workspace per LtGemm (what NVIDIA recommends for Hopper).
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

// A row length rounded up to a multiple of 64 elements (128 bytes of bf16):
// the leading dimension cuBLASLt's fast kernels need. GPT-2's vocabulary of
// 50257 as a leading dimension ran the LM head at 95 TFLOP/s on an H200
// against 800 at 50304 (docs/perf.md), so the logits rows are padded to this.
inline int64_t padded_leading_dimension(int64_t elements) { return (elements + 63) / 64 * 64; }

}  // namespace trainbench::cuda
