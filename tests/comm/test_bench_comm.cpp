// `trainbench bench comm` through the real binary on one rank (no launcher):
// the local communicator, the note that busbw is 0 there, the data check, and
// the command's user errors. The multi-rank runs are test_bench_comm_mpi.
#include <cstdlib>  // setenv: NCCL_COMM_BLOCKING
#include <filesystem>  // no result file
#include <fstream>  // an NCCL configuration file
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "comm/communicator.h"  // nccl_environment_problem
#include "tests/comm/bench_comm_json.h"
#include "tests/support/run_command.h"
#include "tests/support/sanitizer.h"  // no ulimit -v under ASan
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
  EXPECT_EQ(result.at("schema"), "trainbench.bench_comm/v2");
  EXPECT_EQ(result.at("backend"), "local");
  EXPECT_EQ(result.at("buffers"), "host");
  EXPECT_TRUE(result.at("library").is_null()) << "no library under the local backend";
  // The local backend has no raw MPI path: its tables do not describe one.
  EXPECT_EQ(run.out.find("raw: MPI_"), std::string::npos) << run.out;
  EXPECT_EQ(result.at("ranks"), 1);
  testing::expect_measured_and_checked(result);
  // What one rank held at once: on one rank (no MPI scratch) the largest
  // all-gather, 1/1 of the size in and the size out; tiny's one bucket
  // (641 KiB) is larger than the sweep's 16K.
  const int64_t bucket = result.at("bucket_bytes").at(0).get<int64_t>();
  ASSERT_GT(bucket, 16 << 10);
  EXPECT_EQ(result.at("memory_per_rank_bytes").get<int64_t>(), 2 * bucket);
  EXPECT_EQ(result.at("ranks_on_host"), 1);
}

// comm.backend=nccl where no NCCL run can be made (no NCCL in this build,
// no GPU): one exit-3 line says which, before anything is measured. Where
// one can, test_bench_comm_nccl (label gpu) measures.
TEST(BenchComm, NcclWithoutAGpuOrItsBuildSaysInOneLineWhyNot) {
  const testing::TempDir dir;
  const std::string out = dir.file("comm.json");
  const testing::CommandResult run = run_command(std::string(TRAINBENCH_BINARY) +
                                                 " bench comm --set comm.backend=nccl --max-bytes 1M --iters 3 --out " +
                                                 out);
  if (run.exit_code == 0) GTEST_SKIP() << "a GPU and the NCCL backend are here: test_bench_comm_nccl measures";
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  const bool no_build = run.err.rfind("trainbench: comm.backend=nccl: this build has no NCCL backend", 0) == 0;
  const bool no_gpu = run.err.rfind("trainbench: bench comm: comm.backend=nccl: ", 0) == 0;
  EXPECT_TRUE(no_build || no_gpu) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  EXPECT_EQ(run.out.find("gradient step"), std::string::npos) << "nothing measured: " << run.out;
  EXPECT_FALSE(std::filesystem::exists(out)) << "no result without a measurement";
}

// NCCL_COMM_BLOCKING=1 overrides the communicator's non-blocking config:
// every NCCL call would wait inside NCCL, past any comm.timeout_s. Refused,
// in one line, before the build or a GPU is asked for (and unset, nothing).
TEST(BenchComm, NcclMadeBlockingByTheEnvironmentIsRefused) {
  const testing::CommandResult run = run_command("NCCL_COMM_BLOCKING=1 " + std::string(TRAINBENCH_BINARY) +
                                                 " bench comm --set comm.backend=nccl --max-bytes 1M --iters 3");
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_EQ(run.err.rfind("trainbench: comm.backend=nccl: NCCL_COMM_BLOCKING=1 (the environment) makes every NCCL "
                          "call block inside NCCL, where comm.timeout_s cannot end a collective", 0), 0u) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  // As NCCL parses it (an integer), and from the file NCCL reads it from.
  const testing::TempDir dir;
  ::setenv("NCCL_CONF_FILE", dir.file("nccl.conf").c_str(), 1);
  for (const char* value : {"0", "", "00"}) {
    ::setenv("NCCL_COMM_BLOCKING", value, 1);
    EXPECT_EQ(nccl_environment_problem(), "") << "'" << value << "'";
  }
  for (const char* value : {"01", " 1", "0x1"}) {
    ::setenv("NCCL_COMM_BLOCKING", value, 1);
    EXPECT_NE(nccl_environment_problem(), "") << "'" << value << "'";
  }
  ::unsetenv("NCCL_COMM_BLOCKING");
  EXPECT_EQ(nccl_environment_problem(), "");
  std::ofstream(dir.file("nccl.conf")) << "# site settings\nNCCL_DEBUG=WARN\n  NCCL_COMM_BLOCKING=1\n";
  EXPECT_EQ(nccl_environment_problem().rfind("NCCL_COMM_BLOCKING=1 (" + dir.file("nccl.conf") + ") makes", 0), 0u)
      << nccl_environment_problem();
  ::unsetenv("NCCL_CONF_FILE");
}

// Buffers that cannot be mapped under ulimit -v are refused before they are
// allocated (the process printed only "out of memory"): exit 3, one line,
// what one rank needs (a 1 GiB all-gather on one rank: 1 GiB in, 1 GiB out),
// the limit, and a --max-bytes that fits.
TEST(BenchComm, BuffersBeyondTheAddressSpaceLimitExitThreeBeforeAllocating) {
  SKIP_ADDRESS_SPACE_LIMIT_UNDER_ASAN();
  const testing::CommandResult run = run_command("bash -c 'ulimit -v 2000000 && exec " +
                                                 std::string(TRAINBENCH_BINARY) +
                                                 " bench comm --max-bytes 1G --iters 1'");
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_EQ(run.err.rfind("trainbench: bench comm: --max-bytes 1.00 GiB needs 2.00 GiB per rank", 0), 0u) << run.err;
  EXPECT_NE(run.err.find("the address-space limit (ulimit -v) is 1.91 GiB"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("or give --max-bytes "), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << run.err;
  EXPECT_EQ(run.out.find("gradient step"), std::string::npos) << "nothing measured: " << run.out;
  // 1500M by the default factor 4 from 1 KiB sweeps to 1 GiB: the need is
  // that size's, and said to be.
  const testing::CommandResult between = run_command("bash -c 'ulimit -v 2000000 && exec " +
                                                     std::string(TRAINBENCH_BINARY) +
                                                     " bench comm --max-bytes 1500M --iters 1'");
  EXPECT_EQ(between.exit_code, 3) << between.out << between.err;
  EXPECT_EQ(between.err.rfind("trainbench: bench comm: --max-bytes 1.46 GiB (the sweep's largest size 1.00 GiB) "
                              "needs 2.00 GiB per rank", 0), 0u) << between.err;
}

// Sizes read as every command reads them: K = 1024, KB = 1000 (`shards
// synth --size 100KB` is 100000 bytes; bench comm took 1KB for 1024).
TEST(BenchComm, SizesReadKAs1024AndKBAs1000AsShardsDoes) {
  const testing::TempDir dir;
  const std::string out = dir.file("comm.json");
  const testing::CommandResult run = run_command(std::string(TRAINBENCH_BINARY) +
                                                 " bench comm --min-bytes 1KB --max-bytes 4K --factor 2 --iters 1 "
                                                 "--out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = testing::read_json(out);
  std::set<int64_t> swept = testing::collective_sizes(result);
  swept.erase(result.at("bucket_bytes").at(0).get<int64_t>());
  EXPECT_EQ(swept, (std::set<int64_t>{1000, 2000, 4000})) << "1KB x 2^i up to 4K = 4096";
}

TEST(BenchComm, BadSizesAreOneLineUserErrors) {
  for (const std::string& args : {std::string("--min-bytes 1M --max-bytes 1K"), std::string("--factor 1"),
                                  std::string("--max-bytes lots"), std::string("--iters 0"),
                                  std::string("--max-bytes 4X"), std::string("--min-bytes 1KiBB")}) {
    const testing::CommandResult run = run_command(std::string(TRAINBENCH_BINARY) + " bench comm " + args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    EXPECT_EQ(run.err.rfind("trainbench: ", 0), 0u) << args << ": " << run.err;
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << args << ": " << run.err;
  }
}

// One rank has no collective for a slow network to hold: refused, as run
// refuses it, not taken and ignored.
TEST(BenchComm, AnInjectedNetworkDelayOnOneRankIsRefused) {
  const testing::CommandResult run =
      run_command(std::string(TRAINBENCH_BINARY) + " bench comm tiny --max-bytes 4K --set comm.inject_delay_ms=5");
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_EQ(run.err, "trainbench: comm.inject_delay_ms: one rank has no collective to hold; run at least 2 ranks "
                     "(the fault would be injected nowhere)\n");
}

// The sweep measures whole floats, sizes rounded down: a range holding no
// multiple of 4 bytes measured 4 B, outside the range asked for, and said
// nothing. A range that holds one still runs.
TEST(BenchComm, ARangeHoldingNoWholeFloatIsRefusedNamingIt) {
  for (const std::string& range :
       {std::string("--min-bytes 5 --max-bytes 7"), std::string("--min-bytes 1 --max-bytes 3")}) {
    const testing::CommandResult run = run_command(std::string(TRAINBENCH_BINARY) + " bench comm " + range);
    EXPECT_EQ(run.exit_code, 2) << range << ": " << run.err;
    EXPECT_EQ(run.err, "trainbench: bench comm: " + range +
                           ": no whole float (a multiple of 4 bytes) lies between them, and the sweep measures "
                           "whole floats\n")
        << range;
  }
  const testing::TempDir dir;
  const std::string out = dir.file("edge.json");
  const testing::CommandResult edge = run_command(std::string(TRAINBENCH_BINARY) +
                                                  " bench comm --min-bytes 4 --max-bytes 7 --iters 1 --out " + out);
  ASSERT_EQ(edge.exit_code, 0) << edge.err;
  EXPECT_EQ(testing::collective_sizes(testing::read_json(out)).count(4), 1u) << "one whole float, at the range's lower edge";
}

}  // namespace
}  // namespace trainbench
