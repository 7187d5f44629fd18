// What every fuzz target in this folder holds its code to: bad input
// surfaces as a one-line message; anything else is a finding, which aborts
// (libFuzzer then keeps the input).
#pragma once

#include <cstdio>   // std::fprintf
#include <cstdlib>  // std::abort
#include <string>

namespace trainbench::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "finding: %s\n", what.c_str());
  std::abort();
}

// A message the CLI prints: one line, not empty.
inline void check_one_line(const std::string& message) {
  if (message.empty() || message.find('\n') != std::string::npos) finding("message is not one line: [" + message + "]");
}

}  // namespace trainbench::fuzz
