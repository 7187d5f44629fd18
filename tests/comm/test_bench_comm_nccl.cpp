// `trainbench bench comm` on NCCL and the room for its device buffers, on
// this process's GPU. Built with the NCCL backend and labelled gpu, so that
// scripts/gpu_check.sh runs it; without a GPU each test skips, saying why.
// The refusals without a GPU or without NCCL are test_bench_comm's and
// test_collective_bench's.
#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "comm/bench_buffer.h"
#include "comm/communicator.h"
#include "kernels/device_info.h"
#include "tests/comm/bench_comm_json.h"
#include "tests/support/one_rank_communicator.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

// The collectives on device buffers, on this process's GPU, checked as on
// the host; the one-rank world NCCL makes from the local bootstrap.
TEST(BenchCommNccl, MeasuresOnTheGpuAndChecksTheData) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  const testing::TempDir dir;
  const std::string out = dir.file("comm.json");
  // comm.timeout_s under the test's own limit (150 s in gpu_check.sh): a
  // stalled NCCL ends the run in trainbench's words, which CTest's kill of
  // the test would lose (run_command reads the output at the end).
  const testing::CommandResult run = testing::run_command(
      std::string(TRAINBENCH_BINARY) +
      " bench comm --set comm.backend=nccl --set comm.timeout_s=60 --max-bytes 1M --iters 3 --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const nlohmann::json result = testing::read_json(out);
  EXPECT_EQ(result.at("backend"), "nccl");
  EXPECT_EQ(result.at("buffers"), "gpu");
  EXPECT_FALSE(result.at("library").get<std::string>().empty());
  testing::expect_measured_and_checked(result);
  EXPECT_NE(run.out.find("on each rank's GPU"), std::string::npos) << run.out;
}

// The room asked of the GPU: none for 4 EiB, named with the GPU's free
// memory; a few bytes fit; the host copies are asked of the host's share.
// (Not the edge of the room: gpu_check.sh runs GPU tests side by side, and
// their allocations move the free memory between two questions.)
TEST(BenchCommNccl, RoomForDeviceBuffersIsTheGpusFreeMemoryLessNcclsReserve) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  testing::DeviceBufferStandIn device;
  std::string why;
  const int64_t free_bytes = free_bench_buffer_bytes(device, &why);
  ASSERT_GT(free_bytes, kDeviceBenchReserveBytes) << why;
  const std::string huge = device_bench_room_shortfall(device, int64_t{1} << 62, -1);
  EXPECT_EQ(huge.rfind("the buffers need ", 0), 0u) << huge;
  EXPECT_NE(huge.find("once 1024 MiB is kept for NCCL"), std::string::npos) << huge;
  EXPECT_EQ(device_bench_room_shortfall(device, 4, -1), "");
  EXPECT_NE(device_bench_room_shortfall(device, 1 << 20, 1 << 10).find("host copies"), std::string::npos);
}

}  // namespace
}  // namespace trainbench
