// `trainbench bench comm` through the real binary on 2 and 4 MPI ranks:
// every collective passes its data check on both paths and reports a finite,
// positive busbw, and the gradient step all-reduces the trainer's buckets.
#include <numeric>  // std::accumulate
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/comm/bench_comm_json.h"
#include "tests/comm/mpirun.h"
#include "tests/support/run_command.h"
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
  EXPECT_EQ(result.at("ranks"), ranks);
  EXPECT_EQ(result.at("hosts"), 1);
  testing::expect_measured_and_checked(result);
  // Both paths of every collective, at every size of the sweep.
  int raw = 0;
  int communicator = 0;
  for (const nlohmann::json& r : result.at("collectives")) (r.at("path") == "raw" ? raw : communicator) += 1;
  EXPECT_EQ(raw, communicator);
  EXPECT_GE(raw, 3 * 6);  // 1K..1M by 4: six sizes, three collectives
}

INSTANTIATE_TEST_SUITE_P(MpiRanks, BenchCommRanks, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Ranks";
                         });

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
  for (const nlohmann::json& r : result.at("gradient_step")) {
    EXPECT_EQ(r.at("buckets").get<size_t>(), buckets.size());
    EXPECT_EQ(r.at("bytes"), result.at("gradient_bytes"));
  }
  testing::expect_measured_and_checked(result);
}

}  // namespace
}  // namespace trainbench
