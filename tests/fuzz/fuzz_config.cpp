// libFuzzer target over the config a user writes: YAML text (the part of the
// input before a NUL byte) and one `--set KEY=VALUE` (the part after it),
// through parse_config, which also checks every key and every rule. Bad
// input may only ever surface as a one-line ConfigError (the CLI's exit 2).
// A crash, a sanitizer report, a stack overflow on deep nesting, another
// exception or a multi-line message is a finding.
#include <cstdint>  // uint8_t
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_checks.h"
#include "trainer/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) overrides.push_back(input.substr(nul + 1));
  try {
    (void)trainbench::parse_config(yaml, "fuzz.yaml", overrides);
  } catch (const trainbench::ConfigError& error) {
    trainbench::fuzz::check_one_line(error.what());
  }
  return 0;
}
