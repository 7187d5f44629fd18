// libFuzzer target over the loader position a checkpoint carries
// (parse_position, a hand-written binary layout read back on --resume): bad
// bytes may only ever surface as a one-line DataError of scope kConfig; bytes
// it accepts must serialize back to themselves (nothing ignored, nothing
// made up). A crash, a sanitizer report, another exception, a multi-line
// message or a round trip that differs is a finding.
#include <cstdint>  // uint8_t
#include <cstdio>   // std::fprintf
#include <cstdlib>  // std::abort
#include <string>

#include "dataloader/data_error.h"
#include "dataloader/shard_loader.h"  // parse_position, serialize_position

namespace {

void finding(const std::string& what) {
  std::fprintf(stderr, "finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  trainbench::LoaderPosition position;
  try {
    position = trainbench::parse_position(bytes);
  } catch (const trainbench::DataError& error) {
    const std::string message = error.what();
    if (message.empty() || message.find('\n') != std::string::npos)
      finding("message is not one line: [" + message + "]");
    if (error.scope() != trainbench::CorruptScope::kConfig) finding("scope is not kConfig: " + message);
    return 0;
  }
  if (trainbench::serialize_position(position) != bytes) finding("accepted bytes do not serialize back to themselves");
  return 0;
}
