// The collective harness and launcher detection in one process, on the local
// communicator: sizes, bus bandwidth factors, and the data check on a rank
// that is the whole world. The multi-rank figures are tested under mpirun
// (test_bench_comm_mpi, test_mpi_collectives).
#include "comm/collective_bench.h"

#include <algorithm>  // std::fill
#include <cmath>    // std::isnan
#include <cstdlib>  // setenv, unsetenv
#include <map>
#include <optional>
#include <stdexcept>  // the fake's abort
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/launch_detect.h"
#include "tests/support/forwarding_bench_buffer.h"  // the faulty buffers
#include "tests/support/one_rank_communicator.h"  // the device-buffer stand-in

namespace trainbench {
namespace {

TEST(CollectiveBench, SizeSweepMultipliesAndRoundsToWholeFloats) {
  EXPECT_EQ(size_sweep(1024, 1 << 20, 4),
            (std::vector<int64_t>{1024, 4096, 16384, 65536, 262144, 1 << 20}));
  EXPECT_EQ(size_sweep(1024, 5000, 4), (std::vector<int64_t>{1024, 4096}));
  // 10, 15, 22.5, 33.75, 50.6, 75.9 bytes: down to whole floats, repeats dropped.
  EXPECT_EQ(size_sweep(10, 100, 1.5), (std::vector<int64_t>{8, 12, 20, 32, 48, 72}));
  EXPECT_EQ(size_sweep(1, 4, 2), (std::vector<int64_t>{4}));
}

// A maximum the sweep reaches is in it, though the factor is not exact in
// binary (100000 x 1.1 is 110000.00000000001 in doubles; 1000 x 2.7 x 2.7
// above 7290).
TEST(CollectiveBench, SizeSweepKeepsTheMaximumItReaches) {
  EXPECT_EQ(size_sweep(100000, 110000, 1.1), (std::vector<int64_t>{100000, 110000}));
  EXPECT_EQ(size_sweep(1000, 7290, 2.7), (std::vector<int64_t>{1000, 2700, 7288}));
  EXPECT_EQ(size_sweep(1000, 7289, 2.7), (std::vector<int64_t>{1000, 2700}));
}

TEST(CollectiveBench, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median_of_iterations({4, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median_of_iterations({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of_iterations({7, 5}), 6);
  EXPECT_DOUBLE_EQ(median_of_iterations({}), 0);
}

TEST(CollectiveBench, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("reduce_scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_gather", 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_reduce", 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("broadcast", 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("reduce", 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("all_to_all", 4), 0.75);
  EXPECT_THROW(bus_bandwidth_factor("scatter", 4), std::logic_error);
}

// The data check's pattern sums exactly in fp32 in any order of ranks, on
// the largest clusters too: rank + 1 + i % 7 summed past 2^24 above 5786
// ranks, and a healthy job's check failed (bench comm exit 4, burn-in's
// fabric "returned wrong values").
TEST(CollectiveBench, TheCheckPatternSumsExactlyOnLargeClustersInAnyOrder) {
  for (const int world : {1, 2, 7, 13, 5800, 8192, 100000}) {
    for (int64_t i = 0; i < 64; ++i) {  // every term the index adds, 0 to 7
      int64_t exact = 0;
      float up = 0, down = 0;
      for (int r = 0; r < world; ++r) {
        exact += static_cast<int64_t>(bench_contribution(r, i));
        up += bench_contribution(r, i);
        down += bench_contribution(world - 1 - r, i);
      }
      ASSERT_EQ(bench_sum_of_contributions(world, i), static_cast<float>(exact)) << world << " ranks, i " << i;
      ASSERT_EQ(up, static_cast<float>(exact)) << world << " ranks, i " << i;
      ASSERT_EQ(down, static_cast<float>(exact)) << world << " ranks, i " << i;
      ASSERT_EQ(static_cast<float>(exact), static_cast<double>(exact)) << "not exact in fp32";
    }
  }
}

// One rank of a larger job whose link sums right but delivers blocks to the
// wrong ranks: its reduce-scatter hands every rank block 0 of the sum, its
// all-gather swaps the blocks of ranks 0 and 7. The other ranks' inputs are
// what they would send (bench_contribution at their places in the whole
// array). With a check pattern of period 7 both passed: every rank's block of
// a reduce-scatter whose block was a multiple of 7 floats expected the same
// values, and ranks 7 apart sent the same all-gather block.
class MisplacesBlocks final : public testing::OneRankCommunicator {
 public:
  MisplacesBlocks(int rank, int world) : rank_(rank), world_(world) {}
  const char* backend_name() const override { return "misplaces blocks"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void all_gather(double value, double* out) override { std::fill(out, out + world_, value); }
  Ticket start_all_reduce_sum(float* data, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) data[i] = bench_sum_of_contributions(world_, i);
    return 0;
  }
  double wait(Ticket) override { return 0.0; }
  void reduce_scatter_sum(const float*, float* recv, int64_t block) override {
    for (int64_t i = 0; i < block; ++i) recv[i] = bench_sum_of_contributions(world_, i);  // rank 0's block
  }
  void all_gather_floats(const float* send, float* recv, int64_t block) override {
    for (int r = 0; r < world_; ++r) {
      const int from = r == 0 ? 7 : r == 7 ? 0 : r;
      for (int64_t i = 0; i < block; ++i)
        recv[r * block + i] = from == rank_ ? send[i] : bench_contribution(from, from * block + i);
    }
  }
  [[noreturn]] void abort(int, const std::string& message) override { throw std::runtime_error(message); }

 private:
  int rank_;
  int world_;
};

TEST(CollectiveBench, ABlockDeliveredToTheWrongRankFailsTheCheckAtEverySize) {
  const CollectiveBenchOptions options{.warmup_iters = 0, .iters = 1};
  for (const int64_t block : {1, 7, 14, 49, 64, 4096}) {
    MisplacesBlocks comm(/*rank=*/1, /*world=*/8);
    const std::vector<CollectiveBenchResult> results = bench_collectives(comm, {block * 8 * 4}, options);
    ASSERT_EQ(results.size(), 3u) << block;
    for (const CollectiveBenchResult& r : results) {
      if (r.collective == "all_reduce") {
        EXPECT_TRUE(r.check_ok) << "block " << block;  // summed right
      } else if (r.collective == "reduce_scatter" && block == 1) {
        // One element: rank 0's and rank 1's sums can be equal by chance.
      } else {
        EXPECT_FALSE(r.check_ok) << r.collective << ", block " << block << " floats";
      }
    }
  }
}

// The pattern's sums differ from rank to rank's block for any block size:
// not one of a reduce-scatter's blocks of 2 to 64 floats, on 2 to 16 ranks,
// expects what another rank's block does.
TEST(CollectiveBench, EveryRanksBlockExpectsDifferentValues) {
  for (int world = 2; world <= 16; ++world)
    for (int64_t block = 2; block <= 64; ++block)
      for (int r = 1; r < world; ++r) {
        bool differs = false;
        for (int64_t i = 0; i < block && !differs; ++i)
          differs = bench_sum_of_contributions(world, r * block + i) != bench_sum_of_contributions(world, i);
        ASSERT_TRUE(differs) << world << " ranks, block " << block << ": rank " << r << "'s block as rank 0's";
      }
}

TEST(CollectiveBench, OneRankChecksEveryCollectiveAndMovesNothing) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const std::vector<CollectiveBenchResult> results =
      bench_collectives(*comm, {1024, 4096}, CollectiveBenchOptions{.warmup_iters = 1, .iters = 3});
  std::map<std::string, std::vector<std::string>> paths;
  for (const CollectiveBenchResult& r : results) {
    paths[r.collective].push_back(r.path);
    EXPECT_TRUE(r.check_ok) << r.collective << " " << r.path << " " << r.bytes;
    EXPECT_EQ(r.count * 4, r.bytes);
    EXPECT_EQ(r.busbw_gbs, 0.0);
  }
  // The raw path is plain MPI, which only the MPI communicator initialises.
  EXPECT_EQ(paths["all_reduce"], (std::vector<std::string>{"bucketed", "bucketed"}));
  EXPECT_EQ(paths["reduce_scatter"], (std::vector<std::string>{"comm", "comm"}));
  EXPECT_EQ(paths["all_gather"], (std::vector<std::string>{"comm", "comm"}));
}

TEST(CollectiveBench, GradientStepAllReducesEveryBucket) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const std::vector<CollectiveBenchResult> results =
      bench_gradient_step(*comm, {1 << 20, 400, 1 << 16}, CollectiveBenchOptions{.warmup_iters = 0, .iters = 2});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].path, "bucketed");
  EXPECT_EQ(results[0].buckets, 3);
  EXPECT_EQ(results[0].bytes, (1 << 20) + 400 + (1 << 16));
  EXPECT_TRUE(results[0].check_ok);
}

// Buffers apart from their host views, as a GPU's are (NCCL): the harness
// copies the pattern to them, the collective works there, and the check
// reads what comes back. The separate buffer leaves NaN in its host view
// when it copies out, so a harness that checked without copying back, or
// ran the collective on the host view, fails every check.
TEST(CollectiveBench, BuffersApartFromTheHostAreFilledAndCheckedThroughCopies) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const CollectiveBenchOptions options{.warmup_iters = 1, .iters = 2};
  std::vector<CollectiveBenchResult> results =
      bench_collectives(*comm, {1024, 4096}, options, make_separate_host_bench_buffer);
  const std::vector<CollectiveBenchResult> step =
      bench_gradient_step(*comm, {1 << 16, 400}, options, make_separate_host_bench_buffer);
  results.insert(results.end(), step.begin(), step.end());
  ASSERT_EQ(results.size(), 7u);
  for (const CollectiveBenchResult& r : results)
    EXPECT_TRUE(r.check_ok) << r.collective << " " << r.path << " " << r.bytes;
}

// A buffer whose data goes bad from its second read back on: a fault that
// only repeated calls bring out. The check after the timed loop sees it (one
// check before the loop, alone, passed every collective).
class GoesBadAfterItsFirstReadBack final : public testing::ForwardingBenchBuffer {
 public:
  using ForwardingBenchBuffer::ForwardingBenchBuffer;
  void to_host() override {
    ForwardingBenchBuffer::to_host();
    if (++reads_ > 1 && !host().empty()) host().back() += 1.0f;
  }

 private:
  int reads_ = 0;
};

TEST(CollectiveBench, AFaultUnderRepeatedCallsFailsTheCheckAfterTheTimedLoop) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const CollectiveBenchOptions options{.warmup_iters = 1, .iters = 3};
  const std::vector<CollectiveBenchResult> results = bench_collectives(
      *comm, {1024}, options, [](int64_t count) -> std::unique_ptr<BenchBuffer> {
        return std::make_unique<GoesBadAfterItsFirstReadBack>(count);
      });
  ASSERT_FALSE(results.empty());
  for (const CollectiveBenchResult& r : results) EXPECT_FALSE(r.check_ok) << r.collective << " " << r.path;
}

// The gradient step's check fails as the collectives' does, and
// failed_data_check names it: `run --ceilings` and `project` took its time
// as the link's whatever the check said.
TEST(CollectiveBench, AFaultInTheGradientStepFailsItsCheckAndIsNamed) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const CollectiveBenchOptions options{.warmup_iters = 1, .iters = 3};
  const std::vector<CollectiveBenchResult> bad = bench_gradient_step(
      *comm, {4096, 1024}, options, [](int64_t count) -> std::unique_ptr<BenchBuffer> {
        return std::make_unique<GoesBadAfterItsFirstReadBack>(count);
      });
  ASSERT_FALSE(bad.empty());
  for (const CollectiveBenchResult& r : bad) EXPECT_FALSE(r.check_ok) << r.path;
  EXPECT_EQ(failed_data_check(bad), "all_reduce of 5120 bytes (bucketed path)");
  const std::vector<CollectiveBenchResult> good = bench_gradient_step(*comm, {4096, 1024}, options);
  ASSERT_FALSE(good.empty());
  for (const CollectiveBenchResult& r : good) EXPECT_TRUE(r.check_ok) << r.path;
  EXPECT_EQ(failed_data_check(good), "");
}

TEST(CollectiveBench, ASeparateBufferCopiesBothWaysAndZeroesItsOwnMemory) {
  const std::unique_ptr<BenchBuffer> buffer = make_separate_host_bench_buffer(3);
  buffer->host() = {1, 2, 3};
  buffer->to_collective();
  EXPECT_TRUE(std::isnan(buffer->host()[0]));  // the host view is stale until copied back
  buffer->data()[1] = 7;
  buffer->to_host();
  EXPECT_EQ(buffer->host(), (std::vector<float>{1, 7, 3}));
  buffer->zero();
  EXPECT_EQ(buffer->host(), (std::vector<float>{1, 7, 3}));
  buffer->to_host();
  EXPECT_EQ(buffer->host(), (std::vector<float>{0, 0, 0}));
  // The host backends' buffers are their host views.
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const std::unique_ptr<BenchBuffer> in_place = make_bench_buffer(*comm, 2);
  EXPECT_EQ(in_place->data(), in_place->host().data());
  EXPECT_EQ(free_bench_buffer_bytes(*comm), -1);
}

// The network ceiling, burn-in's fabric check and project's link measure on
// the GPU only where it has room beside the run, for the buffers and their
// host copies; host buffers are the callers' to size. Where the GPU cannot
// be asked (no GPU, no NCCL in this build), there is no room. With a GPU,
// test_bench_comm_nccl (label gpu, run by scripts/gpu_check.sh) checks the room.
TEST(CollectiveBench, RoomForDeviceBuffersIsAskedOfTheGpuAndOfTheHost) {
  const std::unique_ptr<Communicator> host = make_local_communicator();
  EXPECT_EQ(device_bench_room_shortfall(*host, int64_t{1} << 62, 0), "");
  testing::DeviceBufferStandIn device;
  std::string why;
  if (free_bench_buffer_bytes(device, &why) >= 0) GTEST_SKIP() << "a GPU is here: test_bench_comm_nccl checks its room";
  EXPECT_FALSE(why.empty());
  const std::string huge = device_bench_room_shortfall(device, int64_t{1} << 62, -1);
  EXPECT_EQ(huge, "the free memory of rank 0's GPU is unknown (" + why + ")");
  EXPECT_EQ(device_bench_room_shortfall(device, 4, -1), huge) << "unknown is no room";
}

// Sets environment variables for one test and restores them after.
class ScopedEnvironment {
 public:
  ScopedEnvironment() {
    for (const char* name : kLauncherVariables) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
  }
  ~ScopedEnvironment() {
    for (const char* name : kLauncherVariables) {
      unsetenv(name);
      if (auto it = saved_.find(name); it != saved_.end()) setenv(name, it->second.c_str(), 1);
    }
  }
  void set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  static constexpr const char* kLauncherVariables[] = {
      "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",        "PMI_RANK",     "PMIX_RANK", "PMIX_SIZE",
      "MV2_COMM_WORLD_SIZE",  "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"};
  std::map<std::string, std::string> saved_;
};

TEST(LaunchDetect, NoLauncherVariablesMeansOneRank) {
  ScopedEnvironment env;
  EXPECT_FALSE(launched_by_mpi());
  EXPECT_EQ(launcher_task_count(), 0);
}

TEST(LaunchDetect, MpiLaunchersAreRecognised) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    ScopedEnvironment env;
    env.set(name, "4");
    EXPECT_TRUE(launched_by_mpi()) << name;
    EXPECT_EQ(launcher_task_count(), 4) << name;
  }
  for (const char* name : {"PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"}) {
    ScopedEnvironment env;
    env.set(name, "0");
    EXPECT_TRUE(launched_by_mpi()) << name;
  }
}

TEST(LaunchDetect, SlurmStepsOfSeveralTasksGoThroughMpi) {
  ScopedEnvironment env;
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_STEP_NUM_TASKS", "1");
  EXPECT_FALSE(launched_by_mpi());  // a one-task step, or the batch script
  env.set("SLURM_STEP_NUM_TASKS", "8");
  EXPECT_TRUE(launched_by_mpi());
  EXPECT_EQ(launcher_task_count(), 8);
}

}  // namespace
}  // namespace trainbench
