// The CUDA backend of TrainingEngine: bf16 parameters and activations, fp32
// master weights, gradients and AdamW state, GEMMs through cuBLASLt and the
// ops of cuda_ops.h on a compute stream; token batches arrive through pinned
// staging on a copy stream. Same straight-line forward/backward as CpuEngine,
// same ParameterLayout, so the trainer does not change per backend.
//
// The LM head's GEMMs run on the vocabulary rounded up to 64 rows (a padded
// bf16 copy of the head; the layout keeps vocab rows): an odd vocabulary
// keeps cuBLASLt off its fast kernels.
//
// Attention (train.attention): cuDNN's fused SDPA (cudnn_attention.h) where
// this build has it and cuDNN supports the shape — no T² probabilities kept,
// one fp32 logsumexp per query row instead; otherwise strided-batched
// cuBLASLt GEMMs for Q·Kᵀ and P·V around one causal-softmax launch, keeping P
// (batch·heads·T² bf16 per layer) for backward. docs/metrics.md, "Attention".
#pragma once

#include <cuda_runtime.h>  // cudaStream_t, cudaEvent_t

#include <cstdint>  // int64_t
#include <memory>   // the fused attention
#include <vector>   // per-layer views, the event pool

#include "kernels/cuda/cuda_ops.h"       // bf16
#include "kernels/cuda/cudnn_attention.h"  // CudnnAttention
#include "kernels/cuda/device_buffer.h"  // DeviceBuffer, PinnedBuffer
#include "kernels/cuda/engine_views.h"  // LayerActivations, FinalActivations, Scratch
#include "kernels/cuda/lt_gemm.h"        // LtGemm
#include "kernels/cuda/op_timer.h"       // OpTimer: report.op_times
#include "kernels/engine.h"              // TrainingEngine

namespace trainbench::cuda {

class CudaEngine final : public TrainingEngine {
 public:
  explicit CudaEngine(const EngineOptions& options);
  ~CudaEngine() override;

  const char* backend_name() const override { return "cuda"; }
  const ModelShape& shape() const override { return shape_; }
  const ParameterLayout& layout() const override { return layout_; }
  int64_t micro_batch() const override { return micro_batch_; }
  MemoryPlan memory_plan() const override;
  AttentionInfo attention() const override { return attention_info_; }
  GemmInfo gemm() const override;

  void init_parameters(uint64_t seed) override;
  void set_parameters(const float* host) override;
  void get_parameters(float* host) const override;
  void get_gradients(float* host) const override;
  float* device_gradient_buffer() override { return grads_.get(); }
  // The fp32 master of every parameter; nullptr under LoRA, whose frozen base
  // has no fp32 copy.
  float* device_parameter_buffer() override { return master_begin_ == 0 ? master_.get() : nullptr; }
  void refresh_working_parameters() override;
  void* record_compute_event() override;

  void zero_gradients() override;
  void forward(const TokenBatch& batch) override;
  float last_loss() override;
  void get_logits(float* host) const override;
  void backward(const TokenBatch& batch, float loss_scale,
                const GradientsReadyFn& on_gradients_ready) override;
  float optimizer_step(const AdamWSettings& settings, int64_t step) override;
  // ZeRO-1 (EngineOptions::optimizer_shard): AdamW m and v exist for the
  // shard only; the shard's master and bf16 parameters are updated, and the
  // caller all-gathers the master and calls refresh_working_parameters.
  double gradient_sum_of_squares(int64_t begin, int64_t end) override;
  void optimizer_step_shard(const AdamWSettings& settings, int64_t step, double global_norm) override;
  OptimizerShard optimizer_shard() const override { return shard_; }

  double take_compute_seconds() override;
  void set_compute_timing(bool on) override;
  bool set_op_timing(bool on) override {
    op_timer_.set_enabled(on);
    return true;
  }
  std::vector<OpTime> take_op_times() override { return op_timer_.take(); }
  void synchronize() override;
  double measure_gemm_flops(int64_t m, int64_t n, int64_t k, double seconds) override;
  double datasheet_peak_flops_per_s() const override { return datasheet_peak_; }
  void* allocate_host(size_t bytes) override;
  void release_host(void* memory) override;

  // "master_fp32", "params_bf16", "adam_m", "adam_v" (m and v of this
  // rank's optimizer shard; without padding) (under LoRA:
  // "base_bf16" when asked for, "lora_fp32", "lora_bf16", "adam_m",
  // "adam_v"). The copy runs on its
  // own stream after the compute work issued so far; the next optimizer step
  // (and set_parameters, init_parameters, restore_state) orders the compute
  // stream after it on the device, so forward and backward overlap it.
  std::vector<StateTensor> state_tensors() const override;
  using TrainingEngine::begin_state_copy;  // the whole-tensor form
  void begin_state_copy(const std::vector<StateCopyPart>& parts) override;
  double wait_state_copy() override;
  void restore_state(const std::vector<const void*>& sources) override;

 private:
  struct LayerWeights {
    bf16 *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
  };
  struct LayerGrads {  // null when the tensor is frozen
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
  };
  // One LoRA adapter (kernels/cpu's twin): bf16 A and B, fp32 gradients, and
  // h = x·Aᵀ [N, rank] (unscaled; alpha/rank goes into the GEMMs) for backward.
  struct LoraAdapter {
    bf16 *a = nullptr, *b = nullptr, *h = nullptr;
    float *d_a = nullptr, *d_b = nullptr;
    int64_t in = 0, out = 0;
  };
  void lora_forward(int64_t layer, ParamKind target, const bf16* x, bf16* y);
  void lora_backward(int64_t layer, ParamKind target, const bf16* dy, const bf16* x, bf16* dx);
  // The fp32 master copy exists for trainable parameters only under LoRA (the
  // frozen base lives in bf16 alone): master element of parameter offset o.
  int64_t master_offset(int64_t parameter_offset) const { return parameter_offset - master_begin_; }

  template <typename T>
  T* param_view(T* base, ParamKind kind, int64_t layer = -1) const;
  float* grad_view(ParamKind kind, int64_t layer = -1) const;
  LayerWeights layer_weights(int64_t layer) const;
  LayerGrads layer_grads(int64_t layer) const;
  void assign_views();
  void upload_tokens(const TokenBatch& batch);
  // GEMM helpers in the CPU ops' terms (row-major, [out, in] weights). The
  // output (and d_out) rows are out_stride elements apart: out_dim when 0,
  // the padded logits_stride() for the logits.
  void matmul_forward(bf16* out, const bf16* in, const bf16* weight, int64_t n, int64_t in_dim,
                      int64_t out_dim, int64_t out_stride = 0);
  void matmul_backward(bf16* d_in, float* d_weight, const bf16* d_out, const bf16* in,
                       const bf16* weight, int64_t n, int64_t in_dim, int64_t out_dim,
                       bool accumulate_d_in, int64_t out_stride = 0);
  // The logits' row length in memory: vocab rounded up to 64 elements.
  int64_t logits_stride() const;
  // The LM head as its GEMMs read it: lm_head_rows_ × d_model bf16, the rows
  // past vocab zero (the padded copy, which refresh_lm_head_copy fills from
  // the parameters at each forward); the parameters' own view when vocab is
  // a multiple of 64.
  void refresh_lm_head_copy();
  const bf16* lm_head_weights() const;
  // Element offsets of head h's views in sequence 0 (its rows of q, d_q and
  // the attention output; of its kv head's k and v; its T×T probabilities),
  // and how far each moves from one sequence to the next: attention runs as
  // one strided-batched GEMM per head over the micro-batch.
  struct HeadOffsets {
    int64_t q, kv, probs;
  };
  HeadOffsets head_offsets(int64_t h) const;
  HeadOffsets sequence_strides() const;
  // Picks the attention kernels (options_.attention) before anything is
  // sized: builds cuDNN's SDPA graphs, or says in attention_info_ why not.
  void choose_attention();
  // The constructor's work after the device is selected (select_device, in
  // the initialiser list): streams, events, the attention choice, the memory
  // check and every allocation.
  void create_streams_and_state();
  // The destructor's work, also run when the constructor throws.
  void release_cuda_objects() noexcept;
  // Throws (exit 3 through the CLI) when the plan for the chosen attention
  // exceeds the GPU's free memory: needed vs free and what to lower.
  void check_plan_fits_free_memory() const;
  float attention_scale() const;
  void attention_forward(const LayerActivations& a);
  void attention_backward(const LayerActivations& a);
  // AdamW over this engine's optimizer shard (all of the gradients without
  // ZeRO-1) on the compute stream, the gradients scaled by scratch_.grad_scale.
  void adamw_over_shard(const AdamWSettings& settings, int64_t step);
  // Starts the next kind of op for report.op_times (nothing when off).
  void mark(OpKind op) { op_timer_.mark(op, compute_stream_); }
  // Brackets device work with events for compute_s.
  void begin_compute();
  void end_compute();
  // Device pointers behind state_tensors(), in its order.
  std::vector<void*> state_buffers() const;
  // Makes the compute stream wait for the state copy begun last, once, before
  // work that writes the parameters or the optimizer state.
  void order_after_state_copy();
  // Makes the compute stream wait for zero_gradients' memset, once, before
  // work that reads or writes the gradients.
  void order_after_gradient_zeroing() const;

  EngineOptions options_;
  ModelShape shape_;
  ParameterLayout layout_;
  int64_t micro_batch_;
  int device_ = 0;
  double datasheet_peak_ = 0.0;

  cudaStream_t compute_stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t tokens_ready_ = nullptr;  // copy stream → compute stream
  cudaEvent_t tokens_free_ = nullptr;   // compute stream done with the device tokens
  cudaEvent_t losses_ready_ = nullptr;
  // Checkpoint snapshots (begin_state_copy) run on their own stream, not on
  // copy_stream_: the next step's token upload runs there, and it must not
  // queue behind a device-to-host copy of several GB.
  cudaStream_t state_copy_stream_ = nullptr;
  cudaEvent_t state_copy_start_ = nullptr;  // compute stream → state-copy stream
  cudaEvent_t state_copy_done_ = nullptr;   // state-copy stream → compute stream, host
  bool state_copy_in_flight_ = false;       // begun, and the host has not waited for it
  bool compute_waits_for_state_copy_ = false;  // the compute stream is not yet ordered after it
  // zero_gradients' memset runs on its own stream, alongside the forward that
  // follows it (which does not touch the gradients): 7.7 GB at Llama-3-8B's
  // 4 layers, ~2 ms a step off the compute stream. It starts once the compute
  // stream is done with the gradients (gradients_released_); the first work
  // that touches them again waits for gradients_zeroed_
  // (order_after_gradient_zeroing).
  cudaStream_t gradient_zero_stream_ = nullptr;
  cudaEvent_t gradients_released_ = nullptr;  // compute stream → zero stream
  cudaEvent_t gradients_zeroed_ = nullptr;    // zero stream → compute stream
  // mutable: get_gradients (const) orders itself after the memset too.
  mutable bool gradient_zeroing_pending_ = false;  // the compute stream is not yet ordered after it
  std::vector<cudaEvent_t> timing_events_;  // start/stop pairs of this step
  size_t timing_used_ = 0;
  bool compute_timing_ = true;  // set_compute_timing
  // record_compute_event's ring (kComputeEventRing events, no timing).
  std::vector<cudaEvent_t> compute_ready_events_;
  size_t next_compute_ready_event_ = 0;

  OpTimer op_timer_;
  LtGemm gemm_;
  DeviceBuffer<bf16> params_, activations_, scratch_bf16_;
  DeviceBuffer<float> master_, grads_, adam_m_, adam_v_, activation_stats_, scratch_fp32_;
  DeviceBuffer<double> scratch_fp64_;
  DeviceBuffer<int32_t> tokens_;  // inputs then targets, [2, N]
  PinnedBuffer<int32_t> tokens_staging_;
  PinnedBuffer<float> losses_host_;
  PinnedBuffer<float> grad_norm_host_;
  PinnedBuffer<double> sum_sq_host_;  // ZeRO-1's sums of squares, each way
  // ZeRO-1: adam_m_ and adam_v_ cover gradient elements [shard_.begin, shard_.end).
  EngineOptions::OptimizerShard shard_;

  // The padded vocabulary (engine_sizes.h): the head's GEMM rows and
  // its zero-padded bf16 copy (empty when vocab is a multiple of 64).
  int64_t lm_head_rows_ = 0;
  DeviceBuffer<bf16> lm_head_padded_;

  // cuDNN's fused SDPA and its workspace; null when attention runs as GEMMs.
  std::unique_ptr<CudnnAttention> fused_attention_;
  DeviceBuffer<unsigned char> attention_workspace_;
  AttentionInfo attention_info_;

  std::vector<LayerActivations> layer_acts_;
  std::vector<std::vector<LoraAdapter>> lora_;  // [layer][lora_target_slot]
  int64_t master_begin_ = 0;  // LoRA: layout().base_params(); else 0
  FinalActivations final_acts_{};
  Scratch scratch_{};
  std::vector<int64_t> grad_ready_from_layer_;
  int64_t grad_ready_from_head_ = 0;
  const int32_t* staged_inputs_ = nullptr;  // the host batch now on the device
  int64_t token_groups_ = 0;                 // groups of the staged inputs (tokens_ after 2·n)
  std::vector<int32_t> token_group_scratch_;  // vocab entries for group_rows_by_token
  bool logits_valid_ = false;
  bool losses_recorded_ = false;  // losses_ready_ has been recorded by a forward
};

}  // namespace trainbench::cuda
