// Never a hang: a rank that stalls or dies in a collective ends the whole job
// with exit code 3 and one line naming the collective, within the comm
// timeout (2 s here) plus the launcher's teardown. Runs mpi_timeout_child
// under mpirun.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "tests/comm/mpirun.h"
#include "tests/support/run_command.h"

namespace trainbench {
namespace {

using testing::mpirun;
using testing::run_command;

constexpr double kTimeoutS = 2;          // what mpi_timeout_child sets
constexpr double kTeardownAllowanceS = 30;

struct Outcome {
  testing::CommandResult result;
  double seconds = 0;
};

Outcome run_stalled_job(const std::string& mode) {
  const auto start = std::chrono::steady_clock::now();
  Outcome outcome{run_command(mpirun(2, std::string(TIMEOUT_CHILD) + " " + mode)), 0};
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return outcome;
}

void expect_aborted_by_timeout(const std::string& mode, const std::string& message) {
  const Outcome outcome = run_stalled_job(mode);
  EXPECT_EQ(outcome.result.exit_code, 3) << outcome.result.err;
  EXPECT_GE(outcome.seconds, kTimeoutS);
  EXPECT_LT(outcome.seconds, kTimeoutS + kTeardownAllowanceS);
  EXPECT_NE(outcome.result.err.find("trainbench: " + message), std::string::npos) << outcome.result.err;
}

TEST(MpiTimeout, StalledBarrier) {
  expect_aborted_by_timeout(
      "barrier", "comm: barrier of 0 bytes timed out after 2 s at stall test (rank 0 of 2): a rank died or stalled");
}

TEST(MpiTimeout, StalledAllReduce) {
  expect_aborted_by_timeout(
      "all_reduce",
      "comm: all_reduce of 4096 bytes timed out after 2 s at stall test (rank 0 of 2): a rank died or stalled");
}

TEST(MpiTimeout, StalledBackgroundAllReduce) {
  expect_aborted_by_timeout("background",
                            "comm: background all_reduce of 4096 bytes timed out after 2 s at stall test "
                            "(rank 0 of 2): a rank died or stalled");
}

TEST(MpiTimeout, ARankThatNeverJoinsEndsTheStartUp) {
  // The others waited in MPI_Init for ever: there was no MPI yet to time out.
  expect_aborted_by_timeout("never_joined",
                            "comm: MPI start-up did not finish within comm.timeout_s=2 s (rank 0 of 2): a rank "
                            "never joined it");
}

TEST(MpiTimeout, DeadRankEndsTheJob) {
  // The launcher may notice the death first and end the job itself; either
  // way it ends, with a failure, well before any hang.
  const Outcome outcome = run_stalled_job("died");
  EXPECT_NE(outcome.result.exit_code, 0);
  EXPECT_NE(outcome.result.exit_code, 124) << "the job hung until `timeout` killed it";
  EXPECT_LT(outcome.seconds, kTimeoutS + kTeardownAllowanceS);
}

}  // namespace
}  // namespace trainbench
