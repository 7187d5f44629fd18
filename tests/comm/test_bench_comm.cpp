// `trainbench bench comm` through the real binary on one rank (no launcher):
// the local communicator, the note that busbw is 0 there, the data check, and
// the command's user errors. The multi-rank runs are test_bench_comm_mpi.
#include <string>

#include <gtest/gtest.h>

#include "tests/comm/bench_comm_json.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

using testing::run_command;

TEST(BenchComm, OneRankChecksTheDataAndSaysBusbwIsZero) {
  const testing::TempDir dir;
  const std::string out = dir.file("comm.json");
  const testing::CommandResult run =
      run_command(std::string(TRAINBENCH_BINARY) + " bench comm --max-bytes 16K --iters 3 --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("busbw is 0 by definition"), std::string::npos) << run.out;
  const nlohmann::json result = testing::read_json(out);
  EXPECT_EQ(result.at("schema"), "trainbench.bench_comm/v1");
  EXPECT_EQ(result.at("backend"), "local");
  EXPECT_EQ(result.at("ranks"), 1);
  testing::expect_measured_and_checked(result);
}

TEST(BenchComm, BadSizesAreOneLineUserErrors) {
  for (const std::string& args : {std::string("--min-bytes 1M --max-bytes 1K"), std::string("--factor 1"),
                                  std::string("--max-bytes lots"), std::string("--iters 0")}) {
    const testing::CommandResult run = run_command(std::string(TRAINBENCH_BINARY) + " bench comm " + args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    EXPECT_EQ(run.err.rfind("trainbench: ", 0), 0u) << args << ": " << run.err;
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << args << ": " << run.err;
  }
}

}  // namespace
}  // namespace trainbench
