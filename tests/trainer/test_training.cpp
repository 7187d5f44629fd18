// The training loop on the real CPU engine: the loss must fall on a repeated
// batch, and every step's time must be fully accounted for.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "comm/communicator.h"
#include "dataloader/batch_source.h"
#include "kernels/engine.h"
#include "trainer/config.h"
#include "trainer/instrument_cost.h"
#include "trainer/train_loop.h"

namespace trainbench {
namespace {

std::unique_ptr<TrainingEngine> cpu_engine(const Config& config, int threads) {
  EngineOptions options;
  options.shape = config.model;
  options.micro_batch = config.train.micro_batch;
  options.device = "cpu";
  options.threads = threads;
  auto engine = make_engine(options);
  engine->init_parameters(static_cast<uint64_t>(config.train.seed));
  return engine;
}

RunOutcome train(const Config& config) {
  auto engine = cpu_engine(config, static_cast<int>(config.train.threads));
  auto source = make_synthetic_source(config.train.micro_batch, config.model.seq_len,
                                      config.model.vocab, config.data.synthetic_batches,
                                      static_cast<uint64_t>(config.data.seed));
  auto comm = make_local_communicator();
  return run_training(config, *engine, *source, *comm, nullptr);
}

TEST(Training, TinyOnOneRepeatedBatchHalvesTheLossIn100Steps) {
  const Config config = load_config(
      "tiny", {"data.synthetic_batches=1", "train.steps=100", "train.warmup_steps=0"});
  const RunOutcome outcome = train(config);
  ASSERT_EQ(outcome.steps.size(), 100u);
  const double first = outcome.steps.front().loss;
  const double last = outcome.steps.back().loss;
  EXPECT_NEAR(first, std::log(static_cast<double>(config.model.vocab)), 0.1);
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
  EXPECT_TRUE(outcome.all_checks_passed());
}

TEST(Training, GradientAccumulationTrainsToo) {
  const Config config = load_config(
      "tiny", {"data.synthetic_batches=2", "train.grad_accum=2", "train.steps=30",
               "train.warmup_steps=0"});
  const RunOutcome outcome = train(config);
  EXPECT_LT(outcome.steps.back().loss, outcome.steps.front().loss - 0.5);
  EXPECT_EQ(outcome.summary.global_tokens_per_step,
            2 * config.train.micro_batch * config.model.seq_len);
}

TEST(Training, StepTimeIsTheSumOfItsCategories) {
  const Config config = load_config("tiny", {"train.steps=8", "train.warmup_steps=2"});
  const RunOutcome outcome = train(config);
  ASSERT_EQ(outcome.steps.size(), 8u);
  for (const StepRecord& s : outcome.steps) {
    const double sum = s.compute_s + s.comm_exposed_s + s.data_stall_s + s.ckpt_stall_s + s.other_s;
    EXPECT_NEAR(sum, s.step_s, 1e-9) << "step " << s.step;
    EXPECT_GT(s.compute_s, 0.0);
    EXPECT_GE(s.other_s, -1e-3) << "step " << s.step;
  }
  EXPECT_EQ(outcome.summary.measured_steps, 6);
  EXPECT_EQ(outcome.summary.warmup_steps, 2);
  EXPECT_GT(outcome.summary.tokens_per_s, 0.0);
  EXPECT_NEAR(outcome.summary.tokens_per_s * outcome.summary.step_s.median,
              static_cast<double>(outcome.summary.global_tokens_per_step), 1e-6);
  const RunSummary& s = outcome.summary;
  EXPECT_NEAR(s.compute_share + s.comm_exposed_share + s.data_stall_share + s.ckpt_stall_share +
                  s.other_share,
              1.0, 1e-9);
}

// report.instrument=false reaches the engine: no compute timing during the
// run (the CPU engine reads no clock), and the default back on after it.
TEST(Training, AnUntimedRunTurnsTheEnginesTimingOffAndBackOn) {
  const Config config = load_config("tiny", {"train.steps=4", "train.warmup_steps=1", "report.instrument=false"});
  auto engine = cpu_engine(config, 1);
  auto source = make_synthetic_source(config.train.micro_batch, config.model.seq_len, config.model.vocab, 2, 1);
  auto comm = make_local_communicator();
  const RunOutcome outcome = run_training(config, *engine, *source, *comm, nullptr);
  ASSERT_EQ(outcome.steps.size(), 4u);
  for (const StepRecord& s : outcome.steps) EXPECT_EQ(s.compute_s, 0.0) << "step " << s.step;
  EXPECT_GT(outcome.summary.measured_wall_s, 0.0);

  double wait = 0;
  const HostBatch& host = source->next(&wait);
  const TokenBatch batch{host.inputs, host.targets, host.batch, host.seq_len};
  engine->set_compute_timing(false);
  engine->forward(batch);
  EXPECT_EQ(engine->take_compute_seconds(), 0.0) << "timing off: nothing measured";
  engine->set_compute_timing(true);
  engine->forward(batch);
  EXPECT_GT(engine->take_compute_seconds(), 0.0) << "timing on again";
}

// bench instrument's measurement: the pairs it was asked for, each side
// timed, an interval around the median, and the engine's state as before.
TEST(Training, InstrumentationCostAlternatesBlocksAndRestoresTheEngine) {
  const Config config = load_config("tiny", {});
  auto engine = cpu_engine(config, 1);
  auto comm = make_local_communicator();
  std::vector<float> before(static_cast<size_t>(engine->layout().total_params()));
  engine->get_parameters(before.data());
  const InstrumentationCost cost = measure_instrumentation_cost(config, *engine, *comm, 5, 2);
  ASSERT_EQ(cost.timed_s.size(), 5u);
  ASSERT_EQ(cost.untimed_s.size(), 5u);
  EXPECT_EQ(cost.block_steps, 2);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_GT(cost.timed_s[i], 0.0);
    EXPECT_GT(cost.untimed_s[i], 0.0);
  }
  EXPECT_LE(cost.overhead_low, cost.overhead_median);
  EXPECT_GE(cost.overhead_high, cost.overhead_median);
  EXPECT_GT(cost.untimed_step_s, 0.0);
  std::vector<float> after(before.size());
  engine->get_parameters(after.data());
  EXPECT_EQ(before, after) << "the measurement trained, and put the state back";
  EXPECT_THROW(measure_instrumentation_cost(config, *engine, *comm, 1, 2), std::invalid_argument);
  EXPECT_THROW(measure_instrumentation_cost(config, *engine, *comm, 4, 0), std::invalid_argument);
}

TEST(Training, ANonFiniteLossStopsTheRunWithAFailedCheck) {
  // A learning rate this large blows the weights up within a few steps.
  const Config config = load_config(
      "tiny", {"train.lr=1e30", "train.grad_clip=0", "train.steps=40", "train.warmup_steps=0"});
  const RunOutcome outcome = train(config);
  EXPECT_FALSE(outcome.all_checks_passed());
  EXPECT_LT(outcome.steps.size(), 40u);
  EXPECT_FALSE(std::isfinite(outcome.steps.back().loss));
}

// The ceiling's shape: the projection with the most work, each side padded to
// 64. GPT-2 small: the LM head [B·T, 768] × [768, 50257] → n 50304.
TEST(Training, TheCeilingGemmIsTheLargestProjectionPaddedTo64) {
  ModelShape gpt2{.vocab = 50257, .d_model = 768, .n_layers = 12, .n_heads = 12,
                  .n_kv_heads = 12, .ffn_hidden = 3072, .seq_len = 1024};
  int64_t m = 0, n = 0, k = 0;
  largest_gemm_shape(gpt2, 32, &m, &n, &k);
  EXPECT_EQ(m, 32 * 1024);
  EXPECT_EQ(n, 50304);
  EXPECT_EQ(k, 768);
  // A small vocabulary: the MLP's down projection (k = ffn) has the most work;
  // odd sides round up.
  ModelShape small{.vocab = 100, .d_model = 200, .n_layers = 1, .n_heads = 4, .n_kv_heads = 4,
                   .ffn_hidden = 700, .seq_len = 33};
  largest_gemm_shape(small, 3, &m, &n, &k);
  EXPECT_EQ(m, 128);  // 99 → 128
  EXPECT_EQ(n * k, 256 * 704);
}

}  // namespace
}  // namespace trainbench
