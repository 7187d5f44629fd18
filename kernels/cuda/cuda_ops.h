// The CUDA ops of one training step: the same ops, names and argument order
// as kernels/cpu/cpu_ops.h, on device pointers, enqueued on `stream`.
// Precision (the llm.c recipe): parameters and activations bf16, activation
// gradients bf16, weight gradients fp32 (they accumulate across
// micro-batches), norms' rstd, losses and logsumexp fp32, fp32 master weights
// and AdamW state. All accumulation inside an op is fp32. Every op is
// deterministic (no floating-point atomics), so a run repeats bit for bit —
// exact resume depends on it. GEMMs are not here: they go through LtGemm.
// Elementwise ops read all their inputs before writing, so an output may
// alias an input. Tests: tests/cuda/test_cuda_ops.cpp, each op against its
// CPU twin.
#pragma once

#include <cuda_bf16.h>     // __nv_bfloat16
#include <cuda_runtime.h>  // cudaStream_t

#include <cstdint>  // int64_t, int32_t

#include "kernels/cuda/scratch_sizes.h"  // rmsnorm_backward_scratch_floats, sum_of_squares_scratch_doubles

namespace trainbench::cuda {

using bf16 = __nv_bfloat16;

// out[n, d] = embedding[tokens[n], :]
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* embedding, int64_t n,
                       int64_t d, cudaStream_t stream);
// The micro-batch's rows grouped by token (kernels/token_groups.h), on the device.
struct TokenGroups {
  const int32_t* rows = nullptr;     // [n] row indices, each group's in increasing order
  const int32_t* offsets = nullptr;  // [count + 1]
  const int32_t* tokens = nullptr;   // [count]
  int64_t count = 0;
};
// d_embedding[tokens[r], :] += d_out[r, :] for every row r: one thread per
// (group, column) adds its group's rows in row order — the CPU's order, with
// no atomics — so the bits match the CPU twin's fp32 sums exactly.
void embedding_backward(float* d_embedding, const bf16* d_out, const TokenGroups& groups, int64_t d,
                        cudaStream_t stream);

// out = in · rsqrt(mean(in²) + eps) · weight per row; rstd[n] kept for backward.
void rmsnorm_forward(bf16* out, float* rstd, const bf16* in, const bf16* weight, int64_t n,
                     int64_t d, float eps, cudaStream_t stream);
// The residual add fused with the norm that follows it (forward):
// residual += addend, rounded to bf16 as add_inplace rounds it, then
// out = rmsnorm(residual) exactly as rmsnorm_forward computes it — the same
// bits as the two ops one after the other, in one pass that reads the
// residual stream once instead of three times. (Same bits when `addend` is
// 16-byte aligned like the other operands, as the engine's views all are: an
// unaligned one alone sends this op down the element-by-element sum of
// squares while rmsnorm_forward takes packs, which may round differently.) (Backward needs no twin:
// rmsnorm_backward already adds into the residual stream's gradient.)
void residual_add_rmsnorm_forward(bf16* residual, const bf16* addend, bf16* out, float* rstd,
                                  const bf16* weight, int64_t n, int64_t d, float eps,
                                  cudaStream_t stream);
// d_in += ∂/∂in;  d_weight += ∂/∂weight (null to skip) through per-block
// partial sums in `scratch` (rmsnorm_backward_scratch_floats) reduced in order;
// scratch is untouched, and may be null, when d_weight is null.
void rmsnorm_backward(bf16* d_in, float* d_weight, const bf16* d_out, const bf16* in,
                      const bf16* weight, const float* rstd, int64_t n, int64_t d, float* scratch,
                      cudaStream_t stream);

// RoPE in place on x[batch, seq_len, n_heads, head_dim], half-split pairing,
// angle = position · theta^(-2i/head_dim) computed in fp32; backward rotates back.
// head_dim must be even and ≤ 512 (std::invalid_argument otherwise).
void rope_forward(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                  double theta, cudaStream_t stream);
void rope_backward(bf16* d_x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                   double theta, cudaStream_t stream);

// Causal softmax over scores[rows_of_heads, seq_len, seq_len] in place →
// probabilities (entries above the diagonal set to 0), with `scale` applied
// to the scores first. Attention = LtGemm (Q·Kᵀ) → this → LtGemm (P·V).
void causal_softmax_forward(bf16* scores_to_probs, int64_t heads_times_batch, int64_t seq_len,
                            float scale, cudaStream_t stream);
// d_scores = P ⊙ (d_probs − rowsum(P ⊙ d_probs)) · scale, in place on d_probs.
void causal_softmax_backward(bf16* d_probs_to_d_scores, const bf16* probs,
                             int64_t heads_times_batch, int64_t seq_len, float scale,
                             cudaStream_t stream);

// out = silu(gate) · up;  and its gradients (overwritten).
void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t count,
                    cudaStream_t stream);
void swiglu_backward(bf16* d_gate, bf16* d_up, const bf16* d_out, const bf16* gate,
                     const bf16* up, int64_t count, cudaStream_t stream);

// out += in, elementwise (the residual stream).
void add_inplace(bf16* out, const bf16* in, int64_t count, cudaStream_t stream);

// Fused softmax + cross-entropy over logits[n, vocab], rows `row_stride`
// (>= vocab) elements apart: losses[n] and logsumexp[n] forward; backward
// turns the logits into dlogits in place, (softmax − onehot) · d_loss, so
// probabilities are never stored. Entries past vocab are neither read nor written.
void cross_entropy_forward(float* losses, float* logsumexp, const bf16* logits,
                           const int32_t* targets, int64_t n, int64_t vocab, int64_t row_stride,
                           cudaStream_t stream);
void cross_entropy_backward(bf16* logits_to_dlogits, const float* logsumexp,
                            const int32_t* targets, int64_t n, int64_t vocab, int64_t row_stride,
                            float d_loss, cudaStream_t stream);

// *result = Σ x² in double, by fixed per-block partials (`scratch`,
// sum_of_squares_scratch_doubles) summed in order: the same bits every run.
void sum_of_squares(double* result, const float* x, int64_t count, double* scratch,
                    cudaStream_t stream);

// grad_scale = max_norm / (norm + 1e-6) when norm = sqrt(sum_sq) > max_norm,
// else 1 (torch.nn.utils.clip_grad_norm_, as CpuEngine); max_norm <= 0 disables. Stays on the
// device so clipping needs no host round trip; the norm is copied out lazily.
// max_norm is train.grad_clip as the config has it, a double as on the CPU
// (a float 0.1 gave a scale one bit off the CPU engine's).
void clip_scale_from_sum_of_squares(float* grad_scale, float* grad_norm, const double* sum_sq,
                                    double max_norm, cudaStream_t stream);

// One AdamW step as torch.optim.AdamW on fp32 master weights, writing the bf16
// copy the next forward uses. The gradient is multiplied by *grad_scale.
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // from 1
};
void adamw_update(float* master, bf16* params, const float* grads, float* m, float* v,
                  int64_t count, const AdamWStep& step, const float* grad_scale,
                  cudaStream_t stream);

// dst[i] = bf16(src[i]), for the initial bf16 copy of the master weights.
void copy_fp32_to_bf16(bf16* dst, const float* src, int64_t count, cudaStream_t stream);

// dst[i] = bf16 of a value uniform in [−scale, scale), a hash of (seed, i):
// operands for timing runs (the GEMM ceiling), which must not be zeros.
void fill_uniform_bf16(bf16* dst, int64_t count, float scale, uint32_t seed, cudaStream_t stream);

}  // namespace trainbench::cuda
