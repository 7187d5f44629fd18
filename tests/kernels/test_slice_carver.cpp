// SliceCarver: consecutive slices of one allocation, each on its alignment,
// and the counting pass (null base) that sizes the allocation.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/slice_carver.h"

namespace trainbench {
namespace {

TEST(SliceCarver, PacksSlicesBackToBackByDefault) {
  std::vector<float> buffer(10);
  SliceCarver<float> carve(buffer.data());
  EXPECT_EQ(carve.take(3), buffer.data());
  EXPECT_EQ(carve.take(5), buffer.data() + 3);
  EXPECT_EQ(carve.take(2), buffer.data() + 8);
  EXPECT_EQ(carve.used(), 10);
}

TEST(SliceCarver, StartsEverySliceOnItsAlignment) {
  std::vector<short> buffer(64);
  SliceCarver<short> carve(buffer.data(), 8);
  EXPECT_EQ(carve.take(3), buffer.data());
  EXPECT_EQ(carve.take(8), buffer.data() + 8);   // 3 rounded up to 8
  EXPECT_EQ(carve.take(9), buffer.data() + 16);  // an exact multiple adds no gap
  EXPECT_EQ(carve.take(0), buffer.data() + 32);  // 9 rounded up to 16
  EXPECT_EQ(carve.take(1), buffer.data() + 32);  // an empty slice takes no room
  EXPECT_EQ(carve.used(), 40);
}

TEST(SliceCarver, ACountingPassReturnsNullAndUsesWhatTheRealPassDoes) {
  SliceCarver<double> count(nullptr, 4);
  std::vector<int64_t> sizes = {5, 1, 12, 7};
  for (int64_t n : sizes) EXPECT_EQ(count.take(n), nullptr);
  EXPECT_EQ(count.used(), 8 + 4 + 12 + 8);
  std::vector<double> buffer(count.used());
  SliceCarver<double> real(buffer.data(), 4);
  double* last = nullptr;
  for (int64_t n : sizes) last = real.take(n);
  EXPECT_EQ(real.used(), count.used());
  EXPECT_LE(last + sizes.back(), buffer.data() + buffer.size());
}

}  // namespace
}  // namespace trainbench
