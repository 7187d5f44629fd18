// fp32 CPU implementations of the ops of one training step. Each op is a free
// function over raw row-major buffers with its shapes spelled out; the CUDA
// backend implements the same ops with the same names and argument order (bf16
// activations), and its tests compare against these. Backward functions ADD
// into weight gradients (gradient accumulation across micro-batches) and, where
// noted, into input gradients (the residual stream). Loops are threaded with
// OpenMP; GEMMs go to OpenBLAS, one single-threaded call per OpenMP thread.
#pragma once

#include <chrono>
#include <cstdint>  // int64_t

namespace trainbench::cpu {

// C[m, n] = alpha·op(A)[m, k] · op(B)[k, n] + beta·C (row-major, op = transpose or not),
// split into row or column blocks of C (the longer side) across the OpenMP
// threads, OpenBLAS single-threaded in each.
void sgemm_parallel(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                         const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc, float alpha = 1.0f);

// Fills OpenBLAS's buffer pool for omp_get_max_threads() GEMMs at once, now
// rather than mid-run (see the definition).
void take_blas_buffers();

// OpenBLAS's pthread build starts its worker threads before main (one fewer
// than the cores), and each maps a GEMM buffer (up to 128 MiB) when it first
// runs. On a loaded host that can come after the address-space check
// measured what the process maps: the worker then took the room the check had
// left for take_blas_buffers, whose mapping OpenBLAS retries for ever (a run
// hung under ulimit -v). Returns how many workers have not settled (asleep,
// their buffer mapped), after waiting up to `wait` for them; 0 where OpenBLAS
// started none (OPENBLAS_NUM_THREADS=1, one core).
int blas_workers_yet_to_map(std::chrono::milliseconds wait);

// out[n, out_dim] = in[n, in_dim] · weight[out_dim, in_dim]ᵀ   (PyTorch Linear, no bias)
void matmul_forward(float* out, const float* in, const float* weight, int64_t n, int64_t in_dim,
                    int64_t out_dim);
// d_in (=, or += when accumulate_d_in) d_out · weight;  d_weight += d_outᵀ · in.
// Either gradient may be null to skip it (frozen weight, or the embedding input).
void matmul_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                     const float* weight, int64_t n, int64_t in_dim, int64_t out_dim,
                     bool accumulate_d_in);

// out[n, d] = embedding[tokens[n], :]
void embedding_forward(float* out, const int32_t* tokens, const float* embedding, int64_t n,
                       int64_t d);
// d_embedding[tokens[n], :] += d_out[n, :]
void embedding_backward(float* d_embedding, const float* d_out, const int32_t* tokens, int64_t n,
                        int64_t d);

// out = in / sqrt(mean(in²) + eps) · weight, per row; rstd[n] keeps 1/sqrt(...) for backward.
void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t n,
                     int64_t d, float eps);
// d_in += ∂/∂in, d_weight += ∂/∂weight.
void rmsnorm_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                      const float* weight, const float* rstd, int64_t n, int64_t d);

// Rotary position embedding, in place on x[batch, seq_len, n_heads, head_dim],
// half-split pairing (element i rotates with i + head_dim/2, as HF Llama's
// rotate_half), angle = position · theta^(-2i/head_dim).
void rope_forward(float* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                  double theta);
// The rotation is orthogonal: the gradient is the inverse rotation, in place.
void rope_backward(float* d_x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                   double theta);

// Causal grouped-query attention with scale 1/sqrt(head_dim).
// q[batch, seq, n_heads, head_dim], k and v [batch, seq, n_kv_heads, head_dim];
// query head h reads kv head h / (n_heads / n_kv_heads).
// out[batch, seq, n_heads, head_dim]; probs[batch, n_heads, seq, seq] keeps the
// softmax for backward (masked entries are 0).
struct AttentionShape {
  int64_t batch, seq_len, n_heads, n_kv_heads, head_dim;
};
void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       const AttentionShape& s);
// d_q, d_k, d_v are overwritten. scratch: attention_scratch_floats(s,
// omp_get_max_threads()) floats (one seq_len² score matrix per thread).
void attention_backward(float* d_q, float* d_k, float* d_v, const float* d_out, const float* probs,
                        const float* q, const float* k, const float* v, float* scratch,
                        const AttentionShape& s);
int64_t attention_scratch_floats(const AttentionShape& s, int threads);

// SwiGLU: out = silu(gate) · up, elementwise over count elements.
void swiglu_forward(float* out, const float* gate, const float* up, int64_t count);
void swiglu_backward(float* d_gate, float* d_up, const float* d_out, const float* gate,
                     const float* up, int64_t count);

// out += in (the residual stream), elementwise.
void add_inplace(float* out, const float* in, int64_t count);

// Fused softmax + cross-entropy over logits[n, vocab]. Forward writes
// losses[n] = logsumexp(row) − row[target] and keeps logsumexp[n].
void cross_entropy_forward(float* losses, float* logsumexp, const float* logits,
                           const int32_t* targets, int64_t n, int64_t vocab);
// Turns logits into dlogits in place: (softmax − onehot) · d_loss, using the
// stored logsumexp, so probabilities are never stored separately.
void cross_entropy_backward(float* logits_to_dlogits, const float* logsumexp,
                            const int32_t* targets, int64_t n, int64_t vocab, float d_loss);

// Sum of squares of count elements, accumulated in double.
double sum_of_squares(const float* x, int64_t count);

// One AdamW step over count elements, as torch.optim.AdamW:
//   p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
//   p ← p − lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps),   with g = grad · grad_scale.
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale;  // clipping factor (1 when not clipped)
  int64_t step;      // from 1
};
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t count,
                  const AdamWStep& step);

}  // namespace trainbench::cpu
