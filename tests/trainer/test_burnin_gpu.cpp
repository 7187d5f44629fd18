// Burn-in's GPU health probe (kernels/gpu_health.h) on the GPU the engine
// would use. Labelled gpu, so that scripts/gpu_check.sh runs it; without a
// GPU it checks that the probe is absent and says why, then skips.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "kernels/device_info.h"
#include "kernels/gpu_health.h"

namespace trainbench {
namespace {

TEST(BurninGpuHealth, OpensTheEnginesGpuAndReadsIt) {
  std::string why_not;
  const std::unique_ptr<GpuHealthProbe> probe = open_gpu_health(0, &why_not);
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) {
    EXPECT_EQ(probe, nullptr) << "a probe of no GPU";
    EXPECT_FALSE(why_not.empty());
    GTEST_SKIP() << "no GPU: " << inventory.why_none << " (the probe: " << why_not << ")";
  }
  ASSERT_NE(probe, nullptr) << why_not;
  EXPECT_FALSE(probe->gpu_name().empty());
  const GpuHealthSample sample = probe->sample();
  EXPECT_GT(sample.temperature_c, 0) << probe->gpu_name();
  EXPECT_GT(sample.sm_clock_mhz, 0);
  EXPECT_GE(sample.clock_event_reasons, 0);
}

}  // namespace
}  // namespace trainbench
