// libFuzzer target over the whole read path of one shard: tar bytes ->
// TarReader -> SampleReader -> decode_tokens in every format. Bad input may
// only ever surface as a DataError or a false from decode_tokens, each with a
// one-line message; a crash, a sanitizer report, another exception, a token
// outside the vocabulary or a multi-line message is a finding.
#include <cstdint>  // uint8_t, int32_t
#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/tar_reader.h"
#include "dataloader/token_decode.h"
#include "dataloader/webdataset.h"
#include "tests/fuzz/fuzz_checks.h"

namespace {

using namespace trainbench;

constexpr int64_t kVocab = 50257;
// Keeps a member that claims gigabytes from exhausting the fuzzer's memory.
constexpr int64_t kMaxMemberBytes = int64_t{1} << 20;
constexpr int kMaxSamples = 4096;

using fuzz::check_one_line;
using fuzz::finding;

void decode_every_format(const uint8_t* data, size_t size, std::vector<int32_t>* tokens) {
  for (const TokenFormat format :
       {TokenFormat::kU16, TokenFormat::kU32, TokenFormat::kNpy, TokenFormat::kTxt}) {
    tokens->clear();
    std::string error;
    if (!decode_tokens(format, data, size, kVocab, tokens, &error)) {
      check_one_line(error);
      if (!tokens->empty()) finding("a failed decode appended tokens");
      continue;
    }
    for (const int32_t token : *tokens) {
      if (token < 0 || token >= kVocab)
        finding("token " + std::to_string(token) + " outside the vocabulary");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<int32_t> tokens;
  // The input as a token payload itself reaches the npy parser directly.
  decode_every_format(data, size, &tokens);

  // Read twice: keeping every member (shards verify, pack), and keeping the
  // token member only, as the loader reads (the other members are read
  // through, not kept: another path through the member's data).
  for (const char* keep : {"", "u16"}) {
  TarReader tar;
  try {
    tar.open_memory(data, size, "fuzz.tar");
    SampleReader reader(tar, kMaxMemberBytes, keep);
    Sample sample;
    for (int index = 0; index < kMaxSamples; ++index) {
      try {
        if (!reader.next(&sample)) break;
      } catch (const DataError& error) {
        if (error.scope() != CorruptScope::kSample) throw;
        check_one_line(error.what());
        continue;
      }
      for (size_t i = 0; i < sample.member_count; ++i) {
        const std::vector<uint8_t>& member = sample.members[i].data;
        decode_every_format(member.data(), member.size(), &tokens);
      }
    }
  } catch (const DataError& error) {
    check_one_line(error.what());
  }
  }
  return 0;
}
