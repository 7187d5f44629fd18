// The MPI communicator on real ranks: CTest runs this binary under
// `mpirun -n 2` and `-n 4` (tests/comm/CMakeLists.txt). Every collective must
// give exactly the expected values: each rank contributes small integers,
// whose sums are exact in fp32.
#include <algorithm>  // std::copy
#include <chrono>
#include <cstdlib>  // std::atoi
#include <cstring>  // std::strncmp
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>   // sleeping to skew the ranks
#include <vector>

#include <gtest/gtest.h>

#include "comm/collective_bench.h"  // the bench harness on buffers apart from the host
#include "comm/communicator.h"
#include "tests/support/forwarding_bench_buffer.h"  // a buffer slow to read back

namespace trainbench {
namespace {

// MPI can be initialised once per process: main() makes the communicator
// every test uses.
Communicator* comm = nullptr;
int expected_ranks = 0;

// What rank `rank` contributes at element i, and the sum over `world` ranks.
float contribution(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 5); }
float sum_over_ranks(int world, int64_t i) {
  return static_cast<float>(world * (world + 1) / 2 + world * (i % 5));
}

std::vector<float> contributions(int64_t count, int64_t first_index = 0) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = contribution(comm->rank(), first_index + i);
  return values;
}

// The index of the first element of `values` that is not the sum over ranks,
// or -1.
int64_t first_wrong_sum(const std::vector<float>& values, int64_t first_index = 0) {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] != sum_over_ranks(comm->world_size(), first_index + static_cast<int64_t>(i)))
      return static_cast<int64_t>(i);
  return -1;
}

TEST(MpiCommunicator, RanksAndHosts) {
  EXPECT_STREQ(comm->backend_name(), "mpi");
  EXPECT_EQ(comm->world_size(), expected_ranks);
  EXPECT_GE(comm->rank(), 0);
  EXPECT_LT(comm->rank(), comm->world_size());
  // All ranks run on this one machine: the local rank is the rank.
  EXPECT_EQ(comm->local_rank(), comm->rank());
  EXPECT_FALSE(comm->host_name().empty());
}

TEST(MpiCommunicator, AllReduceSum) {
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
    std::vector<float> values = contributions(count);
    comm->all_reduce_sum(values.data(), count);
    EXPECT_EQ(first_wrong_sum(values), -1) << count << " floats";
  }
}

TEST(MpiCommunicator, AllGatherDouble) {
  std::vector<double> gathered(static_cast<size_t>(comm->world_size()));
  comm->all_gather(0.5 + comm->rank(), gathered.data());
  for (int r = 0; r < comm->world_size(); ++r) EXPECT_EQ(gathered[r], 0.5 + r);
}

// Every rank leaves the barrier after the slowest one woke from its sleep:
// compared on the host's one steady clock (CLOCK_MONOTONIC, shared by the
// ranks' processes), not each rank's own 190 ms, which a rank that left the
// previous collective late did not see.
TEST(MpiCommunicator, BarrierWaitsForTheSlowestRank) {
  const auto seconds_now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  const bool sleeper = comm->rank() == comm->world_size() - 1;
  if (sleeper) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double woke = sleeper ? seconds_now() : 0.0;
  comm->barrier();
  const double left = seconds_now();
  std::vector<double> woke_at(static_cast<size_t>(comm->world_size()));
  comm->all_gather(woke, woke_at.data());
  EXPECT_GE(left, woke_at.back()) << "rank " << comm->rank() << " left the barrier before the last rank woke";
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  for (int root = 0; root < comm->world_size(); ++root) {
    std::vector<int32_t> data(3000, comm->rank() == root ? root + 7 : -1);
    comm->broadcast(data.data(), static_cast<int64_t>(data.size() * sizeof(int32_t)), root);
    EXPECT_EQ(data, std::vector<int32_t>(3000, root + 7)) << "root " << root;
  }
}

TEST(MpiCommunicator, ReduceScatterSum) {
  const int world = comm->world_size();
  const int64_t block = 1001;
  const std::vector<float> send = contributions(block * world);
  std::vector<float> recv(block);
  comm->reduce_scatter_sum(send.data(), recv.data(), block);
  EXPECT_EQ(first_wrong_sum(recv, comm->rank() * block), -1);

  // In place: the rank's sum lands in the first block.
  std::vector<float> in_place = contributions(block * world);
  comm->reduce_scatter_sum(in_place.data(), in_place.data(), block);
  in_place.resize(block);
  EXPECT_EQ(first_wrong_sum(in_place, comm->rank() * block), -1);
}

TEST(MpiCommunicator, AllGatherFloats) {
  const int world = comm->world_size();
  const int64_t block = 777;
  const std::vector<float> send = contributions(block);
  std::vector<float> recv(block * world);
  comm->all_gather_floats(send.data(), recv.data(), block);
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < block; ++i)
      ASSERT_EQ(recv[r * block + i], contribution(r, i)) << "rank " << r << " element " << i;

  // In place: this rank's block already sits at its place.
  std::vector<float> in_place(block * world, -1.0f);
  std::copy(send.begin(), send.end(), in_place.begin() + comm->rank() * block);
  comm->all_gather_floats(in_place.data() + comm->rank() * block, in_place.data(), block);
  EXPECT_EQ(in_place, recv);
}

TEST(MpiCommunicator, BackgroundAllReducesCompleteInOrder) {
  (void)comm->take_comm_seconds();  // only this test's requests count below
  // Buckets of different sizes, the first the largest: if requests could
  // overtake each other, the small ones would finish first.
  const std::vector<int64_t> counts = {int64_t{1} << 22, 10, 1000, int64_t{1} << 18, 1};
  std::vector<std::vector<float>> buckets;
  std::vector<Communicator::Ticket> tickets;
  int64_t first_index = 0;
  for (int64_t count : counts) {
    buckets.push_back(contributions(count, first_index));
    first_index += count;
  }
  for (std::vector<float>& bucket : buckets)
    tickets.push_back(comm->start_all_reduce_sum(bucket.data(), static_cast<int64_t>(bucket.size())));
  for (size_t k = 1; k < tickets.size(); ++k) EXPECT_GT(tickets[k], tickets[k - 1]);

  // Waiting for the last one means every earlier one is done too.
  EXPECT_GE(comm->wait(tickets.back()), 0.0);
  first_index = 0;
  for (size_t k = 0; k < buckets.size(); ++k) {
    EXPECT_EQ(first_wrong_sum(buckets[k], first_index), -1) << "bucket " << k;
    first_index += counts[k];
  }
  // A finished request's wait returns at once: it does not wait for another
  // request or a peer. (Within 0.5 s, not 10 ms: a loaded machine's
  // scheduler alone can hold a thread that long.)
  for (Communicator::Ticket ticket : tickets) EXPECT_LT(comm->wait(ticket), 0.5);

  const double comm_seconds = comm->take_comm_seconds();
  EXPECT_GT(comm_seconds, 0.0);
  EXPECT_EQ(comm->take_comm_seconds(), 0.0);  // taken
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_GT(comm->last_completion_time(), 0.0);
  EXPECT_LE(comm->last_completion_time(), now);
}

TEST(MpiCommunicator, BlockingCollectivesWhileBackgroundOnesRun) {
  // The main thread's collectives and the progress thread's all-reduces are
  // on different communicators: ranks may interleave them differently.
  std::vector<float> background = contributions(int64_t{1} << 21);
  const Communicator::Ticket ticket =
      comm->start_all_reduce_sum(background.data(), static_cast<int64_t>(background.size()));
  if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<float> blocking = contributions(5000);
  comm->all_reduce_sum(blocking.data(), static_cast<int64_t>(blocking.size()));
  comm->wait(ticket);
  EXPECT_EQ(first_wrong_sum(blocking), -1);
  EXPECT_EQ(first_wrong_sum(background), -1);
}

// The bench harness on buffers apart from their host views (NCCL's GPU
// memory's stand-in, bench_buffer.h), every path including raw MPI: each
// rank's pattern reaches the collective and every rank's result comes back.
TEST(MpiCommunicator, BenchHarnessCopiesToBuffersElsewhereAndChecksWhatComesBack) {
  const CollectiveBenchOptions options{.warmup_iters = 1, .iters = 2, .timeout_s = 60};
  std::vector<CollectiveBenchResult> results =
      bench_collectives(*comm, {4096, 1 << 16}, options, make_separate_host_bench_buffer);
  const std::vector<CollectiveBenchResult> step =
      bench_gradient_step(*comm, {1 << 16, 1000}, options, make_separate_host_bench_buffer);
  results.insert(results.end(), step.begin(), step.end());
  // Two sizes of three collectives and the step, each on its path and raw MPI's.
  ASSERT_EQ(results.size(), 14u);
  for (const CollectiveBenchResult& r : results)
    EXPECT_TRUE(r.check_ok) << r.collective << " " << r.path << " " << r.bytes;
}

// A buffer whose copy back to the host takes 1.2 s, as a large GPU buffer's
// copy and check may: host work between the raw path's calls. The raw
// path's watchdog counted it as a call that made no progress and, with a
// 1 s comm.timeout_s, ended a healthy job (exit 3). Only time inside a call
// counts.
class SlowToReadBack final : public testing::ForwardingBenchBuffer {
 public:
  using ForwardingBenchBuffer::ForwardingBenchBuffer;
  void to_host() override {
    ForwardingBenchBuffer::to_host();
    if (!host().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  }
};

TEST(MpiCommunicator, TheRawPathsWatchdogCountsOnlyTimeInsideACall) {
  const CollectiveBenchOptions options{.warmup_iters = 0, .iters = 2, .timeout_s = 1};
  const std::vector<CollectiveBenchResult> step =
      bench_gradient_step(*comm, {4096}, options, [](int64_t count) -> std::unique_ptr<BenchBuffer> {
        return std::make_unique<SlowToReadBack>(count);
      });
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[1].path, "raw");
  for (const CollectiveBenchResult& r : step) EXPECT_TRUE(r.check_ok) << r.path;
}

// The harness's background all-reduces leave nothing in the communicator's
// comm_s: the next training step would take them as its own (burn-in
// measures the fabric between steps, the network ceiling before step 1).
TEST(MpiCommunicator, BenchHarnessLeavesNoCommSecondsToTheNextStep) {
  comm->take_comm_seconds();
  bench_gradient_step(*comm, {1 << 16, 1 << 16}, CollectiveBenchOptions{.warmup_iters = 1, .iters = 3, .timeout_s = 60});
  bench_collectives(*comm, {1 << 16}, CollectiveBenchOptions{.warmup_iters = 1, .iters = 3, .timeout_s = 60});
  EXPECT_EQ(comm->take_comm_seconds(), 0.0);
}

// Burn-in, the network ceiling and project read the communicator's paths
// only: without the raw path they make no call that only bench comm's
// watchdog bounds (they left its timeout at 300 s whatever comm.timeout_s
// said). The raw path without a timeout is refused, not run unbounded.
TEST(MpiCommunicator, BenchHarnessLeavesTheRawPathOutWhenAskedAndRefusesItWithoutATimeout) {
  const CollectiveBenchOptions without_raw{.warmup_iters = 0, .iters = 1, .raw_path = false};
  std::vector<CollectiveBenchResult> results = bench_collectives(*comm, {4096}, without_raw);
  const std::vector<CollectiveBenchResult> step = bench_gradient_step(*comm, {4096}, without_raw);
  results.insert(results.end(), step.begin(), step.end());
  ASSERT_EQ(results.size(), 4u);
  for (const CollectiveBenchResult& r : results) EXPECT_NE(r.path, "raw") << r.collective;
  EXPECT_THROW(bench_gradient_step(*comm, {4096}, CollectiveBenchOptions{.warmup_iters = 0, .iters = 1}),
               std::invalid_argument);
}

// A rank unwinding from an error abandons its background all-reduces
// before its buffers are freed: the one inside MPI cannot be cancelled, and
// says so (the caller keeps its buffer); the ones not begun are dropped,
// never started on freed memory. Rank 0 queues two while its peers join
// only the first, late: every rank ends having run one, and the
// communicator stays usable for the tests after this one. (Rank 0 gives its
// progress thread 1 s to take the first into MPI: were it still queued, both
// would be dropped and rank 0's wait would never end; 100 ms left that to a
// loaded machine's scheduler.)
TEST(MpiCommunicator, AbandoningDropsWhatHasNotBegunAndNamesWhatIsInFlight) {
  std::vector<float> first = contributions(1000);
  std::vector<float> second(1000, -7.0f);
  if (comm->rank() == 0) {
    const Communicator::Ticket ticket = comm->start_all_reduce_sum(first.data(), 1000);
    (void)comm->start_all_reduce_sum(second.data(), 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the first is inside MPI, waiting for peers
    EXPECT_TRUE(comm->abandon_collectives()) << "the first all-reduce is in flight";
    comm->wait(ticket);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // time for a second one to start, were it kept
    EXPECT_FALSE(comm->abandon_collectives()) << "nothing in flight or queued once the first is done";
    EXPECT_EQ(second, std::vector<float>(1000, -7.0f)) << "the dropped all-reduce wrote its buffer";
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    comm->wait(comm->start_all_reduce_sum(first.data(), 1000));
    EXPECT_FALSE(comm->abandon_collectives());
  }
  EXPECT_EQ(first_wrong_sum(first), -1);
  comm->barrier();
}

TEST(MpiCommunicator, WaitOnATicketNeverStartedIsAnError) {
  EXPECT_THROW(comm->wait(1 << 30), std::invalid_argument);
}

}  // namespace
}  // namespace trainbench

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) trainbench::expected_ranks = std::atoi(argv[i] + 8);
  std::unique_ptr<trainbench::Communicator> comm = trainbench::make_mpi_communicator();
  comm->set_timeout(60);  // a test that leaves the ranks out of step fails, never hangs
  comm->set_context("test_mpi_collectives");
  trainbench::comm = comm.get();
  const int failed = RUN_ALL_TESTS();
  comm.reset();  // MPI_Finalize
  return failed;
}
