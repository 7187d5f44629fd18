// dump_samples: prints what our reader sees in one shard, one JSON line each,
// so Python tests can compare it with what webdataset and tarfile see.
//   dump_samples SHARD            samples: {"key", "offset", "members": {ext: {"size", "fnv1a64"}}}
//   dump_samples --members SHARD  raw tar members: {"name", "size", "offset", "regular"}
//   dump_samples --tokens FIELD VOCAB SHARD
//                                 decoded tokens: {"key", "tokens": [...]}
// A corrupt sample is reported as one line on stderr and reading goes on (as
// data.on_corrupt=skip would); any other DataError ends it. Exit status 2
// after any error, else 0.
#include <cstdio>  // std::printf, std::fprintf
#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/tar_reader.h"
#include "dataloader/token_decode.h"
#include "dataloader/webdataset.h"

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// FNV-1a 64: enough to tell byte strings apart, and Python computes it in three lines.
std::string fnv1a64_hex(const std::vector<uint8_t>& data) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const uint8_t byte : data) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

constexpr int64_t kMaxMemberBytes = int64_t{1} << 30;

void dump_members(trainbench::TarReader& tar) {
  trainbench::TarMember member;
  while (tar.next_member(&member)) {
    std::printf("{\"name\": %s, \"size\": %lld, \"offset\": %lld, \"regular\": %s}\n",
                json_string(member.name).c_str(), static_cast<long long>(member.size),
                static_cast<long long>(member.offset), member.regular ? "true" : "false");
    tar.skip_data();
  }
}

std::string samples_line(const trainbench::Sample& sample) {
  std::string line = "{\"key\": " + json_string(sample.key) +
                     ", \"offset\": " + std::to_string(sample.offset) + ", \"members\": {";
  for (size_t i = 0; i < sample.member_count; ++i) {
    const trainbench::SampleMember& member = sample.members[i];
    line += (i > 0 ? ", " : "") + json_string(member.extension) +
            ": {\"size\": " + std::to_string(member.data.size()) + ", \"fnv1a64\": \"" +
            fnv1a64_hex(member.data) + "\"}";
  }
  return line + "}}";
}

// The sample's tokens, or an empty string after reporting why they cannot be decoded.
std::string tokens_line(const trainbench::Sample& sample, const std::string& field, int64_t vocab,
                        const std::string& path) {
  const trainbench::SampleMember* member = sample.find(field);
  std::vector<int32_t> tokens;
  std::string error = "sample has no ." + field + " member";
  if (member == nullptr ||
      !trainbench::decode_tokens(trainbench::token_format_of_field(field), member->data.data(),
                                 member->data.size(), vocab, &tokens, &error)) {
    std::fprintf(stderr, "%s\n",
                 trainbench::at_offset(path, sample.offset, sample.key + ": " + error).c_str());
    return "";
  }
  std::string line = "{\"key\": " + json_string(sample.key) + ", \"tokens\": [";
  for (size_t i = 0; i < tokens.size(); ++i)
    line += (i > 0 ? ", " : "") + std::to_string(tokens[i]);
  return line + "]}";
}

// Returns whether a corrupt sample was met. With a token field, prints the
// decoded tokens instead of the members.
bool dump_samples(trainbench::TarReader& tar, const std::string& token_field, int64_t vocab) {
  // Tokens: only the token member is kept, the others read through, as the loader reads.
  trainbench::SampleReader reader(tar, kMaxMemberBytes, token_field);
  trainbench::Sample sample;
  bool corrupt = false;
  for (;;) {
    try {
      if (!reader.next(&sample)) return corrupt;
    } catch (const trainbench::DataError& error) {
      if (error.scope() != trainbench::CorruptScope::kSample) throw;
      std::fprintf(stderr, "%s\n", error.what());
      corrupt = true;
      continue;
    }
    const std::string line = token_field.empty()
                                 ? samples_line(sample)
                                 : tokens_line(sample, token_field, vocab, tar.path());
    if (line.empty()) corrupt = true;
    if (!line.empty()) std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const bool members = args.size() == 2 && args[0] == "--members";
  const bool tokens = args.size() == 4 && args[0] == "--tokens";
  if (args.size() != 1 && !members && !tokens) {
    std::fprintf(stderr, "usage: dump_samples [--members | --tokens FIELD VOCAB] SHARD\n");
    return 2;
  }
  try {
    trainbench::TarReader tar;
    tar.open(args.back());
    if (members) {
      dump_members(tar);
      return 0;
    }
    const std::string token_field = tokens ? args[1] : "";
    const int64_t vocab = tokens ? std::stoll(args[2]) : 0;
    return dump_samples(tar, token_field, vocab) ? 2 : 0;
  } catch (const trainbench::DataError& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
}
