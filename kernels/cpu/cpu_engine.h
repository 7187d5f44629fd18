// The fp32 CPU backend of TrainingEngine: OpenBLAS GEMMs, OpenMP loops, one
// allocation per kind of state (parameters, gradients, AdamW m and v,
// activations) with named views into each. It is the reference every CUDA
// kernel is tested against and the engine CPU-only machines train with.
#pragma once

#include <chrono>   // compute-time accounting
#include <cstdint>  // int64_t
#include <cstdlib>  // std::free for the aligned buffers
#include <memory>     // std::unique_ptr
#include <stdexcept>  // std::logic_error from last_loss
#include <thread>     // the state-copy thread
#include <vector>   // per-layer views

#include "kernels/engine.h"     // TrainingEngine, EngineOptions
#include "kernels/op_timing.h"  // HostOpTimer: report.op_times

namespace trainbench::cpu {

// A 64-byte aligned float array: one per kind of state.
struct AlignedFloats {
  std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
  int64_t count = 0;
  void allocate(int64_t n);
  float* get() const { return data.get(); }
};

// Activations one layer saves for its backward pass.
struct LayerActivations {
  float* residual_in;     // [N, D] the layer's input x
  float* attn_norm_out;   // [N, D]
  float* attn_rstd;       // [N]
  float* q;               // [N, q_dim] after RoPE
  float* k;               // [N, kv_dim] after RoPE
  float* v;               // [N, kv_dim]
  float* probs;           // [B, H, T, T]
  float* attn_out;        // [N, q_dim] before the output projection
  float* residual_mid;    // [N, D] x + attention
  float* mlp_norm_out;    // [N, D]
  float* mlp_rstd;        // [N]
  float* gate;            // [N, F]
  float* up;              // [N, F]
  float* swiglu_out;      // [N, F]
};
struct FinalActivations {
  float* residual_out;    // [N, D] the last layer's output
  float* norm_out;        // [N, D]
  float* rstd;            // [N]
  float* logits;          // [N, V]; dlogits after backward
  float* losses;          // [N]
  float* logsumexp;       // [N]
};
struct BackwardScratch {
  float* d_residual;      // [N, D] gradient flowing down the residual stream
  float* d_norm_out;      // [N, D]
  float* d_q;             // [N, q_dim]
  float* d_k;             // [N, kv_dim]
  float* d_v;             // [N, kv_dim]
  float* d_attn_out;      // [N, q_dim]
  float* d_swiglu;        // [N, F]
  float* d_gate;          // [N, F]
  float* d_up;            // [N, F]
  float* attention;       // attention_scratch_floats
  float* lora;            // [N, rank]: dy·B of one adapter
};

// Floats of the one activation buffer, for the memory plan and the allocation.
struct ActivationSizes {
  int64_t kept = 0;     // saved for backward: every layer's, the final ones, LoRA's h
  int64_t scratch = 0;  // backward temporaries, shared by all layers
  int64_t total() const { return kept + scratch; }
};

// The engine's views into its activation buffer, in carving order: what
// backward keeps, then its scratch. With a null base the carving only
// counts (sizes): the memory plan and the allocation take their sizes from
// it, and the engine assigns its views from the same carving, so the three
// cannot disagree.
struct CpuEngineViews {
  std::vector<LayerActivations> layers;
  FinalActivations final_acts{};
  BackwardScratch scratch{};
  std::vector<float*> lora_h;  // h = x·Aᵀ [N, rank] per adapter, in layout.lora_adapters() order
  ActivationSizes sizes;
};
CpuEngineViews carve_cpu_engine_views(const ModelShape& shape, const ParameterLayout& layout, int64_t micro_batch,
                                      int threads, float* base);
ActivationSizes activation_sizes(const ModelShape& shape, int64_t micro_batch, int threads,
                                 const LoraSpec& lora = {});
MemoryPlan plan_cpu_memory(const EngineOptions& options);

// Not final: a test stands it in for a device engine (test_data_parallel's
// ZeRO-1 on device buffers), reusing its arithmetic.
class CpuEngine : public TrainingEngine {
 public:
  explicit CpuEngine(const EngineOptions& options);
  ~CpuEngine() override;  // waits for an in-flight state copy

  const char* backend_name() const override { return "cpu"; }
  const ModelShape& shape() const override { return shape_; }
  const ParameterLayout& layout() const override { return layout_; }
  int64_t micro_batch() const override { return micro_batch_; }
  MemoryPlan memory_plan() const override { return plan_cpu_memory(options_); }
  AttentionInfo attention() const override { return AttentionInfo{"gemm", "OpenBLAS GEMMs per head"}; }
  GemmInfo gemm() const override { return GemmInfo{"openblas", "OpenBLAS sgemm, split across the threads"}; }

  void init_parameters(uint64_t seed) override;
  void set_parameters(const float* host) override;
  void get_parameters(float* host) const override;
  void get_gradients(float* host) const override;
  float* host_gradient_buffer() override { return grads_.get(); }
  int cpu_threads() const override { return threads_; }
  float* host_parameter_buffer() override { return params_.get(); }

  void zero_gradients() override;
  void forward(const TokenBatch& batch) override;
  float last_loss() override {
    if (!loss_computed_) throw std::logic_error("last_loss: no forward yet");  // as the CUDA engine
    return last_loss_;
  }
  void get_logits(float* host) const override;
  void backward(const TokenBatch& batch, float loss_scale,
                const GradientsReadyFn& on_gradients_ready) override;
  float optimizer_step(const AdamWSettings& settings, int64_t step) override;
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
  void synchronize() override {}
  double measure_gemm_flops(int64_t m, int64_t n, int64_t k, double seconds) override;

  // "master_fp32" (the parameters, without the ZeRO padding), "adam_m" and
  // "adam_v" (this rank's optimizer shard). The copy runs on its own thread
  // while forward and backward run on the OpenMP threads; whatever writes
  // the parameters or the optimizer state joins it first.
  std::vector<StateTensor> state_tensors() const override;
  using TrainingEngine::begin_state_copy;  // the whole-tensor form
  void begin_state_copy(const std::vector<StateCopyPart>& parts) override;
  double wait_state_copy() override;
  void restore_state(const std::vector<const void*>& sources) override;

 private:
  // Pointers of one layer's parameters (or their gradients; null when frozen).
  struct LayerWeights {
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w_gate, *w_up, *w_down;
  };
  // One LoRA adapter of one projection: its A and B, their gradients, and
  // h = x·Aᵀ [N, rank] saved for backward. Null a: not adapted.
  struct LoraAdapter {
    float *a = nullptr, *b = nullptr, *d_a = nullptr, *d_b = nullptr, *h = nullptr;
    int64_t in = 0, out = 0;
  };
  // y += scale · (x·Aᵀ)·Bᵀ for the adapter of `target` in `layer`, if any.
  void lora_forward(int64_t layer, ParamKind target, const float* x, float* y);
  // dB += scale · dyᵀ·h, dA += scale · (dy·B)ᵀ·x, dx += scale · (dy·B)·A.
  void lora_backward(int64_t layer, ParamKind target, const float* dy, const float* x, float* dx);

  LayerWeights layer_view(float* base, bool gradients, int64_t layer) const;
  float* tensor_view(float* base, bool gradients, ParamKind kind, int64_t layer = -1) const;
  void assign_activation_views();
  // The buffers behind state_tensors(), in its order.
  std::vector<float*> state_buffers() const;

  EngineOptions options_;
  ModelShape shape_;
  ParameterLayout layout_;
  int64_t micro_batch_;
  int threads_;

  AlignedFloats params_, grads_, adam_m_, adam_v_, activations_;
  // ZeRO-1: adam_m_ and adam_v_ cover gradient elements [shard_.begin, shard_.end).
  EngineOptions::OptimizerShard shard_;
  std::vector<LayerActivations> layer_acts_;
  std::vector<std::vector<LoraAdapter>> lora_;  // [layer][lora_target_slot]
  FinalActivations final_acts_{};
  BackwardScratch scratch_{};
  // grad_ready_from_[l]: first gradient element of layer l and everything after it.
  std::vector<int64_t> grad_ready_from_layer_;
  int64_t grad_ready_from_head_ = 0;  // final norm + LM head

  float last_loss_ = 0.0f;
  bool loss_computed_ = false;
  bool logits_valid_ = false;
  double compute_seconds_ = 0.0;
  bool compute_timing_ = true;
  HostOpTimer op_timer_;  // report.op_times: marks where each kind of op starts

  // The state copy begun last, joinable while it may still run. Only the
  // thread driving the engine starts and joins it.
  std::thread state_copy_;
};

}  // namespace trainbench::cpu
