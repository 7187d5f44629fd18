// A small checkpoint whose every byte follows from (step, rank, file), so a
// test can write it in one process and check what another process left.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"

namespace trainbench::testing {

// Sections as a trainer lays them out: odd sizes, so padding exists.
inline std::vector<SectionSpec> test_sections(int64_t scale = 1) {
  return {{"params_bf16", 1000 * scale + 7},
          {"master_fp32", 2000 * scale + 12},
          {"adam_m", 2000 * scale + 12},
          {"adam_v", 2000 * scale + 12},
          {"meta", 100}};
}

inline unsigned char test_byte(int64_t step, int rank, const std::string& section, int64_t i) {
  uint64_t h = static_cast<uint64_t>(step) * 1000003u + static_cast<uint64_t>(rank) * 7919u + static_cast<uint64_t>(i);
  for (char c : section) h = h * 131 + static_cast<unsigned char>(c);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  return static_cast<unsigned char>(h >> 56);
}

inline void fill_state(StateImage& image, int64_t step, int rank) {
  for (size_t s = 0; s < image.sections().size(); ++s) {
    const SectionPlacement& p = image.sections()[s];
    unsigned char* data = image.section_data(s);
    for (int64_t i = 0; i < p.bytes; ++i) data[i] = test_byte(step, rank, p.name, i);
  }
}

// The images of one rank's checkpoint of `step`, split over `files`.
inline std::vector<StateImage> make_state(int64_t step, int rank, int files, int64_t scale = 1) {
  std::vector<StateImage> images;
  for (const std::vector<SectionSpec>& file : assign_sections_to_files(test_sections(scale), files)) {
    images.emplace_back(file);
    fill_state(images.back(), step, rank);
  }
  return images;
}

inline std::vector<const StateImage*> pointers(const std::vector<StateImage>& images) {
  std::vector<const StateImage*> result;
  for (const StateImage& image : images) result.push_back(&image);
  return result;
}

// Empty when `loaded` holds exactly make_state(step, rank, ...)'s sections,
// else the first difference.
inline std::string compare_state(const LoadedRank& loaded, int64_t step, int rank, int64_t scale = 1) {
  for (const SectionSpec& spec : test_sections(scale)) {
    int64_t bytes = -1;
    const unsigned char* data = loaded.section(spec.name, &bytes);
    if (data == nullptr) return "section " + spec.name + " missing";
    if (bytes != spec.bytes) return "section " + spec.name + " has " + std::to_string(bytes) + " bytes";
    for (int64_t i = 0; i < bytes; ++i)
      if (data[i] != test_byte(step, rank, spec.name, i))
        return "section " + spec.name + " differs at byte " + std::to_string(i);
  }
  return "";
}

// Writes and commits rank 0 of a one-rank checkpoint of `step` in `dir`.
inline nlohmann::json write_and_commit(const std::string& dir, int64_t step, int64_t keep = 2, int files = 2,
                                       int64_t scale = 1, WriteOptions options = {}) {
  prepare_pending_folder(dir, step);
  const std::vector<StateImage> images = make_state(step, 0, files, scale);
  write_rank_files(pending_folder(dir, step), 0, pointers(images), options);
  CommitRequest request;
  request.dir = dir;
  request.step = step;
  request.world_size = 1;
  request.keep = keep;
  request.config = {{"model", {{"n_layers", 2}}}};
  request.versions = {{"trainbench", "test"}};
  request.extra = {{"note", "test"}};
  return commit_checkpoint(request);
}

}  // namespace trainbench::testing
