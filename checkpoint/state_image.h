// STORAGE WRITE. One checkpoint file's bytes in host memory: named sections
// at 4096-byte aligned offsets of one staging allocation, the padding zeroed.
// The engine copies its state straight into the sections (page-locked memory
// under CUDA, from the allocator the trainer hands in) and the writer writes
// the whole image with large aligned writes, O_DIRECT when asked, with no
// bounce copy.
#pragma once

#include <cstddef>     // size_t
#include <cstdint>     // int64_t
#include <functional>  // StagingAllocator
#include <string>
#include <vector>

namespace trainbench {

// Sections start at multiples of this, and an image's size is one: the
// alignment O_DIRECT asks of offsets, lengths and buffers.
inline constexpr int64_t kImageAlignment = 4096;

// `bytes` rounded up to kImageAlignment: what a section or a slice takes in an image.
inline int64_t aligned_to_image(int64_t bytes) { return (bytes + kImageAlignment - 1) / kImageAlignment * kImageAlignment; }

struct SectionSpec {
  std::string name;
  int64_t bytes = 0;
};

// The size of an image of these sections: each rounded up to kImageAlignment.
int64_t image_size(const std::vector<SectionSpec>& sections);

// The bytes of an image held in memory: [from, from + bytes), both multiples
// of kImageAlignment; bytes -1 = from `from` to the image's end. A rank that
// writes only its slice of an image every rank holds alike (checkpoint_files.h:
// slice_for_rank) stages only that slice: 1/N of the host memory and of the
// device-to-host copy, not the whole image N times over.
struct HeldBytes {
  int64_t from = 0;
  int64_t bytes = -1;
};

// Where a section lies in its file.
struct SectionPlacement {
  std::string name;
  int64_t offset = 0;  // multiple of kImageAlignment
  int64_t bytes = 0;   // without the padding
};

// Host memory for staging; the default is plain memory. Either function may
// be empty, then the default is used. allocate returns nullptr on failure.
struct StagingAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* memory)> release;
};

class StateImage {
 public:
  // Lays out the sections in order and allocates the `held` bytes of the
  // image, the whole of it by default (aligned to kImageAlignment whatever
  // the allocator's own alignment). Throws std::bad_alloc when the allocator
  // fails, std::invalid_argument on a negative size, a repeated name or a
  // `held` range that is not aligned or not inside the image.
  StateImage(const std::vector<SectionSpec>& sections, StagingAllocator allocator = {}, HeldBytes held = {});
  ~StateImage();
  StateImage(const StateImage&) = delete;
  StateImage& operator=(const StateImage&) = delete;
  StateImage(StateImage&& other) noexcept;
  StateImage& operator=(StateImage&& other) noexcept;

  const std::vector<SectionPlacement>& sections() const { return sections_; }
  // Index of the section with that name, or -1.
  int64_t find(const std::string& name) const;
  // The section's first byte; it must be held whole (std::out_of_range).
  unsigned char* section_data(size_t index);
  const unsigned char* section_data(size_t index) const;
  // The address of image byte `offset`, with [offset, offset + bytes) held
  // (std::out_of_range otherwise).
  unsigned char* at(int64_t offset, int64_t bytes = 0);
  const unsigned char* at(int64_t offset, int64_t bytes = 0) const;
  // The held bytes, from image byte held_from(); null when none are held.
  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }  // the whole image's, a multiple of kImageAlignment
  int64_t held_from() const { return held_from_; }
  int64_t held_bytes() const { return held_bytes_; }

 private:
  void release_memory();
  std::vector<SectionPlacement> sections_;
  StagingAllocator allocator_;
  void* allocation_ = nullptr;     // what the allocator returned
  unsigned char* data_ = nullptr;  // allocation_ rounded up to kImageAlignment: image byte held_from_
  int64_t bytes_ = 0;
  int64_t held_from_ = 0;
  int64_t held_bytes_ = 0;
};

}  // namespace trainbench
