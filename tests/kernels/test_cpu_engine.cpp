// CpuEngine invariants that need no reference framework (libtorch comparisons
// are in tests/reference): initial loss, determinism, gradient readiness,
// accumulation, and that training reduces the loss; the checkpoint state
// (what it holds, a copy overlapping the next step, a bit-exact resume).
#include <gtest/gtest.h>

#include <algorithm>  // std::copy
#include <cmath>
#include <cstring>  // std::memcmp
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_engine.h"
#include "kernels/engine.h"  // planned_state_tensors
#include "kernels/op_timing.h"  // OpKind, op_kind_name
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

// Zeroing the gradients is a pass over all of them, each step: compute (it
// was untimed, and read as host overhead), under the optimizer's kind.
TEST(CpuEngine, ZeroingTheGradientsIsComputeTime) {
  const EngineOptions o = tiny_options();
  cpu::CpuEngine engine(o);
  ASSERT_TRUE(engine.set_op_timing(true));
  engine.take_compute_seconds();
  engine.take_op_times();
  engine.zero_gradients();
  const double compute = engine.take_compute_seconds();
  EXPECT_GT(compute, 0.0);
  const std::vector<OpTime> ops = engine.take_op_times();
  ASSERT_EQ(ops.size(), static_cast<size_t>(OpKind::kCount));
  const double zeroing = ops[static_cast<size_t>(OpKind::kOptimizer)].seconds;
  EXPECT_GT(zeroing, 0.0);
  EXPECT_LE(zeroing, compute);
}

// report.op_times on the cpu engine: marks with the host clock tile each
// engine call, so the kinds add up to compute_s; off, nothing is timed.
TEST(CpuEngine, OpTimesAddUpToTheComputeTime) {
  const EngineOptions o = tiny_options();
  cpu::CpuEngine engine(o);
  engine.init_parameters(1);
  ASSERT_TRUE(engine.set_op_timing(true));
  engine.take_compute_seconds();
  const Tokens t = random_tokens(o, 3);
  engine.zero_gradients();
  engine.forward(t.batch(o));
  engine.backward(t.batch(o), 1.0f, nullptr);
  engine.optimizer_step(AdamWSettings{}, 1);
  const double compute = engine.take_compute_seconds();
  const std::vector<OpTime> ops = engine.take_op_times();
  ASSERT_EQ(ops.size(), static_cast<size_t>(OpKind::kCount));
  double sum = 0;
  for (const OpTime& op : ops) {
    EXPECT_GE(op.seconds, 0.0) << op.op;
    sum += op.seconds;
  }
  for (OpKind kind : {OpKind::kGemm, OpKind::kLmHead, OpKind::kAttention, OpKind::kLoss, OpKind::kOptimizer})
    EXPECT_GT(ops[static_cast<size_t>(kind)].seconds, 0.0) << op_kind_name(kind);
  EXPECT_EQ(ops[static_cast<size_t>(OpKind::kAttention)].op, "attention");
  EXPECT_NEAR(sum, compute, 0.05 * compute) << "ops " << sum << " s, compute " << compute << " s";
  // Taken: the next take starts from zero; off: nothing is timed.
  for (const OpTime& op : engine.take_op_times()) EXPECT_EQ(op.seconds, 0.0) << op.op;
  engine.set_op_timing(false);
  engine.forward(t.batch(o));
  for (const OpTime& op : engine.take_op_times()) EXPECT_EQ(op.seconds, 0.0) << op.op;
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

// An id outside the vocabulary would index past the embedding or the logits
// row; the engines refuse it whichever of inputs or targets holds it.
TEST(CpuEngine, HasNoLossBeforeItsFirstForward) {
  cpu::CpuEngine engine(tiny_options());
  EXPECT_THROW(engine.last_loss(), std::logic_error);
}

TEST(CpuEngine, RejectsIdsOutsideTheVocabulary) {
  const EngineOptions o = tiny_options();
  cpu::CpuEngine engine(o);
  const Tokens t = random_tokens(o, 1);
  const int64_t n = o.micro_batch * o.shape.seq_len;
  for (const bool in_targets : {false, true}) {
    for (const int32_t bad : {static_cast<int32_t>(o.shape.vocab), -1}) {
      Tokens bad_tokens = t;
      (in_targets ? bad_tokens.targets : bad_tokens.inputs)[static_cast<size_t>(n - 1)] = bad;
      try {
        engine.forward(bad_tokens.batch(o));
        ADD_FAILURE() << "id " << bad << " in the " << (in_targets ? "targets" : "inputs") << " was taken";
      } catch (const std::invalid_argument& e) {
        const std::string expected = std::string(in_targets ? "target" : "input") + " token " +
                                     std::to_string(bad) + " at row " + std::to_string(n - 1) +
                                     " is outside the vocabulary [0, " + std::to_string(o.shape.vocab) + ")";
        EXPECT_EQ(e.what(), expected);
      }
    }
  }
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

// ---- checkpoint state ----

namespace trainbench {
namespace {

// Host buffers laid out as an engine's state_tensors().
struct HostState {
  std::vector<StateTensor> tensors;
  std::vector<std::vector<unsigned char>> bytes;
  explicit HostState(const TrainingEngine& engine) : tensors(engine.state_tensors()) {
    for (const StateTensor& t : tensors) bytes.emplace_back(static_cast<size_t>(t.bytes), 0xAB);
  }
  std::vector<void*> destinations() {
    std::vector<void*> out;
    for (auto& b : bytes) out.push_back(b.empty() ? nullptr : b.data());
    return out;
  }
  std::vector<const void*> sources() const {
    std::vector<const void*> out;
    for (const auto& b : bytes) out.push_back(b.empty() ? nullptr : b.data());
    return out;
  }
  const std::vector<unsigned char>& named(const std::string& name) const {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == name) return bytes[i];
    throw std::out_of_range("no state tensor " + name);
  }
};

// The state right now, copied synchronously.
HostState state_of(TrainingEngine& engine) {
  HostState image(engine);
  engine.begin_state_copy(image.destinations());
  engine.wait_state_copy();
  return image;
}

bool same_bytes(const std::vector<unsigned char>& a, const void* b, size_t bytes) {
  return a.size() == bytes && (bytes == 0 || std::memcmp(a.data(), b, bytes) == 0);
}

// A model big enough (about 3.4M parameters, 40 MB of state) that copying
// the state takes about as long as a forward and backward: an optimizer step
// that did not wait for the copy would overwrite state still being read.
EngineOptions medium_options() {
  EngineOptions o = tiny_options();
  o.shape.vocab = 4096;
  o.shape.d_model = 256;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 4;
  o.shape.ffn_hidden = 512;
  o.shape.seq_len = 16;
  o.micro_batch = 2;
  return o;
}

// One training step on batch `seed`; a sharded engine steps its shard with
// the norm of its own gradients (the test needs the same call on both sides,
// not the global norm). Returns the loss.
float train_step(cpu::CpuEngine& engine, const EngineOptions& o, int64_t step, bool sharded) {
  AdamWSettings adam;
  adam.lr = 1e-2;
  const Tokens t = random_tokens(o, 500 + static_cast<uint32_t>(step));
  engine.zero_gradients();
  engine.forward(t.batch(o));
  const float loss = engine.last_loss();
  engine.backward(t.batch(o), 1.0f, nullptr);
  if (sharded) {
    const int64_t begin = o.optimizer_shard.begin, end = o.optimizer_shard.end;
    engine.optimizer_step_shard(adam, step, std::sqrt(engine.gradient_sum_of_squares(begin, end)));
  } else {
    engine.optimizer_step(adam, step);
  }
  return loss;
}

TEST(CpuEngineState, TensorsAreTheMasterWeightsAndThisShardsMoments) {
  const EngineOptions full = tiny_options();
  cpu::CpuEngine engine(full);
  const int64_t params = engine.layout().total_params();
  const int64_t trainable = engine.layout().trainable_params();
  std::vector<StateTensor> tensors = engine.state_tensors();
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "master_fp32");
  EXPECT_EQ(tensors[0].bytes, 4 * params);
  EXPECT_EQ(tensors[1].name, "adam_m");
  EXPECT_EQ(tensors[1].bytes, 4 * trainable);
  EXPECT_EQ(tensors[2].name, "adam_v");
  EXPECT_EQ(tensors[2].bytes, 4 * trainable);

  // ZeRO-1: the whole (unpadded) parameters, and the moments of this shard only.
  EngineOptions shard = full;
  shard.optimizer_shard = {100, 100 + 1234};
  shard.pad_buffers_to = 4096;
  cpu::CpuEngine sharded(shard);
  tensors = sharded.state_tensors();
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "master_fp32");
  EXPECT_EQ(tensors[0].bytes, 4 * params) << "the padding is not state";
  EXPECT_EQ(tensors[1].bytes, 4 * 1234);
  EXPECT_EQ(tensors[2].bytes, 4 * 1234);

  // An empty shard has no moments; a copy and a restore take null for them.
  EngineOptions empty = full;
  empty.optimizer_shard = {7, 7};
  cpu::CpuEngine nothing(empty);
  nothing.init_parameters(3);
  tensors = nothing.state_tensors();
  EXPECT_EQ(tensors[1].bytes, 0);
  EXPECT_EQ(tensors[2].bytes, 0);
  HostState image = state_of(nothing);
  std::vector<float> params_now(static_cast<size_t>(params));
  nothing.get_parameters(params_now.data());
  EXPECT_TRUE(same_bytes(image.named("master_fp32"), params_now.data(), 4 * params));
  nothing.restore_state(image.sources());
}

// What a run checks the host memory of its checkpoint staging with before
// the engine is built: the engine's own state tensors, name for name and
// byte for byte, for full training, a ZeRO-1 shard (empty too) and LoRA
// with and without the base in the checkpoint.
TEST(CpuEngineState, PlannedStateTensorsAreTheEnginesOwn) {
  const EngineOptions full = tiny_options();
  EngineOptions shard = full;
  shard.optimizer_shard = {100, 100 + 1234};
  shard.pad_buffers_to = 4096;
  EngineOptions empty = full;
  empty.optimizer_shard = {7, 7};
  EngineOptions lora = full;
  lora.lora = LoraSpec{4, 8.0, {std::begin(kLoraTargetKinds), std::end(kLoraTargetKinds)}};
  EngineOptions lora_with_base = lora;
  lora_with_base.lora_state_includes_base = true;
  for (const EngineOptions& options : {full, shard, empty, lora, lora_with_base}) {
    const std::vector<StateTensor> planned = planned_state_tensors(options);
    const std::vector<StateTensor> own = cpu::CpuEngine(options).state_tensors();
    ASSERT_EQ(planned.size(), own.size());
    for (size_t i = 0; i < own.size(); ++i) {
      EXPECT_EQ(planned[i].name, own[i].name) << i;
      EXPECT_EQ(planned[i].bytes, own[i].bytes) << own[i].name;
    }
  }
}

TEST(CpuEngineState, MismatchedBufferListsAreRejected) {
  cpu::CpuEngine engine(tiny_options());
  std::vector<float> one(engine.layout().total_params());
  EXPECT_THROW(engine.begin_state_copy({one.data()}), std::invalid_argument);
  EXPECT_THROW(engine.restore_state({one.data()}), std::invalid_argument);
  EXPECT_THROW(engine.begin_state_copy({one.data(), nullptr, nullptr}), std::invalid_argument)
      << "adam_m has bytes but no buffer";
  EXPECT_EQ(engine.wait_state_copy(), 0.0) << "a rejected copy never started";
}

// A rank that writes a slice of the state the ranks hold alike stages only
// that slice: a part copies exactly its bytes of its tensor, where it is
// told, and nothing else.
TEST(CpuEngineState, APartCopiesExactlyItsBytesOfItsTensor) {
  cpu::CpuEngine engine(tiny_options());
  engine.init_parameters(3);
  const HostState whole = state_of(engine);
  const std::vector<StateTensor> tensors = engine.state_tensors();
  ASSERT_EQ(tensors[0].name, "master_fp32");
  ASSERT_GT(tensors[0].bytes, 100);
  const int64_t from = 36, bytes = tensors[0].bytes / 2;
  std::vector<unsigned char> landing(static_cast<size_t>(bytes) + 2, 0xEE);  // a guard byte each side
  std::vector<StateCopyPart> parts(tensors.size());
  parts[0] = {landing.data() + 1, from, bytes};
  engine.begin_state_copy(parts);
  engine.wait_state_copy();
  EXPECT_EQ(landing.front(), 0xEE);
  EXPECT_EQ(landing.back(), 0xEE);
  EXPECT_EQ(std::memcmp(landing.data() + 1, whole.named("master_fp32").data() + from, static_cast<size_t>(bytes)), 0);

  parts[0] = {landing.data(), tensors[0].bytes - 8, 16};  // past the tensor's end
  EXPECT_THROW(engine.begin_state_copy(parts), std::invalid_argument);
  parts[0] = {nullptr, 0, 4};
  EXPECT_THROW(engine.begin_state_copy(parts), std::invalid_argument) << "bytes but no buffer";
  parts.pop_back();
  parts[0] = {};
  EXPECT_THROW(engine.begin_state_copy(parts), std::invalid_argument) << "a part too few";
}

TEST(CpuEngineState, WaitWithNothingInFlightReturnsZero) {
  cpu::CpuEngine engine(tiny_options());
  EXPECT_EQ(engine.wait_state_copy(), 0.0);
  HostState image(engine);
  engine.begin_state_copy(image.destinations());
  EXPECT_GE(engine.wait_state_copy(), 0.0);
  EXPECT_EQ(engine.wait_state_copy(), 0.0) << "the copy was already waited for";
  HostState target(engine);  // outlives the engine below, as destinations must
  {
    // Destroyed with a copy in flight: the destructor joins it.
    cpu::CpuEngine short_lived(tiny_options());
    short_lived.init_parameters(5);
    short_lived.begin_state_copy(target.destinations());
  }
  const HostState same_init = [&] {
    cpu::CpuEngine again(tiny_options());
    again.init_parameters(5);
    return state_of(again);
  }();
  EXPECT_TRUE(target.bytes == same_init.bytes) << "the copy landed before the engine went away";
}

// The snapshot split of a checkpoint: the copy begins after a step, the next
// step's forward and backward run while it copies, and its optimizer step
// waits for it. What lands is the state as it was when the copy began.
TEST(CpuEngineState, CopyOverlappingTheNextStepHoldsTheStateWhenItBegan) {
  const EngineOptions o = medium_options();
  cpu::CpuEngine engine(o);
  engine.init_parameters(12);
  for (int64_t step = 1; step <= 2; ++step) train_step(engine, o, step, false);

  const int64_t params = engine.layout().total_params();
  for (int64_t step = 3; step <= 5; ++step) {
    std::vector<float> params_before(static_cast<size_t>(params));
    engine.get_parameters(params_before.data());
    const HostState reference = state_of(engine);  // m and v as they are now

    HostState async(engine);
    engine.begin_state_copy(async.destinations());
    train_step(engine, o, step, false);  // forward and backward overlap the copy
    EXPECT_EQ(engine.wait_state_copy(), 0.0) << "optimizer_step already waited for it";

    std::vector<float> params_after(static_cast<size_t>(params));
    engine.get_parameters(params_after.data());
    ASSERT_NE(std::memcmp(params_after.data(), params_before.data(), 4 * params), 0)
        << "the step did not change the parameters: the test would prove nothing";
    EXPECT_TRUE(same_bytes(async.named("master_fp32"), params_before.data(), 4 * params))
        << "step " << step;
    EXPECT_TRUE(async.named("adam_m") == reference.named("adam_m")) << "step " << step;
    EXPECT_TRUE(async.named("adam_v") == reference.named("adam_v")) << "step " << step;
  }
}

// Engine A trains 3 steps and copies its state; engine B, started from other
// weights, restores the copy; 3 more identical steps on each give identical
// losses and bit-identical parameters and moments.
void expect_exact_resume(const EngineOptions& o, bool sharded) {
  cpu::CpuEngine a(o), b(o);
  a.init_parameters(1);
  b.init_parameters(2);
  for (int64_t step = 1; step <= 3; ++step) train_step(a, o, step, sharded);
  HostState snapshot(a);
  a.begin_state_copy(snapshot.destinations());
  a.wait_state_copy();
  b.restore_state(snapshot.sources());

  for (int64_t step = 4; step <= 6; ++step) {
    const float loss_a = train_step(a, o, step, sharded);
    const float loss_b = train_step(b, o, step, sharded);
    EXPECT_EQ(std::memcmp(&loss_a, &loss_b, sizeof(float)), 0)
        << "loss at step " << step << ": " << loss_a << " vs " << loss_b;
  }
  const int64_t params = a.layout().total_params();
  std::vector<float> params_a(static_cast<size_t>(params)), params_b(static_cast<size_t>(params));
  a.get_parameters(params_a.data());
  b.get_parameters(params_b.data());
  EXPECT_EQ(std::memcmp(params_a.data(), params_b.data(), 4 * params), 0) << "parameters";
  const HostState state_a = state_of(a), state_b = state_of(b);
  for (size_t i = 0; i < state_a.tensors.size(); ++i)
    EXPECT_EQ(state_a.bytes[i], state_b.bytes[i]) << state_a.tensors[i].name;
}

TEST(CpuEngineState, RestoredStateResumesBitExactly) {
  expect_exact_resume(tiny_options(), false);
}

TEST(CpuEngineState, RestoredShardStateResumesBitExactly) {
  EngineOptions o = tiny_options();
  const int64_t trainable = cpu::CpuEngine(o).layout().trainable_params();
  o.optimizer_shard = {trainable / 3, trainable / 3 + trainable / 2};
  o.pad_buffers_to = 64;
  expect_exact_resume(o, true);
}

}  // namespace
}  // namespace trainbench
