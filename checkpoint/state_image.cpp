#include "checkpoint/state_image.h"

#include <cstdlib>    // std::aligned_alloc, std::free
#include <cstring>    // std::memset
#include <new>        // std::bad_alloc
#include <stdexcept>  // std::invalid_argument
#include <utility>    // std::swap

namespace trainbench {

StateImage::StateImage(const std::vector<SectionSpec>& sections, StagingAllocator allocator)
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
  if (bytes_ == 0) return;  // nothing to stage: data() stays null

  if (allocator_.allocate) {
    // A caller's allocator promises no alignment (malloc gives 16, some
    // pinned allocators 64): ask for one alignment unit more and round up.
    allocation_ = allocator_.allocate(static_cast<size_t>(bytes_ + kImageAlignment));
    if (allocation_ == nullptr) throw std::bad_alloc();
    const auto address = reinterpret_cast<uintptr_t>(allocation_);
    data_ = reinterpret_cast<unsigned char*>((address + kImageAlignment - 1) / kImageAlignment * kImageAlignment);
  } else {
    allocation_ = std::aligned_alloc(kImageAlignment, static_cast<size_t>(bytes_));
    if (allocation_ == nullptr) throw std::bad_alloc();
    data_ = static_cast<unsigned char*>(allocation_);
  }
  // Only the padding: the sections are about to be overwritten with state,
  // and touching gigabytes twice would cost a snapshot's worth of time. The
  // padding is written to the file, so it must not carry old heap contents
  // (or differ between two images of the same state, breaking checksums).
  for (const SectionPlacement& s : sections_)
    std::memset(data_ + s.offset + s.bytes, 0, static_cast<size_t>(aligned_to_image(s.bytes) - s.bytes));
}

StateImage::~StateImage() { release_memory(); }

StateImage::StateImage(StateImage&& other) noexcept
    : sections_(std::move(other.sections_)),
      allocator_(std::move(other.allocator_)),
      allocation_(other.allocation_),
      data_(other.data_),
      bytes_(other.bytes_) {
  other.sections_.clear();
  other.allocation_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = 0;
}

StateImage& StateImage::operator=(StateImage&& other) noexcept {
  if (this == &other) return *this;
  release_memory();
  sections_ = std::move(other.sections_);
  allocator_ = std::move(other.allocator_);
  allocation_ = other.allocation_;
  data_ = other.data_;
  bytes_ = other.bytes_;
  other.sections_.clear();
  other.allocation_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = 0;
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
  bytes_ = 0;
}

int64_t StateImage::find(const std::string& name) const {
  for (size_t i = 0; i < sections_.size(); ++i)
    if (sections_[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

unsigned char* StateImage::section_data(size_t index) { return data_ + sections_.at(index).offset; }

const unsigned char* StateImage::section_data(size_t index) const { return data_ + sections_.at(index).offset; }

}  // namespace trainbench
