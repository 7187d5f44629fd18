// CI has no GPU, so the only proof that the CUDA code keeps compiling is that
// it was compiled: where nvcc exists and TRAINBENCH_CUDA is not OFF, the
// binary must contain the CUDA kernels.
#include <gtest/gtest.h>

#include <string>

#include "kernels/device_info.h"

namespace trainbench {
namespace {

TEST(CudaBuild, CudaSourcesAreCompiledWheneverNvccIsPresent) {
  const std::string nvcc = TRAINBENCH_NVCC_PATH;
  const std::string setting = TRAINBENCH_CUDA_SETTING;
  if (nvcc.empty() || nvcc.find("NOTFOUND") != std::string::npos)
    GTEST_SKIP() << "no nvcc on this machine: the CUDA sources cannot be compiled here";
  if (setting == "OFF") GTEST_SKIP() << "configured with TRAINBENCH_CUDA=OFF";
  const std::string info = cuda_build_info();
  EXPECT_NE(info.find("CUDA "), std::string::npos)
      << "nvcc is at " << nvcc << " but the CUDA sources were not built";
  EXPECT_NE(info.find("sm_90"), std::string::npos) << info << ": H100/H200 code must be built";
  EXPECT_NE(info.find("sm_80"), std::string::npos) << info << ": A100 code must be built";
}

TEST(CudaBuild, NoGpuIsAnAnswerNotACrash) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) {
    EXPECT_FALSE(inventory.why_none.empty());
  }
  for (const GpuInfo& gpu : inventory.gpus) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.memory_bytes, 0);
  }
}

}  // namespace
}  // namespace trainbench
