// A slowed checkpoint disk shows up as checkpoint stall, and only there: with
// checkpoint.when_busy: wait the loop waits for the slow previous checkpoint
// (ckpt_stall_s), with skip it does not wait and the checkpoint is counted as
// skipped, and with a fast disk the stall stays small.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/engine.h"
#include "tests/support/temp_dir.h"
#include "trainer/checkpointing.h"
#include "trainer/config.h"
#include "trainer/data_source.h"
#include "trainer/train_loop.h"

namespace trainbench {
namespace {

struct Totals {
  double ckpt_stall_s = 0, data_stall_s = 0, comm_exposed_s = 0, step_s = 0;
  double max_work_s = 0;  // the longest step less its checkpoint stall
  int64_t committed = 0, skipped = 0;
};

// tiny on synthetic tokens (no storage read), 9 steps, a checkpoint every 3.
Totals train_with_checkpoints(double inject_delay_ms, const std::string& when_busy) {
  testing::TempDir dir("test_ckpt_stall");
  const Config config = load_config(
      "tiny", {"train.steps=9", "train.warmup_steps=0", "train.threads=1", "data.source=synthetic",
               "checkpoint.dir=" + dir.path(), "checkpoint.every_steps=3", "checkpoint.when_busy=" + when_busy,
               "checkpoint.inject_delay_ms=" + std::to_string(inject_delay_ms)});
  EngineOptions options;
  options.shape = config.model;
  options.micro_batch = config.train.micro_batch;
  options.device = "cpu";
  options.threads = 1;
  auto engine = make_engine(options);
  engine->init_parameters(static_cast<uint64_t>(config.train.seed));
  auto comm = make_local_communicator();
  DataSetup data = make_data_source(config, *engine, 0, 1);
  Checkpointer checkpointer(config, dir.path(), *engine, *data.source, *comm, nlohmann::json::object(), "");
  const RunOutcome outcome = run_training(config, *engine, *data.source, *comm, nullptr, &checkpointer);
  Totals totals;
  for (const StepRecord& s : outcome.steps) {
    totals.ckpt_stall_s += s.ckpt_stall_s;
    totals.data_stall_s += s.data_stall_s;
    totals.comm_exposed_s += s.comm_exposed_s;
    totals.step_s += s.step_s;
    totals.max_work_s = std::max(totals.max_work_s, s.step_s - s.ckpt_stall_s);
  }
  totals.committed = outcome.summary.checkpoints_committed;
  totals.skipped = outcome.summary.checkpoints_skipped;
  return totals;
}

TEST(CheckpointStall, ASlowDiskIsCheckpointStallWhenTheLoopWaits) {
  // Each checkpoint's writer sleeps 1 s; tiny's steps take milliseconds, so
  // the checkpoints of steps 6 and 9 each wait most of a second for the
  // previous one.
  const Totals slow = train_with_checkpoints(1000.0, "wait");
  const Totals fast = train_with_checkpoints(0.0, "wait");
  EXPECT_EQ(slow.committed, 3);
  // The checkpoints of steps 6 and 9 each wait for the previous writer's
  // second less the three steps trained meanwhile: bounded by this run's own
  // step time (a fixed 1.5 s failed once steps on a loaded machine passed 80 ms).
  EXPECT_GT(slow.ckpt_stall_s, 2 * (1.0 - 3 * slow.max_work_s) - 0.05)
      << "two waits of 1 s less three steps of at most " << slow.max_work_s << " s";
  // The time the slow disk added to the run (beside the same run on a fast
  // disk, so a loaded machine's slower steps cancel) is the stall.
  EXPECT_LE(slow.ckpt_stall_s, slow.step_s) << "the stall is part of the steps' time";
  EXPECT_GT(slow.ckpt_stall_s, 0.8 * (slow.step_s - fast.step_s)) << "the added time is the stall";
  EXPECT_LT(slow.data_stall_s, 0.05);
  EXPECT_EQ(slow.comm_exposed_s, 0.0);
  EXPECT_LT(fast.ckpt_stall_s, 0.5 * slow.ckpt_stall_s);
}

TEST(CheckpointStall, ASlowDiskWithWhenBusySkipIsSkippedCheckpointsNotStall) {
  const Totals skip = train_with_checkpoints(1000.0, "skip");
  EXPECT_GE(skip.skipped, 1);
  EXPECT_GE(skip.committed, 1);
  EXPECT_LT(skip.ckpt_stall_s, 0.5) << "nothing waited for the slow disk";
}

}  // namespace
}  // namespace trainbench
