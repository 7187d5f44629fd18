#include "kernels/cuda/cuda_engine.h"

#include <algorithm>  // std::min, std::max
#include <chrono>     // wait_state_copy's blocked time
#include <cmath>      // std::sqrt, std::pow
#include <cstdio>     // std::snprintf, std::fprintf
#include <cstring>    // std::memcpy
#include <exception>  // std::uncaught_exceptions in release_host
#include <stdexcept>  // std::invalid_argument, std::logic_error
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"  // TRAINBENCH_CUDA_CHECK
#include "kernels/cuda/engine_sizes.h"  // engine_sizes, cuda_memory_plan: the plan is the allocation
#include "kernels/device_info.h"      // cudnn_attention_build_info
#include "kernels/datasheet_peak.h"   // datasheet_bf16_peak_flops: MFU's peak
#include "kernels/parameter_init.h"   // init_parameters_host: the same weights as the CPU
#include "kernels/token_groups.h"     // group_rows_by_token: the embedding backward's order

namespace trainbench::cuda {

namespace {

constexpr size_t kTimingEventPairs = 16;

}  // namespace

MemoryPlan CudaEngine::memory_plan() const {
  return cuda_memory_plan(options_, fused_attention_ != nullptr,
                          static_cast<int64_t>(attention_workspace_.bytes()));
}

namespace {
// Makes `index` the calling thread's device and returns it: run in the
// initialiser list before gemm_, whose cuBLASLt handle and workspace belong
// to the device current when it is built (else rank k > 0 of a multi-GPU run
// would get them on GPU 0).
int select_device(int index) {
  TRAINBENCH_CUDA_CHECK(cudaSetDevice(index));
  return index;
}
}  // namespace

CudaEngine::CudaEngine(const EngineOptions& options)
    : options_(options),
      shape_(options.shape),
      layout_(make_layout(options)),
      micro_batch_(options.micro_batch),
      device_(select_device(options.gpu_index)),
      gemm_(LtGemm::kDefaultWorkspaceBytes, /*time_candidates=*/!options.deterministic) {
  cudaDeviceProp prop{};
  TRAINBENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  datasheet_peak_ = datasheet_bf16_peak_flops(prop.name);
  // A constructor that throws runs no destructor: what was created before
  // the throw (a failed memory check, cuDNN or allocation) is released here,
  // not leaked into a process that may go on (a test, a burn-in retry).
  try {
    create_streams_and_state();
  } catch (...) {
    release_cuda_objects();
    // A failed call (a cudaMalloc out of memory) also left the runtime's
    // last error set: cleared, so the next engine's first launch check in
    // this process does not report it as its own.
    (void)cudaGetLastError();
    throw;
  }
}

void CudaEngine::create_streams_and_state() {
  TRAINBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream_, cudaStreamNonBlocking));
  TRAINBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  // Its own stream for checkpoint snapshots: see state_copy_stream_ in the header.
  TRAINBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&state_copy_stream_, cudaStreamNonBlocking));
  TRAINBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&gradient_zero_stream_, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&tokens_ready_, &tokens_free_, &losses_ready_, &state_copy_start_,
                         &state_copy_done_, &gradients_released_, &gradients_zeroed_})
    TRAINBENCH_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  timing_events_.resize(2 * kTimingEventPairs);
  for (cudaEvent_t& e : timing_events_) TRAINBENCH_CUDA_CHECK(cudaEventCreate(&e));
  compute_ready_events_.resize(kComputeEventRing);
  for (cudaEvent_t& e : compute_ready_events_)
    TRAINBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  choose_attention();
  check_plan_fits_free_memory();
  if (fused_attention_ != nullptr && fused_attention_->workspace_bytes() > 0)
    attention_workspace_ = DeviceBuffer<unsigned char>(fused_attention_->workspace_bytes());
  const EngineSizes z = engine_sizes(shape_, layout_, micro_batch_, fused_attention_ != nullptr);
  const int64_t n = micro_batch_ * shape_.seq_len;
  params_ = DeviceBuffer<bf16>(z.params);
  master_begin_ = z.params - z.master;
  master_ = DeviceBuffer<float>(std::max<int64_t>(padded_count(z.master, options_.pad_buffers_to), 1));
  grads_ = DeviceBuffer<float>(gradient_buffer_elements(z, options_.pad_buffers_to));
  lm_head_rows_ = z.lm_head_rows;
  if (z.lm_head_copy > 0) lm_head_padded_ = DeviceBuffer<bf16>(z.lm_head_copy);
  shard_ = resolve_optimizer_shard(options_, z.trainable);
  adam_m_ = DeviceBuffer<float>(std::max<int64_t>(shard_.end - shard_.begin, 1));
  adam_v_ = DeviceBuffer<float>(std::max<int64_t>(shard_.end - shard_.begin, 1));
  activations_ = DeviceBuffer<bf16>(z.views.activations);
  activation_stats_ = DeviceBuffer<float>(z.views.activation_stats);
  scratch_bf16_ = DeviceBuffer<bf16>(z.views.scratch_bf16);
  scratch_fp32_ = DeviceBuffer<float>(z.views.scratch_fp32);
  scratch_fp64_ = DeviceBuffer<double>(z.views.scratch_fp64);
  tokens_ = DeviceBuffer<int32_t>(z.tokens);
  tokens_staging_ = PinnedBuffer<int32_t>(z.tokens);
  losses_host_ = PinnedBuffer<float>(n);
  grad_norm_host_ = PinnedBuffer<float>(1);
  sum_sq_host_ = PinnedBuffer<double>(1);
  assign_views();

  // The master's padding (ZeRO-1) must read as zero in every all-gather:
  // set_parameters writes the parameters only, and no update touches it.
  TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(master_.get(), 0, master_.bytes(), compute_stream_));
  // The padded LM head's extra rows stay zero: only the first vocab rows are
  // copied in (lm_head_weights), so the extra logits are exactly 0.
  if (lm_head_padded_.get() != nullptr)
    TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(lm_head_padded_.get(), 0, lm_head_padded_.bytes(), compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(adam_m_.get(), 0, adam_m_.bytes(), compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(adam_v_.get(), 0, adam_v_.bytes(), compute_stream_));
  zero_gradients();

  // Where the gradient buffer becomes final as backward walks down.
  const GradientReadiness readiness = gradient_readiness(layout_, shape_.n_layers);
  grad_ready_from_head_ = readiness.after_head;
  grad_ready_from_layer_ = readiness.after_layer;
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
}

namespace {
std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}
}  // namespace

// The plan the CLI checked beforehand assumed cuDNN attention wherever it is
// built and compared it with the GPU's total memory. Here the attention is
// chosen (a fallback to GEMMs keeps the probabilities), cuDNN's real
// workspace is known, and other processes' allocations show in the free
// memory, so the engine checks again before its first allocation: a clear
// "needs vs free" instead of a cudaMalloc failure halfway through.
void CudaEngine::check_plan_fits_free_memory() const {
  const bool fused = fused_attention_ != nullptr;
  const MemoryPlan plan =
      cuda_memory_plan(options_, fused, fused ? fused_attention_->workspace_bytes() : 0);
  size_t free_bytes = 0, total_bytes = 0;
  TRAINBENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Everything but the cuBLASLt workspace, which the GEMM wrapper already holds.
  const int64_t still_to_allocate = plan.total_bytes() - static_cast<int64_t>(gemm_.workspace_bytes());
  if (still_to_allocate <= static_cast<int64_t>(free_bytes)) return;
  throw CudaError("the cuda engine needs " + gib(static_cast<double>(plan.total_bytes())) +
                  " of GPU memory (activations " + gib(static_cast<double>(plan.activation_bytes)) +
                  ", attention " + attention_info_.kernel + ") but GPU " + std::to_string(device_) +
                  " has " + gib(static_cast<double>(free_bytes)) + " free of " +
                  gib(static_cast<double>(total_bytes)) +
                  ": lower train.micro_batch, model.seq_len or model.n_layers" +
                  (fused ? "" : " (" + attention_info_.detail + ")"),
                  /*device_fault=*/false);
}

CudaEngine::~CudaEngine() { release_cuda_objects(); }

// Streams, events and the cuDNN handle (the buffers free themselves). Safe on
// a partly built engine: what was not created is still null.
void CudaEngine::release_cuda_objects() noexcept {
  // Teardown cannot report errors; a failure here means the context is gone.
  cudaDeviceSynchronize();
  // cuDNN's handle is bound to the compute stream: released before the stream.
  fused_attention_.reset();
  for (cudaEvent_t e : timing_events_)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : compute_ready_events_)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : {tokens_ready_, tokens_free_, losses_ready_, state_copy_start_,
                        state_copy_done_, gradients_released_, gradients_zeroed_})
    if (e != nullptr) cudaEventDestroy(e);
  if (gradient_zero_stream_ != nullptr) cudaStreamDestroy(gradient_zero_stream_);
  if (state_copy_stream_ != nullptr) cudaStreamDestroy(state_copy_stream_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (compute_stream_ != nullptr) cudaStreamDestroy(compute_stream_);
}

void CudaEngine::assign_views() {
  const EngineViews views =
      carve_engine_views(shape_, layout_, micro_batch_, fused_attention_ != nullptr,
                         {activations_.get(), activation_stats_.get(), scratch_bf16_.get(),
                          scratch_fp32_.get(), scratch_fp64_.get()});
  layer_acts_ = views.layers;
  final_acts_ = views.final_acts;
  scratch_ = views.scratch;
  lora_.assign(shape_.n_layers, std::vector<LoraAdapter>(kLoraTargetCount));
  const std::vector<ParameterLayout::LoraAdapterTensors>& adapters = layout_.lora_adapters();
  for (size_t i = 0; i < adapters.size(); ++i) {
    const ParameterLayout::LoraAdapterTensors& t = adapters[i];
    LoraAdapter& adapter = lora_[t.layer][lora_target_slot(t.target)];
    adapter = {params_.get() + t.a->offset, params_.get() + t.b->offset, views.lora_h[i],
               grads_.get() + t.a->grad_offset, grads_.get() + t.b->grad_offset, t.a->shape[1],
               t.b->shape[0]};
  }
}

// y += s · (x·Aᵀ)·Bᵀ with s = alpha / rank, h = x·Aᵀ kept for backward.
void CudaEngine::lora_forward(int64_t layer, ParamKind target, const bf16* x, bf16* y) {
  const LoraAdapter& ad = lora_[layer][lora_target_slot(target)];
  if (ad.a == nullptr) return;
  const int64_t n = micro_batch_ * shape_.seq_len, r = layout_.lora_spec().rank;
  const float scale = static_cast<float>(layout_.lora_spec().scale());
  gemm_.gemm(false, true, n, r, ad.in, 1.0f, x, ad.in, ad.a, ad.in, 0.0f, ad.h, r,
             GemmOutput::kBf16, compute_stream_);
  gemm_.gemm(false, true, n, ad.out, r, scale, ad.h, r, ad.b, r, 1.0f, y, ad.out,
             GemmOutput::kBf16, compute_stream_);
}

// t = dy·B; dB += s·dyᵀ·h; dA += s·tᵀ·x; dx += s·t·A (gradients fp32, accumulated).
void CudaEngine::lora_backward(int64_t layer, ParamKind target, const bf16* dy, const bf16* x,
                               bf16* dx) {
  const LoraAdapter& ad = lora_[layer][lora_target_slot(target)];
  if (ad.a == nullptr) return;
  const int64_t n = micro_batch_ * shape_.seq_len, r = layout_.lora_spec().rank;
  const float scale = static_cast<float>(layout_.lora_spec().scale());
  bf16* t = scratch_.lora;
  gemm_.gemm(false, false, n, r, ad.out, 1.0f, dy, ad.out, ad.b, r, 0.0f, t, r, GemmOutput::kBf16,
             compute_stream_);
  gemm_.gemm(true, false, ad.out, r, n, scale, dy, ad.out, ad.h, r, 1.0f, ad.d_b, r,
             GemmOutput::kFp32, compute_stream_);
  gemm_.gemm(true, false, r, ad.in, n, scale, t, r, x, ad.in, 1.0f, ad.d_a, ad.in,
             GemmOutput::kFp32, compute_stream_);
  gemm_.gemm(false, false, n, ad.in, r, scale, t, r, ad.a, ad.in, 1.0f, dx, ad.in,
             GemmOutput::kBf16, compute_stream_);
}

template <typename T>
T* CudaEngine::param_view(T* base, ParamKind kind, int64_t layer) const {
  return base + layout_.get(kind, layer).offset;
}

float* CudaEngine::grad_view(ParamKind kind, int64_t layer) const {
  const ParamTensor& t = layout_.get(kind, layer);
  return t.trainable ? grads_.get() + t.grad_offset : nullptr;
}

CudaEngine::LayerWeights CudaEngine::layer_weights(int64_t l) const {
  bf16* p = params_.get();
  return LayerWeights{param_view(p, ParamKind::kAttnNorm, l), param_view(p, ParamKind::kWq, l),
                      param_view(p, ParamKind::kWk, l),       param_view(p, ParamKind::kWv, l),
                      param_view(p, ParamKind::kWo, l),       param_view(p, ParamKind::kMlpNorm, l),
                      param_view(p, ParamKind::kWGate, l),    param_view(p, ParamKind::kWUp, l),
                      param_view(p, ParamKind::kWDown, l)};
}

CudaEngine::LayerGrads CudaEngine::layer_grads(int64_t l) const {
  return LayerGrads{grad_view(ParamKind::kAttnNorm, l), grad_view(ParamKind::kWq, l),
                    grad_view(ParamKind::kWk, l),       grad_view(ParamKind::kWv, l),
                    grad_view(ParamKind::kWo, l),       grad_view(ParamKind::kMlpNorm, l),
                    grad_view(ParamKind::kWGate, l),    grad_view(ParamKind::kWUp, l),
                    grad_view(ParamKind::kWDown, l)};
}

void CudaEngine::init_parameters(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(layout_.total_params()));
  init_parameters_host(layout_, shape_.n_layers, seed, host.data());
  set_parameters(host.data());
}

void CudaEngine::set_parameters(const float* host) {
  order_after_state_copy();
  // Under LoRA the frozen base has no fp32 copy on the device: it goes to
  // bf16 through a bounded fp32 staging buffer, a chunk at a time.
  if (master_begin_ > 0) {
    const int64_t chunk = std::min<int64_t>(master_begin_, int64_t{16} << 20);
    DeviceBuffer<float> staging(chunk);
    for (int64_t done = 0; done < master_begin_; done += chunk) {
      const int64_t count = std::min(chunk, master_begin_ - done);
      TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(staging.get(), host + done, sizeof(float) * count,
                                            cudaMemcpyHostToDevice, compute_stream_));
      copy_fp32_to_bf16(params_.get() + done, staging.get(), count, compute_stream_);
      // The staging buffer is reused by the next chunk.
      TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
    }
  }
  const int64_t masters = layout_.total_params() - master_begin_;
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(master_.get(), host + master_begin_,
                                        sizeof(float) * masters, cudaMemcpyHostToDevice,
                                        compute_stream_));
  copy_fp32_to_bf16(params_.get() + master_begin_, master_.get(), masters, compute_stream_);
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
}

// The base under LoRA comes back as its bf16 values.
void CudaEngine::get_parameters(float* host) const {
  if (master_begin_ > 0) {
    std::vector<bf16> base(static_cast<size_t>(master_begin_));
    TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(base.data(), params_.get(), sizeof(bf16) * master_begin_,
                                          cudaMemcpyDeviceToHost, compute_stream_));
    TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
    for (int64_t i = 0; i < master_begin_; ++i) host[i] = __bfloat162float(base[i]);
  }
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(host + master_begin_, master_.get(),
                                        sizeof(float) * (layout_.total_params() - master_begin_),
                                        cudaMemcpyDeviceToHost, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
}

void CudaEngine::get_gradients(float* host) const {
  order_after_gradient_zeroing();
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(host, grads_.get(),
                                        sizeof(float) * layout_.trainable_params(),
                                        cudaMemcpyDeviceToHost, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
}

void CudaEngine::zero_gradients() {
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(gradients_released_, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamWaitEvent(gradient_zero_stream_, gradients_released_, 0));
  TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, grads_.bytes(), gradient_zero_stream_));
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(gradients_zeroed_, gradient_zero_stream_));
  gradient_zeroing_pending_ = true;
}

void CudaEngine::order_after_gradient_zeroing() const {
  if (!gradient_zeroing_pending_) return;
  TRAINBENCH_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, gradients_zeroed_, 0));
  gradient_zeroing_pending_ = false;
}

void* CudaEngine::allocate_host(size_t bytes) {
  void* memory = nullptr;
  // Failure is the caller's to report (out of pinned memory), as with malloc.
  if (cudaHostAlloc(&memory, bytes, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state
    return nullptr;
  }
  return memory;
}

// Called from destructors (the loader's batch slots, the checkpoint
// staging), also while the exception of a failed CUDA call unwinds. After a
// sticky error (an illegal address, an Xid) every call fails again, and a
// throw here would end the process in std::terminate, not in exit 3 with the
// first error. So a failure is told once on stderr, and only when no
// exception is on its way out already.
void CudaEngine::release_host(void* memory) {
  if (memory == nullptr) return;
  const cudaError_t status = cudaFreeHost(memory);
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  if (std::uncaught_exceptions() == 0)
    std::fprintf(stderr, "trainbench: warning: cudaFreeHost failed: %s (%s)\n", cudaGetErrorName(status),
                 cudaGetErrorString(status));
}

// Host batch → pinned staging → device on the copy stream. The loader's
// batches are pinned too, but the loader reuses a batch's memory as soon as
// the next one is taken, possibly before an asynchronous copy from it ends;
// the staging copy (pinned to pinned, a few hundred KiB) decouples the two.
// The compute stream waits for the copy, and the copy waits until the
// compute stream is done with the previous batch's tokens (backward reads them).
void CudaEngine::upload_tokens(const TokenBatch& batch) {
  const int64_t n = micro_batch_ * shape_.seq_len;
  TRAINBENCH_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, tokens_free_, 0));
  // The staging buffer may still feed the previous copy.
  TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(tokens_ready_));
  int32_t* staged = tokens_staging_.get();
  std::memcpy(staged, batch.inputs, sizeof(int32_t) * n);
  std::memcpy(staged + n, batch.targets, sizeof(int32_t) * n);
  token_groups_ = group_rows_by_token(batch.inputs, n, shape_.vocab, staged + 2 * n, staged + 3 * n,
                                      staged + 4 * n + 1, token_group_scratch_);
  // Only the groups that exist travel (their tokens sit after n + 1 offsets).
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(tokens_.get(), staged,
                                        sizeof(int32_t) * (4 * n + 1 + token_groups_), cudaMemcpyHostToDevice,
                                        copy_stream_));
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(tokens_ready_, copy_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, tokens_ready_, 0));
  staged_inputs_ = batch.inputs;
}

void CudaEngine::begin_compute() {
  if (!compute_timing_) return;
  if (timing_used_ + 2 > timing_events_.size()) {
    // More calls than pairs before take_compute_seconds: grow the pool.
    const size_t old_size = timing_events_.size();
    timing_events_.resize(old_size * 2);
    for (size_t i = old_size; i < timing_events_.size(); ++i)
      TRAINBENCH_CUDA_CHECK(cudaEventCreate(&timing_events_[i]));
  }
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(timing_events_[timing_used_], compute_stream_));
}

void CudaEngine::end_compute() {
  op_timer_.stop(compute_stream_);
  if (!compute_timing_) return;
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(timing_events_[timing_used_ + 1], compute_stream_));
  timing_used_ += 2;
}

void CudaEngine::set_compute_timing(bool on) {
  // Pairs already recorded are dropped: their stop events may still be
  // pending, and they would be read as belonging to the next measurement.
  synchronize();
  compute_timing_ = on;
  timing_used_ = 0;
}

double CudaEngine::take_compute_seconds() {
  double seconds = 0.0;
  for (size_t i = 0; i + 1 < timing_used_; i += 2) {
    TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(timing_events_[i + 1]));
    float milliseconds = 0.0f;
    TRAINBENCH_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, timing_events_[i], timing_events_[i + 1]));
    seconds += 1e-3 * milliseconds;
  }
  timing_used_ = 0;
  return seconds;
}

// All work issued so far (engine.h), a gradient memset on its own stream included.
void CudaEngine::synchronize() {
  order_after_gradient_zeroing();
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
}

// A ring, not one event: a consumer that holds on to an event for a while
// (up to kComputeEventRing - 1 further calls) still finds it as recorded.
void* CudaEngine::record_compute_event() {
  // The contract is "the engine's work enqueued so far": that includes a
  // gradient memset still running on its own stream.
  order_after_gradient_zeroing();
  const cudaEvent_t event = compute_ready_events_[next_compute_ready_event_];
  next_compute_ready_event_ = (next_compute_ready_event_ + 1) % compute_ready_events_.size();
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(event, compute_stream_));
  return event;
}

int64_t CudaEngine::logits_stride() const { return padded_leading_dimension(shape_.vocab); }

// The head's current bf16 rows into the padded copy, on the compute stream,
// at every forward: whatever wrote the parameters since (an optimizer step, a
// restore, ZeRO-1's refresh), the copy cannot be stale, and backward reads
// what its forward read. vocab × d_model bf16, 77 MB for GPT-2: tens of
// microseconds on an H200.
void CudaEngine::refresh_lm_head_copy() {
  if (lm_head_padded_.get() == nullptr) return;
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(lm_head_padded_.get(),
                                        param_view(params_.get(), ParamKind::kLmHead),
                                        sizeof(bf16) * shape_.vocab * shape_.d_model,
                                        cudaMemcpyDeviceToDevice, compute_stream_));
}

const bf16* CudaEngine::lm_head_weights() const {
  return lm_head_padded_.get() != nullptr ? lm_head_padded_.get()
                                          : param_view(params_.get(), ParamKind::kLmHead);
}

void CudaEngine::matmul_forward(bf16* out, const bf16* in, const bf16* weight, int64_t n,
                                int64_t in_dim, int64_t out_dim, int64_t out_stride) {
  if (out_stride == 0) out_stride = out_dim;
  gemm_.gemm(false, true, n, out_dim, in_dim, 1.0f, in, in_dim, weight, in_dim, 0.0f, out,
             out_stride, GemmOutput::kBf16, compute_stream_);
}

void CudaEngine::matmul_backward(bf16* d_in, float* d_weight, const bf16* d_out, const bf16* in,
                                 const bf16* weight, int64_t n, int64_t in_dim, int64_t out_dim,
                                 bool accumulate_d_in, int64_t out_stride) {
  if (out_stride == 0) out_stride = out_dim;
  if (d_in != nullptr)
    gemm_.gemm(false, false, n, in_dim, out_dim, 1.0f, d_out, out_stride, weight, in_dim,
               accumulate_d_in ? 1.0f : 0.0f, d_in, in_dim, GemmOutput::kBf16, compute_stream_);
  if (d_weight != nullptr)  // fp32, accumulated across micro-batches
    gemm_.gemm(true, false, out_dim, in_dim, n, 1.0f, d_out, out_stride, in, in_dim, 1.0f,
               d_weight, in_dim, GemmOutput::kFp32, compute_stream_);
}

CudaEngine::HeadOffsets CudaEngine::head_offsets(int64_t h) const {
  return HeadOffsets{h * shape_.head_dim(), (h / shape_.heads_per_kv()) * shape_.head_dim(),
                     h * shape_.seq_len * shape_.seq_len};
}

CudaEngine::HeadOffsets CudaEngine::sequence_strides() const {
  const int64_t T = shape_.seq_len;
  return HeadOffsets{T * shape_.q_dim(), T * shape_.kv_dim(), shape_.n_heads * T * T};
}

float CudaEngine::attention_scale() const {
  return 1.0f / std::sqrt(static_cast<float>(shape_.head_dim()));
}

void CudaEngine::choose_attention() {
  const std::string& asked = options_.attention;
  if (asked != "auto" && asked != "cudnn" && asked != "gemm")
    throw std::invalid_argument("attention must be auto, cudnn or gemm, not '" + asked + "'");
  if (asked == "gemm") {
    attention_info_ = AttentionInfo{"gemm", "cuBLASLt GEMMs around a causal softmax (train.attention=gemm)"};
    return;
  }
  const AttentionShape attention_shape{micro_batch_, shape_.n_heads, shape_.n_kv_heads, shape_.seq_len,
                                       shape_.head_dim()};
  std::string why_not;
  fused_attention_ =
      make_cudnn_attention(attention_shape, attention_scale(), options_.deterministic, compute_stream_, &why_not);
  // cuDNN's probing of engines that cannot run the graph (mode A's before a
  // FALLBACK one builds, or all of them) may leave the runtime's last error
  // set (a refused launch, an NVRTC kernel that did not load): cleared, so
  // the engine's next launch check does not take it for a fault of its own.
  // A refusal is in why_not.
  (void)cudaGetLastError();
  if (fused_attention_ != nullptr) {
    attention_info_ = AttentionInfo{
        "cudnn-sdpa", fused_attention_->library_version() +
                          (options_.deterministic ? ", deterministic backward"
                                                  : ", fastest backward: dQ summed with atomics, not bitwise "
                                                    "repeatable (train.deterministic=false)")};
    return;
  }
  if (asked == "cudnn") throw std::runtime_error("train.attention=cudnn: " + why_not);
  attention_info_ = AttentionInfo{"gemm", "cuBLASLt GEMMs around a causal softmax; cuDNN SDPA not used: " + why_not};
}

GemmInfo CudaEngine::gemm() const {
  if (!gemm_.times_candidates())
    return GemmInfo{"heuristic", "cuBLASLt bf16, the heuristic's first algorithm per shape: the same on every "
                                 "run (train.deterministic=true)"};
  const GemmTuning t = gemm_.tuning();
  std::string detail = "cuBLASLt bf16, the fastest of up to " + std::to_string(LtGemm::kMaxCandidates) +
                       " candidate algorithms timed at each shape's first call (train.deterministic=false)";
  if (t.shapes == 0) {
    detail += "; no shape timed yet";
  } else {
    char saved[200];
    std::snprintf(saved, sizeof saved,
                  "; %ld shapes timed, %ld took another algorithm than the heuristic's first (%.0f%% faster "
                  "twice): by those timings %.1f%% less GEMM time",
                  static_cast<long>(t.shapes), static_cast<long>(t.changed), 100.0 * LtGemm::kSwitchMargin,
                  t.first_choice_seconds > 0 ? 100.0 * (1.0 - t.chosen_seconds / t.first_choice_seconds) : 0.0);
    detail += saved;
  }
  if (t.single_candidate > 0)
    detail += "; " + std::to_string(t.single_candidate) + " shapes had a single candidate";
  if (!t.untimed.empty()) detail += "; " + t.untimed;
  return GemmInfo{"timed", detail};
}

// cuDNN's fused SDPA when chosen. Otherwise per head, batched over the
// micro-batch: scores = Q Kᵀ into P's slot; one causal softmax launch over all
// heads (scale applied there); then out = P V.
void CudaEngine::attention_forward(const LayerActivations& a) {
  if (fused_attention_ != nullptr) {
    fused_attention_->forward(a.q, a.k, a.v, a.attn_out, a.attn_stats, attention_workspace_.get());
    return;
  }
  const int64_t T = shape_.seq_len, hd = shape_.head_dim(), B = micro_batch_;
  const int64_t q_ld = shape_.q_dim(), kv_ld = shape_.kv_dim();
  const HeadOffsets step = sequence_strides();
  const float scale = attention_scale();
  for (int64_t h = 0; h < shape_.n_heads; ++h) {
    const HeadOffsets o = head_offsets(h);
    gemm_.gemm_strided_batched(false, true, T, T, hd, 1.0f, a.q + o.q, q_ld, step.q, a.k + o.kv,
                               kv_ld, step.kv, 0.0f, a.probs + o.probs, T, step.probs, B,
                               GemmOutput::kBf16, compute_stream_);
  }
  causal_softmax_forward(a.probs, B * shape_.n_heads, T, scale, compute_stream_);
  for (int64_t h = 0; h < shape_.n_heads; ++h) {
    const HeadOffsets o = head_offsets(h);
    gemm_.gemm_strided_batched(false, false, T, hd, T, 1.0f, a.probs + o.probs, T, step.probs,
                               a.v + o.kv, kv_ld, step.kv, 0.0f, a.attn_out + o.q, q_ld, step.q, B,
                               GemmOutput::kBf16, compute_stream_);
  }
}

// dV (+)= Pᵀ dO and dP = dO Vᵀ per head; one softmax-backward launch turns dP
// into dS (scaled); then dQ = dS K and dK (+)= dSᵀ Q. The query heads of a kv
// group accumulate into the same dK/dV (the first one overwrites). Each GEMM
// is one launch per head, batched over the micro-batch. cuDNN's backward
// (when chosen) recomputes the scores from q, k and the logsumexp instead.
void CudaEngine::attention_backward(const LayerActivations& a) {
  const Scratch& g = scratch_;
  if (fused_attention_ != nullptr) {
    fused_attention_->backward(a.q, a.k, a.v, a.attn_out, g.d_attn_out, a.attn_stats, g.d_q, g.d_k,
                               g.d_v, attention_workspace_.get());
    return;
  }
  const int64_t T = shape_.seq_len, hd = shape_.head_dim(), B = micro_batch_;
  const int64_t q_ld = shape_.q_dim(), kv_ld = shape_.kv_dim();
  const int64_t group = shape_.heads_per_kv();
  const HeadOffsets step = sequence_strides();
  const float scale = attention_scale();
  for (int64_t h = 0; h < shape_.n_heads; ++h) {
    const HeadOffsets o = head_offsets(h);
    const float accumulate = h % group == 0 ? 0.0f : 1.0f;
    gemm_.gemm_strided_batched(true, false, T, hd, T, 1.0f, a.probs + o.probs, T, step.probs,
                               g.d_attn_out + o.q, q_ld, step.q, accumulate, g.d_v + o.kv, kv_ld,
                               step.kv, B, GemmOutput::kBf16, compute_stream_);
    gemm_.gemm_strided_batched(false, true, T, T, hd, 1.0f, g.d_attn_out + o.q, q_ld, step.q,
                               a.v + o.kv, kv_ld, step.kv, 0.0f, g.d_probs + o.probs, T,
                               step.probs, B, GemmOutput::kBf16, compute_stream_);
  }
  causal_softmax_backward(g.d_probs, a.probs, B * shape_.n_heads, T, scale, compute_stream_);
  for (int64_t h = 0; h < shape_.n_heads; ++h) {
    const HeadOffsets o = head_offsets(h);
    const float accumulate = h % group == 0 ? 0.0f : 1.0f;
    gemm_.gemm_strided_batched(false, false, T, hd, T, 1.0f, g.d_probs + o.probs, T, step.probs,
                               a.k + o.kv, kv_ld, step.kv, 0.0f, g.d_q + o.q, q_ld, step.q, B,
                               GemmOutput::kBf16, compute_stream_);
    gemm_.gemm_strided_batched(true, false, T, hd, T, 1.0f, g.d_probs + o.probs, T, step.probs,
                               a.q + o.q, q_ld, step.q, accumulate, g.d_k + o.kv, kv_ld, step.kv, B,
                               GemmOutput::kBf16, compute_stream_);
  }
}

void CudaEngine::forward(const TokenBatch& batch) {
  check_batch(batch, micro_batch_, shape_.seq_len, shape_.vocab);
  upload_tokens(batch);
  begin_compute();
  const ModelShape& s = shape_;
  const int64_t n = micro_batch_ * s.seq_len, d = s.d_model, f = s.ffn_hidden;
  const float eps = static_cast<float>(s.norm_eps);
  const int32_t* inputs = tokens_.get();
  const int32_t* targets = tokens_.get() + n;
  cudaStream_t stream = compute_stream_;
  bf16* p = params_.get();

  FinalActivations& fa = final_acts_;
  // The norm that feeds layer l's attention, or the head when l = n_layers:
  // its output, rstd and gain.
  struct NormTarget {
    bf16* out;
    float* rstd;
    const bf16* gain;
  };
  auto norm_feeding = [&](int64_t l) {
    if (l == s.n_layers) return NormTarget{fa.norm_out, fa.rstd, param_view(p, ParamKind::kFinalNorm)};
    return NormTarget{layer_acts_[l].attn_norm_out, layer_acts_[l].attn_rstd, layer_weights(l).attn_norm};
  };
  bf16* x = s.n_layers > 0 ? layer_acts_[0].residual_in : fa.residual_out;
  mark(OpKind::kEmbedding);
  embedding_forward(x, inputs, param_view(p, ParamKind::kTokenEmbedding), n, d, stream);
  // The first norm has no residual add before it; every later norm is fused
  // with the add that precedes it (residual_add_rmsnorm_forward), so the
  // residual adds count under "norm" in report.op_times.
  mark(OpKind::kNorm);
  const NormTarget first = norm_feeding(0);
  rmsnorm_forward(first.out, first.rstd, x, first.gain, n, d, eps, stream);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerWeights w = layer_weights(l);
    const LayerActivations& a = layer_acts_[l];
    bf16* x_next = l + 1 < s.n_layers ? layer_acts_[l + 1].residual_in : fa.residual_out;

    mark(OpKind::kGemm);
    matmul_forward(a.q, a.attn_norm_out, w.wq, n, d, s.q_dim());
    lora_forward(l, ParamKind::kWq, a.attn_norm_out, a.q);
    matmul_forward(a.k, a.attn_norm_out, w.wk, n, d, s.kv_dim());
    lora_forward(l, ParamKind::kWk, a.attn_norm_out, a.k);
    matmul_forward(a.v, a.attn_norm_out, w.wv, n, d, s.kv_dim());
    lora_forward(l, ParamKind::kWv, a.attn_norm_out, a.v);
    mark(OpKind::kRope);
    rope_forward(a.q, micro_batch_, s.seq_len, s.n_heads, s.head_dim(), s.rope_theta, stream);
    rope_forward(a.k, micro_batch_, s.seq_len, s.n_kv_heads, s.head_dim(), s.rope_theta, stream);
    mark(OpKind::kAttention);
    attention_forward(a);
    mark(OpKind::kGemm);
    matmul_forward(a.residual_mid, a.attn_out, w.wo, n, s.q_dim(), d);
    lora_forward(l, ParamKind::kWo, a.attn_out, a.residual_mid);
    mark(OpKind::kNorm);
    residual_add_rmsnorm_forward(a.residual_mid, a.residual_in, a.mlp_norm_out, a.mlp_rstd,
                                 w.mlp_norm, n, d, eps, stream);
    mark(OpKind::kGemm);
    matmul_forward(a.gate, a.mlp_norm_out, w.w_gate, n, d, f);
    lora_forward(l, ParamKind::kWGate, a.mlp_norm_out, a.gate);
    matmul_forward(a.up, a.mlp_norm_out, w.w_up, n, d, f);
    lora_forward(l, ParamKind::kWUp, a.mlp_norm_out, a.up);
    mark(OpKind::kSwiglu);
    swiglu_forward(a.swiglu_out, a.gate, a.up, n * f, stream);
    mark(OpKind::kGemm);
    matmul_forward(x_next, a.swiglu_out, w.w_down, n, f, d);
    lora_forward(l, ParamKind::kWDown, a.swiglu_out, x_next);
    // x_next = that + x_mid, normed for the next layer's attention or the head.
    mark(OpKind::kNorm);
    const NormTarget next = norm_feeding(l + 1);
    residual_add_rmsnorm_forward(x_next, a.residual_mid, next.out, next.rstd, next.gain, n, d, eps, stream);
  }
  // All lm_head_rows_ logits: the padded ones come out 0, the loss reads vocab.
  mark(OpKind::kLmHead);
  refresh_lm_head_copy();
  matmul_forward(fa.logits, fa.norm_out, lm_head_weights(), n, d, lm_head_rows_, logits_stride());
  mark(OpKind::kLoss);
  cross_entropy_forward(fa.losses, fa.logsumexp, fa.logits, targets, n, s.vocab, logits_stride(),
                        stream);
  end_compute();
  // A second forward without backward may overwrite the tokens after this;
  // a backward re-records the event when it is done with them.
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(tokens_free_, stream));
  // The mean loss is summed on the host, in order, when asked for.
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(losses_host_.get(), fa.losses, sizeof(float) * n,
                                        cudaMemcpyDeviceToHost, stream));
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(losses_ready_, stream));
  losses_recorded_ = true;
  logits_valid_ = true;
}

float CudaEngine::last_loss() {
  // An event never recorded counts as complete: without a forward the sum
  // below would read the pinned buffer's uninitialised bytes.
  if (!losses_recorded_) throw std::logic_error("last_loss: no forward yet");
  TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(losses_ready_));
  const int64_t n = micro_batch_ * shape_.seq_len;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += losses_host_.get()[i];
  return static_cast<float>(sum / static_cast<double>(n));
}

void CudaEngine::get_logits(float* host) const {
  if (!logits_valid_) throw std::logic_error("get_logits: no forward since the last backward");
  const int64_t count = micro_batch_ * shape_.seq_len * shape_.vocab;
  std::vector<bf16> logits(static_cast<size_t>(count));
  // The device rows are padded (logits_stride()); the host's are vocab long.
  TRAINBENCH_CUDA_CHECK(cudaMemcpy2DAsync(
      logits.data(), sizeof(bf16) * shape_.vocab, final_acts_.logits,
      sizeof(bf16) * logits_stride(), sizeof(bf16) * shape_.vocab,
      static_cast<size_t>(micro_batch_ * shape_.seq_len), cudaMemcpyDeviceToHost, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
  for (int64_t i = 0; i < count; ++i) host[i] = __bfloat162float(logits[i]);
}

void CudaEngine::backward(const TokenBatch& batch, float loss_scale,
                          const GradientsReadyFn& on_gradients_ready) {
  // The ids were checked by this batch's forward, whose device copy backward
  // reads (it must be the same batch, below): the shape is all that is left.
  check_batch_shape(batch, micro_batch_, shape_.seq_len);
  if (!logits_valid_) throw std::logic_error("backward without a preceding forward");
  if (batch.inputs != staged_inputs_)
    throw std::logic_error("backward must follow the forward of the same batch");
  // Before the timing event: a memset still running (it had the whole
  // forward to finish) is not this call's compute.
  order_after_gradient_zeroing();
  begin_compute();
  const ModelShape& s = shape_;
  const int64_t n = micro_batch_ * s.seq_len, d = s.d_model, f = s.ffn_hidden;
  const int32_t* inputs = tokens_.get();
  const int32_t* targets = tokens_.get() + n;
  cudaStream_t stream = compute_stream_;
  bf16* p = params_.get();
  const Scratch& g = scratch_;
  FinalActivations& fa = final_acts_;

  mark(OpKind::kLoss);
  cross_entropy_backward(fa.logits, fa.logsumexp, targets, n, s.vocab, logits_stride(),
                         loss_scale / static_cast<float>(n), stream);
  logits_valid_ = false;
  // dlogits of the padded columns are the forward's zeros (the loss's
  // backward writes vocab columns only): both GEMMs run on lm_head_rows_,
  // the weight gradient's extra rows (exactly 0) landing in the slack after
  // the gradient buffer (engine_sizes); a frozen head has no weight gradient.
  mark(OpKind::kLmHead);
  matmul_backward(g.d_norm_out, grad_view(ParamKind::kLmHead), fa.logits, fa.norm_out,
                  lm_head_weights(), n, d, lm_head_rows_, false, logits_stride());
  mark(OpKind::kNorm);
  TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(g.d_residual, 0, sizeof(bf16) * n * d, stream));
  rmsnorm_backward(g.d_residual, grad_view(ParamKind::kFinalNorm), g.d_norm_out, fa.residual_out,
                   param_view(p, ParamKind::kFinalNorm), fa.rstd, n, d, g.rmsnorm, stream);
  if (on_gradients_ready) on_gradients_ready(grad_ready_from_head_);

  for (int64_t l = s.n_layers - 1; l >= 0; --l) {
    const LayerWeights w = layer_weights(l);
    const LayerGrads dw = layer_grads(l);
    const LayerActivations& a = layer_acts_[l];
    // MLP block; d_residual holds dL/dx_next, also the direct gradient of x_mid.
    mark(OpKind::kGemm);
    matmul_backward(g.d_swiglu, dw.w_down, g.d_residual, a.swiglu_out, w.w_down, n, f, d, false);
    lora_backward(l, ParamKind::kWDown, g.d_residual, a.swiglu_out, g.d_swiglu);
    mark(OpKind::kSwiglu);
    swiglu_backward(g.d_gate, g.d_up, g.d_swiglu, a.gate, a.up, n * f, stream);
    mark(OpKind::kGemm);
    matmul_backward(g.d_norm_out, dw.w_gate, g.d_gate, a.mlp_norm_out, w.w_gate, n, d, f, false);
    lora_backward(l, ParamKind::kWGate, g.d_gate, a.mlp_norm_out, g.d_norm_out);
    matmul_backward(g.d_norm_out, dw.w_up, g.d_up, a.mlp_norm_out, w.w_up, n, d, f, true);
    lora_backward(l, ParamKind::kWUp, g.d_up, a.mlp_norm_out, g.d_norm_out);
    mark(OpKind::kNorm);
    rmsnorm_backward(g.d_residual, dw.mlp_norm, g.d_norm_out, a.residual_mid, w.mlp_norm,
                     a.mlp_rstd, n, d, g.rmsnorm, stream);
    // Attention block; d_residual now holds dL/dx_mid.
    mark(OpKind::kGemm);
    matmul_backward(g.d_attn_out, dw.wo, g.d_residual, a.attn_out, w.wo, n, s.q_dim(), d, false);
    lora_backward(l, ParamKind::kWo, g.d_residual, a.attn_out, g.d_attn_out);
    mark(OpKind::kAttention);
    attention_backward(a);
    mark(OpKind::kRope);
    rope_backward(g.d_q, micro_batch_, s.seq_len, s.n_heads, s.head_dim(), s.rope_theta, stream);
    rope_backward(g.d_k, micro_batch_, s.seq_len, s.n_kv_heads, s.head_dim(), s.rope_theta, stream);
    mark(OpKind::kGemm);
    matmul_backward(g.d_norm_out, dw.wq, g.d_q, a.attn_norm_out, w.wq, n, d, s.q_dim(), false);
    lora_backward(l, ParamKind::kWq, g.d_q, a.attn_norm_out, g.d_norm_out);
    matmul_backward(g.d_norm_out, dw.wk, g.d_k, a.attn_norm_out, w.wk, n, d, s.kv_dim(), true);
    lora_backward(l, ParamKind::kWk, g.d_k, a.attn_norm_out, g.d_norm_out);
    matmul_backward(g.d_norm_out, dw.wv, g.d_v, a.attn_norm_out, w.wv, n, d, s.kv_dim(), true);
    lora_backward(l, ParamKind::kWv, g.d_v, a.attn_norm_out, g.d_norm_out);
    mark(OpKind::kNorm);
    rmsnorm_backward(g.d_residual, dw.attn_norm, g.d_norm_out, a.residual_in, w.attn_norm,
                     a.attn_rstd, n, d, g.rmsnorm, stream);
    if (on_gradients_ready) on_gradients_ready(grad_ready_from_layer_[l]);
  }
  float* d_embedding = grad_view(ParamKind::kTokenEmbedding);
  if (d_embedding != nullptr) {
    mark(OpKind::kEmbedding);
    const TokenGroups groups{inputs + 2 * n, inputs + 3 * n, inputs + 4 * n + 1, token_groups_};
    embedding_backward(d_embedding, g.d_residual, groups, d, stream);
  }
  end_compute();
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(tokens_free_, stream));
  if (on_gradients_ready) on_gradients_ready(0);
}

float CudaEngine::optimizer_step(const AdamWSettings& settings, int64_t step) {
  if (shard_.begin != 0 || shard_.end != layout_.trainable_params())
    throw std::logic_error("optimizer_step on a sharded optimizer: use optimizer_step_shard");
  // A device-side wait for a state copy begun earlier, before the timing
  // event, so the copy does not count as compute; forward and backward
  // issued before this ran alongside it.
  order_after_state_copy();
  order_after_gradient_zeroing();  // zeros without a backward since: still the update's input
  begin_compute();
  mark(OpKind::kOptimizer);
  cudaStream_t stream = compute_stream_;
  sum_of_squares(scratch_.sum_sq, grads_.get(), layout_.trainable_params(),
                 scratch_.sum_sq_partials, stream);
  clip_scale_from_sum_of_squares(scratch_.grad_scale, scratch_.grad_norm, scratch_.sum_sq,
                                 settings.grad_clip, stream);
  adamw_over_shard(settings, step);
  end_compute();
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(grad_norm_host_.get(), scratch_.grad_norm, sizeof(float),
                                        cudaMemcpyDeviceToHost, stream));
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
  return grad_norm_host_.get()[0];
}

void CudaEngine::adamw_over_shard(const AdamWSettings& settings, int64_t step) {
  AdamWStep adam{static_cast<float>(settings.lr), static_cast<float>(settings.beta1),
                 static_cast<float>(settings.beta2), static_cast<float>(settings.eps), 0.0f,
                 step};
  // Decay on matrices only (ShardPiece::decay), as CpuEngine and the libtorch reference.
  for (const ShardPiece& piece : shard_pieces(layout_, shard_.begin, shard_.end)) {
    adam.weight_decay = piece.decay ? static_cast<float>(settings.weight_decay) : 0.0f;
    adamw_update(master_.get() + master_offset(piece.parameter), params_.get() + piece.parameter,
                 grads_.get() + piece.lo, adam_m_.get() + (piece.lo - shard_.begin),
                 adam_v_.get() + (piece.lo - shard_.begin), piece.hi - piece.lo, adam,
                 scratch_.grad_scale, compute_stream_);
  }
}

double CudaEngine::gradient_sum_of_squares(int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > layout_.trainable_params())
    throw std::invalid_argument("gradient_sum_of_squares: [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") is outside the " +
                                std::to_string(layout_.trainable_params()) + " gradients");
  order_after_gradient_zeroing();
  begin_compute();
  mark(OpKind::kOptimizer);
  sum_of_squares(scratch_.sum_sq, grads_.get() + begin, end - begin, scratch_.sum_sq_partials,
                 compute_stream_);
  end_compute();
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(sum_sq_host_.get(), scratch_.sum_sq, sizeof(double),
                                        cudaMemcpyDeviceToHost, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
  return sum_sq_host_.get()[0];
}

// optimizer_step's update restricted to [shard_.begin, shard_.end), with the
// clip scale from the norm the caller assembled over every rank's shard.
void CudaEngine::optimizer_step_shard(const AdamWSettings& settings, int64_t step,
                                      double global_norm) {
  order_after_state_copy();
  order_after_gradient_zeroing();
  begin_compute();
  mark(OpKind::kOptimizer);
  cudaStream_t stream = compute_stream_;
  // The same device clip-scale kernel as the full step, fed norm².
  sum_sq_host_.get()[0] = global_norm * global_norm;
  TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(scratch_.sum_sq, sum_sq_host_.get(), sizeof(double),
                                        cudaMemcpyHostToDevice, stream));
  clip_scale_from_sum_of_squares(scratch_.grad_scale, scratch_.grad_norm, scratch_.sum_sq,
                                 settings.grad_clip, stream);
  adamw_over_shard(settings, step);
  end_compute();
  // The host round trip above (and the caller's all-gather next) need the
  // update done; the pinned norm² is not overwritten before the copy ran.
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaEngine::refresh_working_parameters() {
  order_after_state_copy();  // a checkpoint's copy may still be reading the bf16 parameters
  // Part of ZeRO-1's optimizer step (its only callers): timed as compute.
  // Untimed, its device time (6 bytes a parameter, ~2.4 ms a step at
  // h200-llama8b-4l) fell to other_s through the step's synchronize.
  begin_compute();
  mark(OpKind::kOptimizer);
  copy_fp32_to_bf16(params_.get() + master_begin_, master_.get(),
                    layout_.total_params() - master_begin_, compute_stream_);
  end_compute();
}

std::vector<StateTensor> CudaEngine::state_tensors() const {
  const int64_t params = layout_.total_params(), shard = shard_.end - shard_.begin;
  const int64_t f32 = sizeof(float), b16 = sizeof(bf16);
  if (layout_.lora_spec().enabled()) {
    // The adapters are the last block of the parameters (ParameterLayout).
    std::vector<StateTensor> tensors;
    if (options_.lora_state_includes_base) tensors.push_back({"base_bf16", master_begin_ * b16});
    tensors.push_back({"lora_fp32", (params - master_begin_) * f32});
    tensors.push_back({"lora_bf16", (params - master_begin_) * b16});
    tensors.push_back({"adam_m", shard * f32});
    tensors.push_back({"adam_v", shard * f32});
    return tensors;
  }
  return {{"master_fp32", params * f32},
          {"params_bf16", params * b16},
          {"adam_m", shard * f32},
          {"adam_v", shard * f32}};
}

std::vector<void*> CudaEngine::state_buffers() const {
  if (layout_.lora_spec().enabled()) {
    std::vector<void*> buffers;
    if (options_.lora_state_includes_base) buffers.push_back(params_.get());
    buffers.push_back(master_.get());
    buffers.push_back(params_.get() + master_begin_);
    buffers.push_back(adam_m_.get());
    buffers.push_back(adam_v_.get());
    return buffers;
  }
  return {master_.get(), params_.get(), adam_m_.get(), adam_v_.get()};
}

// The copy starts when the compute work issued so far (the last optimizer
// step) has finished, on state_copy_stream_. Into page-locked destinations
// (allocate_host) cudaMemcpyAsync returns at once; into pageable memory the
// runtime makes it synchronous, which is correct but does not overlap.
void CudaEngine::begin_state_copy(const std::vector<StateCopyPart>& parts) {
  check_state_parts("begin_state_copy", state_tensors(), parts);
  // A previous copy still in flight is ahead of this one on the same stream.
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(state_copy_start_, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamWaitEvent(state_copy_stream_, state_copy_start_, 0));
  const std::vector<void*> buffers = state_buffers();
  // From the first copy on, the copy is in flight: if a later enqueue fails,
  // the copies already queued must still be waited for (wait_state_copy, the
  // Checkpointer's destructor) before their destinations are freed.
  state_copy_in_flight_ = true;
  compute_waits_for_state_copy_ = true;
  try {
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].bytes > 0)
        TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(parts[i].destination,
                                              static_cast<const unsigned char*>(buffers[i]) + parts[i].from,
                                              static_cast<size_t>(parts[i].bytes), cudaMemcpyDeviceToHost,
                                              state_copy_stream_));
  } catch (...) {
    (void)cudaEventRecord(state_copy_done_, state_copy_stream_);  // after what was queued
    throw;
  }
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(state_copy_done_, state_copy_stream_));
}

double CudaEngine::wait_state_copy() {
  if (!state_copy_in_flight_) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(state_copy_done_));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state_copy_in_flight_ = false;
  compute_waits_for_state_copy_ = false;  // it has landed: nothing left to order after
  return seconds;
}

void CudaEngine::order_after_state_copy() {
  if (!compute_waits_for_state_copy_) return;
  TRAINBENCH_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, state_copy_done_, 0));
  compute_waits_for_state_copy_ = false;
}

void CudaEngine::restore_state(const std::vector<const void*>& sources) {
  const std::vector<StateTensor> tensors = state_tensors();
  check_state_pointers("restore_state", tensors, sources);
  order_after_state_copy();
  const std::vector<void*> buffers = state_buffers();
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].bytes > 0)
      TRAINBENCH_CUDA_CHECK(cudaMemcpyAsync(buffers[i], sources[i],
                                            static_cast<size_t>(tensors[i].bytes),
                                            cudaMemcpyHostToDevice, compute_stream_));
  TRAINBENCH_CUDA_CHECK(cudaStreamSynchronize(compute_stream_));
}

double CudaEngine::measure_gemm_flops(int64_t m, int64_t n, int64_t k, double seconds) {
  return measure_lt_gemm_flops(gemm_, m, n, k, seconds, compute_stream_);
}

}  // namespace trainbench::cuda
