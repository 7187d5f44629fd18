// StateImage: sections at 4096-aligned offsets of one aligned allocation,
// padding zeroed whatever the allocator hands out; and how sections are
// split over a rank's files.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "checkpoint/checkpoint_files.h"  // assign_sections_to_files
#include "checkpoint/state_image.h"

namespace trainbench {
namespace {

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kImageAlignment == 0; }

// An allocator as bad as allowed: 64-byte aligned but never 4096-aligned,
// memory full of garbage. Counts what it hands out and gets back.
struct PoorAllocator {
  int allocations = 0;
  int releases = 0;
  void* last = nullptr;
  StagingAllocator get() {
    return {[this](size_t bytes) -> void* {
              const size_t size = (bytes + 64 + 4095) / 4096 * 4096;
              unsigned char* base = static_cast<unsigned char*>(std::aligned_alloc(4096, size));
              if (base == nullptr) return nullptr;
              std::memset(base, 0xAB, size);
              ++allocations;
              last = base + 64;
              return base + 64;
            },
            [this](void* memory) {
              ++releases;
              std::free(static_cast<unsigned char*>(memory) - 64);
            }};
  }
};

TEST(StateImage, SectionsStartAtAlignedOffsetsAndTheSizeIsPadded) {
  const StateImage image({{"a", 10}, {"b", 4096}, {"empty", 0}, {"c", 5000}});
  ASSERT_EQ(image.sections().size(), 4u);
  EXPECT_EQ(image.sections()[0].offset, 0);
  EXPECT_EQ(image.sections()[1].offset, 4096);
  EXPECT_EQ(image.sections()[2].offset, 8192);
  EXPECT_EQ(image.sections()[3].offset, 8192);
  EXPECT_EQ(image.sections()[3].bytes, 5000);
  EXPECT_EQ(image.bytes(), 8192 + 8192);
  EXPECT_TRUE(aligned(image.data()));
  for (size_t i = 0; i < image.sections().size(); ++i) EXPECT_TRUE(aligned(image.section_data(i)));
  EXPECT_EQ(image.find("c"), 3);
  EXPECT_EQ(image.find("nope"), -1);
  EXPECT_EQ(image.section_data(3), image.data() + 8192);
}

TEST(StateImage, AlignsAndZeroesPaddingWithAPoorAllocator) {
  PoorAllocator poor;
  {
    StateImage image({{"a", 10}, {"b", 100}}, poor.get());
    EXPECT_TRUE(aligned(image.data())) << "data rounded up to 4096 from a 64-byte aligned allocation";
    EXPECT_EQ(image.bytes(), 8192);
    // The padding after each section is zero; the sections are left to the caller.
    for (const SectionPlacement& s : image.sections())
      for (int64_t i = s.offset + s.bytes; i < s.offset + 4096; ++i)
        ASSERT_EQ(image.data()[i], 0) << "padding byte " << i;
    EXPECT_EQ(image.data()[0], 0xAB) << "section bytes are not touched (they are about to be overwritten)";
    EXPECT_EQ(poor.allocations, 1);
  }
  EXPECT_EQ(poor.releases, 1) << "released through the allocator, with the pointer it returned";
}

TEST(StateImage, DefaultAllocatorZeroesPadding) {
  StateImage image({{"x", 1}});
  EXPECT_EQ(image.bytes(), 4096);
  for (int64_t i = 1; i < 4096; ++i) ASSERT_EQ(image.data()[i], 0);
}

TEST(StateImage, RejectsNegativeSizesAndRepeatedNames) {
  EXPECT_THROW(StateImage({{"a", -1}}), std::invalid_argument);
  EXPECT_THROW(StateImage({{"a", 1}, {"a", 2}}), std::invalid_argument);
}

TEST(StateImage, AllocatorFailureIsBadAlloc) {
  const StagingAllocator failing{[](size_t) -> void* { return nullptr; }, {}};
  EXPECT_THROW(StateImage({{"a", 4096}}, failing), std::bad_alloc);
}

TEST(StateImage, EmptyImageHasNoMemory) {
  const StateImage image({});
  EXPECT_EQ(image.bytes(), 0);
  EXPECT_EQ(image.data(), nullptr);
}

TEST(StateImage, MovesOwnership) {
  PoorAllocator poor;
  {
    StateImage first({{"a", 100}}, poor.get());
    unsigned char* data = first.data();
    StateImage second(std::move(first));
    EXPECT_EQ(second.data(), data);
    EXPECT_EQ(first.data(), nullptr);
    EXPECT_EQ(first.bytes(), 0);
    EXPECT_TRUE(first.sections().empty());
    StateImage third({{"b", 1}}, poor.get());
    third = std::move(second);  // releases third's own memory
    EXPECT_EQ(poor.releases, 1);
    EXPECT_EQ(third.data(), data);
    EXPECT_EQ(third.find("a"), 0);
  }
  EXPECT_EQ(poor.allocations, 2);
  EXPECT_EQ(poor.releases, 2);
}

// A rank stages only its slice of an image the ranks hold alike: the
// allocation is the held bytes' (and the alignment's), addresses are the
// image's offsets mapped into it, and what lies outside is refused.
TEST(StateImage, HoldsOnlyTheBytesItIsGiven) {
  struct Counting {
    size_t asked = 0;
    StagingAllocator get() {
      return {[this](size_t bytes) {
                asked = bytes;
                return std::malloc(bytes);
              },
              [](void* memory) { std::free(memory); }};
    }
  } counting;
  // a: [0, 8192) with 10 bytes of padding; b: [8192, 16384); c: [16384, 20480).
  const std::vector<SectionSpec> sections = {{"a", 8182}, {"b", 8192}, {"c", 4096}};
  EXPECT_EQ(image_size(sections), 20480);
  {
    PoorAllocator poor;  // garbage everywhere: the held padding must come out zeroed
    StateImage image(sections, poor.get(), HeldBytes{4096, 8192});
    EXPECT_EQ(image.bytes(), 20480) << "the layout is the whole image's";
    EXPECT_EQ(image.held_from(), 4096);
    EXPECT_EQ(image.held_bytes(), 8192);
    EXPECT_TRUE(aligned(image.data()));
    EXPECT_EQ(image.at(4096), image.data());
    EXPECT_EQ(image.at(8192, 4096), image.data() + 4096);
    for (int64_t i = 8182; i < 8192; ++i) ASSERT_EQ(*image.at(i), 0) << "a's padding byte " << i;
    EXPECT_EQ(*image.at(8181), 0xAB) << "a's own bytes are left to the copy";
    EXPECT_THROW(image.at(0), std::out_of_range);
    EXPECT_THROW(image.at(8192, 4097), std::out_of_range);
    EXPECT_THROW(image.section_data(0), std::out_of_range) << "a is held only in part";
    EXPECT_THROW(image.section_data(2), std::out_of_range) << "c is not held";
  }
  {
    StateImage image(sections, counting.get(), HeldBytes{8192, -1});
    EXPECT_EQ(counting.asked, 12288u + 4096u) << "the held bytes and one alignment unit, not the whole image";
    EXPECT_EQ(image.section_data(1), image.data());
    EXPECT_EQ(image.section_data(2), image.data() + 8192);
  }
  const StateImage none(sections, counting.get(), HeldBytes{20480, 0});
  EXPECT_EQ(none.data(), nullptr) << "an empty slice holds nothing";
  EXPECT_EQ(none.held_bytes(), 0);
  EXPECT_THROW(StateImage(sections, {}, HeldBytes{100, 4096}), std::invalid_argument) << "not aligned";
  EXPECT_THROW(StateImage(sections, {}, HeldBytes{16384, 8192}), std::invalid_argument) << "past the end";
  EXPECT_THROW(StateImage(sections, {}, HeldBytes{-4096, 4096}), std::invalid_argument);
}

TEST(AssignSections, LargestFirstOntoTheLightestFileKeepingOrderWithinAFile) {
  const int64_t mib = 1 << 20;
  const std::vector<SectionSpec> sections = {{"s0", 10 * mib}, {"s1", 6 * mib}, {"s2", 5 * mib}, {"s3", 4 * mib}};
  const auto files = assign_sections_to_files(sections, 2);
  ASSERT_EQ(files.size(), 2u);
  // 10 -> f0; 6 -> f1; 5 -> f1 (11); 4 -> f0 (14).
  ASSERT_EQ(files[0].size(), 2u);
  EXPECT_EQ(files[0][0].name, "s0");
  EXPECT_EQ(files[0][1].name, "s3");
  ASSERT_EQ(files[1].size(), 2u);
  EXPECT_EQ(files[1][0].name, "s1");
  EXPECT_EQ(files[1][1].name, "s2");
}

TEST(AssignSections, DropsEmptyFilesAndRejectsZeroFiles) {
  const std::vector<SectionSpec> sections = {{"a", 1}, {"b", 2}, {"c", 3}};
  EXPECT_EQ(assign_sections_to_files(sections, 5).size(), 3u);
  EXPECT_EQ(assign_sections_to_files(sections, 1).size(), 1u);
  EXPECT_EQ(assign_sections_to_files(sections, 1)[0].size(), 3u);
  EXPECT_TRUE(assign_sections_to_files({}, 2).empty());
  EXPECT_THROW(assign_sections_to_files(sections, 0), std::invalid_argument);
}

}  // namespace
}  // namespace trainbench
