// The whole CUDA engine (bf16 weights and activations, fp32 master weights and
// AdamW state) against the fp32 CPU engine, both built by make_engine from the
// same EngineOptions and started from the same seed (init_parameters_host makes
// the weights identical by construction): loss, logits and every gradient of one
// step; a 20-step AdamW loss trajectory; parameters after optimizer steps;
// gradient readiness; compute time and the memory plan; frozen tensors;
// ZeRO-1's sharded optimizer step against the full one;
// run-to-run determinism; the device gradients read by another stream after a
// compute event (the NCCL sync's hooks); and the checkpoint state (a copy
// overlapping the next step, a bit-exact resume). Without a GPU every test
// skips with the reason.
//
// Tolerances, as ‖cuda − cpu‖ / ‖cpu‖ computed in double, per tensor:
//   kLoss            2e-2  relative difference of the mean cross-entropy.
//   kLogits          3e-2  logits come out of L layers of bf16 activations (each
//                          rounding ≤ 2^-8 relative) and bf16 weight copies;
//                          the errors add up through the residual stream.
//   kGradient        5e-2  each trainable tensor's gradient: on top of the forward's
//                          bf16 activations, the activation gradients are bf16 too
//                          and flow back through all L layers, attention softmax and
//                          RMSNorm backward, so early layers see the most rounding.
//   kTrajectoryStep  5e-2  each of 20 AdamW steps' loss: small gradient differences
//                          move the two runs apart a little every step.
//   kParameters      1e-2  parameters after two AdamW steps (eps 1e-3, see the test):
//                          the fp32 masters start identical and the steps move the
//                          matrices by 3–15 % of their norm, so a few % error in
//                          the update stays under 1 % of the weights.
//   kUpdate          1e-1  the update itself (parameters after − before): with eps
//                          1e-3 it is a smooth function of the gradients, so its
//                          error is about the gradients' (≤ kGradient), doubled for
//                          the second step's drift. A wrong optimizer misses by ~1.
//   exact                  set_parameters/get_parameters round trip (fp32 masters),
//                          frozen tensors across optimizer_step, two CUDA runs.
#include <gtest/gtest.h>

#include <algorithm>  // std::count_if

#include <cmath>      // std::sqrt, std::fabs, std::isfinite
#include <cstdint>    // int32_t, int64_t
#include <cstdio>     // std::printf
#include <cstring>    // std::memcmp
#include <iterator>   // std::begin, std::end
#include <memory>     // std::unique_ptr
#include <new>        // std::bad_alloc from PinnedState
#include <random>     // std::mt19937 and distributions
#include <stdexcept>  // std::invalid_argument, std::logic_error
#include <string>
#include <vector>

#include <cuda_bf16.h>     // bf16-representable weights for the LoRA test
#include <cuda_runtime.h>  // a second stream reading the device gradients

#include "kernels/device_info.h"  // query_gpus: skip without a GPU
#include "kernels/engine.h"       // make_engine, TrainingEngine, EngineOptions
#include "tests/support/relative_error.h"  // relative_error
#include "tests/support/token_batches.h"   // Tokens, random_tokens

namespace trainbench {
namespace {

using testing::random_tokens;
using testing::relative_error;
using testing::Tokens;

constexpr double kLoss = 2e-2;
constexpr double kLogits = 3e-2;
constexpr double kGradient = 5e-2;
constexpr double kTrajectoryStep = 5e-2;
constexpr double kParameters = 1e-2;
constexpr double kUpdate = 1e-1;

constexpr int kTrajectorySteps = 20;
constexpr double kMinimumLossFall = 0.30;  // both engines' loss falls by at least 30%

// ---- shapes ----

// Multi-head attention (n_kv_heads == n_heads); seq_len 37 and a vocabulary
// that are not multiples of 8, so no kernel or GEMM can rely on padding.
EngineOptions multi_head_options(const std::string& device) {
  EngineOptions o;
  o.shape = ModelShape{.vocab = 263, .d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4,
                       .ffn_hidden = 176, .seq_len = 37};
  o.micro_batch = 3;
  o.device = device;
  return o;
}

// Grouped-query attention: 6 query heads share 2 KV heads.
EngineOptions gqa_options(const std::string& device) {
  EngineOptions o;
  o.shape = ModelShape{.vocab = 1001, .d_model = 96, .n_layers = 3, .n_heads = 6, .n_kv_heads = 2,
                       .ffn_hidden = 256, .seq_len = 37};
  o.micro_batch = 2;
  o.device = device;
  return o;
}

// Llama-like heads (head_dim 64, 4 query heads on 2 KV heads) at a length
// that is not a multiple of 64, with the attention kernels named: cuDNN's
// fused SDPA (train.attention=cudnn) and the GEMM path, each against the CPU.
EngineOptions llama_like_options(const std::string& device, const std::string& attention) {
  EngineOptions o;
  o.shape = ModelShape{.vocab = 515, .d_model = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                       .ffn_hidden = 512, .seq_len = 96};
  o.micro_batch = 2;
  o.device = device;
  o.attention = device == "cuda" ? attention : "auto";
  return o;
}
EngineOptions llama_like_cudnn_options(const std::string& device) { return llama_like_options(device, "cudnn"); }
EngineOptions llama_like_gemm_options(const std::string& device) { return llama_like_options(device, "gemm"); }
// cuDNN's fastest backward (train.deterministic=false), which sums dQ with atomics.
EngineOptions llama_like_cudnn_fast_options(const std::string& device) {
  EngineOptions o = llama_like_options(device, "cudnn");
  o.deterministic = false;
  return o;
}

// train.deterministic=false on the GEMM attention: every GEMM (projections,
// the strided-batched attention GEMMs, the accumulating ones) with its
// cuBLASLt candidates timed first; runs wherever cuDNN is not built too.
EngineOptions llama_like_gemm_timed_options(const std::string& device) {
  EngineOptions o = llama_like_options(device, "gemm");
  o.deterministic = false;
  return o;
}

EngineOptions on_device(EngineOptions o, const std::string& device) {
  o.device = device;
  return o;
}

// ---- host helpers ----

bool all_finite(const std::vector<float>& values) {
  for (float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

std::vector<float> gradients_of(const TrainingEngine& engine) {
  std::vector<float> grads(engine.layout().trainable_params());
  engine.get_gradients(grads.data());
  return grads;
}

std::vector<float> parameters_of(const TrainingEngine& engine) {
  std::vector<float> params(engine.layout().total_params());
  engine.get_parameters(params.data());
  return params;
}

// zero_gradients, forward, backward with loss scale 1; returns the loss.
float forward_backward(TrainingEngine& engine, const TokenBatch& batch,
                       const GradientsReadyFn& on_ready = nullptr) {
  engine.zero_gradients();
  engine.forward(batch);
  const float loss = engine.last_loss();
  engine.backward(batch, 1.0f, on_ready);
  return loss;
}

// Every trainable tensor's gradient, by name, within `tolerance`.
void expect_gradients_close(const TrainingEngine& cuda, const TrainingEngine& cpu,
                            double tolerance) {
  const std::vector<float> cuda_grads = gradients_of(cuda);
  const std::vector<float> cpu_grads = gradients_of(cpu);
  ASSERT_EQ(cuda_grads.size(), cpu_grads.size());
  for (const ParamTensor& p : cpu.layout().tensors()) {
    if (!p.trainable) continue;
    const double error =
        relative_error(cuda_grads.data() + p.grad_offset, cpu_grads.data() + p.grad_offset, p.numel);
    EXPECT_LE(error, tolerance) << "gradient of " << p.name;
  }
}

// Every tensor's parameters, by name, within `tolerance`.
void expect_parameters_close(const TrainingEngine& cuda, const TrainingEngine& cpu,
                             double tolerance) {
  const std::vector<float> cuda_params = parameters_of(cuda);
  const std::vector<float> cpu_params = parameters_of(cpu);
  ASSERT_EQ(cuda_params.size(), cpu_params.size());
  for (const ParamTensor& p : cpu.layout().tensors()) {
    const double error =
        relative_error(cuda_params.data() + p.offset, cpu_params.data() + p.offset, p.numel);
    EXPECT_LE(error, tolerance) << "parameters of " << p.name;
  }
}

// ---- fixtures ----

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuInventory inventory = query_gpus();
    if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
    gpu_memory_bytes_ = inventory.gpus.front().memory_bytes;
  }
  int64_t gpu_memory_bytes_ = 0;
};

struct ShapeCase {
  const char* name;
  EngineOptions (*options)(const std::string& device);
};

class CudaEngineVsCpu : public ::testing::TestWithParam<ShapeCase> {
 protected:
  void SetUp() override {
    const GpuInventory inventory = query_gpus();
    if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  }
};

// ---- the whole model, one step ----

TEST_P(CudaEngineVsCpu, LossLogitsAndEveryGradientMatchTheCpuEngine) {
  const EngineOptions cuda_options = GetParam().options("cuda");
  const EngineOptions cpu_options = GetParam().options("cpu");
  if (cuda_options.attention == "cudnn" && cudnn_attention_build_info().empty())
    GTEST_SKIP() << "this build has no cuDNN attention (cuDNN or the frontend headers were not found)";
  std::unique_ptr<TrainingEngine> cuda = make_engine(cuda_options);
  if (cuda_options.attention != "auto") {
    ASSERT_EQ(cuda->attention().kernel, cuda_options.attention == "cudnn" ? "cudnn-sdpa" : "gemm")
        << cuda->attention().detail;
  }
  if (cuda->attention().kernel == "cudnn-sdpa") {
    // The detail says which backward runs: the report carries it.
    EXPECT_NE(cuda->attention().detail.find(cuda_options.deterministic ? "deterministic backward" : "fastest backward"),
              std::string::npos)
        << cuda->attention().detail;
  }
  // train.deterministic=false also times cuBLASLt's candidates per shape.
  EXPECT_EQ(cuda->gemm().algorithms, cuda_options.deterministic ? "heuristic" : "timed") << cuda->gemm().detail;
  std::unique_ptr<TrainingEngine> cpu = make_engine(cpu_options);
  ASSERT_STREQ(cuda->backend_name(), "cuda");
  ASSERT_EQ(cuda->layout().total_params(), cpu->layout().total_params());
  ASSERT_EQ(cuda->layout().trainable_params(), cpu->layout().trainable_params());
  cuda->init_parameters(7);
  cpu->init_parameters(7);
  // Same weights by construction: the fp32 masters are the CPU's parameters bit for bit.
  ASSERT_EQ(parameters_of(*cuda), parameters_of(*cpu));

  const Tokens t = random_tokens(cpu_options, 13);
  const int64_t logit_count = cpu_options.micro_batch * cpu_options.shape.seq_len *
                              cpu_options.shape.vocab;
  std::vector<float> cuda_logits(logit_count), cpu_logits(logit_count);
  for (TrainingEngine* e : {cuda.get(), cpu.get()}) {
    e->zero_gradients();
    e->forward(t.batch(cpu_options));
  }
  cuda->get_logits(cuda_logits.data());
  cpu->get_logits(cpu_logits.data());
  const float cuda_loss = cuda->last_loss(), cpu_loss = cpu->last_loss();
  for (TrainingEngine* e : {cuda.get(), cpu.get()}) e->backward(t.batch(cpu_options), 1.0f, nullptr);

  ASSERT_TRUE(std::isfinite(cuda_loss)) << "cuda loss";
  EXPECT_LE(std::fabs(static_cast<double>(cuda_loss) - cpu_loss) / std::fabs(cpu_loss), kLoss)
      << "loss: cuda " << cuda_loss << ", cpu " << cpu_loss;
  ASSERT_TRUE(all_finite(cuda_logits)) << "logits";
  EXPECT_LE(relative_error(cuda_logits.data(), cpu_logits.data(), logit_count), kLogits)
      << "logits";
  expect_gradients_close(*cuda, *cpu, kGradient);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaEngineVsCpu,
                         ::testing::Values(ShapeCase{"MultiHead", multi_head_options},
                                           ShapeCase{"GroupedQuery", gqa_options},
                                           ShapeCase{"LlamaLikeCudnnAttention", llama_like_cudnn_options},
                                           ShapeCase{"LlamaLikeCudnnFastBackward", llama_like_cudnn_fast_options},
                                           ShapeCase{"LlamaLikeGemmAttention", llama_like_gemm_options},
                                           ShapeCase{"LlamaLikeGemmAttentionTimedGemms",
                                                     llama_like_gemm_timed_options}),
                         [](const ::testing::TestParamInfo<ShapeCase>& info) {
                           return std::string(info.param.name);
                         });

// ---- LoRA ----

// LoRA on every projection of the grouped-query shape: the CUDA adapters'
// gradients against the CPU's, then ten AdamW steps after which the bf16 base
// on the GPU is bit-identical and the adapters follow the CPU's. The weights
// start bf16-representable (the GPU keeps the frozen base in bf16 only) and B
// non-zero (B = 0 would leave A's gradient zero and the adapters unchecked).
TEST_F(CudaEngineTest, LoraAdaptersMatchTheCpuEngineAndTheBaseStaysFrozen) {
  EngineOptions options = gqa_options("cuda");
  options.lora = LoraSpec{4, 8.0, {std::begin(kLoraTargetKinds), std::end(kLoraTargetKinds)}};
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  std::unique_ptr<TrainingEngine> cpu = make_engine(on_device(options, "cpu"));
  ASSERT_EQ(cuda->layout().trainable_params(), cpu->layout().trainable_params());
  ASSERT_LT(cuda->memory_plan().parameter_bytes, 3 * cuda->layout().total_params())
      << "the frozen base must have no fp32 copy on the GPU";
  cpu->init_parameters(5);
  std::vector<float> weights = parameters_of(*cpu);
  std::mt19937 rng(8);
  std::normal_distribution<float> b_values(0.0f, 0.05f);
  for (const ParamTensor& t : cpu->layout().tensors())
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      if (t.kind == ParamKind::kLoraB) weights[i] = b_values(rng);
      weights[i] = __bfloat162float(__float2bfloat16(weights[i]));
    }
  cuda->set_parameters(weights.data());
  cpu->set_parameters(weights.data());
  ASSERT_EQ(parameters_of(*cuda), weights) << "bf16-representable weights round-trip exactly";

  const Tokens t = random_tokens(options, 17);
  const float cuda_loss = forward_backward(*cuda, t.batch(options));
  const float cpu_loss = forward_backward(*cpu, t.batch(options));
  EXPECT_LE(std::fabs(static_cast<double>(cuda_loss) - cpu_loss) / cpu_loss, kLoss);
  expect_gradients_close(*cuda, *cpu, kGradient);

  AdamWSettings adamw;
  adamw.lr = 1e-3;
  // kParameters' setting (the table above): with eps 1e-8 an adapter element
  // whose gradient is near zero takes a full lr step wherever bf16's noise
  // points, and ten steps of that reach 1e-2 on a correct engine.
  adamw.eps = 1e-3;
  for (int step = 1; step <= 10; ++step) {
    if (step > 1) {
      forward_backward(*cuda, t.batch(options));
      forward_backward(*cpu, t.batch(options));
    }
    ASSERT_TRUE(std::isfinite(cuda->optimizer_step(adamw, step))) << "step " << step;
    cpu->optimizer_step(adamw, step);
  }
  const std::vector<float> trained = parameters_of(*cuda);
  const int64_t base = cuda->layout().base_params();
  EXPECT_EQ(std::memcmp(trained.data(), weights.data(), sizeof(float) * base), 0)
      << "the frozen base changed on the GPU";
  expect_parameters_close(*cuda, *cpu, kParameters);
}

// ---- training ----

TEST_F(CudaEngineTest, TwentyStepLossTrajectoryFollowsTheCpuEngine) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  std::unique_ptr<TrainingEngine> cpu = make_engine(on_device(options, "cpu"));
  cuda->init_parameters(3);
  cpu->init_parameters(3);
  const Tokens t = random_tokens(options, 29);  // the same batch every step
  AdamWSettings adamw;
  adamw.lr = 1e-3;

  std::vector<float> cuda_losses, cpu_losses;
  for (int step = 1; step <= kTrajectorySteps; ++step) {
    cuda_losses.push_back(forward_backward(*cuda, t.batch(options)));
    cpu_losses.push_back(forward_backward(*cpu, t.batch(options)));
    const float cuda_norm = cuda->optimizer_step(adamw, step);
    const float cpu_norm = cpu->optimizer_step(adamw, step);
    ASSERT_TRUE(std::isfinite(cuda_losses.back())) << "cuda loss at step " << step;
    ASSERT_TRUE(std::isfinite(cuda_norm)) << "cuda gradient norm at step " << step;
    // The returned pre-clipping norm, checked where both runs still have the
    // same weights (later the two trajectories drift apart a little).
    if (step == 1) {
      EXPECT_LE(std::fabs(static_cast<double>(cuda_norm) - cpu_norm) / cpu_norm, kGradient)
          << "gradient norm: cuda " << cuda_norm << ", cpu " << cpu_norm;
    }
  }
  for (int i = 0; i < kTrajectorySteps; ++i)
    EXPECT_LE(std::fabs(static_cast<double>(cuda_losses[i]) - cpu_losses[i]) / cpu_losses[i],
              kTrajectoryStep)
        << "loss at step " << i + 1 << ": cuda " << cuda_losses[i] << ", cpu " << cpu_losses[i];
  const double cpu_fall = 1.0 - cpu_losses.back() / cpu_losses.front();
  const double cuda_fall = 1.0 - cuda_losses.back() / cuda_losses.front();
  EXPECT_GE(cpu_fall, kMinimumLossFall) << "cpu loss " << cpu_losses.front() << " -> "
                                        << cpu_losses.back();
  EXPECT_GE(cuda_fall, kMinimumLossFall) << "cuda loss " << cuda_losses.front() << " -> "
                                         << cuda_losses.back();
}

TEST_F(CudaEngineTest, ParametersAfterOptimizerStepsFollowTheCpuEngine) {
  const EngineOptions options = multi_head_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  std::unique_ptr<TrainingEngine> cpu = make_engine(on_device(options, "cpu"));
  cuda->init_parameters(5);
  cpu->init_parameters(5);
  const std::vector<float> initial = parameters_of(*cpu);
  AdamWSettings adamw;
  adamw.lr = 1e-3;
  // Adam divides each element by its own gradient magnitude: with eps 1e-8 an
  // element whose true gradient is ~0 takes a full lr step in whichever
  // direction bf16 rounding points it, and the comparison would measure the
  // sign of rounding noise (on the CPU, perturbing the gradients by 0.4 % already
  // moves w_down's parameters 0.9 % apart). eps 1e-3, about the size of a typical
  // gradient element here, keeps both the sqrt(v) and the eps term in play while
  // making the update a smooth function of the gradients.
  adamw.eps = 1e-3;
  for (int step = 1; step <= 2; ++step) {
    const Tokens t = random_tokens(options, 100 + step);
    forward_backward(*cuda, t.batch(options));
    forward_backward(*cpu, t.batch(options));
    cuda->optimizer_step(adamw, step);
    cpu->optimizer_step(adamw, step);
  }
  expect_parameters_close(*cuda, *cpu, kParameters);

  const std::vector<float> cuda_params = parameters_of(*cuda);
  const std::vector<float> cpu_params = parameters_of(*cpu);
  std::vector<float> cuda_update(initial.size()), cpu_update(initial.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    cuda_update[i] = cuda_params[i] - initial[i];
    cpu_update[i] = cpu_params[i] - initial[i];
  }
  for (const ParamTensor& p : cpu->layout().tensors())
    EXPECT_LE(relative_error(cuda_update.data() + p.offset, cpu_update.data() + p.offset, p.numel),
              kUpdate)
        << "update of " << p.name;
}

// ZeRO-1's pieces on the device (CpuEngine's twin test): two engines each
// owning part of the AdamW state — split inside a tensor, buffers padded to
// two blocks as comm.zero pads them — given the global norm from both
// shards' sums of squares, then "all-gathered" (each copies the other's
// block of fp32 master weights and rebuilds its bf16 copy), follow one
// unsharded engine bit for bit: the same kernels on the same elements, and a
// stale bf16 copy would change the next loss. Clipping off, so the clip
// scale (computed from norm² instead of the sum itself) cannot differ.
TEST_F(CudaEngineTest, ShardedOptimizerStepsTogetherEqualTheFullStep) {
  const EngineOptions full_options = gqa_options("cuda");
  const int64_t n = make_layout(full_options).trainable_params();
  const int64_t split = n / 2 + 3;
  EngineOptions low = full_options, high = full_options;
  low.optimizer_shard = {0, split};
  high.optimizer_shard = {split, n};
  low.pad_buffers_to = high.pad_buffers_to = 2;
  std::unique_ptr<TrainingEngine> full = make_engine(full_options);
  std::unique_ptr<TrainingEngine> first = make_engine(low);
  std::unique_ptr<TrainingEngine> second = make_engine(high);
  EXPECT_EQ(first->memory_plan().optimizer_bytes + second->memory_plan().optimizer_bytes,
            full->memory_plan().optimizer_bytes);
  ASSERT_NE(first->device_parameter_buffer(), nullptr);
  AdamWSettings adam;
  adam.lr = 1e-2;
  adam.grad_clip = 0;
  for (TrainingEngine* e : {full.get(), first.get(), second.get()}) e->init_parameters(4);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tokens t = random_tokens(full_options, 40 + static_cast<uint32_t>(step));
    std::vector<float> losses;
    for (TrainingEngine* e : {full.get(), first.get(), second.get()})
      losses.push_back(forward_backward(*e, t.batch(full_options)));
    EXPECT_EQ(std::memcmp(&losses[0], &losses[1], sizeof(float)), 0) << "step " << step;
    EXPECT_EQ(std::memcmp(&losses[0], &losses[2], sizeof(float)), 0) << "step " << step;
    const double full_norm = full->optimizer_step(adam, step);
    const double norm = std::sqrt(first->gradient_sum_of_squares(0, split) +
                                  second->gradient_sum_of_squares(split, n));
    EXPECT_NEAR(norm, full_norm, 1e-5 * full_norm) << "step " << step;
    first->optimizer_step_shard(adam, step, norm);
    second->optimizer_step_shard(adam, step, norm);
    // The all-gather: each block of the master weights from the engine that owns it.
    float* a = first->device_parameter_buffer();
    float* b = second->device_parameter_buffer();
    ASSERT_EQ(cudaMemcpy(a + split, b + split, sizeof(float) * (n - split), cudaMemcpyDeviceToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b, a, sizeof(float) * split, cudaMemcpyDeviceToDevice), cudaSuccess);
    // A device-to-device cudaMemcpy may return before it is done, and the
    // engines' streams do not wait for the legacy stream: the all-gather
    // must be complete before the refresh reads it (engine.h).
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    first->refresh_working_parameters();
    second->refresh_working_parameters();
  }
  const std::vector<float> want = parameters_of(*full);
  for (TrainingEngine* e : {first.get(), second.get()}) {
    const std::vector<float> got = parameters_of(*e);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0);
  }
  // The next forward reads the refreshed bf16 copy.
  const Tokens t = random_tokens(full_options, 50);
  const float want_loss = forward_backward(*full, t.batch(full_options));
  const float got_loss = forward_backward(*first, t.batch(full_options));
  EXPECT_EQ(std::memcmp(&want_loss, &got_loss, sizeof(float)), 0) << want_loss << " vs " << got_loss;
  EXPECT_THROW(first->optimizer_step(adam, 4), std::logic_error) << "a sharded engine has no full step";
}

// train.attention auto takes cuDNN's fused SDPA wherever this build has it
// and cuDNN supports the shape (Llama-like heads); its memory plan then
// holds no T² probabilities: less activation memory than the GEMM path's.
TEST_F(CudaEngineTest, AutoAttentionTakesCudnnWhereBuiltAndKeepsNoProbabilities) {
  if (cudnn_attention_build_info().empty())
    GTEST_SKIP() << "this build has no cuDNN attention (cuDNN or the frontend headers were not found)";
  std::unique_ptr<TrainingEngine> fused = make_engine(llama_like_options("cuda", "auto"));
  std::unique_ptr<TrainingEngine> gemm = make_engine(llama_like_options("cuda", "gemm"));
  ASSERT_EQ(fused->attention().kernel, "cudnn-sdpa") << fused->attention().detail;
  EXPECT_NE(fused->attention().detail.find("cuDNN 9."), std::string::npos) << fused->attention().detail;
  EXPECT_EQ(gemm->attention().kernel, "gemm");
  const EngineOptions o = llama_like_options("cuda", "gemm");
  const int64_t probs_bytes = 2 * o.micro_batch * o.shape.n_heads * o.shape.seq_len * o.shape.seq_len;
  const int64_t stats_bytes = 4 * o.micro_batch * o.shape.n_heads * o.shape.seq_len;
  EXPECT_EQ(fused->memory_plan().activation_bytes,
            gemm->memory_plan().activation_bytes - o.shape.n_layers * (probs_bytes - stats_bytes));
}

TEST_F(CudaEngineTest, SetAndGetParametersRoundTripExactly) {
  const EngineOptions options = multi_head_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  const int64_t count = cuda->layout().total_params();
  // fp32 values that bf16 cannot represent: an exact round trip proves the
  // engine keeps fp32 masters and returns them, not its bf16 copy.
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> written(count);
  for (float& v : written) v = normal(rng);
  cuda->set_parameters(written.data());
  std::vector<float> read(count, NAN);
  cuda->get_parameters(read.data());
  for (const ParamTensor& p : cuda->layout().tensors())
    EXPECT_EQ(std::memcmp(written.data() + p.offset, read.data() + p.offset,
                          sizeof(float) * p.numel), 0)
        << "parameters of " << p.name;

  // The bf16 copy follows set_parameters: the next forward uses the new weights,
  // as the CPU engine given the same weights does.
  std::unique_ptr<TrainingEngine> cpu = make_engine(on_device(options, "cpu"));
  cpu->set_parameters(written.data());
  const Tokens t = random_tokens(options, 31);
  cuda->forward(t.batch(options));
  cpu->forward(t.batch(options));
  EXPECT_LE(std::fabs(static_cast<double>(cuda->last_loss()) - cpu->last_loss()) /
                std::fabs(cpu->last_loss()),
            kLoss)
      << "loss after set_parameters: cuda " << cuda->last_loss() << ", cpu " << cpu->last_loss();
}

// ---- gradient readiness ----

TEST_F(CudaEngineTest, GradientReadinessIsTheCpuEnginesSequence) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  std::unique_ptr<TrainingEngine> cpu = make_engine(on_device(options, "cpu"));
  cuda->init_parameters(2);
  cpu->init_parameters(2);
  const Tokens t = random_tokens(options, 3);
  std::vector<int64_t> cuda_ready, cpu_ready;
  forward_backward(*cuda, t.batch(options), [&](int64_t from) { cuda_ready.push_back(from); });
  forward_backward(*cpu, t.batch(options), [&](int64_t from) { cpu_ready.push_back(from); });

  ASSERT_FALSE(cuda_ready.empty()) << "backward never reported gradients ready";
  for (size_t i = 1; i < cuda_ready.size(); ++i)
    EXPECT_LE(cuda_ready[i], cuda_ready[i - 1]) << "readiness call " << i << " went up";
  EXPECT_EQ(cuda_ready.back(), 0) << "the whole gradient buffer is final after backward";
  EXPECT_EQ(cuda_ready, cpu_ready);
}

// zero_gradients' memset runs on a stream of its own, alongside the next
// forward: every reader and writer of the gradients must still come after it
// (get_gradients, backward's accumulation, a stream waiting for
// record_compute_event), or the zeros race the old values.
TEST_F(CudaEngineTest, ZeroGradientsIsOrderedBeforeEveryUseOfTheGradients) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(6);
  const Tokens t = random_tokens(options, 9);
  const int64_t count = cuda->layout().trainable_params();
  forward_backward(*cuda, t.batch(options));
  const std::vector<float> first = gradients_of(*cuda);
  ASSERT_GT(std::count_if(first.begin(), first.end(), [](float g) { return g != 0.0f; }), count / 2);

  cuda->zero_gradients();  // no synchronize: the reads below must order themselves
  EXPECT_EQ(gradients_of(*cuda), std::vector<float>(static_cast<size_t>(count), 0.0f));

  // The same batch from zeros again: the same bits (an accumulation into
  // unfinished zeros would add the old gradients in).
  cuda->zero_gradients();
  cuda->forward(t.batch(options));
  cuda->backward(t.batch(options), 1.0f, nullptr);
  EXPECT_EQ(gradients_of(*cuda), first);

  // A device consumer ordered by record_compute_event right after the zeroing.
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> seen(static_cast<size_t>(count), 1.0f);
  cuda->zero_gradients();
  ASSERT_EQ(cudaStreamWaitEvent(consumer, static_cast<cudaEvent_t>(cuda->record_compute_event()), 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(seen.data(), cuda->device_gradient_buffer(), seen.size() * sizeof(float),
                            cudaMemcpyDeviceToHost, consumer),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(seen, std::vector<float>(static_cast<size_t>(count), 0.0f));
  EXPECT_EQ(cudaStreamDestroy(consumer), cudaSuccess);
}

// The hooks the NCCL gradient sync uses: device_gradient_buffer is the
// gradient buffer itself, and a stream that waits for record_compute_event's
// event, recorded right after backward is enqueued (the host has not waited
// for it), reads the finished gradients.
TEST_F(CudaEngineTest, DeviceGradientsAreReadCompleteByAStreamWaitingForAComputeEvent) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(4);
  const Tokens t = random_tokens(options, 5);
  const int64_t count = cuda->layout().trainable_params();
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  float* device_gradients = cuda->device_gradient_buffer();
  ASSERT_NE(device_gradients, nullptr);
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  void* pinned = nullptr;  // page-locked, so the copy below is asynchronous
  ASSERT_EQ(cudaMallocHost(&pinned, bytes), cudaSuccess);

  forward_backward(*cuda, t.batch(options));  // backward enqueued, not waited for
  void* event = cuda->record_compute_event();
  ASSERT_NE(event, nullptr);
  ASSERT_EQ(cudaStreamWaitEvent(consumer, static_cast<cudaEvent_t>(event), 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, device_gradients, bytes, cudaMemcpyDeviceToHost, consumer), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  std::vector<float> gradients(static_cast<size_t>(count));
  cuda->get_gradients(gradients.data());
  EXPECT_EQ(std::memcmp(pinned, gradients.data(), bytes), 0)
      << "the other stream read the gradients before backward had written them";
  // The ring: kComputeEventRing calls hand out distinct events, then repeat.
  std::vector<void*> ring;
  for (int i = 0; i < TrainingEngine::kComputeEventRing; ++i) ring.push_back(cuda->record_compute_event());
  for (int i = 0; i < TrainingEngine::kComputeEventRing; ++i)
    for (int j = 0; j < i; ++j) EXPECT_NE(ring[i], ring[j]);
  EXPECT_EQ(cuda->record_compute_event(), ring[0]);
  cuda->synchronize();
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(consumer), cudaSuccess);
}

// ---- accounting ----

// What the CPU engine does with the same calls: no loss before a forward
// (an unrecorded event reads as complete, and the pinned losses were never
// written), and an id outside the vocabulary refused before any copy.
TEST_F(CudaEngineTest, NoLossBeforeAForwardAndIdsOutsideTheVocabularyRefused) {
  const EngineOptions options = multi_head_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(1);
  EXPECT_THROW(cuda->last_loss(), std::logic_error);
  Tokens t = random_tokens(options, 8);
  t.targets.back() = static_cast<int32_t>(options.shape.vocab);
  EXPECT_THROW(cuda->forward(t.batch(options)), std::invalid_argument);
  t.targets.back() = 0;
  cuda->forward(t.batch(options));
  EXPECT_TRUE(std::isfinite(cuda->last_loss()));
}

TEST_F(CudaEngineTest, ComputeTimeIsPositiveAfterAStep) {
  const EngineOptions options = multi_head_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(1);
  cuda->take_compute_seconds();  // drop whatever set-up counted
  const Tokens t = random_tokens(options, 8);
  forward_backward(*cuda, t.batch(options));
  cuda->optimizer_step(AdamWSettings{}, 1);
  cuda->synchronize();
  const double seconds = cuda->take_compute_seconds();
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 60.0) << "one step of a tiny model";
}

// report.op_times: the intervals between the engine's ops tile its compute
// brackets, so they add up to compute_s; the step's main kinds are all there;
// off again, nothing is timed.
TEST_F(CudaEngineTest, OpTimesAddUpToTheComputeTime) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(1);
  ASSERT_TRUE(cuda->set_op_timing(true));
  cuda->take_compute_seconds();
  cuda->take_op_times();
  const Tokens t = random_tokens(options, 8);
  forward_backward(*cuda, t.batch(options));
  cuda->optimizer_step(AdamWSettings{}, 1);
  cuda->synchronize();
  const double compute = cuda->take_compute_seconds();
  double sum = 0;
  for (const OpTime& op : cuda->take_op_times()) {
    EXPECT_GE(op.seconds, 0.0) << op.op;
    const bool main_kind = op.op == "gemm" || op.op == "attention" || op.op == "norm" || op.op == "loss" ||
                           op.op == "optimizer" || op.op == "lm_head" || op.op == "embedding";
    if (main_kind) {
      EXPECT_GT(op.seconds, 0.0) << op.op;
    }
    sum += op.seconds;
  }
  EXPECT_NEAR(sum, compute, 0.05 * compute + 1e-5) << "ops " << sum << " s, compute " << compute << " s";
  ASSERT_TRUE(cuda->set_op_timing(false));
  forward_backward(*cuda, t.batch(options));
  cuda->synchronize();
  for (const OpTime& op : cuda->take_op_times()) EXPECT_EQ(op.seconds, 0.0) << op.op;
}

// report.instrument=false: no timing events at all (nothing measured, and
// the pair pool does not grow step after step), then timing on again.
TEST_F(CudaEngineTest, ComputeTimingOffRecordsNothingAndOnAgainMeasures) {
  const EngineOptions options = multi_head_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(1);
  const Tokens t = random_tokens(options, 8);
  cuda->set_compute_timing(false);
  for (int step = 1; step <= 3; ++step) {
    forward_backward(*cuda, t.batch(options));
    cuda->optimizer_step(AdamWSettings{}, step);
  }
  cuda->synchronize();
  EXPECT_EQ(cuda->take_compute_seconds(), 0.0);
  cuda->set_compute_timing(true);
  forward_backward(*cuda, t.batch(options));
  cuda->optimizer_step(AdamWSettings{}, 4);
  cuda->synchronize();
  EXPECT_GT(cuda->take_compute_seconds(), 0.0);
}

TEST_F(CudaEngineTest, MemoryPlanIsPositiveAndFitsTheGpu) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  const MemoryPlan plan = cuda->memory_plan();
  EXPECT_GT(plan.parameter_bytes, 0);
  EXPECT_GT(plan.gradient_bytes, 0);
  EXPECT_GT(plan.optimizer_bytes, 0);
  EXPECT_GT(plan.activation_bytes, 0);
  EXPECT_GT(plan.workspace_bytes, 0);
  EXPECT_LE(plan.total_bytes(), gpu_memory_bytes_);
  // fp32 masters and AdamW m and v at least, whichever kind the masters are counted under.
  const ParameterLayout& layout = cuda->layout();
  EXPECT_GE(plan.parameter_bytes + plan.optimizer_bytes,
            4 * layout.total_params() + 8 * layout.trainable_params());
  // The plan the trainer prints before allocating is the engine's: exactly
  // with GEMM attention; with cuDNN's, all but the workspace, which that plan
  // estimates before cuDNN's graphs exist (both printed, to judge the estimate).
  EngineOptions gemm_options = options;
  gemm_options.attention = "gemm";
  EXPECT_EQ(plan_engine_memory(gemm_options).total_bytes(), make_engine(gemm_options)->memory_plan().total_bytes());
  const MemoryPlan predicted = plan_engine_memory(options);
  if (cuda->attention().kernel == "cudnn-sdpa") {
    EXPECT_EQ(predicted.activation_bytes, plan.activation_bytes);
    EXPECT_EQ(predicted.parameter_bytes + predicted.gradient_bytes + predicted.optimizer_bytes,
              plan.parameter_bytes + plan.gradient_bytes + plan.optimizer_bytes);
    std::printf("workspace: planned %lld bytes, the engine's with cuDNN's own figure %lld\n",
                static_cast<long long>(predicted.workspace_bytes), static_cast<long long>(plan.workspace_bytes));
  }
}

// A plan larger than the GPU's free memory is refused before the engine
// allocates anything, with needed vs free and what to lower (exit 3 through
// the CLI), not a cudaMalloc failure partway.
TEST_F(CudaEngineTest, APlanLargerThanTheFreeMemoryIsRefusedBeforeAllocating) {
  EngineOptions options = gqa_options("cuda");
  options.attention = "gemm";
  // Each sequence adds 2 · 37 · 96 bf16 rows per layer and more: enough of
  // them outgrow any GPU without the plan's arithmetic overflowing.
  options.micro_batch = int64_t{1} << 26;
  try {
    make_engine(options);
    FAIL() << "an engine planned at " << plan_engine_memory(options).total_bytes() << " bytes was built";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("free of"), std::string::npos) << message;
    EXPECT_NE(message.find("train.micro_batch"), std::string::npos) << message;
    EXPECT_NE(message.find("attention gemm"), std::string::npos) << message;
  }
  // The refusal left the device usable: an engine that fits still builds.
  std::unique_ptr<TrainingEngine> cuda = make_engine(gqa_options("cuda"));
  cuda->init_parameters(1);
}

// ---- frozen tensors ----

TEST_F(CudaEngineTest, FrozenTensorGetsNoGradientAndStaysBitIdentical) {
  EngineOptions options = multi_head_options("cuda");
  options.frozen = {ParamKind::kWq};
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  std::unique_ptr<TrainingEngine> cpu = make_engine(on_device(options, "cpu"));
  const ParameterLayout& layout = cuda->layout();
  const ParameterLayout full_layout(options.shape);
  ASSERT_EQ(layout.trainable_params(),
            full_layout.trainable_params() -
                options.shape.n_layers * options.shape.q_dim() * options.shape.d_model);
  for (int64_t layer = 0; layer < options.shape.n_layers; ++layer) {
    EXPECT_FALSE(layout.get(ParamKind::kWq, layer).trainable);
    EXPECT_EQ(layout.get(ParamKind::kWq, layer).grad_offset, -1);
  }

  cuda->init_parameters(6);
  cpu->init_parameters(6);
  const Tokens t = random_tokens(options, 17);
  forward_backward(*cuda, t.batch(options));
  forward_backward(*cpu, t.batch(options));
  // Input gradients still flow through the frozen projection: every trainable
  // tensor's gradient is what the CPU engine with the same frozen set computes.
  expect_gradients_close(*cuda, *cpu, kGradient);

  const std::vector<float> before = parameters_of(*cuda);
  cuda->optimizer_step(AdamWSettings{}, 1);
  const std::vector<float> after = parameters_of(*cuda);
  for (const ParamTensor& p : layout.tensors()) {
    const bool unchanged = std::memcmp(before.data() + p.offset, after.data() + p.offset,
                                       sizeof(float) * p.numel) == 0;
    EXPECT_EQ(unchanged, !p.trainable) << "parameters of " << p.name
                                       << (p.trainable ? " did not move" : " moved");
  }
}

// ---- determinism ----

TEST_F(CudaEngineTest, SameSeedAndBatchGiveBitIdenticalGradientsAndLoss) {
  const EngineOptions options = gqa_options("cuda");
  const Tokens t = random_tokens(options, 5);
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  for (int run = 0; run < 2; ++run) {
    std::unique_ptr<TrainingEngine> cuda = make_engine(options);
    cuda->init_parameters(9);
    losses.push_back(forward_backward(*cuda, t.batch(options)));
    grads.push_back(gradients_of(*cuda));
  }
  EXPECT_EQ(std::memcmp(&losses[0], &losses[1], sizeof(float)), 0)
      << "loss " << losses[0] << " vs " << losses[1];
  const ParameterLayout layout = make_layout(options);
  for (const ParamTensor& p : layout.tensors()) {
    if (!p.trainable) continue;
    EXPECT_EQ(std::memcmp(grads[0].data() + p.grad_offset, grads[1].data() + p.grad_offset,
                          sizeof(float) * p.numel), 0)
        << "gradient of " << p.name;
  }
}

// ---- checkpoint state ----

// Page-locked host buffers from the engine (allocate_host) laid out as its
// state_tensors(), released through it.
class PinnedState {
 public:
  explicit PinnedState(TrainingEngine& engine) : engine_(engine), tensors_(engine.state_tensors()) {
    for (const StateTensor& t : tensors_) {
      buffers_.push_back(t.bytes > 0 ? engine.allocate_host(static_cast<size_t>(t.bytes)) : nullptr);
      if (t.bytes > 0 && buffers_.back() == nullptr) throw std::bad_alloc();
      if (t.bytes > 0) std::memset(buffers_.back(), 0xAB, static_cast<size_t>(t.bytes));
    }
  }
  ~PinnedState() {
    for (void* b : buffers_)
      if (b != nullptr) engine_.release_host(b);
  }
  PinnedState(const PinnedState&) = delete;
  PinnedState& operator=(const PinnedState&) = delete;

  const std::vector<StateTensor>& tensors() const { return tensors_; }
  const std::vector<void*>& destinations() const { return buffers_; }
  std::vector<const void*> sources() const {
    return std::vector<const void*>(buffers_.begin(), buffers_.end());
  }
  // Whether tensor i holds the same bytes as `other`'s tensor i.
  bool same(size_t i, const void* other) const {
    return tensors_[i].bytes == 0 ||
           std::memcmp(buffers_[i], other, static_cast<size_t>(tensors_[i].bytes)) == 0;
  }

 private:
  TrainingEngine& engine_;
  std::vector<StateTensor> tensors_;
  std::vector<void*> buffers_;
};

// One AdamW step on batch `seed`; returns the loss.
float train_step(TrainingEngine& engine, const EngineOptions& options, int step) {
  AdamWSettings adamw;
  adamw.lr = 1e-3;
  const Tokens t = random_tokens(options, 700 + static_cast<uint32_t>(step));
  const float loss = forward_backward(engine, t.batch(options));
  engine.optimizer_step(adamw, step);
  return loss;
}

// What a run checks the host memory of its checkpoint staging with before
// the engine is built (planned_state_tensors): the engine's own state
// tensors, for full training, a ZeRO-1 shard and LoRA with and without the
// base in the checkpoint.
TEST_F(CudaEngineTest, PlannedStateTensorsAreTheEnginesOwn) {
  const EngineOptions full = gqa_options("cuda");
  EngineOptions shard = full;
  shard.optimizer_shard = {100, 100 + 1234};
  EngineOptions lora = full;
  lora.lora = LoraSpec{4, 8.0, {std::begin(kLoraTargetKinds), std::end(kLoraTargetKinds)}};
  EngineOptions lora_with_base = lora;
  lora_with_base.lora_state_includes_base = true;
  for (const EngineOptions& options : {full, shard, lora, lora_with_base}) {
    const std::vector<StateTensor> planned = planned_state_tensors(options);
    const std::vector<StateTensor> own = make_engine(options)->state_tensors();
    ASSERT_EQ(planned.size(), own.size());
    for (size_t i = 0; i < own.size(); ++i) {
      EXPECT_EQ(planned[i].name, own[i].name) << i;
      EXPECT_EQ(planned[i].bytes, own[i].bytes) << own[i].name;
    }
  }
}

// The snapshot split of a checkpoint: the copy begins after a step, on its
// own stream; the next step's forward and backward are issued while it runs
// and its optimizer step waits for it on the device. What lands is the state
// as it was when the copy began.
TEST_F(CudaEngineTest, StateCopyOverlappingTheNextStepHoldsTheStateWhenItBegan) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  const ParameterLayout& layout = cuda->layout();
  const std::vector<StateTensor> tensors = cuda->state_tensors();
  ASSERT_EQ(tensors.size(), 4u);
  EXPECT_EQ(tensors[0].name, "master_fp32");
  EXPECT_EQ(tensors[0].bytes, 4 * layout.total_params());
  EXPECT_EQ(tensors[1].name, "params_bf16");
  EXPECT_EQ(tensors[1].bytes, 2 * layout.total_params());
  EXPECT_EQ(tensors[2].name, "adam_m");
  EXPECT_EQ(tensors[2].bytes, 4 * layout.trainable_params());
  EXPECT_EQ(tensors[3].name, "adam_v");
  EXPECT_EQ(tensors[3].bytes, 4 * layout.trainable_params());
  EXPECT_EQ(cuda->wait_state_copy(), 0.0) << "nothing in flight";
  EXPECT_THROW(cuda->begin_state_copy({nullptr}), std::invalid_argument);
  EXPECT_THROW(cuda->restore_state({nullptr}), std::invalid_argument);

  cuda->init_parameters(12);
  for (int step = 1; step <= 2; ++step) train_step(*cuda, options, step);
  for (int step = 3; step <= 5; ++step) {
    const std::vector<float> before = parameters_of(*cuda);
    PinnedState reference(*cuda);  // every tensor as it is now, copied synchronously
    cuda->begin_state_copy(reference.destinations());
    cuda->wait_state_copy();

    PinnedState async(*cuda);
    cuda->begin_state_copy(async.destinations());
    train_step(*cuda, options, step);
    EXPECT_GE(cuda->wait_state_copy(), 0.0);
    EXPECT_EQ(cuda->wait_state_copy(), 0.0) << "already waited for";

    const std::vector<float> after = parameters_of(*cuda);
    ASSERT_NE(after, before) << "the step did not change the parameters: the test would prove nothing";
    EXPECT_TRUE(async.same(0, before.data())) << "master_fp32 at step " << step;
    for (size_t i = 0; i < tensors.size(); ++i)
      EXPECT_TRUE(async.same(i, reference.destinations()[i]))
          << tensors[i].name << " at step " << step;
  }
}

// A rank stages only its slice of the state the ranks hold alike: a part of
// a tensor lands exactly where it is told, nothing around it touched, and
// equals those bytes of the whole tensor's copy.
TEST_F(CudaEngineTest, APartCopiesExactlyItsBytesOfItsTensor) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> cuda = make_engine(options);
  cuda->init_parameters(7);
  train_step(*cuda, options, 1);
  PinnedState whole(*cuda);
  cuda->begin_state_copy(whole.destinations());
  cuda->wait_state_copy();
  const std::vector<StateTensor> tensors = cuda->state_tensors();
  ASSERT_EQ(tensors[1].name, "params_bf16");
  const int64_t from = 4096, bytes = (tensors[1].bytes - from) / 2;
  ASSERT_GT(bytes, 0);
  unsigned char* landing = static_cast<unsigned char*>(cuda->allocate_host(static_cast<size_t>(bytes) + 2));
  ASSERT_NE(landing, nullptr);
  std::memset(landing, 0xEE, static_cast<size_t>(bytes) + 2);
  std::vector<StateCopyPart> parts(tensors.size());
  parts[1] = {landing + 1, from, bytes};
  cuda->begin_state_copy(parts);
  cuda->wait_state_copy();
  EXPECT_EQ(landing[0], 0xEE);
  EXPECT_EQ(landing[bytes + 1], 0xEE);
  EXPECT_EQ(std::memcmp(landing + 1, static_cast<const unsigned char*>(whole.destinations()[1]) + from,
                        static_cast<size_t>(bytes)),
            0);
  cuda->release_host(landing);
  parts[1] = {nullptr, 0, 0};
  parts[2] = {whole.destinations()[2], tensors[2].bytes - 4, 8};
  EXPECT_THROW(cuda->begin_state_copy(parts), std::invalid_argument) << "past the tensor's end";
}

// Engine A trains 3 steps and copies its state; engine B, started from other
// weights, restores the copy; 3 more identical steps on each give identical
// losses and bit-identical parameters, bf16 copy and moments.
TEST_F(CudaEngineTest, RestoredStateResumesBitExactly) {
  const EngineOptions options = gqa_options("cuda");
  std::unique_ptr<TrainingEngine> a = make_engine(options);
  std::unique_ptr<TrainingEngine> b = make_engine(options);
  a->init_parameters(1);
  b->init_parameters(2);
  for (int step = 1; step <= 3; ++step) train_step(*a, options, step);
  {
    PinnedState snapshot(*a);
    a->begin_state_copy(snapshot.destinations());
    a->wait_state_copy();
    b->restore_state(snapshot.sources());
  }
  for (int step = 4; step <= 6; ++step) {
    const float loss_a = train_step(*a, options, step);
    const float loss_b = train_step(*b, options, step);
    EXPECT_EQ(std::memcmp(&loss_a, &loss_b, sizeof(float)), 0)
        << "loss at step " << step << ": " << loss_a << " vs " << loss_b;
  }
  const std::vector<float> params_a = parameters_of(*a), params_b = parameters_of(*b);
  EXPECT_EQ(std::memcmp(params_a.data(), params_b.data(), sizeof(float) * params_a.size()), 0)
      << "parameters";
  PinnedState state_a(*a), state_b(*b);
  a->begin_state_copy(state_a.destinations());
  b->begin_state_copy(state_b.destinations());
  a->wait_state_copy();
  b->wait_state_copy();
  for (size_t i = 0; i < state_a.tensors().size(); ++i)
    EXPECT_TRUE(state_a.same(i, state_b.destinations()[i])) << state_a.tensors()[i].name;
}

}  // namespace
}  // namespace trainbench
