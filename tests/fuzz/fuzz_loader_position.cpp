// libFuzzer target over the loader position a checkpoint carries
// (parse_position, a hand-written binary layout read back on --resume): bad
// bytes may only ever surface as a one-line DataError of scope kConfig; bytes
// it accepts must serialize back to themselves (nothing ignored, nothing
// made up). A crash, a sanitizer report, another exception, a multi-line
// message or a round trip that differs is a finding.
#include <cstdint>  // uint8_t
#include <string>

#include "dataloader/data_error.h"
#include "dataloader/shard_loader.h"  // parse_position, serialize_position
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  trainbench::LoaderPosition position;
  try {
    position = trainbench::parse_position(bytes);
  } catch (const trainbench::DataError& error) {
    trainbench::fuzz::check_one_line(error.what());
    if (error.scope() != trainbench::CorruptScope::kConfig)
      trainbench::fuzz::finding(std::string("scope is not kConfig: ") + error.what());
    return 0;
  }
  if (trainbench::serialize_position(position) != bytes)
    trainbench::fuzz::finding("accepted bytes do not serialize back to themselves");
  return 0;
}
