#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>  // cblas_sgemm (OpenBLAS)
#include <omp.h>    // omp_get_max_threads for scratch sizing

#include <unistd.h>  // getpid

#include <algorithm>  // std::max
#include <chrono>
#include <cmath>      // std::exp, std::sqrt, std::pow, std::cos, std::sin
#include <fstream>
#include <string>
#include <thread>     // std::this_thread::sleep_for
#include <vector>     // per-thread partial sums in rmsnorm_backward

#include "kernels/host_resources.h"  // thread_ids, stat_fields_after_name: OpenBLAS's workers

namespace trainbench::cpu {

// All CPU parallelism is OpenMP's: OpenBLAS runs single-threaded inside each
// OpenMP thread and every GEMM is split into blocks of its output. With
// OpenBLAS's own thread pool in play as well, its spinning threads and
// OpenMP's fought for the same cores between every GEMM and every elementwise
// loop (measured: 2 threads slower than 1 on the tiny preset). The longer
// output dimension is split, so each thread streams only its share of the
// larger operand (the LM head's weight, for one). Blocks are a multiple of 16
// so the micro-kernels stay on full tiles.
void sgemm_parallel(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                         const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc, float alpha) {
  const CBLAS_TRANSPOSE op_a = transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE op_b = transpose_b ? CblasTrans : CblasNoTrans;
  constexpr int64_t kQuantum = 16;
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const int64_t max_blocks = (extent + kQuantum - 1) / kQuantum;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), max_blocks));
  if (threads <= 1) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t blocks_per_thread = (max_blocks + threads - 1) / threads;
    const int64_t begin = std::min<int64_t>(extent, omp_get_thread_num() * blocks_per_thread * kQuantum);
    const int64_t end = std::min<int64_t>(extent, begin + blocks_per_thread * kQuantum);
    if (begin < end && split_rows) {
      // Row r of op(A) is row r of A, or column r of A when A is transposed.
      const float* a_rows = transpose_a ? a + begin : a + begin * lda;
      cblas_sgemm(CblasRowMajor, op_a, op_b, end - begin, n, k, alpha, a_rows, lda, b, ldb, beta,
                  c + begin * ldc, ldc);
    } else if (begin < end) {
      // Column j of op(B) is column j of B, or row j of B when B is transposed.
      const float* b_cols = transpose_b ? b + begin * ldb : b + begin;
      cblas_sgemm(CblasRowMajor, op_a, op_b, m, end - begin, k, alpha, a, lda, b_cols, ldb, beta,
                  c + begin, ldc);
    }
  }
}

// OpenBLAS's GEMM buffers (128 MiB each) come from a pool it fills on
// demand and keeps: one more whenever more calls run at once than ever
// before, and when that mapping fails it retries forever. Under an
// address-space limit (ulimit -v) the loader's threads, their stacks and
// malloc's arenas could use up the room first, and the run hung at the first
// GEMM that ran on two threads at once. Every OpenMP thread takes a buffer
// here, all at once (held across a barrier), at the engine's construction,
// which the trainer's address-space check covers; later GEMMs reuse them.
// The pool's entry points are OpenBLAS's own, not CBLAS: weak, so another
// BLAS links too (and skips this).
extern "C" void* blas_memory_alloc(int) __attribute__((weak));
extern "C" void blas_memory_free(void*) __attribute__((weak));

void take_blas_buffers() {
  if (blas_memory_alloc == nullptr || blas_memory_free == nullptr) return;
#pragma omp parallel
  {
    void* buffer = blas_memory_alloc(0);
#pragma omp barrier
    blas_memory_free(buffer);
  }
}

namespace {

// The threads alive before main: OpenBLAS's workers, which its library
// constructor starts (nothing of this program's, of MPI's or of CUDA's runs
// before main). Read by a static initializer, which runs after every shared
// library's constructor.
std::vector<std::string> threads_before_main() {
  std::vector<std::string> threads = thread_ids();
  std::erase(threads, std::to_string(::getpid()));
  return threads;
}

const std::vector<std::string> blas_workers = threads_before_main();

// Asleep ('S' in /proc/self/task/ID/stat), or gone. A worker not yet run, one
// mapping its buffer, one retrying a mapping that does not fit and one still
// spinning for work after it mapped are all running ('R').
bool settled(const std::string& thread) {
  std::ifstream stat("/proc/self/task/" + thread + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const std::vector<std::string> fields = stat_fields_after_name(text);
  return fields.empty() || fields[0] == "S";
}

int workers_not_settled() {
  int count = 0;
  for (const std::string& thread : blas_workers) count += settled(thread) ? 0 : 1;
  return count;
}

}  // namespace

// Seen settled twice, 10 ms apart: a worker waiting on the pool's lock sleeps
// too, for as long as another holds it.
int blas_workers_yet_to_map(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  int settled_polls = 0;
  for (;;) {
    const int not_settled = workers_not_settled();
    settled_polls = not_settled == 0 ? settled_polls + 1 : 0;
    if (settled_polls == 2) return 0;
    if (std::chrono::steady_clock::now() >= deadline) return not_settled;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void matmul_forward(float* out, const float* in, const float* weight, int64_t n, int64_t in_dim,
                    int64_t out_dim) {
  sgemm_parallel(false, true, n, out_dim, in_dim, in, in_dim, weight, in_dim, 0.0f, out,
                      out_dim);
}

void matmul_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                     const float* weight, int64_t n, int64_t in_dim, int64_t out_dim,
                     bool accumulate_d_in) {
  if (d_in != nullptr) {
    sgemm_parallel(false, false, n, in_dim, out_dim, d_out, out_dim, weight, in_dim,
                        accumulate_d_in ? 1.0f : 0.0f, d_in, in_dim);
  }
  if (d_weight != nullptr) {
    sgemm_parallel(true, false, out_dim, in_dim, n, d_out, out_dim, in, in_dim, 1.0f,
                        d_weight, in_dim);
  }
}

void embedding_forward(float* out, const int32_t* tokens, const float* embedding, int64_t n,
                       int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const float* src = embedding + static_cast<int64_t>(tokens[row]) * d;
    float* dst = out + row * d;
    for (int64_t i = 0; i < d; ++i) dst[i] = src[i];
  }
}

void embedding_backward(float* d_embedding, const float* d_out, const int32_t* tokens, int64_t n,
                        int64_t d) {
  // Rows may repeat a token, so threads split the columns, not the rows: no
  // two threads ever add into the same element.
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t chunk = (d + threads - 1) / threads;
    const int64_t begin = std::min<int64_t>(d, omp_get_thread_num() * chunk);
    const int64_t end = std::min<int64_t>(d, begin + chunk);
    for (int64_t row = 0; row < n; ++row) {
      float* dst = d_embedding + static_cast<int64_t>(tokens[row]) * d;
      const float* src = d_out + row * d;
      for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
    }
  }
}

void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t n,
                     int64_t d, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const float* x = in + row * d;
    float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < d; ++i) sum_sq += x[i] * x[i];
    const float r = 1.0f / std::sqrt(sum_sq / static_cast<float>(d) + eps);
    rstd[row] = r;
    float* y = out + row * d;
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * r * weight[i];
  }
}

void rmsnorm_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                      const float* weight, const float* rstd, int64_t n, int64_t d) {
  // y_i = x_i·r·w_i with r = (mean(x²)+eps)^-1/2:
  //   dx_i = r·w_i·dy_i − x_i·r³/d · Σ_j dy_j·w_j·x_j,   dw_i = Σ_rows dy_i·x_i·r.
  // Weight gradients are summed per thread, then reduced in thread order, so
  // the result is bit-identical from run to run (exact resume depends on it).
  const int max_threads = omp_get_max_threads();
  std::vector<float> partials(d_weight != nullptr ? static_cast<size_t>(max_threads * d) : 0, 0.0f);
  int used_threads = 1;
#pragma omp parallel
  {
#pragma omp single
    used_threads = omp_get_num_threads();
    float* my_partial =
        d_weight != nullptr ? partials.data() + static_cast<int64_t>(omp_get_thread_num()) * d : nullptr;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < n; ++row) {
      const float* x = in + row * d;
      const float* dy = d_out + row * d;
      const float r = rstd[row];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; ++i) dot += dy[i] * weight[i] * x[i];
      const float coef = dot * r * r * r / static_cast<float>(d);
      float* dx = d_in + row * d;
      for (int64_t i = 0; i < d; ++i) dx[i] += r * weight[i] * dy[i] - x[i] * coef;
      if (my_partial != nullptr)
        for (int64_t i = 0; i < d; ++i) my_partial[i] += dy[i] * x[i] * r;
    }
  }
  if (d_weight != nullptr) {
    for (int t = 0; t < used_threads; ++t)
      for (int64_t i = 0; i < d; ++i) d_weight[i] += partials[t * d + i];
  }
}

namespace {
// Rotates every (i, i + half) pair of every head by ±angle(t, i).
void rope_rotate(float* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                 double theta, float direction) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq_len; ++t) {
      float* row = x + (b * seq_len + t) * n_heads * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // inv_freq in float, as PyTorch reference implementations compute it.
        const float inv_freq =
            1.0f / static_cast<float>(std::pow(theta, static_cast<double>(2 * i) / head_dim));
        const float angle = static_cast<float>(t) * inv_freq;
        const float c = std::cos(angle);
        const float s = direction * std::sin(angle);
        for (int64_t h = 0; h < n_heads; ++h) {
          float* v = row + h * head_dim;
          const float x1 = v[i];
          const float x2 = v[i + half];
          v[i] = x1 * c - x2 * s;
          v[i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                  double theta) {
  rope_rotate(x, batch, seq_len, n_heads, head_dim, theta, 1.0f);
}

void rope_backward(float* d_x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                   double theta) {
  rope_rotate(d_x, batch, seq_len, n_heads, head_dim, theta, -1.0f);
}

// Attention runs per (batch, head) as OpenBLAS GEMMs on strided views of q,
// k, v (one single-threaded call per OpenMP thread, as every GEMM here) with
// the masked softmax in between. The GEMMs compute the full T×T square — the
// masked half is wasted — but at GEMM speed that beat hand-written causal
// loops by ~3× in backward (perf on cpu-small: 9.6% of the step → see
// docs/perf.md).
void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
  const int64_t T = s.seq_len, hd = s.head_dim;
  const int64_t q_stride = s.n_heads * hd, kv_stride = s.n_kv_heads * hd;
  const int64_t group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t kvh = h / group;
      const float* q_head = q + b * T * q_stride + h * hd;
      const float* k_head = k + b * T * kv_stride + kvh * hd;
      const float* v_head = v + b * T * kv_stride + kvh * hd;
      float* p = probs + (b * s.n_heads + h) * T * T;
      // scores = scale · Q Kᵀ, then a causal softmax per row (masked entries 0).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q_head, q_stride,
                  k_head, kv_stride, 0.0f, p, T);
      for (int64_t i = 0; i < T; ++i) {
        float* row = p + i * T;
        float max_score = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) max_score = std::max(max_score, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - max_score);
          sum += row[j];
        }
        const float inv_sum = 1.0f / sum;
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv_sum;
        for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      // out = P V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, v_head,
                  kv_stride, 0.0f, out + b * T * q_stride + h * hd, q_stride);
    }
  }
}

int64_t attention_scratch_floats(const AttentionShape& s, int threads) {
  return s.seq_len * s.seq_len * std::max(threads, 1);
}

void attention_backward(float* d_q, float* d_k, float* d_v, const float* d_out, const float* probs,
                        const float* q, const float* k, const float* v, float* scratch,
                        const AttentionShape& s) {
  const int64_t T = s.seq_len, hd = s.head_dim;
  const int64_t q_stride = s.n_heads * hd, kv_stride = s.n_kv_heads * hd;
  const int64_t group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // One thread owns one (batch, kv head): it is the only writer of that slice
  // of d_k and d_v, however many query heads feed it.
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t kvh = 0; kvh < s.n_kv_heads; ++kvh) {
      float* d_score = scratch + static_cast<int64_t>(omp_get_thread_num()) * T * T;
      const float* k_head = k + b * T * kv_stride + kvh * hd;
      const float* v_head = v + b * T * kv_stride + kvh * hd;
      float* dk_head = d_k + b * T * kv_stride + kvh * hd;
      float* dv_head = d_v + b * T * kv_stride + kvh * hd;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* p = probs + (b * s.n_heads + h) * T * T;
        const float* q_head = q + b * T * q_stride + h * hd;
        const float* do_head = d_out + b * T * q_stride + h * hd;
        const float accumulate = h == kvh * group ? 0.0f : 1.0f;  // first head overwrites
        // dV (+)= Pᵀ dO
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, do_head,
                    q_stride, accumulate, dv_head, kv_stride);
        // dP = dO Vᵀ;  dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale   (masked P = 0 gives dS = 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, do_head, q_stride,
                    v_head, kv_stride, 0.0f, d_score, T);
        for (int64_t i = 0; i < T; ++i) {
          const float* p_row = p + i * T;
          float* ds_row = d_score + i * T;
          float weighted = 0.0f;
#pragma omp simd reduction(+ : weighted)
          for (int64_t j = 0; j <= i; ++j) weighted += p_row[j] * ds_row[j];
          for (int64_t j = 0; j <= i; ++j) ds_row[j] = p_row[j] * (ds_row[j] - weighted) * scale;
          for (int64_t j = i + 1; j < T; ++j) ds_row[j] = 0.0f;
        }
        // dQ = dS K;  dK (+)= dSᵀ Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, d_score, T, k_head,
                    kv_stride, 0.0f, d_q + b * T * q_stride + h * hd, q_stride);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, d_score, T, q_head,
                    q_stride, accumulate, dk_head, kv_stride);
      }
    }
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_backward(float* d_gate, float* d_up, const float* d_out, const float* gate,
                     const float* up, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    const float sig = 1.0f / (1.0f + std::exp(-g));
    const float silu = g * sig;
    d_up[i] = d_out[i] * silu;
    d_gate[i] = d_out[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
  }
}

void add_inplace(float* out, const float* in, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] += in[i];
}

void cross_entropy_forward(float* losses, float* logsumexp, const float* logits,
                           const int32_t* targets, int64_t n, int64_t vocab) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const float* x = logits + row * vocab;
    float max_logit = -INFINITY;
    for (int64_t j = 0; j < vocab; ++j) max_logit = std::max(max_logit, x[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(x[j] - max_logit);
    const float lse = max_logit + std::log(sum);
    logsumexp[row] = lse;
    losses[row] = lse - x[targets[row]];
  }
}

void cross_entropy_backward(float* logits_to_dlogits, const float* logsumexp,
                            const int32_t* targets, int64_t n, int64_t vocab, float d_loss) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    float* x = logits_to_dlogits + row * vocab;
    const float lse = logsumexp[row];
    for (int64_t j = 0; j < vocab; ++j) x[j] = std::exp(x[j] - lse) * d_loss;
    x[targets[row]] -= d_loss;
  }
}

double sum_of_squares(const float* x, int64_t count) {
  // Fixed chunks summed in order: the same total on every run and thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double total = 0.0;
    const int64_t end = std::min(count, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) total += static_cast<double>(x[i]) * x[i];
    partial[c] = total;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t count,
                  const AdamWStep& s) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(s.beta1), s.step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(s.beta2), s.step);
  const float step_size = static_cast<float>(s.lr / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay = 1.0f - s.lr * s.weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = grads[i] * s.grad_scale;
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    const float denom = std::sqrt(v[i]) / bias_correction2_sqrt + s.eps;
    params[i] = params[i] * decay - step_size * m[i] / denom;
  }
}

}  // namespace trainbench::cpu
