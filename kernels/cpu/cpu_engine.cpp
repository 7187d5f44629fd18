#include "kernels/cpu/cpu_engine.h"

#include <cblas.h>  // openblas_set_num_threads
#include <omp.h>    // omp_set_num_threads

#include <algorithm>  // std::min, std::sort
#include <cmath>      // std::sqrt
#include <cstring>    // std::memcpy, std::memset
#include <stdexcept>  // std::invalid_argument for a malformed batch or state list
#include <string>

#include "kernels/cpu/cpu_ops.h"        // the ops
#include "kernels/host_resources.h"     // cpu_engine_threads: train.threads=0
#include "kernels/parameter_init.h"     // init_parameters_host
#include "kernels/slice_carver.h"       // SliceCarver: views into the allocations

namespace trainbench::cpu {

namespace {
using Clock = std::chrono::steady_clock;

// Adds the wall time of one engine call to the compute total; reads no
// clock when timing is off (set_compute_timing). Its end also ends the op
// report.op_times is timing.
class ComputeTimer {
 public:
  ComputeTimer(double& total, bool on, HostOpTimer& ops)
      : total_(total), on_(on), ops_(ops), start_(on ? Clock::now() : Clock::time_point{}) {}
  ~ComputeTimer() {
    ops_.stop();
    if (on_) total_ += std::chrono::duration<double>(Clock::now() - start_).count();
  }
 private:
  double& total_;
  bool on_;
  HostOpTimer& ops_;
  Clock::time_point start_;
};
}  // namespace

void AlignedFloats::allocate(int64_t n) {
  count = n;
  // Round up to the alignment, and never ask for zero bytes.
  const size_t bytes = ((static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  data.reset(static_cast<float*>(p));
}

CpuEngineViews carve_cpu_engine_views(const ModelShape& s, const ParameterLayout& layout, int64_t micro_batch,
                                      int threads, float* base) {
  const int64_t n = micro_batch * s.seq_len;
  const int64_t d = s.d_model, f = s.ffn_hidden;
  SliceCarver<float> carve(base);
  CpuEngineViews v;
  v.layers.resize(s.n_layers);
  for (LayerActivations& a : v.layers) {
    a.residual_in = carve.take(n * d);
    a.attn_norm_out = carve.take(n * d);
    a.attn_rstd = carve.take(n);
    a.q = carve.take(n * s.q_dim());
    a.k = carve.take(n * s.kv_dim());
    a.v = carve.take(n * s.kv_dim());
    a.probs = carve.take(micro_batch * s.n_heads * s.seq_len * s.seq_len);
    a.attn_out = carve.take(n * s.q_dim());
    a.residual_mid = carve.take(n * d);
    a.mlp_norm_out = carve.take(n * d);
    a.mlp_rstd = carve.take(n);
    a.gate = carve.take(n * f);
    a.up = carve.take(n * f);
    a.swiglu_out = carve.take(n * f);
  }
  FinalActivations& fa = v.final_acts;
  fa.residual_out = carve.take(n * d);
  fa.norm_out = carve.take(n * d);
  fa.rstd = carve.take(n);
  fa.logits = carve.take(n * s.vocab);
  fa.losses = carve.take(n);
  fa.logsumexp = carve.take(n);
  const LoraSpec& spec = layout.lora_spec();
  for (int64_t i = 0; i < layout.lora_adapter_count(); ++i) v.lora_h.push_back(carve.take(n * spec.rank));
  v.sizes.kept = carve.used();

  BackwardScratch& sc = v.scratch;
  sc.d_residual = carve.take(n * d);
  sc.d_norm_out = carve.take(n * d);
  sc.d_q = carve.take(n * s.q_dim());
  sc.d_k = carve.take(n * s.kv_dim());
  sc.d_v = carve.take(n * s.kv_dim());
  sc.d_attn_out = carve.take(n * s.q_dim());
  sc.d_swiglu = carve.take(n * f);
  sc.d_gate = carve.take(n * f);
  sc.d_up = carve.take(n * f);
  const AttentionShape attn{micro_batch, s.seq_len, s.n_heads, s.n_kv_heads, s.head_dim()};
  sc.attention = carve.take(attention_scratch_floats(attn, threads));
  sc.lora = spec.enabled() ? carve.take(n * spec.rank) : nullptr;
  v.sizes.scratch = carve.used() - v.sizes.kept;
  return v;
}

ActivationSizes activation_sizes(const ModelShape& s, int64_t micro_batch, int threads, const LoraSpec& lora) {
  return carve_cpu_engine_views(s, ParameterLayout(s, lora), micro_batch, threads, nullptr).sizes;
}

MemoryPlan plan_cpu_memory(const EngineOptions& options) {
  const ParameterLayout layout = make_layout(options);
  const EngineOptions::OptimizerShard shard = resolve_optimizer_shard(options, layout.trainable_params());
  const ActivationSizes acts = activation_sizes(options.shape, options.micro_batch,
                                                cpu_engine_threads(options.threads), options.lora);
  MemoryPlan plan;
  plan.parameter_bytes = padded_count(layout.total_params(), options.pad_buffers_to) * 4;
  plan.gradient_bytes = padded_count(layout.trainable_params(), options.pad_buffers_to) * 4;
  plan.optimizer_bytes = 2 * (shard.end - shard.begin) * 4;
  plan.activation_bytes = acts.kept * 4;
  plan.workspace_bytes = acts.scratch * 4;
  return plan;
}

CpuEngine::CpuEngine(const EngineOptions& options)
    : options_(options),
      shape_(options.shape),
      layout_(make_layout(options)),
      micro_batch_(options.micro_batch),
      threads_(cpu_engine_threads(options.threads)) {
  // OpenMP owns the threads; OpenBLAS runs inside them (see sgemm_parallel).
  omp_set_num_threads(threads_);
  openblas_set_num_threads(1);
  take_blas_buffers();

  params_.allocate(padded_count(layout_.total_params(), options.pad_buffers_to));
  grads_.allocate(padded_count(layout_.trainable_params(), options.pad_buffers_to));
  shard_ = resolve_optimizer_shard(options, layout_.trainable_params());
  adam_m_.allocate(shard_.end - shard_.begin);
  adam_v_.allocate(shard_.end - shard_.begin);
  const ActivationSizes sizes = activation_sizes(shape_, micro_batch_, threads_, options.lora);
  activations_.allocate(sizes.total());
  assign_activation_views();

  std::memset(params_.get(), 0, sizeof(float) * params_.count);
  std::memset(adam_m_.get(), 0, sizeof(float) * adam_m_.count);
  std::memset(adam_v_.get(), 0, sizeof(float) * adam_v_.count);
  zero_gradients();

  // Where the gradient buffer becomes final as backward walks down.
  const GradientReadiness readiness = gradient_readiness(layout_, shape_.n_layers);
  grad_ready_from_head_ = readiness.after_head;
  grad_ready_from_layer_ = readiness.after_layer;
}

CpuEngine::~CpuEngine() {
  // The copy thread writes into the caller's buffers from ours: neither may
  // go away under it.
  wait_state_copy();
}

void CpuEngine::assign_activation_views() {
  const CpuEngineViews views = carve_cpu_engine_views(shape_, layout_, micro_batch_, threads_, activations_.get());
  layer_acts_ = views.layers;
  final_acts_ = views.final_acts;
  scratch_ = views.scratch;
  lora_.assign(shape_.n_layers, std::vector<LoraAdapter>(kLoraTargetCount));
  const std::vector<ParameterLayout::LoraAdapterTensors> adapters = layout_.lora_adapters();
  for (size_t i = 0; i < adapters.size(); ++i) {
    const ParameterLayout::LoraAdapterTensors& t = adapters[i];
    LoraAdapter& adapter = lora_[t.layer][lora_target_slot(t.target)];
    adapter = {params_.get() + t.a->offset, params_.get() + t.b->offset, grads_.get() + t.a->grad_offset,
               grads_.get() + t.b->grad_offset, views.lora_h[i], t.a->shape[1], t.b->shape[0]};
  }
}

// y += s · (x·Aᵀ)·Bᵀ with s = alpha / rank (in the GEMM), h = x·Aᵀ kept for backward.
void CpuEngine::lora_forward(int64_t layer, ParamKind target, const float* x, float* y) {
  const LoraAdapter& ad = lora_[layer][lora_target_slot(target)];
  if (ad.a == nullptr) return;
  const int64_t n = micro_batch_ * shape_.seq_len, r = layout_.lora_spec().rank;
  const float scale = static_cast<float>(layout_.lora_spec().scale());
  matmul_forward(ad.h, x, ad.a, n, ad.in, r);
  sgemm_parallel(false, true, n, ad.out, r, ad.h, r, ad.b, r, 1.0f, y, ad.out, scale);
}

// t = dy·B; dB += s·dyᵀ·h; dA += s·tᵀ·x; dx += s·t·A (as the CUDA engine).
void CpuEngine::lora_backward(int64_t layer, ParamKind target, const float* dy, const float* x,
                              float* dx) {
  const LoraAdapter& ad = lora_[layer][lora_target_slot(target)];
  if (ad.a == nullptr) return;
  const int64_t n = micro_batch_ * shape_.seq_len, r = layout_.lora_spec().rank;
  const float scale = static_cast<float>(layout_.lora_spec().scale());
  float* t = scratch_.lora;
  sgemm_parallel(false, false, n, r, ad.out, dy, ad.out, ad.b, r, 0.0f, t, r);
  sgemm_parallel(true, false, ad.out, r, n, dy, ad.out, ad.h, r, 1.0f, ad.d_b, r, scale);
  sgemm_parallel(true, false, r, ad.in, n, t, r, x, ad.in, 1.0f, ad.d_a, ad.in, scale);
  sgemm_parallel(false, false, n, ad.in, r, t, r, ad.a, ad.in, 1.0f, dx, ad.in, scale);
}

float* CpuEngine::tensor_view(float* base, bool gradients, ParamKind kind, int64_t layer) const {
  const ParamTensor& t = layout_.get(kind, layer);
  if (!gradients) return base + t.offset;
  return t.trainable ? base + t.grad_offset : nullptr;
}

CpuEngine::LayerWeights CpuEngine::layer_view(float* base, bool gradients, int64_t l) const {
  return LayerWeights{
      tensor_view(base, gradients, ParamKind::kAttnNorm, l),
      tensor_view(base, gradients, ParamKind::kWq, l),
      tensor_view(base, gradients, ParamKind::kWk, l),
      tensor_view(base, gradients, ParamKind::kWv, l),
      tensor_view(base, gradients, ParamKind::kWo, l),
      tensor_view(base, gradients, ParamKind::kMlpNorm, l),
      tensor_view(base, gradients, ParamKind::kWGate, l),
      tensor_view(base, gradients, ParamKind::kWUp, l),
      tensor_view(base, gradients, ParamKind::kWDown, l),
  };
}

void CpuEngine::init_parameters(uint64_t seed) {
  wait_state_copy();
  init_parameters_host(layout_, shape_.n_layers, seed, params_.get());
}

// The buffers may be longer than the layout (EngineOptions::pad_buffers_to);
// only the layout's elements cross the interface.
void CpuEngine::set_parameters(const float* host) {
  wait_state_copy();
  std::memcpy(params_.get(), host, sizeof(float) * layout_.total_params());
}

void CpuEngine::get_parameters(float* host) const {
  std::memcpy(host, params_.get(), sizeof(float) * layout_.total_params());
}

void CpuEngine::get_gradients(float* host) const {
  std::memcpy(host, grads_.get(), sizeof(float) * layout_.trainable_params());
}

// Compute: a pass over every gradient, each step (untimed, it read as host
// overhead: 2-4 % of a step at vocab 16384).
void CpuEngine::zero_gradients() {
  ComputeTimer timer(compute_seconds_, compute_timing_, op_timer_);
  op_timer_.mark(OpKind::kOptimizer);
  std::memset(grads_.get(), 0, sizeof(float) * grads_.count);
}

void CpuEngine::get_logits(float* host) const {
  if (!logits_valid_) throw std::logic_error("get_logits: no forward since the last backward");
  std::memcpy(host, final_acts_.logits,
              sizeof(float) * micro_batch_ * shape_.seq_len * shape_.vocab);
}

void CpuEngine::forward(const TokenBatch& batch) {
  check_batch(batch, micro_batch_, shape_.seq_len, shape_.vocab);
  // The thread count is process-wide OpenMP state; the per-thread scratch
  // was sized for threads_, so re-assert it on entry.
  omp_set_num_threads(threads_);
  ComputeTimer timer(compute_seconds_, compute_timing_, op_timer_);
  const ModelShape& s = shape_;
  const int64_t n = micro_batch_ * s.seq_len;
  const int64_t d = s.d_model, f = s.ffn_hidden;
  const float eps = static_cast<float>(s.norm_eps);
  const AttentionShape attn{micro_batch_, s.seq_len, s.n_heads, s.n_kv_heads, s.head_dim()};
  float* params = params_.get();

  float* x = s.n_layers > 0 ? layer_acts_[0].residual_in : final_acts_.residual_out;
  op_timer_.mark(OpKind::kEmbedding);
  embedding_forward(x, batch.inputs, tensor_view(params, false, ParamKind::kTokenEmbedding), n, d);

  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerWeights w = layer_view(params, false, l);
    LayerActivations& a = layer_acts_[l];
    float* x_next = l + 1 < s.n_layers ? layer_acts_[l + 1].residual_in : final_acts_.residual_out;

    // Attention block: x_mid = x + Wo · attention(rope(Wq·n), rope(Wk·n), Wv·n), n = rmsnorm(x)
    op_timer_.mark(OpKind::kNorm);
    rmsnorm_forward(a.attn_norm_out, a.attn_rstd, a.residual_in, w.attn_norm, n, d, eps);
    op_timer_.mark(OpKind::kGemm);
    matmul_forward(a.q, a.attn_norm_out, w.wq, n, d, s.q_dim());
    lora_forward(l, ParamKind::kWq, a.attn_norm_out, a.q);
    matmul_forward(a.k, a.attn_norm_out, w.wk, n, d, s.kv_dim());
    lora_forward(l, ParamKind::kWk, a.attn_norm_out, a.k);
    matmul_forward(a.v, a.attn_norm_out, w.wv, n, d, s.kv_dim());
    lora_forward(l, ParamKind::kWv, a.attn_norm_out, a.v);
    op_timer_.mark(OpKind::kRope);
    rope_forward(a.q, micro_batch_, s.seq_len, s.n_heads, s.head_dim(), s.rope_theta);
    rope_forward(a.k, micro_batch_, s.seq_len, s.n_kv_heads, s.head_dim(), s.rope_theta);
    op_timer_.mark(OpKind::kAttention);
    attention_forward(a.attn_out, a.probs, a.q, a.k, a.v, attn);
    op_timer_.mark(OpKind::kGemm);
    matmul_forward(a.residual_mid, a.attn_out, w.wo, n, s.q_dim(), d);
    lora_forward(l, ParamKind::kWo, a.attn_out, a.residual_mid);
    op_timer_.mark(OpKind::kResidual);
    add_inplace(a.residual_mid, a.residual_in, n * d);

    // MLP block: x_next = x_mid + Wdown · (silu(Wgate·m) ⊙ Wup·m), m = rmsnorm(x_mid)
    op_timer_.mark(OpKind::kNorm);
    rmsnorm_forward(a.mlp_norm_out, a.mlp_rstd, a.residual_mid, w.mlp_norm, n, d, eps);
    op_timer_.mark(OpKind::kGemm);
    matmul_forward(a.gate, a.mlp_norm_out, w.w_gate, n, d, f);
    lora_forward(l, ParamKind::kWGate, a.mlp_norm_out, a.gate);
    matmul_forward(a.up, a.mlp_norm_out, w.w_up, n, d, f);
    lora_forward(l, ParamKind::kWUp, a.mlp_norm_out, a.up);
    op_timer_.mark(OpKind::kSwiglu);
    swiglu_forward(a.swiglu_out, a.gate, a.up, n * f);
    op_timer_.mark(OpKind::kGemm);
    matmul_forward(x_next, a.swiglu_out, w.w_down, n, f, d);
    lora_forward(l, ParamKind::kWDown, a.swiglu_out, x_next);
    op_timer_.mark(OpKind::kResidual);
    add_inplace(x_next, a.residual_mid, n * d);
  }

  FinalActivations& fa = final_acts_;
  op_timer_.mark(OpKind::kNorm);
  rmsnorm_forward(fa.norm_out, fa.rstd, fa.residual_out,
                  tensor_view(params, false, ParamKind::kFinalNorm), n, d, eps);
  op_timer_.mark(OpKind::kLmHead);
  matmul_forward(fa.logits, fa.norm_out, tensor_view(params, false, ParamKind::kLmHead), n, d,
                 s.vocab);
  op_timer_.mark(OpKind::kLoss);
  cross_entropy_forward(fa.losses, fa.logsumexp, fa.logits, batch.targets, n, s.vocab);
  double loss_sum = 0.0;
  for (int64_t i = 0; i < n; ++i) loss_sum += fa.losses[i];
  last_loss_ = static_cast<float>(loss_sum / static_cast<double>(n));
  loss_computed_ = true;
  logits_valid_ = true;
}

void CpuEngine::backward(const TokenBatch& batch, float loss_scale,
                         const GradientsReadyFn& on_gradients_ready) {
  check_batch(batch, micro_batch_, shape_.seq_len, shape_.vocab);
  if (!logits_valid_) throw std::logic_error("backward without a preceding forward");
  omp_set_num_threads(threads_);
  ComputeTimer timer(compute_seconds_, compute_timing_, op_timer_);
  const ModelShape& s = shape_;
  const int64_t n = micro_batch_ * s.seq_len;
  const int64_t d = s.d_model, f = s.ffn_hidden;
  const AttentionShape attn{micro_batch_, s.seq_len, s.n_heads, s.n_kv_heads, s.head_dim()};
  float* params = params_.get();
  float* grads = grads_.get();
  BackwardScratch& g = scratch_;
  FinalActivations& fa = final_acts_;

  // Head: loss → dlogits (in place) → final norm → residual stream.
  op_timer_.mark(OpKind::kLoss);
  cross_entropy_backward(fa.logits, fa.logsumexp, batch.targets, n, s.vocab,
                         loss_scale / static_cast<float>(n));
  logits_valid_ = false;
  op_timer_.mark(OpKind::kLmHead);
  matmul_backward(g.d_norm_out, tensor_view(grads, true, ParamKind::kLmHead), fa.logits,
                  fa.norm_out, tensor_view(params, false, ParamKind::kLmHead), n, d, s.vocab,
                  false);
  op_timer_.mark(OpKind::kNorm);
  std::memset(g.d_residual, 0, sizeof(float) * n * d);
  rmsnorm_backward(g.d_residual, tensor_view(grads, true, ParamKind::kFinalNorm), g.d_norm_out,
                   fa.residual_out, tensor_view(params, false, ParamKind::kFinalNorm), fa.rstd, n,
                   d);
  if (on_gradients_ready) on_gradients_ready(grad_ready_from_head_);

  for (int64_t l = s.n_layers - 1; l >= 0; --l) {
    const LayerWeights w = layer_view(params, false, l);
    const LayerWeights dw = layer_view(grads, true, l);
    const LayerActivations& a = layer_acts_[l];
    // d_residual holds dL/dx_next, which is also the direct gradient of x_mid.

    // MLP block.
    op_timer_.mark(OpKind::kGemm);
    matmul_backward(g.d_swiglu, dw.w_down, g.d_residual, a.swiglu_out, w.w_down, n, f, d, false);
    lora_backward(l, ParamKind::kWDown, g.d_residual, a.swiglu_out, g.d_swiglu);
    op_timer_.mark(OpKind::kSwiglu);
    swiglu_backward(g.d_gate, g.d_up, g.d_swiglu, a.gate, a.up, n * f);
    op_timer_.mark(OpKind::kGemm);
    matmul_backward(g.d_norm_out, dw.w_gate, g.d_gate, a.mlp_norm_out, w.w_gate, n, d, f, false);
    lora_backward(l, ParamKind::kWGate, g.d_gate, a.mlp_norm_out, g.d_norm_out);
    matmul_backward(g.d_norm_out, dw.w_up, g.d_up, a.mlp_norm_out, w.w_up, n, d, f, true);
    lora_backward(l, ParamKind::kWUp, g.d_up, a.mlp_norm_out, g.d_norm_out);
    op_timer_.mark(OpKind::kNorm);
    rmsnorm_backward(g.d_residual, dw.mlp_norm, g.d_norm_out, a.residual_mid, w.mlp_norm,
                     a.mlp_rstd, n, d);

    // Attention block; d_residual now holds dL/dx_mid.
    op_timer_.mark(OpKind::kGemm);
    matmul_backward(g.d_attn_out, dw.wo, g.d_residual, a.attn_out, w.wo, n, s.q_dim(), d, false);
    lora_backward(l, ParamKind::kWo, g.d_residual, a.attn_out, g.d_attn_out);
    op_timer_.mark(OpKind::kAttention);
    attention_backward(g.d_q, g.d_k, g.d_v, g.d_attn_out, a.probs, a.q, a.k, a.v, g.attention,
                       attn);
    op_timer_.mark(OpKind::kRope);
    rope_backward(g.d_q, micro_batch_, s.seq_len, s.n_heads, s.head_dim(), s.rope_theta);
    rope_backward(g.d_k, micro_batch_, s.seq_len, s.n_kv_heads, s.head_dim(), s.rope_theta);
    op_timer_.mark(OpKind::kGemm);
    matmul_backward(g.d_norm_out, dw.wq, g.d_q, a.attn_norm_out, w.wq, n, d, s.q_dim(), false);
    lora_backward(l, ParamKind::kWq, g.d_q, a.attn_norm_out, g.d_norm_out);
    matmul_backward(g.d_norm_out, dw.wk, g.d_k, a.attn_norm_out, w.wk, n, d, s.kv_dim(), true);
    lora_backward(l, ParamKind::kWk, g.d_k, a.attn_norm_out, g.d_norm_out);
    matmul_backward(g.d_norm_out, dw.wv, g.d_v, a.attn_norm_out, w.wv, n, d, s.kv_dim(), true);
    lora_backward(l, ParamKind::kWv, g.d_v, a.attn_norm_out, g.d_norm_out);
    op_timer_.mark(OpKind::kNorm);
    rmsnorm_backward(g.d_residual, dw.attn_norm, g.d_norm_out, a.residual_in, w.attn_norm,
                     a.attn_rstd, n, d);
    if (on_gradients_ready) on_gradients_ready(grad_ready_from_layer_[l]);
  }

  float* d_embedding = tensor_view(grads, true, ParamKind::kTokenEmbedding);
  op_timer_.mark(OpKind::kEmbedding);
  if (d_embedding != nullptr) embedding_backward(d_embedding, g.d_residual, batch.inputs, n, d);
  if (on_gradients_ready) on_gradients_ready(0);
}

float CpuEngine::optimizer_step(const AdamWSettings& settings, int64_t step) {
  if (shard_.begin != 0 || shard_.end != layout_.trainable_params())
    throw std::logic_error("optimizer_step on a sharded optimizer: use optimizer_step_shard");
  double norm = 0;
  {
    ComputeTimer timer(compute_seconds_, compute_timing_, op_timer_);
    op_timer_.mark(OpKind::kOptimizer);
    norm = std::sqrt(sum_of_squares(grads_.get(), grads_.count));
  }
  optimizer_step_shard(settings, step, norm);
  return static_cast<float>(norm);
}

double CpuEngine::gradient_sum_of_squares(int64_t begin, int64_t end) {
  ComputeTimer timer(compute_seconds_, compute_timing_, op_timer_);
  op_timer_.mark(OpKind::kOptimizer);
  return sum_of_squares(grads_.get() + begin, end - begin);
}

void CpuEngine::optimizer_step_shard(const AdamWSettings& settings, int64_t step, double norm) {
  // The state copy begun before this step's forward must see the state as it
  // was then: join it before the first write (optimizer_step comes through here).
  wait_state_copy();
  ComputeTimer timer(compute_seconds_, compute_timing_, op_timer_);
  op_timer_.mark(OpKind::kOptimizer);
  // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above.
  float grad_scale = 1.0f;
  if (settings.grad_clip > 0.0 && norm > settings.grad_clip)
    grad_scale = static_cast<float>(settings.grad_clip / (norm + 1e-6));
  AdamWStep adam{static_cast<float>(settings.lr),
                 static_cast<float>(settings.beta1),
                 static_cast<float>(settings.beta2),
                 static_cast<float>(settings.eps),
                 0.0f,
                 grad_scale,
                 step};
  // Decoupled weight decay (on matrices only, ShardPiece::decay); each
  // tensor is updated where it overlaps this engine's optimizer shard.
  for (const ShardPiece& piece : shard_pieces(layout_, shard_.begin, shard_.end)) {
    adam.weight_decay = piece.decay ? static_cast<float>(settings.weight_decay) : 0.0f;
    adamw_update(params_.get() + piece.parameter, grads_.get() + piece.lo,
                 adam_m_.get() + (piece.lo - shard_.begin), adam_v_.get() + (piece.lo - shard_.begin),
                 piece.hi - piece.lo, adam);
  }
}

std::vector<StateTensor> CpuEngine::state_tensors() const {
  const int64_t shard_bytes = static_cast<int64_t>(sizeof(float)) * (shard_.end - shard_.begin);
  const int64_t base_bytes = static_cast<int64_t>(sizeof(float)) * layout_.base_params();
  if (layout_.lora_spec().enabled()) {
    // The adapters are the last block of the parameters (ParameterLayout).
    std::vector<StateTensor> tensors;
    if (options_.lora_state_includes_base) tensors.push_back({"base_fp32", base_bytes});
    tensors.push_back({"lora_fp32", static_cast<int64_t>(sizeof(float)) *
                                        (layout_.total_params() - layout_.base_params())});
    tensors.push_back({"adam_m", shard_bytes});
    tensors.push_back({"adam_v", shard_bytes});
    return tensors;
  }
  return {{"master_fp32", static_cast<int64_t>(sizeof(float)) * layout_.total_params()},
          {"adam_m", shard_bytes},
          {"adam_v", shard_bytes}};
}

std::vector<float*> CpuEngine::state_buffers() const {
  if (layout_.lora_spec().enabled()) {
    std::vector<float*> buffers;
    if (options_.lora_state_includes_base) buffers.push_back(params_.get());
    buffers.push_back(params_.get() + layout_.base_params());
    buffers.push_back(adam_m_.get());
    buffers.push_back(adam_v_.get());
    return buffers;
  }
  return {params_.get(), adam_m_.get(), adam_v_.get()};
}

void CpuEngine::begin_state_copy(const std::vector<StateCopyPart>& parts) {
  check_state_parts("begin_state_copy", state_tensors(), parts);
  // One copy at a time: the previous one may be writing the same destinations.
  wait_state_copy();
  const std::vector<float*> buffers = state_buffers();
  std::vector<const unsigned char*> sources;
  for (float* buffer : buffers) sources.push_back(reinterpret_cast<const unsigned char*>(buffer));
  state_copy_ = std::thread([parts, sources = std::move(sources)] {
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].bytes > 0)
        std::memcpy(parts[i].destination, sources[i] + parts[i].from, static_cast<size_t>(parts[i].bytes));
  });
}

double CpuEngine::wait_state_copy() {
  if (!state_copy_.joinable()) return 0.0;
  const auto start = Clock::now();
  state_copy_.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void CpuEngine::restore_state(const std::vector<const void*>& sources) {
  const std::vector<StateTensor> tensors = state_tensors();
  check_state_pointers("restore_state", tensors, sources);
  wait_state_copy();
  const std::vector<float*> buffers = state_buffers();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].bytes > 0)
      std::memcpy(buffers[i], sources[i], static_cast<size_t>(tensors[i].bytes));
}

void CpuEngine::set_compute_timing(bool on) {
  compute_timing_ = on;
  compute_seconds_ = 0.0;
}

double CpuEngine::take_compute_seconds() {
  const double seconds = compute_seconds_;
  compute_seconds_ = 0.0;
  return seconds;
}

double CpuEngine::measure_gemm_flops(int64_t m, int64_t n, int64_t k, double seconds) {
  // [m, k] · [n, k]ᵀ through matmul_forward: the exact path of every forward
  // projection. A ceiling is the best the GEMM can do, so the fastest repeat
  // is kept; on a shared or frequency-scaling host a median would sit below
  // what training itself reaches.
  AlignedFloats input, weight, out;
  input.allocate(m * k);
  weight.allocate(n * k);
  out.allocate(m * n);
  for (int64_t i = 0; i < m * k; ++i) input.get()[i] = 0.001f * static_cast<float>(i % 997);
  for (int64_t i = 0; i < n * k; ++i) weight.get()[i] = 0.001f * static_cast<float>(i % 991);
  auto one_gemm = [&] { matmul_forward(out.get(), input.get(), weight.get(), m, k, n); };
  one_gemm();  // warm-up: first-touch page faults
  double best = 0.0;
  int repeats = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  do {
    const auto start = Clock::now();
    one_gemm();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(m) * n * k / elapsed);
    ++repeats;
  } while (Clock::now() < deadline || repeats < 3);
  return best;
}

}  // namespace trainbench::cpu
