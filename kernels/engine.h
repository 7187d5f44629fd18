// The one interface the trainer drives, whatever the backend: a model whose
// parameters, gradients and optimizer state live in flat buffers laid out by
// ParameterLayout, trained by forward / backward / optimizer_step calls.
//
// kernels/cpu implements it in fp32 with OpenBLAS; kernels/cuda (bf16 weights,
// fp32 master weights) implements the same calls, so trainer/ never branches on
// the backend. Parameter and gradient exchange with the host is always fp32 in
// the ParameterLayout order.
#pragma once

#include <cstdlib>     // std::aligned_alloc for allocate_host
#include <cstdint>     // int64_t
#include <functional>  // GradientsReadyFn
#include <memory>      // std::unique_ptr from make_engine
#include <stdexcept>   // std::invalid_argument from check_batch(_shape)
#include <string>      // EngineOptions::device
#include <utility>     // std::pair in check_batch
#include <vector>      // EngineOptions::frozen

#include "kernels/model_shape.h"  // ModelShape, ParameterLayout

namespace trainbench {

// One micro-batch of token ids, row-major [batch, seq_len], in host memory.
// targets[i] is the token that follows inputs[i].
struct TokenBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
  int64_t batch = 0;
  int64_t seq_len = 0;
};

// AdamW exactly as torch.optim.AdamW (decoupled decay, bias correction), with
// weight decay applied to matrices only and global-norm clipping first.
struct AdamWSettings {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables clipping
};

// Bytes each kind of state takes, computed before anything is allocated.
// parameter_bytes counts every copy of the parameters (on the CUDA engine the
// bf16 copy and the fp32 master weights); workspace_bytes the backward
// temporaries, reduction scratch and library workspaces.
struct MemoryPlan {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t total_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes +
           workspace_bytes;
  }
};

// Which attention an engine runs: kernel "gemm" or "cudnn-sdpa", and in
// detail the library version, or why the fused kernel is not running.
struct AttentionInfo {
  std::string kernel = "gemm";
  std::string detail;
};

// How an engine picks its GEMM algorithms: "openblas" (the cpu engine),
// "heuristic" (cuBLASLt's first choice per shape, the same on every run) or
// "timed" (the fastest of cuBLASLt's candidates, timed at each shape's first
// call; train.deterministic=false). detail says what the timing chose.
struct GemmInfo {
  std::string algorithms = "heuristic";
  std::string detail;
};

// Time per kind of op (report.op_times): "gemm", "attention", "norm", ...
struct OpTime {
  std::string op;
  double seconds = 0;
};

// One piece of an engine's resumable state (TrainingEngine::state_tensors).
struct StateTensor {
  std::string name;
  int64_t bytes = 0;
};

// For the engines' state calls: throws std::invalid_argument naming `call`
// unless there is one buffer per state tensor and every tensor with bytes
// has a non-null one.
template <typename Pointer>
void check_state_pointers(const char* call, const std::vector<StateTensor>& tensors,
                          const std::vector<Pointer>& pointers) {
  if (pointers.size() != tensors.size())
    throw std::invalid_argument(std::string(call) + ": " + std::to_string(pointers.size()) + " buffers for " +
                                std::to_string(tensors.size()) + " state tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    if (pointers[i] == nullptr && tensors[i].bytes > 0)
      throw std::invalid_argument(std::string(call) + ": no buffer for " + tensors[i].name);
}

// A part of one state tensor to copy out (TrainingEngine::begin_state_copy):
// its bytes [from, from + bytes) land at `destination`. A rank that writes
// a slice of the state every rank holds alike copies only that slice.
struct StateCopyPart {
  void* destination = nullptr;
  int64_t from = 0;
  int64_t bytes = 0;
};

// Throws std::invalid_argument naming `call` unless there is one part per
// state tensor, each inside its tensor, with a destination where it has bytes.
inline void check_state_parts(const char* call, const std::vector<StateTensor>& tensors,
                              const std::vector<StateCopyPart>& parts) {
  if (parts.size() != tensors.size())
    throw std::invalid_argument(std::string(call) + ": " + std::to_string(parts.size()) + " parts for " +
                                std::to_string(tensors.size()) + " state tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StateCopyPart& p = parts[i];
    if (p.from < 0 || p.bytes < 0 || p.bytes > tensors[i].bytes - p.from)
      throw std::invalid_argument(std::string(call) + ": bytes [" + std::to_string(p.from) + ", +" +
                                  std::to_string(p.bytes) + ") are not inside " + tensors[i].name + " (" +
                                  std::to_string(tensors[i].bytes) + " bytes)");
    if (p.destination == nullptr && p.bytes > 0)
      throw std::invalid_argument(std::string(call) + ": no buffer for " + tensors[i].name);
  }
}

// Called during backward each time a suffix of the gradient buffer is final
// for this micro-batch: gradient elements [ready_from, trainable_params) will
// not be written again. On a device backend the call comes from the host as
// soon as the work producing them is enqueued on the compute stream: a
// consumer on another stream orders itself after it with an event recorded on
// the compute stream at that moment. Backward runs from the LM head down to the embedding,
// and the gradient buffer is ordered embedding-first, so readiness always
// grows as a suffix — exactly what DDP-style reverse-order buckets need.
using GradientsReadyFn = std::function<void(int64_t ready_from)>;

// Throws std::invalid_argument unless the batch is [micro_batch, seq_len].
inline void check_batch_shape(const TokenBatch& batch, int64_t micro_batch, int64_t seq_len) {
  if (batch.batch != micro_batch || batch.seq_len != seq_len)
    throw std::invalid_argument("batch is [" + std::to_string(batch.batch) + ", " +
                                std::to_string(batch.seq_len) + "], engine expects [" +
                                std::to_string(micro_batch) + ", " + std::to_string(seq_len) + "]");
}
// check_batch_shape, and every input and target id in [0, vocab). An id
// outside it would read past the embedding or the logits row (on a GPU, with
// no fault); the loader checks the ids it decodes, this guards every other
// caller.
inline void check_batch(const TokenBatch& batch, int64_t micro_batch, int64_t seq_len, int64_t vocab) {
  check_batch_shape(batch, micro_batch, seq_len);
  const int64_t n = micro_batch * seq_len;
  for (const auto& [ids, name] : {std::pair{batch.inputs, "input"}, std::pair{batch.targets, "target"}}) {
    if (ids == nullptr) throw std::invalid_argument(std::string("batch has no ") + name + " ids");
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= vocab)
        throw std::invalid_argument(std::string(name) + " token " + std::to_string(ids[i]) + " at row " +
                                    std::to_string(i) + " is outside the vocabulary [0, " +
                                    std::to_string(vocab) + ")");
  }
}

// ZeRO-1: gradient elements [begin, end) whose optimizer state an engine
// keeps (EngineOptions::optimizer_shard); end = -1 there means all of them.
struct OptimizerShard {
  int64_t begin = 0;
  int64_t end = -1;
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  virtual const char* backend_name() const = 0;  // "cpu", "cuda"
  virtual const ModelShape& shape() const = 0;
  virtual const ParameterLayout& layout() const = 0;
  virtual int64_t micro_batch() const = 0;
  virtual MemoryPlan memory_plan() const = 0;
  virtual AttentionInfo attention() const = 0;
  // Asked at start-up and again after the run, when a timing engine has
  // timed the shapes it met.
  virtual GemmInfo gemm() const = 0;

  // Parameters (the fp32 master weights on a mixed-precision backend):
  // deterministic init from a seed (normal(0, 0.02) matrices,
  // output projections scaled by 1/sqrt(2·n_layers), norm weights 1), or an
  // fp32 copy in layout order (layout().total_params() elements).
  virtual void init_parameters(uint64_t seed) = 0;
  virtual void set_parameters(const float* host) = 0;
  virtual void get_parameters(float* host) const = 0;
  // Gradients of the trainable tensors (layout().trainable_params() elements).
  virtual void get_gradients(float* host) const = 0;
  // The flat gradient buffer itself when it lives in host memory (the CPU
  // engine), for a host-buffer communicator to reduce in place between
  // backward and optimizer_step; nullptr on a device backend.
  virtual float* host_gradient_buffer() { return nullptr; }
  // The host threads the engine computes with (the CPU engine's resolved
  // train.threads: its sums split by them); 0 for a device engine.
  virtual int cpu_threads() const { return 0; }
  // The same buffer when it lives in device memory (the CUDA engine), for a
  // device-buffer communicator (NCCL) to reduce in place on its own stream
  // between backward and optimizer_step; nullptr on a host backend.
  virtual float* device_gradient_buffer() { return nullptr; }
  // How a consumer on another device stream orders itself after the compute
  // work enqueued so far (GradientsReadyFn's contract): a cudaEventRecord on
  // the compute stream now, returned as a cudaEvent_t (void* keeps CUDA out of
  // this header) for cudaStreamWaitEvent, e.g. Communicator::
  // wait_for_device_event. The event belongs to the engine and comes from a
  // small ring: it keeps this recording until kComputeEventRing more calls,
  // so hand it on at once (cudaStreamWaitEvent captures it when called).
  // nullptr on a host backend, whose work is done when its call returns.
  static constexpr int kComputeEventRing = 8;
  virtual void* record_compute_event() { return nullptr; }
  // The fp32 master parameters (layout().total_params(), padded as
  // EngineOptions::pad_buffers_to says) when they live in host memory, for
  // ZeRO-1's all-gather; nullptr on a device backend.
  virtual float* host_parameter_buffer() { return nullptr; }
  // The same buffer when it lives in device memory (the CUDA engine's fp32
  // master weights), for ZeRO-1's all-gather on a device-buffer communicator;
  // nullptr on a host backend and where the engine keeps no fp32 master of
  // every parameter (LoRA's frozen base is bf16 only).
  virtual float* device_parameter_buffer() { return nullptr; }
  // After the master parameters were rewritten from outside (ZeRO-1's
  // all-gather into device_parameter_buffer, which completed before the
  // call), a mixed-precision engine rebuilds the working copy its forward
  // reads (bf16) from them. A no-op where the master is the working copy.
  virtual void refresh_working_parameters() {}

  // One training step is: zero_gradients, then per micro-batch forward +
  // backward (gradients accumulate), then optimizer_step.
  virtual void zero_gradients() = 0;
  virtual void forward(const TokenBatch& batch) = 0;
  // Mean cross-entropy of the last forward, before or after its backward
  // (waits for that forward on a device backend); std::logic_error before
  // the first forward.
  virtual float last_loss() = 0;
  // Logits of the last forward, [batch·seq_len, vocab]; valid only between a
  // forward and the following backward (backward turns them into dlogits).
  virtual void get_logits(float* host) const = 0;
  // Gradients of (loss_scale × mean loss of this micro-batch) are added.
  virtual void backward(const TokenBatch& batch, float loss_scale,
                        const GradientsReadyFn& on_gradients_ready) = 0;
  // Clips, updates, and returns the global gradient norm before clipping.
  // step counts from 1 (AdamW bias correction).
  virtual float optimizer_step(const AdamWSettings& settings, int64_t step) = 0;

  // ZeRO-1 (EngineOptions::optimizer_shard): the optimizer state exists for
  // this rank's shard of the gradient buffer only, and the step updates the
  // parameters of that shard, clipped by the global gradient norm that the
  // caller assembled from every rank's gradient_sum_of_squares of its shard.
  // Engines without it throw std::logic_error.
  virtual double gradient_sum_of_squares(int64_t begin, int64_t end);
  virtual void optimizer_step_shard(const AdamWSettings& settings, int64_t step, double global_norm);
  // The gradient elements whose optimizer state this engine keeps: all the
  // trainable ones ({0, trainable_params}) unless built for ZeRO-1.
  virtual OptimizerShard optimizer_shard() const { return {0, layout().trainable_params()}; }

  // Compute time (forward + backward + optimizer) accumulated since the
  // previous call, in seconds; device time on a device backend.
  virtual double take_compute_seconds() = 0;
  // Whether the engine times its compute (on by default). Off
  // (report.instrument=false) it takes no clock readings and records no
  // timing events, so that a run without instrumentation pays nothing for
  // it; take_compute_seconds then returns 0.
  virtual void set_compute_timing(bool on) = 0;
  // A breakdown of compute_s by kind of op (report.op_times): when on, the
  // engine times the intervals between its ops; take_op_times returns the
  // sums since the last call, in a fixed order. Off by default. An engine
  // without it returns false here and nothing there.
  virtual bool set_op_timing(bool /*on*/) { return false; }
  virtual std::vector<OpTime> take_op_times() { return {}; }
  // Blocks until all compute work issued so far has finished. A state copy
  // (begin_state_copy) is not waited for here: wait_state_copy does, and
  // measures that wait as the checkpoint's stall.
  virtual void synchronize() = 0;

  // GEMM throughput in FLOP/s of this backend's training precision for
  // [m, k] × [k, n] through the engine's own GEMM path, the best of repeats
  // over about `seconds`: the measured compute ceiling MFU is also reported against.
  // 0 when it cannot be measured (a GPU without the free memory for the operands).
  virtual double measure_gemm_flops(int64_t m, int64_t n, int64_t k, double seconds) = 0;

  // The device's datasheet dense peak in the training precision (bf16 on
  // H100/H200 SXM: 989e12), or 0 where there is none (CPUs, unknown GPUs).
  virtual double datasheet_peak_flops_per_s() const { return 0.0; }

  // --- Checkpoint state ---
  // The pieces of state a checkpoint must hold for a bit-exact resume, in a
  // fixed order with unique names: "master_fp32" (layout().total_params()
  // floats), "params_bf16" on a mixed-precision backend, and "adam_m",
  // "adam_v" for this rank's optimizer shard. Padding is not included.
  virtual std::vector<StateTensor> state_tensors() const = 0;
  // Starts copying parts of the state tensors into host memory (parts[i]
  // of state_tensors()[i]; check_state_parts) and returns at once. Forward
  // and backward may run while it copies: they do not write this state. The
  // next optimizer_step, optimizer_step_shard, set_parameters,
  // init_parameters or restore_state waits for the copy first. On a device
  // backend the copy runs on its own stream into the destinations, which
  // should come from allocate_host (page-locked) to run at link speed.
  virtual void begin_state_copy(const std::vector<StateCopyPart>& parts) = 0;
  // The same for every state tensor whole: destinations[i] receives
  // state_tensors()[i].bytes. Throws as check_state_pointers does.
  void begin_state_copy(const std::vector<void*>& destinations) {
    const std::vector<StateTensor> tensors = state_tensors();
    check_state_pointers("begin_state_copy", tensors, destinations);
    std::vector<StateCopyPart> parts;
    for (size_t i = 0; i < tensors.size(); ++i) parts.push_back({destinations[i], 0, tensors[i].bytes});
    begin_state_copy(parts);
  }
  // Blocks until the copy started last has landed in host memory; returns
  // the seconds it blocked (0 when no copy is in flight).
  virtual double wait_state_copy() = 0;
  // Replaces the state with host copies laid out as state_tensors()
  // (synchronous). Throws std::invalid_argument on a count mismatch.
  virtual void restore_state(const std::vector<const void*>& sources) = 0;

  // Host memory for the data loader's batch ring, which the trainer hands to
  // the loader. The CUDA engine returns page-locked memory, so host-to-device
  // copies run at full link speed; the default is plain 64-byte-aligned
  // memory. nullptr when the allocation fails.
  virtual void* allocate_host(size_t bytes) {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  }
  virtual void release_host(void* memory) { std::free(memory); }
};

struct EngineOptions {
  ModelShape shape;
  int64_t micro_batch = 1;
  std::string device = "cpu";  // "cpu" or "cuda" (resolved by the trainer from "auto")
  int threads = 0;             // CPU threads; 0 = the CPUs this process may use
  int gpu_index = 0;           // CUDA device (the trainer picks the rank's local rank)
  // Parameters that are not trained: no gradient, no optimizer state, no
  // weight-gradient GEMM; input gradients still flow.
  std::vector<ParamKind> frozen;
  // LoRA (train.mode lora): every base tensor frozen, adapters trained. The
  // state a checkpoint takes is then the adapters ("lora_fp32"), plus the
  // base only when lora_state_includes_base: "base_fp32" on the cpu engine,
  // "base_bf16" on the cuda engine (its frozen base is bf16 alone).
  LoraSpec lora;
  bool lora_state_includes_base = false;
  // ZeRO-1: gradient elements [begin, end) whose optimizer state this rank
  // keeps; end = -1 means all of them (no sharding).
  using OptimizerShard = trainbench::OptimizerShard;
  OptimizerShard optimizer_shard;
  // The host parameter and gradient buffers are allocated rounded up to a
  // multiple of this, the padding kept zero: ZeRO-1 reduce-scatters and
  // all-gathers them in `world` equal blocks whatever the model's size
  // (trainer/zero_optimizer.h, zero_padding_multiple).
  int64_t pad_buffers_to = 1;
  // Attention kernels of the cuda engine (train.attention): "auto" runs cuDNN's
  // fused SDPA where this build has it and cuDNN supports the shape on this
  // GPU, else cuBLASLt GEMMs around a causal softmax; "cudnn" fails instead of
  // falling back; "gemm" always takes the GEMMs. The cpu engine runs GEMMs.
  std::string attention = "auto";
  // Whether every kernel must repeat bit for bit (train.deterministic).
  // false lets cuDNN's attention backward sum dQ with atomics, as PyTorch's
  // SDPA backward does, and lets the cuda engine time cuBLASLt's candidate
  // algorithms per GEMM shape (each deterministic, but which one wins the
  // timing can differ between runs). Exact resume and the burn-in's golden
  // step need true; every other kernel is deterministic either way.
  bool deterministic = true;
};

// The parameter layout an engine with these options uses (frozen tensors applied).
ParameterLayout make_layout(const EngineOptions& options);

// Memory a backend would need for these options, without allocating.
// std::runtime_error when this build has no such backend.
MemoryPlan plan_engine_memory(const EngineOptions& options);

// The state tensors an engine of these options checkpoints, in its order
// (TrainingEngine::state_tensors), sized without allocating anything: the
// host memory a run's checkpoint staging takes (rank_staging_bytes), checked
// with the plan before the engine is built, and `trainbench plan`'s staging
// column. options.device picks the engine's layout ("cuda": the fp32 master
// and its bf16 copy, a LoRA base in bf16; else the cpu engine's fp32).
std::vector<StateTensor> planned_state_tensors(const EngineOptions& options);

// The CUDA engine's per-GPU memory for these options (device ignored), in
// any build: what `trainbench plan` prints. Where this build has the CUDA
// engine it is plan_engine_memory's; in a build without it, attention is
// assumed to be cuDNN's (as in a GPU build that found cuDNN) unless
// options.attention is "gemm" (cuda_plan_assumes_cudnn says so).
MemoryPlan plan_cuda_engine_memory(const EngineOptions& options);
// Whether plan_cuda_engine_memory assumes cuDNN attention without knowing
// it is built: true in a build without the CUDA engine.
bool cuda_plan_assumes_cudnn();
// Why the CUDA engine's plan for these options runs the GEMM attention
// (and keeps its B·H·T² probabilities) rather than cuDNN's fused one; ""
// when it plans cuDNN's. train.attention=gemm; a build without cuDNN
// attention; or a shape cuDNN refuses: its frontend's checks for sm_90 where
// it is built, else its documented limit (a head dimension that is a
// multiple of 8, at most 256). The plan assumed cuDNN for every shape, and
// a head dimension of 10 "fitted" in 46 GiB whose probabilities alone were
// 55 GB a layer.
std::string cuda_plan_attention_fallback(const EngineOptions& options);
// The shape part of it: why cuDNN's fused attention refuses these options'
// shape ("" when it takes it, or where this build has no cuDNN to ask). A
// run that asks for it (train.attention=cudnn) is refused with this before
// anything is allocated (exit 2); the plan counted the GEMM attention's
// memory for it and the engine threw once built.
std::string cudnn_attention_shape_refusal(const EngineOptions& options);

// The largest head dimension the CUDA engine runs: its RoPE kernel keeps a
// head's sines and cosines in shared memory (kernels/cuda/cuda_ops.cu).
constexpr int64_t kCudaMaxHeadDim = 512;
// What in `shape` the CUDA engine cannot run ("" when nothing), said before
// anything is allocated: `run` on the cuda engine and `plan` (exit 2). The
// engine's own check came at the first forward, after every allocation.
std::string cuda_engine_shape_problem(const ModelShape& shape);

// n rounded up to a multiple of `multiple` (n itself when multiple <= 1):
// the length of the buffers EngineOptions::pad_buffers_to pads.
int64_t padded_count(int64_t n, int64_t multiple);

// [begin, end) of the gradient buffer whose optimizer state an engine with
// these options keeps (end = -1 resolved to `trainable`). Throws
// std::invalid_argument when the shard lies outside the trainable parameters.
EngineOptions::OptimizerShard resolve_optimizer_shard(const EngineOptions& options, int64_t trainable);

// One piece of a trainable tensor inside an optimizer shard: gradient (and
// AdamW state) elements [lo, hi) of the flat gradient buffer, whose parameters
// start at `parameter`; `decay` says whether weight decay applies (matrices
// only — embeddings, projections, LM head — not norm gains, as GPT-2, llm.c
// and the Llama recipes do).
struct ShardPiece {
  int64_t lo, hi, parameter;
  bool decay;
};
// Every trainable tensor's part of [begin, end), in layout order: what an
// engine's optimizer step updates (the whole buffer without ZeRO-1).
// Neighbours contiguous in both the gradient and the parameter buffers with
// the same `decay` are merged into one piece (AdamW is elementwise, so the
// update is the same): one launch for a layer's q, k, v and o instead of four
// on the CUDA engine — 51 pieces instead of 111 tensors for GPT-2 small.
std::vector<ShardPiece> shard_pieces(const ParameterLayout& layout, int64_t begin, int64_t end);

// Creates the backend named by options.device. Throws std::runtime_error with
// a message naming what is missing when that backend was not built.
std::unique_ptr<TrainingEngine> make_engine(const EngineOptions& options);

// Backends compiled into this binary, e.g. "cpu" or "cpu,cuda".
std::string built_backends();

}  // namespace trainbench
