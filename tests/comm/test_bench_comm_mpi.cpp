// `trainbench bench comm` through the real binary on 2 and 4 MPI ranks:
// every collective passes its data check on both paths and reports a finite,
// positive busbw, and the gradient step all-reduces the trainer's buckets.
#include <algorithm>  // std::max, std::min: the ranks' times
#include <map>      // sizes by collective and path
#include <numeric>  // std::accumulate
#include <string>
#include <tuple>    // the step's rows by path
#include <utility>  // std::pair
#include <vector>

#include <gtest/gtest.h>

#include "comm/communicator.h"  // mpi_library_version
#include "tests/comm/bench_comm_json.h"
#include "tests/comm/mpirun.h"
#include "tests/support/mem_available.h"  // whether this machine has room for the bench refused
#include "tests/support/run_command.h"
#include "tests/support/sanitizer.h"  // no ulimit -v under ASan
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

using testing::mpirun;
using testing::run_command;

nlohmann::json bench_comm_on(int ranks, const std::string& args, const testing::TempDir& dir) {
  const std::string out = dir.file("comm.json");
  const testing::CommandResult run = run_command(
      mpirun(ranks, std::string(TRAINBENCH_BINARY) + " bench comm " + args + " --iters 5 --out " + out, 300));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  return testing::read_json(out);
}

class BenchCommRanks : public ::testing::TestWithParam<int> {};

TEST_P(BenchCommRanks, EveryCollectiveChecksAndMovesData) {
  const int ranks = GetParam();
  const testing::TempDir dir;
  const nlohmann::json result = bench_comm_on(ranks, "tiny --max-bytes 1M", dir);
  EXPECT_EQ(result.at("backend"), "mpi");
  EXPECT_EQ(result.at("library"), mpi_library_version()) << "the MPI the figures are of";
  EXPECT_FALSE(result.at("library").get<std::string>().empty());
  EXPECT_EQ(result.at("ranks"), ranks);
  EXPECT_EQ(result.at("hosts"), 1);
  testing::expect_measured_and_checked(result);
  // Both paths of every collective, at every size of the sweep.
  int raw = 0;
  int communicator = 0;
  for (const nlohmann::json& r : result.at("collectives")) (r.at("path") == "raw" ? raw : communicator) += 1;
  EXPECT_EQ(raw, communicator);
  // nccl-tests' columns: size is the whole buffer, count the collective's
  // count argument — for reduce-scatter and all-gather one rank's block.
  for (const nlohmann::json& r : result.at("collectives")) {
    const int64_t per_buffer = r.at("collective") == "all_reduce" ? 1 : ranks;
    EXPECT_EQ(r.at("count").get<int64_t>() * 4 * per_buffer, r.at("bytes").get<int64_t>()) << r.dump();
  }
  EXPECT_GE(raw, 3 * 6);  // 1K..1M by 4: six sizes, three collectives
  // One rank's most at once: the 1M reduce-scatter (1M in, 1M/n out) and
  // MPI's scratch, twice the message; every rank here is on this host.
  EXPECT_EQ(result.at("memory_per_rank_bytes").get<int64_t>(), 3 * (1 << 20) + (1 << 20) / ranks);
  EXPECT_EQ(result.at("ranks_on_host"), ranks);
}

INSTANTIATE_TEST_SUITE_P(MpiRanks, BenchCommRanks, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Ranks";
                         });

// Which rank's time a row reports, as nccl-tests' -a: the slowest rank's
// median by default (a step waits for it), the mean over ranks with
// --average 1 (nccl-tests' default; the docs said the slowest rank's was
// nccl-tests' too), every rank's median in the row, busbw from the one
// reported.
TEST(BenchCommMpi, TheAverageOptionPicksTheRanksTimeAsNcclTestsDoes) {
  const testing::TempDir dir;
  for (const auto& [option, name] : std::vector<std::pair<std::string, std::string>>{
           {"", "max"}, {" --average 1", "mean"}, {" --average 0", "rank 0"}, {" --average 2", "min"}}) {
    SCOPED_TRACE("average " + name);
    const nlohmann::json result = bench_comm_on(2, "tiny --max-bytes 4K" + option, dir);
    EXPECT_EQ(result.at("average"), name);
    for (const char* table : {"gradient_step", "collectives"}) {
      ASSERT_FALSE(result.at(table).empty()) << table << ": no row to judge the average on";
      for (const nlohmann::json& r : result.at(table)) {
        const std::vector<double> ranks = r.at("rank_time_s").get<std::vector<double>>();
        ASSERT_EQ(ranks.size(), 2u) << r.dump();
        const double expected = name == "max"    ? std::max(ranks[0], ranks[1])
                                : name == "mean" ? (ranks[0] + ranks[1]) / 2
                                : name == "min"  ? std::min(ranks[0], ranks[1])
                                                 : ranks[0];
        EXPECT_DOUBLE_EQ(r.at("time_s").get<double>(), expected) << r.dump();
        EXPECT_DOUBLE_EQ(r.at("algbw_gbs").get<double>(), r.at("bytes").get<double>() / expected / 1e9) << r.dump();
      }
    }
  }
  const testing::CommandResult bad =
      run_command(std::string(TRAINBENCH_BINARY) + " bench comm tiny --average 4 --out " + dir.file("bad.json"));
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--average"), std::string::npos) << bad.err;
}

// Reduce-scatter and all-gather move whole floats per rank: on 4 ranks the
// sweep's 4- and 8-byte sizes are both 16 bytes for them, which were printed
// as repeated rows. Each size a collective moves is measured once.
TEST(BenchCommMpi, SmallSizesThatRoundAlikeAreMeasuredOnce) {
  const testing::TempDir dir;
  const nlohmann::json result = bench_comm_on(4, "tiny --min-bytes 1 --max-bytes 100 --factor 3", dir);
  std::map<std::string, std::vector<int64_t>> sizes;  // "collective/path" -> bytes, in order
  for (const nlohmann::json& r : result.at("collectives"))
    sizes[r.at("collective").get<std::string>() + "/" + r.at("path").get<std::string>()].push_back(
        r.at("bytes").get<int64_t>());
  ASSERT_FALSE(sizes.empty()) << result.dump();
  for (const auto& [name, bytes] : sizes) {
    for (size_t i = 1; i < bytes.size(); ++i) EXPECT_LT(bytes[i - 1], bytes[i]) << name << " repeats a size";
  }
  // The sweep 1, 3, 9, 27, 81 in whole floats: 4, 8, 24, 80 for the all-reduce;
  // blocks of 1, 1, 1 and 5 floats per rank for the others: 16, 16, 16, 80 -> 16, 80.
  // The model's gradient bucket (656640 bytes for tiny) joins the sweep after them.
  const auto swept = [&](const std::string& name) {
    std::vector<int64_t> small;
    for (int64_t b : sizes[name])
      if (b <= 100) small.push_back(b);
    return small;
  };
  EXPECT_EQ(swept("all_reduce/bucketed"), (std::vector<int64_t>{4, 8, 24, 80}));
  EXPECT_EQ(swept("reduce_scatter/comm"), (std::vector<int64_t>{16, 80}));
  EXPECT_EQ(swept("all_gather/comm"), (std::vector<int64_t>{16, 80}));
}

TEST(BenchCommMpi, GradientStepUsesTheTrainersBuckets) {
  const testing::TempDir dir;
  // About 3.3 MiB of gradients: the first bucket 1 MiB (DDP's), then 1.5 MiB, then the rest.
  const nlohmann::json result =
      bench_comm_on(2, "tiny --set model.n_layers=16 --set comm.bucket_mb=1.5 --max-bytes 4K", dir);
  const std::vector<int64_t> buckets = result.at("bucket_bytes").get<std::vector<int64_t>>();
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], 1 << 20);
  EXPECT_EQ(buckets[1], 3 << 19);
  EXPECT_EQ(std::accumulate(buckets.begin(), buckets.end(), int64_t{0}), result.at("gradient_bytes").get<int64_t>());
  EXPECT_EQ(result.at("gradient_step_collectives"), nlohmann::json({"all_reduce"}));
  for (const nlohmann::json& r : result.at("gradient_step")) {
    EXPECT_EQ(r.at("buckets").get<size_t>(), buckets.size());
    EXPECT_EQ(r.at("bytes"), result.at("gradient_bytes"));
    // The step as a whole is the one row's, on its path.
    EXPECT_EQ(result.at("gradient_step_s").at(r.at("path").get<std::string>()), r.at("time_s"));
    EXPECT_NEAR(result.at("gradient_step_busbw_gbs").at(r.at("path").get<std::string>()).get<double>(),
                r.at("busbw_gbs").get<double>(), 1e-9 * r.at("busbw_gbs").get<double>());
  }
  testing::expect_measured_and_checked(result);
}

// Under comm.zero 1 the job's step has no all-reduce: the padded gradient
// is reduce-scattered and the parameters all-gathered (as --ceilings times
// it). bench comm all-reduced the DDP buckets there, a network ceiling of
// another step, without a word.
TEST(BenchCommMpi, UnderZeroOneTheGradientStepIsReduceScatterThenAllGather) {
  const testing::TempDir dir;
  const nlohmann::json result = bench_comm_on(2, "tiny --set comm.zero=1 --max-bytes 4K", dir);
  EXPECT_EQ(result.at("gradient_step_collectives"), nlohmann::json({"reduce_scatter", "all_gather"}));
  EXPECT_NE(result.value("command", "").find(" bench comm tiny --set comm.zero=1 --max-bytes 4K"), std::string::npos)
      << result.value("command", "(none)");
  const std::vector<int64_t> padded = result.at("bucket_bytes").get<std::vector<int64_t>>();
  ASSERT_EQ(padded.size(), 1u);
  const int64_t gradient = result.at("gradient_bytes").get<int64_t>();
  EXPECT_GE(padded[0], gradient);
  EXPECT_LT(padded[0], gradient + 2 * 64 * 4) << "ZeRO-1 pads to whole 64-float blocks per rank";
  EXPECT_EQ(padded[0] % (2 * 64 * 4), 0);
  std::vector<std::string> timed;
  for (const nlohmann::json& r : result.at("gradient_step")) {
    timed.push_back(r.at("collective").get<std::string>() + "/" + r.at("path").get<std::string>());
    EXPECT_EQ(r.at("bytes").get<int64_t>(), padded[0]) << r.dump();
  }
  EXPECT_EQ(timed, (std::vector<std::string>{"reduce_scatter/comm", "reduce_scatter/raw", "all_gather/comm",
                                             "all_gather/raw"}));
  // The step on each path: its reduce-scatter and all-gather summed.
  const nlohmann::json& rows = result.at("gradient_step");
  for (const auto& [path, first, second] : {std::tuple{"comm", 0, 2}, std::tuple{"raw", 1, 3}})
    EXPECT_DOUBLE_EQ(result.at("gradient_step_s").at(path).get<double>(),
                     rows[first].at("time_s").get<double>() + rows[second].at("time_s").get<double>())
        << path;
  // The whole padded gradient is no size the sweep all-reduces.
  for (const nlohmann::json& r : result.at("collectives")) EXPECT_LE(r.at("bytes").get<int64_t>(), 4096) << r.dump();
  testing::expect_measured_and_checked(result);
  // ~5B parameters: each of 2 ranks' blocks is past MPI's int count, as
  // `run` refuses it; the DDP buckets' check let it through.
  const testing::CommandResult large = run_command(
      mpirun(2, std::string(TRAINBENCH_BINARY) +
                    " bench comm tiny --set comm.zero=1 --set model.d_model=8192 --set model.vocab=270000"
                    " --set data.field=u32 --set model.n_layers=1 --set model.n_heads=64 --set model.n_kv_heads=8"
                    " --set model.ffn_hidden=16384 --max-bytes 4K --iters 1",
             120));
  EXPECT_EQ(large.exit_code, 2) << large.out << large.err;
  EXPECT_NE(large.err.find("bench comm: comm.zero=1 on the MPI backend: each rank's block"), std::string::npos)
      << large.err;
  EXPECT_NE(large.err.find("run at least 3 ranks"), std::string::npos) << large.err;
}

// comm.inject_delay_ms (a slow network) holds the communicator's collectives
// as a run's: the gradient step's buckets are held, the raw path's plain MPI
// calls are not, and the result says a fault was injected. It was taken and
// did nothing, the JSON's config saying the fault was on.
TEST(BenchCommMpi, AnInjectedNetworkDelayHoldsTheCommunicatorsCollectivesAndIsSaid) {
  const testing::TempDir dir;
  const nlohmann::json result =
      bench_comm_on(2, "tiny --set comm.inject_delay_ms=40 --min-bytes 4K --max-bytes 4K --warmup-iters 0", dir);
  const nlohmann::json& step = result.at("gradient_step_s");
  EXPECT_GE(step.at("bucketed").get<double>(), 0.040) << step.dump();  // a sleep's floor: not load-sensitive
  ASSERT_EQ(result.at("warnings").size(), 1u) << result.at("warnings").dump();
  EXPECT_NE(result.at("warnings")[0].get<std::string>().find("fault injected (comm.inject_delay_ms=40)"),
            std::string::npos);
  const nlohmann::json plain = bench_comm_on(2, "tiny --min-bytes 4K --max-bytes 4K --warmup-iters 0", dir);
  EXPECT_EQ(plain.at("warnings"), nlohmann::json::array());
  testing::expect_measured_and_checked(result);
}

int trainbench_lines(const std::string& err) {
  int lines = 0;
  for (size_t at = err.find("trainbench: "); at != std::string::npos; at = err.find("trainbench: ", at + 1))
    if (at == 0 || err[at - 1] == '\n') ++lines;
  return lines;
}

// The raw path measures each size in one MPI call, whose count is an int: a
// larger size is refused before anything is allocated, not ended by an
// abort once the communicator's path has been measured.
TEST(BenchCommMpi, ASizeOneMpiCallCannotCarryIsAUserError) {
  const testing::CommandResult run =
      run_command(mpirun(2, std::string(TRAINBENCH_BINARY) + " bench comm tiny --max-bytes 16G --iters 1"));
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("trainbench: bench comm: --max-bytes 16.00 GiB is more than one MPI call carries"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("give --max-bytes 8589934588 or less"), std::string::npos) << run.err;
  EXPECT_EQ(trainbench_lines(run.err), 1) << run.err;
}

// The probe's case: buffers for every rank of the host beyond its
// MemAvailable ran a minute into the system's OOM killer. Refused up front:
// exit 3, one line, the need of one rank and of the host's two, what is
// available. 8 GiB - 4 on two ranks needs 56 GiB (3.5 times the size each);
// a machine with room for that would measure it, so it is skipped there.
TEST(BenchCommMpi, MoreThanTheHostsMemoryExitsThreeBeforeAllocating) {
  const int64_t available_kib = testing::mem_available_kib();
  ASSERT_GT(available_kib, 0) << "no MemAvailable in /proc/meminfo";
  if (available_kib > (int64_t{50} << 20))
    GTEST_SKIP() << "this machine has " << (available_kib >> 20) << " GiB available: room for 56 GiB is near";
  const testing::CommandResult run = run_command(mpirun(
      2, std::string(TRAINBENCH_BINARY) + " bench comm tiny --min-bytes 8589934588 --max-bytes 8589934588 --iters 1"));
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_NE(run.err.find("trainbench: bench comm: --max-bytes 8.00 GiB needs 28.00 GiB per rank"), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("56.00 GiB of host memory for the 2 rank(s) on "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(" is available: give --min-bytes and --max-bytes "), std::string::npos) << run.err;
  EXPECT_EQ(trainbench_lines(run.err), 1) << run.err;
  EXPECT_EQ(run.out.find("gradient step"), std::string::npos) << "nothing measured: " << run.out;
}

// comm.backend=nccl on two ranks where no NCCL run can be made (no NCCL in
// this build, no GPU): every rank stops at once with one line, none of them
// left waiting in NCCL's init for a peer that gave up. (Where two GPUs are,
// the ranks measure, and every check must pass.)
TEST(BenchCommMpi, NcclWithoutGpusStopsEveryRankWithOneLine) {
  const testing::CommandResult run = run_command(
      mpirun(2, std::string(TRAINBENCH_BINARY) + " bench comm tiny --set comm.backend=nccl --max-bytes 1M --iters 2"));
  if (run.exit_code == 0) {
    EXPECT_NE(run.out.find("backend nccl"), std::string::npos) << run.out;
    EXPECT_EQ(run.out.find("FAILED"), std::string::npos) << run.out;
    return;
  }
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_TRUE(run.err.find("trainbench: comm.backend=nccl: this build has no NCCL backend") != std::string::npos ||
              run.err.find("trainbench: bench comm: comm.backend=nccl: ") != std::string::npos)
      << run.err;
  EXPECT_EQ(trainbench_lines(run.err), 1) << run.err;
  EXPECT_EQ(run.out.find("bench comm: 2 rank(s)"), std::string::npos) << "nothing measured: " << run.out;
}

// A limit on one rank alone (ulimit -v on one node) stops every rank with
// that rank's reason before rank 0 starts measuring; rank 0 speaks for all.
TEST(BenchCommMpi, OneRankShortOfMemoryStopsEveryRank) {
  SKIP_ADDRESS_SPACE_LIMIT_UNDER_ASAN();
  const testing::CommandResult run = run_command(
      mpirun(2, "bash -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then ulimit -v 2000000; fi; exec " +
                    std::string(TRAINBENCH_BINARY) + " bench comm tiny --max-bytes 1G --iters 1'"));
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_NE(run.err.find("trainbench: bench comm: --max-bytes 1.00 GiB needs 3.50 GiB per rank"), std::string::npos)
      << run.err;
  EXPECT_EQ(run.out.find("bench comm: 2 rank(s)"), std::string::npos) << "rank 0 must not start: " << run.out;
}

}  // namespace
}  // namespace trainbench
