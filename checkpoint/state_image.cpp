#include "checkpoint/state_image.h"

#include <algorithm>  // std::max, std::min
#include <cstdlib>    // std::aligned_alloc, std::free
#include <cstring>    // std::memset
#include <new>        // std::bad_alloc
#include <stdexcept>  // std::invalid_argument
#include <utility>    // std::as_const

namespace trainbench {

int64_t image_size(const std::vector<SectionSpec>& sections) {
  int64_t bytes = 0;
  for (const SectionSpec& spec : sections) bytes += aligned_to_image(spec.bytes);
  return bytes;
}

StateImage::StateImage(const std::vector<SectionSpec>& sections, StagingAllocator allocator, HeldBytes held)
    : allocator_(std::move(allocator)) {
  int64_t offset = 0;
  for (const SectionSpec& spec : sections) {
    if (spec.bytes < 0)
      throw std::invalid_argument("state image section " + spec.name + ": negative size " +
                                  std::to_string(spec.bytes));
    if (find(spec.name) >= 0)
      throw std::invalid_argument("state image section " + spec.name + ": the name appears twice");
    sections_.push_back({spec.name, offset, spec.bytes});
    offset += aligned_to_image(spec.bytes);
  }
  bytes_ = offset;
  const int64_t held_bytes = held.bytes == -1 ? bytes_ - held.from : held.bytes;
  if (held.from < 0 || held.from % kImageAlignment != 0 || held_bytes < 0 || held_bytes % kImageAlignment != 0 ||
      held_bytes > bytes_ - held.from)
    throw std::invalid_argument("state image: held bytes [" + std::to_string(held.from) + ", +" +
                                std::to_string(held_bytes) + ") are not aligned to " +
                                std::to_string(kImageAlignment) + " or not inside the image of " +
                                std::to_string(bytes_) + " bytes");
  held_from_ = held.from;
  held_bytes_ = held_bytes;
  if (held_bytes_ == 0) return;  // nothing to stage: data() stays null

  if (allocator_.allocate) {
    // A caller's allocator promises no alignment (malloc gives 16, some
    // pinned allocators 64): ask for one alignment unit more and round up.
    allocation_ = allocator_.allocate(static_cast<size_t>(held_bytes_ + kImageAlignment));
    if (allocation_ == nullptr) throw std::bad_alloc();
    const auto address = reinterpret_cast<uintptr_t>(allocation_);
    data_ = reinterpret_cast<unsigned char*>((address + kImageAlignment - 1) / kImageAlignment * kImageAlignment);
  } else {
    allocation_ = std::aligned_alloc(kImageAlignment, static_cast<size_t>(held_bytes_));
    if (allocation_ == nullptr) throw std::bad_alloc();
    data_ = static_cast<unsigned char*>(allocation_);
  }
  // Only the padding: the sections are about to be overwritten with state,
  // and touching gigabytes twice would cost a snapshot's worth of time. The
  // padding is written to the file, so it must not carry old heap contents
  // (or differ between two images of the same state, breaking checksums).
  const int64_t held_end = held_from_ + held_bytes_;
  for (const SectionPlacement& s : sections_) {
    const int64_t from = std::max(s.offset + s.bytes, held_from_);
    const int64_t to = std::min(s.offset + aligned_to_image(s.bytes), held_end);
    if (to > from) std::memset(data_ + (from - held_from_), 0, static_cast<size_t>(to - from));
  }
}

StateImage::~StateImage() { release_memory(); }

StateImage::StateImage(StateImage&& other) noexcept
    : sections_(std::move(other.sections_)),
      allocator_(std::move(other.allocator_)),
      allocation_(other.allocation_),
      data_(other.data_),
      bytes_(other.bytes_),
      held_from_(other.held_from_),
      held_bytes_(other.held_bytes_) {
  other.sections_.clear();
  other.allocation_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = other.held_from_ = other.held_bytes_ = 0;
}

StateImage& StateImage::operator=(StateImage&& other) noexcept {
  if (this == &other) return *this;
  release_memory();
  sections_ = std::move(other.sections_);
  allocator_ = std::move(other.allocator_);
  allocation_ = other.allocation_;
  data_ = other.data_;
  bytes_ = other.bytes_;
  held_from_ = other.held_from_;
  held_bytes_ = other.held_bytes_;
  other.sections_.clear();
  other.allocation_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = other.held_from_ = other.held_bytes_ = 0;
  return *this;
}

void StateImage::release_memory() {
  if (allocation_ != nullptr) {
    if (allocator_.release)
      allocator_.release(allocation_);
    else
      std::free(allocation_);
  }
  allocation_ = nullptr;
  data_ = nullptr;
  bytes_ = held_from_ = held_bytes_ = 0;
}

int64_t StateImage::find(const std::string& name) const {
  for (size_t i = 0; i < sections_.size(); ++i)
    if (sections_[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

const unsigned char* StateImage::at(int64_t offset, int64_t bytes) const {
  if (offset < held_from_ || bytes < 0 || offset + bytes > held_from_ + held_bytes_)
    throw std::out_of_range("state image: bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                            ") are not among the held [" + std::to_string(held_from_) + ", +" +
                            std::to_string(held_bytes_) + ")");
  return data_ == nullptr ? nullptr : data_ + (offset - held_from_);
}

unsigned char* StateImage::at(int64_t offset, int64_t bytes) {
  return const_cast<unsigned char*>(std::as_const(*this).at(offset, bytes));
}

const unsigned char* StateImage::section_data(size_t index) const {
  const SectionPlacement& s = sections_.at(index);
  return at(s.offset, s.bytes);
}

unsigned char* StateImage::section_data(size_t index) {
  return const_cast<unsigned char*>(std::as_const(*this).section_data(index));
}

}  // namespace trainbench
