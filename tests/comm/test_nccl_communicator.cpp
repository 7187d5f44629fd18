// The NCCL communicator on a GPU: world size 1 on the local bootstrap (what
// scripts/gpu_check.sh runs), or N ranks under `mpirun -np N` on a machine
// with N GPUs (the MPI bootstrap; each rank takes the GPU of its local rank).
// Every collective's result is checked element by element: each rank
// contributes small integers, whose sums and averages are exact in fp32 and
// in bf16. Without a GPU every test skips with the reason.
#include <cuda_bf16.h>     // __nv_bfloat16 and its host conversions
#include <cuda_runtime.h>  // device buffers, streams, events

#include <gtest/gtest.h>

#include <algorithm>  // std::copy
#include <atomic>     // the flag a delayed host function sets
#include <chrono>
#include <cmath>      // std::abs
#include <cstdint>    // int64_t
#include <cstdio>     // std::printf
#include <cstdlib>    // std::exit
#include <memory>
#include <stdexcept>  // std::runtime_error
#include <string>
#include <thread>     // std::this_thread::sleep_for
#include <utility>    // std::move
#include <vector>

#include "comm/bench_buffer.h"      // bench comm's buffers on the GPU
#include "comm/collective_bench.h"  // bench comm's harness on NCCL
#include "comm/communicator.h"  // make_nccl_communicator and its bootstraps

namespace trainbench {
namespace {

using bf16 = __nv_bfloat16;
using Clock = std::chrono::steady_clock;

void cuda_ok(cudaError_t result, const char* call) {
  if (result != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(result));
}
#define CUDA_OK(call) cuda_ok((call), #call)

// Why this process cannot run the GPU tests, or "" when it can.
std::string why_no_gpu() {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) return std::string("no GPU: cudaGetDeviceCount: ") + cudaGetErrorString(result);
  if (count == 0) return "no GPU: cudaGetDeviceCount found 0 devices";
  return "";
}

// One NCCL communicator for the whole binary (MPI can be initialised once per
// process, and NCCL init costs a second): made by the first test that needs
// it, destroyed by the environment before CUDA shuts down.
struct SharedCommunicator {
  bool tried = false;
  std::string why_not;
  std::unique_ptr<Communicator> bootstrap_only;  // a rank that has no GPU still finalizes MPI
  std::unique_ptr<Communicator> comm;
};

SharedCommunicator& shared() {
  static SharedCommunicator instance;
  return instance;
}

Communicator* shared_communicator(std::string& why_not) {
  SharedCommunicator& s = shared();
  if (!s.tried) {
    s.tried = true;
    s.why_not = why_no_gpu();
    if (s.why_not.empty()) {
      std::unique_ptr<Communicator> bootstrap =
          launched_by_mpi() ? make_mpi_communicator() : make_local_communicator();
      int devices = 0;
      CUDA_OK(cudaGetDeviceCount(&devices));
      if (!bootstrap) {
        // Under mpirun without the MPI backend every rank would be a world of
        // its own on GPU 0, and pass: an N-rank check that never formed one.
        s.why_not = "launched by mpirun, but the MPI backend is not built: no multi-rank communicator";
      } else if (nccl_version().empty()) {
        s.why_not = "the NCCL backend is not built";
      } else if (bootstrap->local_rank() >= devices) {
        s.why_not = "local rank " + std::to_string(bootstrap->local_rank()) + " has no GPU of its own (" +
                    std::to_string(devices) + " visible)";
        s.bootstrap_only = std::move(bootstrap);
      } else {
        const int device = bootstrap->local_rank();
        s.comm = make_nccl_communicator(std::move(bootstrap), device, 120.0);
        s.comm->set_timeout(120.0);
      }
    }
  }
  why_not = s.why_not;
  return s.comm.get();
}

class DestroyCommunicatorAtEnd : public ::testing::Environment {
 public:
  void TearDown() override {
    shared().comm.reset();
    shared().bootstrap_only.reset();
  }
};
[[maybe_unused]] ::testing::Environment* const destroy_at_end =
    ::testing::AddGlobalTestEnvironment(new DestroyCommunicatorAtEnd);

// A device array of T, filled from and read back to the host.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(int64_t count) : count_(count) {
    CUDA_OK(cudaMalloc(&data_, static_cast<size_t>(count_ > 0 ? count_ : 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(static_cast<int64_t>(values.size())) {
    upload(values);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  void upload(const std::vector<T>& values) {
    CUDA_OK(cudaMemcpy(data_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> values(static_cast<size_t>(count_));
    CUDA_OK(cudaMemcpy(values.data(), data_, values.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return values;
  }

 private:
  T* data_ = nullptr;
  int64_t count_ = 0;
};

// What rank `rank` contributes at element i; the sum and average over
// `world` ranks. Small integers (and halves): exact in fp32 and bf16.
float contribution(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 5); }
float sum_over_ranks(int world, int64_t i) {
  return static_cast<float>(world * (world + 1) / 2 + world * (i % 5));
}
float average_over_ranks(int world, int64_t i) {
  return sum_over_ranks(world, i) / static_cast<float>(world);
}
// The expected values of an all-reduce, element by element.
auto summed(int world) {
  return [world](int64_t i) { return sum_over_ranks(world, i); };
}
auto averaged(int world) {
  return [world](int64_t i) { return average_over_ranks(world, i); };
}

std::vector<float> contributions(int rank, int64_t count, int64_t first_index = 0) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = contribution(rank, first_index + i);
  return values;
}

std::vector<bf16> to_bf16(const std::vector<float>& values) {
  std::vector<bf16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16(values[i]);
  return out;
}

std::vector<float> to_float(const std::vector<bf16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

// The first index where `values` differs from expected(i) by more than
// `relative` × |expected|, or -1.
template <typename Expected>
int64_t first_mismatch(const std::vector<float>& values, Expected expected, double relative = 0.0) {
  for (size_t i = 0; i < values.size(); ++i) {
    const double want = expected(static_cast<int64_t>(i));
    if (std::abs(values[i] - want) > relative * std::abs(want)) return static_cast<int64_t>(i);
  }
  return -1;
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why_not;
    comm = shared_communicator(why_not);
    if (comm == nullptr) GTEST_SKIP() << why_not;
    rank = comm->rank();
    world = comm->world_size();
  }

  Communicator* comm = nullptr;
  int rank = 0;
  int world = 1;
};

TEST_F(NcclCommunicatorTest, DescribesItself) {
  EXPECT_STREQ(comm->backend_name(), "nccl");
  EXPECT_TRUE(comm->device_buffers());
  EXPECT_NE(comm->device_stream(), nullptr);
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, world);
  EXPECT_FALSE(comm->host_name().empty());
  std::printf("NCCL %s, rank %d of %d, local rank %d on %s\n", nccl_version().c_str(), rank, world,
              comm->local_rank(), comm->host_name().c_str());
}

TEST_F(NcclCommunicatorTest, AllReduceSumFp32) {
  for (int64_t count : {int64_t{1}, int64_t{1000}, (int64_t{1} << 22) + 3}) {
    DeviceArray<float> data(contributions(rank, count));
    comm->all_reduce_sum(data.get(), count);
    EXPECT_EQ(first_mismatch(data.download(), summed(world)), -1) << count << " floats";
  }
}

TEST_F(NcclCommunicatorTest, AllReduceSumBf16) {
  for (int64_t count : {int64_t{1}, int64_t{4097}, int64_t{1} << 20}) {
    DeviceArray<bf16> data(to_bf16(contributions(rank, count)));
    comm->all_reduce(data.get(), count, DataType::kBfloat16, ReduceOp::kSum);
    EXPECT_EQ(first_mismatch(to_float(data.download()), summed(world)), -1) << count << " bf16";
  }
}

TEST_F(NcclCommunicatorTest, AllReduceAverageFp32AndBf16) {
  const int64_t count = 10007;
  DeviceArray<float> fp32(contributions(rank, count));
  comm->all_reduce(fp32.get(), count, DataType::kFloat32, ReduceOp::kAvg);
  // NCCL may scale before summing: one rounding per rank at most.
  EXPECT_EQ(first_mismatch(fp32.download(), averaged(world), 1e-6), -1);
  DeviceArray<bf16> half(to_bf16(contributions(rank, count)));
  comm->all_reduce(half.get(), count, DataType::kBfloat16, ReduceOp::kAvg);
  EXPECT_EQ(first_mismatch(to_float(half.download()), averaged(world), 1.0 / 128), -1);
}

TEST_F(NcclCommunicatorTest, ReduceScatterOutOfPlaceAndInPlace) {
  const int64_t count = 1001;  // per rank
  const std::vector<float> send_values = contributions(rank, count * world);
  const auto expected = [&](int64_t i) { return sum_over_ranks(world, rank * count + i); };

  DeviceArray<float> send(send_values);
  DeviceArray<float> recv(count);
  comm->reduce_scatter_sum(send.get(), recv.get(), count);
  EXPECT_EQ(first_mismatch(recv.download(), expected), -1) << "out of place";

  // In place: the result lands in the first block (the interface's rule).
  DeviceArray<float> both(send_values);
  comm->reduce_scatter_sum(both.get(), both.get(), count);
  std::vector<float> first_block = both.download();
  first_block.resize(static_cast<size_t>(count));
  EXPECT_EQ(first_mismatch(first_block, expected), -1) << "in place";
}

TEST_F(NcclCommunicatorTest, AllGatherFloatsOutOfPlaceAndInPlace) {
  const int64_t count = 999;  // per rank
  const auto expected = [&](int64_t i) { return contribution(static_cast<int>(i / count), i % count); };

  DeviceArray<float> send(contributions(rank, count));
  DeviceArray<float> recv(count * world);
  comm->all_gather_floats(send.get(), recv.get(), count);
  EXPECT_EQ(first_mismatch(recv.download(), expected), -1) << "out of place";

  // In place: this rank's block already sits at its place.
  std::vector<float> initial(static_cast<size_t>(count * world), -1.0f);
  const std::vector<float> own = contributions(rank, count);
  std::copy(own.begin(), own.end(), initial.begin() + rank * count);
  DeviceArray<float> both(initial);
  comm->all_gather_floats(both.get() + rank * count, both.get(), count);
  EXPECT_EQ(first_mismatch(both.download(), expected), -1) << "in place";
}

TEST_F(NcclCommunicatorTest, BackgroundRequestsCompleteInOrderWithTimes) {
  // Like the gradient buckets of a step: a small first bucket, then big ones.
  const std::vector<int64_t> counts = {1000, int64_t{1} << 22, int64_t{1} << 22, 12345, int64_t{1} << 24};
  std::vector<std::unique_ptr<DeviceArray<float>>> buckets;
  for (int64_t count : counts)
    buckets.push_back(std::make_unique<DeviceArray<float>>(contributions(rank, count)));
  comm->take_comm_seconds();  // nothing earlier counts

  const double before = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  std::vector<Communicator::Ticket> tickets;
  for (size_t b = 0; b < counts.size(); ++b)
    tickets.push_back(comm->start_all_reduce_sum(buckets[b]->get(), counts[b]));
  for (size_t b = 1; b < tickets.size(); ++b) EXPECT_GT(tickets[b], tickets[b - 1]);

  // Waiting for the last one means every earlier one is done: one stream.
  EXPECT_GE(comm->wait(tickets.back()), 0.0);
  const double completed = comm->last_completion_time();
  const double after = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  for (size_t b = 0; b + 1 < tickets.size(); ++b) EXPECT_LT(comm->wait(tickets[b]), 0.01) << "bucket " << b;
  EXPECT_GE(completed, before);
  EXPECT_LE(completed, after);

  const double comm_s = comm->take_comm_seconds();
  EXPECT_GT(comm_s, 0.0) << "comm_s from the CUDA events";
  EXPECT_LT(comm_s, after - before + 1e-3);
  EXPECT_EQ(comm->take_comm_seconds(), 0.0) << "taken once";
  for (size_t b = 0; b < counts.size(); ++b)
    EXPECT_EQ(first_mismatch(buckets[b]->download(), summed(world)), -1) << "bucket " << b;
  std::printf("5 background all-reduces (%.1f MiB): comm_s %.3f ms\n",
              (1000 + 2 * (1 << 22) + 12345 + (1 << 24)) * 4.0 / (1 << 20), comm_s * 1e3);
}

TEST_F(NcclCommunicatorTest, BackgroundBf16AverageAndBlockingCallsBetween) {
  const int64_t count = 65537;
  DeviceArray<bf16> grads(to_bf16(contributions(rank, count)));
  const Communicator::Ticket ticket =
      comm->start_all_reduce(grads.get(), count, DataType::kBfloat16, ReduceOp::kAvg);
  // A blocking collective issued meanwhile runs after it on the same stream.
  DeviceArray<float> other(contributions(rank, 10));
  comm->all_reduce_sum(other.get(), 10);
  EXPECT_LT(comm->wait(ticket), 0.01) << "already done: the blocking call waited for it";
  EXPECT_EQ(first_mismatch(to_float(grads.download()), averaged(world), 1.0 / 128), -1);
  EXPECT_EQ(first_mismatch(other.download(), summed(world)), -1);
  EXPECT_THROW(comm->wait(ticket + 1000), std::invalid_argument);
}

// The host function that holds a user stream: sleeps, then says it is done.
std::atomic<bool> producer_done{false};
void CUDART_CB slow_producer(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  producer_done = true;
}

TEST_F(NcclCommunicatorTest, WaitsForTheCallersDeviceEventWithoutBlockingTheHost) {
  const int64_t count = 4096;
  DeviceArray<float> data(contributions(rank, count));
  cudaStream_t compute = nullptr;
  cudaEvent_t ready = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  producer_done = false;
  // "Backward" on the compute stream takes 300 ms, then the bucket is ready.
  CUDA_OK(cudaLaunchHostFunc(compute, slow_producer, nullptr));
  CUDA_OK(cudaEventRecord(ready, compute));

  const Clock::time_point start = Clock::now();
  comm->wait_for_device_event(ready);
  const Communicator::Ticket ticket = comm->start_all_reduce_sum(data.get(), count);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 0.2) << "the host must not block";
  comm->wait(ticket);
  EXPECT_TRUE(producer_done) << "the all-reduce ended before the event it had to wait for";
  EXPECT_EQ(first_mismatch(data.download(), summed(world)), -1);
  CUDA_OK(cudaEventDestroy(ready));
  CUDA_OK(cudaStreamDestroy(compute));
}

// bench comm's harness on NCCL: its buffers on this rank's GPU
// (bench_buffer.h), filled and checked through copies; every collective's
// data check holds and every time is a real one.
TEST_F(NcclCommunicatorTest, BenchHarnessRunsOnDeviceBuffers) {
  std::string why;
  const int64_t free_bytes = free_bench_buffer_bytes(*comm, &why);
  EXPECT_GT(free_bytes, int64_t{1} << 20) << why;
  const std::unique_ptr<BenchBuffer> buffer = make_bench_buffer(*comm, 4);
  cudaPointerAttributes attributes{};
  CUDA_OK(cudaPointerGetAttributes(&attributes, buffer->data()));
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);

  const CollectiveBenchOptions options{.warmup_iters = 1, .iters = 3};
  std::vector<CollectiveBenchResult> results = bench_collectives(*comm, {4096, 1 << 22}, options);
  const std::vector<CollectiveBenchResult> step = bench_gradient_step(*comm, {1 << 20, 4 << 20, 1000}, options);
  results.insert(results.end(), step.begin(), step.end());
  ASSERT_EQ(results.size(), 7u);  // no raw path: that is MPI's, on host buffers
  for (const CollectiveBenchResult& r : results) {
    EXPECT_TRUE(r.check_ok) << r.collective << " " << r.path << " " << r.bytes;
    EXPECT_GT(r.time_s, 0.0) << r.collective << " " << r.bytes;
    std::printf("bench on NCCL: %-14s %-8s %9ld bytes %10.1f us busbw %.1f GB/s\n", r.collective.c_str(),
                r.path.c_str(), static_cast<long>(r.bytes), r.time_s * 1e6, r.busbw_gbs);
  }
}

TEST_F(NcclCommunicatorTest, ControlCollectivesUseHostMemory) {
  std::vector<double> gathered(static_cast<size_t>(world));
  comm->all_gather(10.0 + rank, gathered.data());
  for (int r = 0; r < world; ++r) EXPECT_EQ(gathered[static_cast<size_t>(r)], 10.0 + r);
  int value = rank == 0 ? 42 : 0;
  comm->broadcast(&value, sizeof(value), 0);
  EXPECT_EQ(value, 42);
  comm->barrier();
}

// ---- Failures: one rank, in a child process (death tests) ----

// Threadsafe death tests re-execute the binary: a forked child of a process
// that already initialised CUDA cannot use the GPU.
std::string why_no_death_test() {
  const std::string why = why_no_gpu();
  if (!why.empty()) return why;
  if (nccl_version().empty()) return "the NCCL backend is not built";
  if (launched_by_mpi()) return "the failure tests run on one rank, not under mpirun";
  return "";
}

std::atomic<bool> release_stream{false};
void CUDART_CB hold_stream(void*) {
  // Long past the 1 s timeout, bounded so that the child process still ends.
  for (int i = 0; i < 50 && !release_stream; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

TEST(NcclCommunicatorFailures, StalledAllReduceAbortsNamingCollectiveAndContext) {
  const std::string why = why_no_death_test();
  if (!why.empty()) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::unique_ptr<Communicator> comm = make_nccl_communicator(make_local_communicator(), 0, 60.0);
        DeviceArray<float> data(1024);
        // A stalled peer, as this rank sees it: the comm stream does not move.
        CUDA_OK(cudaLaunchHostFunc(static_cast<cudaStream_t>(comm->device_stream()), hold_stream, nullptr));
        comm->set_timeout(1.0);
        comm->set_context("step 12");
        comm->wait(comm->start_all_reduce_sum(data.get(), 1024));
        std::exit(0);
      },
      ::testing::ExitedWithCode(3),
      "nccl background all_reduce of 4096 bytes timed out after 1 s at step 12");
}

TEST(NcclCommunicatorFailures, StalledBlockingCollectiveAborts) {
  const std::string why = why_no_death_test();
  if (!why.empty()) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::unique_ptr<Communicator> comm = make_nccl_communicator(make_local_communicator(), 0, 60.0);
        DeviceArray<float> data(256);
        CUDA_OK(cudaLaunchHostFunc(static_cast<cudaStream_t>(comm->device_stream()), hold_stream, nullptr));
        comm->set_timeout(1.0);
        comm->set_context("checkpoint 3");
        comm->all_reduce(data.get(), 256, DataType::kBfloat16, ReduceOp::kAvg);
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "nccl all_reduce of 512 bytes timed out after 1 s at checkpoint 3");
}

// A bootstrap that claims a world of two ranks of which only rank 0 exists:
// NCCL's init waits for a rank that never joins.
class WorldOfTwoWithOneMissing final : public Communicator {
 public:
  const char* backend_name() const override { return "fake"; }
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  int local_rank() const override { return 0; }
  std::string host_name() const override { return local_->host_name(); }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(double value, double* out) override { out[0] = out[1] = value; }
  void barrier() override {}
  void broadcast(void*, int64_t, int) override {}  // rank 0 is the root
  void reduce_scatter_sum(const float*, float*, int64_t) override {}
  void all_gather_floats(const float*, float*, int64_t) override {}
  Ticket start_all_reduce_sum(float*, int64_t) override { return 0; }
  double wait(Ticket) override { return 0.0; }
  double take_comm_seconds() override { return 0.0; }
  double last_completion_time() const override { return 0.0; }
  void set_timeout(double) override {}
  void set_context(const std::string&) override {}
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    local_->abort(exit_code, message);
    std::exit(exit_code);  // not reached: the local abort exits
  }

 private:
  std::unique_ptr<Communicator> local_ = make_local_communicator();
};

TEST(NcclCommunicatorFailures, InitAbortsWhenARankNeverJoins) {
  const std::string why = why_no_death_test();
  if (!why.empty()) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        make_nccl_communicator(std::make_unique<WorldOfTwoWithOneMissing>(), 0, 2.0);
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "nccl init timed out after 2 s .rank 0 of 2, GPU 0.");
}

TEST(NcclCommunicatorFailures, AMissingGpuIsAnEnvironmentError) {
  const std::string why = why_no_death_test();
  if (!why.empty()) GTEST_SKIP() << why;
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        make_nccl_communicator(make_local_communicator(), devices, 10.0);
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "asked for GPU " + std::to_string(devices));
}

}  // namespace
}  // namespace trainbench
