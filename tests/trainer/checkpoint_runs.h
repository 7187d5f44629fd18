// What the checkpoint tests read back from runs of the real binary: the
// `latest` pointer, every checkpoint file's xxh64 from its manifest, and
// every step's loss from a result JSON.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"  // read_whole_file, run_command

namespace trainbench::testing {

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_whole_file(path)); }

// The folder name `dir/latest` holds, without its newline; "" when there is none.
inline std::string latest_of(const std::string& dir) {
  std::string text = read_whole_file(dir + "/latest");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Every file of a checkpoint and its xxh64, from the manifest: equal maps
// mean equal parameters, optimizer state and data positions on every rank.
inline std::map<std::string, std::string> file_checksums(const std::string& folder) {
  std::map<std::string, std::string> sums;
  const nlohmann::json manifest = read_json(folder + "/manifest.json");
  for (const auto& rank : manifest.at("ranks"))
    for (const auto& file : rank.at("files")) sums[file.at("name")] = file.at("xxh64");
  return sums;
}

// Overwrites `bytes` at `offset` into the section `section` of a checkpoint
// (rank 0's file that holds it) and puts the file's new xxh64 (from xxhsum)
// in the manifest: a damaged section whose checksum no longer gives it
// away, to test what the reader checks beyond checksums.
inline void rewrite_section(const std::string& folder, const std::string& section, int64_t offset,
                            const std::string& bytes) {
  nlohmann::json manifest = read_json(folder + "/manifest.json");
  for (auto& file : manifest.at("ranks").at(0).at("files"))
    for (const auto& s : file.at("sections")) {
      if (s.at("name") != section) continue;
      const std::string path = folder + "/" + file.at("name").get<std::string>();
      {
        std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
        out.seekp(s.at("offset").get<int64_t>() + offset);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      }
      const std::string sum = run_command("xxhsum -H1 " + path).out;
      file["xxh64"] = sum.substr(0, 16);
      std::ofstream(folder + "/manifest.json") << manifest.dump();
      return;
    }
  throw std::runtime_error("no section " + section + " in " + folder);
}

inline std::map<int64_t, double> losses_by_step(const std::string& result_path) {
  std::map<int64_t, double> losses;
  const nlohmann::json result = read_json(result_path);  // outlives the loop
  for (const auto& s : result.at("steps")) losses[s.at("step").get<int64_t>()] = s.at("loss").get<double>();
  return losses;
}

}  // namespace trainbench::testing
