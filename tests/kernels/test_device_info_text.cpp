// A GPU's UUID and PCI bus id as nvidia-smi prints them: what a verdict
// names a card by, in any build.
#include <gtest/gtest.h>

#include "kernels/device_info.h"

namespace trainbench {
namespace {

TEST(GpuIdentity, IsWrittenAsNvidiaSmiWritesIt) {
  const unsigned char bytes[16] = {0x8f, 0x0e, 0x9c, 0x64, 0x1c, 0x57, 0x3f, 0x4b,
                                   0xa9, 0xd2, 0x0c, 0x5b, 0x1e, 0x7a, 0x6f, 0x10};
  EXPECT_EQ(gpu_uuid_text(bytes), "GPU-8f0e9c64-1c57-3f4b-a9d2-0c5b1e7a6f10");
  EXPECT_EQ(pci_bus_id_text(0, 0x19, 0), "00000000:19:00.0");
  EXPECT_EQ(pci_bus_id_text(1, 0xdb, 0x1f), "00000001:DB:1F.0");
}

// A driver (or virtual GPU) that reports no UUID gives 16 zero bytes: that
// is unknown, not one UUID every such GPU shares, which made the ranks'
// GPU-sharing check take a job of one GPU per rank for one GPU.
TEST(GpuIdentity, AnAllZeroUuidIsUnknown) {
  const unsigned char zeros[16] = {};
  EXPECT_EQ(gpu_uuid_text(zeros), "");
  unsigned char last_bit[16] = {};
  last_bit[15] = 1;
  EXPECT_EQ(gpu_uuid_text(last_bit), "GPU-00000000-0000-0000-0000-000000000001");
}

}  // namespace
}  // namespace trainbench
