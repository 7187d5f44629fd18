// CpuEngine invariants that need no reference framework (libtorch comparisons
// are in tests/reference): initial loss, determinism, gradient readiness,
// accumulation, and that training reduces the loss.
#include <gtest/gtest.h>

#include <algorithm>  // std::copy
#include <cmath>
#include <stdexcept>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_engine.h"
#include "tests/support/token_batches.h"  // Tokens, random_tokens

namespace trainbench {
namespace {

using testing::random_tokens;
using testing::Tokens;

EngineOptions tiny_options() {
  EngineOptions o;
  o.shape.vocab = 97;
  o.shape.d_model = 32;
  o.shape.n_layers = 2;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.ffn_hidden = 48;
  o.shape.seq_len = 12;
  o.micro_batch = 3;
  o.threads = 2;
  return o;
}



TEST(CpuEngine, InitialLossIsNearLogVocab) {
  const EngineOptions o = tiny_options();
  cpu::CpuEngine engine(o);
  engine.init_parameters(1);
  const Tokens t = random_tokens(o, 11);
  engine.forward(t.batch(o));
  // Small initial weights give near-uniform predictions.
  EXPECT_NEAR(engine.last_loss(), std::log(static_cast<double>(o.shape.vocab)), 0.05);
}

TEST(CpuEngine, SameSeedAndBatchGiveBitIdenticalGradients) {
  const EngineOptions o = tiny_options();
  const Tokens t = random_tokens(o, 5);
  std::vector<std::vector<float>> grads;
  for (int run = 0; run < 2; ++run) {
    cpu::CpuEngine engine(o);
    engine.init_parameters(9);
    engine.zero_gradients();
    engine.forward(t.batch(o));
    engine.backward(t.batch(o), 1.0f, nullptr);
    grads.emplace_back(engine.layout().trainable_params());
    engine.get_gradients(grads.back().data());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(CpuEngine, GradientReadinessGrowsAsASuffixAndEndsAtZero) {
  const EngineOptions o = tiny_options();
  cpu::CpuEngine engine(o);
  engine.init_parameters(2);
  const Tokens t = random_tokens(o, 3);
  engine.zero_gradients();
  engine.forward(t.batch(o));
  std::vector<int64_t> ready;
  engine.backward(t.batch(o), 1.0f, [&](int64_t from) { ready.push_back(from); });
  // Head, one call per layer, embedding.
  ASSERT_EQ(ready.size(), static_cast<size_t>(o.shape.n_layers + 2));
  for (size_t i = 1; i < ready.size(); ++i) EXPECT_LT(ready[i], ready[i - 1]);
  EXPECT_EQ(ready.back(), 0);
  EXPECT_EQ(ready.front(), engine.layout().get(ParamKind::kFinalNorm).grad_offset);
  EXPECT_EQ(ready[1], engine.layout().get(ParamKind::kAttnNorm, o.shape.n_layers - 1).grad_offset);
}

TEST(CpuEngine, AccumulatedHalfBatchesEqualOneCall) {
  const EngineOptions o = tiny_options();
  const Tokens t = random_tokens(o, 21);
  cpu::CpuEngine engine(o);
  engine.init_parameters(4);
  const int64_t n = engine.layout().trainable_params();
  engine.zero_gradients();
  engine.forward(t.batch(o));
  engine.backward(t.batch(o), 1.0f, nullptr);
  std::vector<float> once(n), twice(n);
  engine.get_gradients(once.data());
  engine.zero_gradients();
  for (int i = 0; i < 2; ++i) {
    engine.forward(t.batch(o));
    engine.backward(t.batch(o), 0.5f, nullptr);
  }
  engine.get_gradients(twice.data());
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (once[i] - twice[i]) * (once[i] - twice[i]);
    norm += once[i] * once[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-6);
}

TEST(CpuEngine, RejectsABatchOfTheWrongShape) {
  const EngineOptions o = tiny_options();
  cpu::CpuEngine engine(o);
  const Tokens t = random_tokens(o, 1);
  TokenBatch wrong = t.batch(o);
  wrong.seq_len -= 1;
  EXPECT_THROW(engine.forward(wrong), std::invalid_argument);
}

TEST(CpuEngine, MemoryPlanMatchesTheAllocation) {
  const EngineOptions o = tiny_options();
  const MemoryPlan plan = cpu::plan_cpu_memory(o);
  const ParameterLayout layout(o.shape);
  EXPECT_EQ(plan.parameter_bytes, 4 * layout.total_params());
  EXPECT_EQ(plan.gradient_bytes, 4 * layout.trainable_params());
  EXPECT_EQ(plan.optimizer_bytes, 8 * layout.trainable_params());
  // probs alone: batch · heads · T² floats per layer.
  EXPECT_GE(plan.activation_bytes, 4 * o.micro_batch * o.shape.n_heads * o.shape.seq_len *
                                       o.shape.seq_len * o.shape.n_layers);
}

// ZeRO-1's pieces: two engines each owning half of the optimizer state, given
// the global norm, update exactly what one unsharded engine updates — split at
// an element inside a tensor, and with clipping off so the clip scale (the
// one input computed differently) cannot differ in its last bit.
TEST(CpuEngine, ShardedOptimizerStepsTogetherEqualTheFullStep) {
  EngineOptions full_options = tiny_options();
  const int64_t n = cpu::CpuEngine(full_options).layout().trainable_params();
  const int64_t split = n / 2 + 3;
  EngineOptions low = full_options, high = full_options;
  low.optimizer_shard = {0, split};
  high.optimizer_shard = {split, n};
  cpu::CpuEngine full(full_options), first(low), second(high);
  EXPECT_EQ(first.memory_plan().optimizer_bytes + second.memory_plan().optimizer_bytes,
            full.memory_plan().optimizer_bytes);
  AdamWSettings adam;
  adam.lr = 1e-2;
  adam.grad_clip = 0;
  for (cpu::CpuEngine* e : {&full, &first, &second}) e->init_parameters(4);
  for (int64_t step = 1; step <= 3; ++step) {
    const Tokens t = random_tokens(full_options, 40 + static_cast<uint32_t>(step));
    for (cpu::CpuEngine* e : {&full, &first, &second}) {
      e->zero_gradients();
      e->forward(t.batch(full_options));
      e->backward(t.batch(full_options), 1.0f, nullptr);
    }
    full.optimizer_step(adam, step);
    const double norm = std::sqrt(first.gradient_sum_of_squares(0, split) +
                                  second.gradient_sum_of_squares(split, n));
    first.optimizer_step_shard(adam, step, norm);
    second.optimizer_step_shard(adam, step, norm);
    // The all-gather: each shard's parameters from the engine that owns it.
    std::copy(second.host_parameter_buffer() + split, second.host_parameter_buffer() + n,
              first.host_parameter_buffer() + split);
    std::copy(first.host_parameter_buffer(), first.host_parameter_buffer() + n,
              second.host_parameter_buffer());
  }
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  full.get_parameters(want.data());
  first.get_parameters(got.data());
  EXPECT_EQ(got, want);
  EXPECT_THROW(first.optimizer_step(adam, 4), std::logic_error) << "a sharded engine has no full step";
}

TEST(CpuEngine, GemmCalibrationReportsAPositiveRate) {
  cpu::CpuEngine engine(tiny_options());
  const double flops = engine.measure_gemm_flops(64, 64, 64, 0.01);
  EXPECT_GT(flops, 1e6);  // any working CPU does a 64³ sgemm faster than 1 MFLOP/s
}

}  // namespace
}  // namespace trainbench

namespace trainbench {
namespace {

TEST(CpuEngineFrozen, FrozenTensorsGetNoGradientAndStayBitIdentical) {
  EngineOptions full = tiny_options();
  EngineOptions frozen = full;
  frozen.frozen = {ParamKind::kWq, ParamKind::kTokenEmbedding};
  const Tokens t = random_tokens(full, 17);

  cpu::CpuEngine full_engine(full), frozen_engine(frozen);
  full_engine.init_parameters(6);
  frozen_engine.init_parameters(6);
  const ParameterLayout& layout = frozen_engine.layout();
  EXPECT_EQ(layout.trainable_params(),
            full_engine.layout().trainable_params() - full.shape.n_layers * 32 * 32 - 97 * 32);
  EXPECT_LT(frozen_engine.memory_plan().optimizer_bytes, full_engine.memory_plan().optimizer_bytes);

  std::vector<float> full_grads(full_engine.layout().trainable_params());
  std::vector<float> frozen_grads(layout.trainable_params());
  for (TrainingEngine* e : {static_cast<TrainingEngine*>(&full_engine),
                            static_cast<TrainingEngine*>(&frozen_engine)}) {
    e->zero_gradients();
    e->forward(t.batch(full));
    e->backward(t.batch(full), 1.0f, nullptr);
  }
  full_engine.get_gradients(full_grads.data());
  frozen_engine.get_gradients(frozen_grads.data());
  // Freezing removes weight gradients only: every trainable tensor's gradient
  // is exactly what the fully trainable model computes.
  for (const ParamTensor& p : layout.tensors()) {
    if (!p.trainable) continue;
    const ParamTensor& same = full_engine.layout().get(p.kind, p.layer);
    for (int64_t i = 0; i < p.numel; ++i)
      ASSERT_EQ(frozen_grads[p.grad_offset + i], full_grads[same.grad_offset + i]) << p.name;
  }

  std::vector<float> before(layout.total_params()), after(layout.total_params());
  frozen_engine.get_parameters(before.data());
  frozen_engine.optimizer_step(AdamWSettings{}, 1);
  frozen_engine.get_parameters(after.data());
  for (const ParamTensor& p : layout.tensors()) {
    bool changed = false;
    for (int64_t i = 0; i < p.numel; ++i) changed |= before[p.offset + i] != after[p.offset + i];
    EXPECT_EQ(changed, p.trainable) << p.name;
  }
}

}  // namespace
}  // namespace trainbench
