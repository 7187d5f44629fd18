// CI has no GPU, so the only proof that the NCCL backend keeps compiling is
// that it was compiled: where the CUDA backend is on and nccl.h and libnccl
// exist, trainbench_comm must contain the NCCL communicator. Runs everywhere.
#include <gtest/gtest.h>

#include <cstdio>     // std::sscanf
#include <cstdlib>    // std::exit
#include <memory>
#include <stdexcept>  // std::logic_error
#include <string>

#include "comm/communicator.h"  // nccl_version, make_nccl_communicator
#include "tests/support/one_rank_communicator.h"

namespace trainbench {
namespace {

bool found(const std::string& path) { return !path.empty() && path.find("NOTFOUND") == std::string::npos; }

TEST(NcclBuild, NcclBackendIsCompiledWheneverNcclIsPresent) {
  const std::string cuda_setting = TRAINBENCH_CUDA_SETTING;
  const std::string nccl_setting = TRAINBENCH_NCCL_SETTING;
  const std::string header = TRAINBENCH_NCCL_HEADER;
  const std::string library = TRAINBENCH_NCCL_LIBRARY_FILE;
  if (!TRAINBENCH_CUDA_BUILT)
    GTEST_SKIP() << "the CUDA backend is not built (TRAINBENCH_CUDA=" << cuda_setting
                 << "): the NCCL backend needs it";
  if (nccl_setting == "OFF") GTEST_SKIP() << "configured with TRAINBENCH_NCCL=OFF";
  if (!found(header)) GTEST_SKIP() << "no nccl.h on this machine: the NCCL backend cannot be compiled here";
  if (!found(library)) GTEST_SKIP() << "nccl.h is at " << header << " but no libnccl was found";
  EXPECT_FALSE(nccl_version().empty())
      << "nccl.h is at " << header << " and libnccl at " << library << " but the NCCL backend was not built";
}

TEST(NcclBuild, VersionIsDottedWhenBuilt) {
  const std::string version = nccl_version();
  if (version.empty()) GTEST_SKIP() << "the NCCL backend is not built";
  // "2.28.9": the library loaded at run time, not the header's.
  int major = 0, minor = 0, patch = 0;
  ASSERT_EQ(std::sscanf(version.c_str(), "%d.%d.%d", &major, &minor, &patch), 3) << version;
  EXPECT_GE(major, 2) << version;
}

TEST(NcclBuild, HostBackendsRefuseWhatOnlyNcclDoes) {
  const std::unique_ptr<Communicator> local = make_local_communicator();
  EXPECT_FALSE(local->device_buffers());
  EXPECT_EQ(local->device_stream(), nullptr);
  EXPECT_THROW(local->wait_for_device_event(nullptr), std::logic_error);
  // One rank: any element type and reduction is the identity.
  float values[3] = {1.0f, 2.0f, 3.0f};
  local->all_reduce(values, 3, DataType::kBfloat16, ReduceOp::kAvg);
  local->wait(local->start_all_reduce(values, 3, DataType::kFloat32, ReduceOp::kAvg));
  EXPECT_EQ(values[2], 3.0f);
}

// Runs with or without a GPU: GPU 1000 exists nowhere, so making the
// communicator is an environment error (exit 3) with a message, never a crash.
TEST(NcclBuild, NoUsableGpuIsAnEnvironmentErrorWithAMessage) {
  if (nccl_version().empty()) GTEST_SKIP() << "the NCCL backend is not built";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: CUDA does not survive fork
  EXPECT_EXIT(
      {
        make_nccl_communicator(make_local_communicator(), 1000, 10.0);
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "comm: the nccl backend .*GPU");
}

// A host backend that keeps the interface's defaults for the general
// all-reduce: it records what reached its fp32-sum collectives.
class RecordingHostCommunicator final : public testing::OneRankCommunicator {
 public:
  const char* backend_name() const override { return "recording"; }
  void all_reduce_sum(float* data, int64_t count) override {
    last_data = data;
    last_count = count;
  }
  Ticket start_all_reduce_sum(float* data, int64_t count) override {
    last_data = data;
    last_count = count;
    return 7;
  }
  double wait(Ticket) override { return 0.0; }
  [[noreturn]] void abort(int exit_code, const std::string&) override { std::exit(exit_code); }

  float* last_data = nullptr;
  int64_t last_count = 0;
};

TEST(NcclBuild, InterfaceDefaultsForwardFp32SumsAndRefuseTheRest) {
  RecordingHostCommunicator comm;
  float values[4] = {};
  comm.all_reduce(values, 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(comm.last_data, values);
  EXPECT_EQ(comm.last_count, 4);
  EXPECT_EQ(comm.start_all_reduce(values + 1, 3, DataType::kFloat32, ReduceOp::kSum), 7);
  EXPECT_EQ(comm.last_data, values + 1);
  EXPECT_THROW(comm.all_reduce(values, 4, DataType::kBfloat16, ReduceOp::kSum), std::logic_error);
  EXPECT_THROW(comm.all_reduce(values, 4, DataType::kFloat32, ReduceOp::kAvg), std::logic_error);
  EXPECT_THROW(comm.start_all_reduce(values, 4, DataType::kBfloat16, ReduceOp::kAvg), std::logic_error);
  EXPECT_THROW(comm.wait_for_device_event(nullptr), std::logic_error);
}

}  // namespace
}  // namespace trainbench
