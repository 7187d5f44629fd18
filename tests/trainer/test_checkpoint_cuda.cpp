// The exact-resume test on the CUDA engine, where a GPU is present: tiny in
// bf16 trained 20 steps straight, and killed after its step-10 checkpoint and
// resumed, ends with the same losses and the same checkpoint bytes (bf16
// parameters, fp32 master weights, AdamW state, data position). Without a
// GPU it skips with the binary's own reason.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/no_gpu_run.h"  // no_gpu_run_possible: the one reason to skip
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/checkpoint_runs.h"

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::run_command;

std::string cuda_run(const std::string& dir, const std::string& out, const std::string& extra = "") {
  return std::string(TRAINBENCH_BINARY) + " run tiny --steps 20 --set train.device=cuda" +
         " --set checkpoint.dir=" + dir + " --set checkpoint.every_steps=10 --set checkpoint.keep=0" +
         " --set report.progress_every=0 --out " + out + " " + extra;
}

TEST(CheckpointCuda, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  testing::TempDir dir("test_ckpt_cuda");
  const CommandResult probe = run_command(std::string(TRAINBENCH_BINARY) +
                                          " run tiny --steps 6 --set train.device=cuda --set checkpoint.every_steps=0"
                                          " --out " + dir.file("probe.json"));
  if (testing::no_gpu_run_possible(probe)) GTEST_SKIP() << "no CUDA run possible here: " << probe.err;
  ASSERT_EQ(probe.exit_code, 0) << probe.out << probe.err;

  const CommandResult straight = run_command(cuda_run(dir.file("a"), dir.file("a.json")));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const CommandResult killed =
      run_command("TRAINBENCH_TEST_CRASH_AT=committed@10 " + cuda_run(dir.file("b"), dir.file("b1.json")));
  ASSERT_NE(killed.exit_code, 0) << killed.out << killed.err;
  ASSERT_EQ(testing::latest_of(dir.file("b")), "step_10");
  const CommandResult resumed = run_command(cuda_run(dir.file("b"), dir.file("b2.json"), "--resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;

  const auto a = testing::losses_by_step(dir.file("a.json"));
  const auto b = testing::losses_by_step(dir.file("b2.json"));
  ASSERT_EQ(b.size(), 10u);
  for (const auto& [step, loss] : b) EXPECT_EQ(loss, a.at(step)) << "step " << step;
  EXPECT_EQ(testing::file_checksums(dir.file("a/step_20")), testing::file_checksums(dir.file("b/step_20")));
}

}  // namespace
}  // namespace trainbench
