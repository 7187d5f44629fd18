// Whether this build carries AddressSanitizer (scripts/sanitize.sh), or
// coverage counters (scripts/coverage.sh), and what a test does about it.
// The trainbench binary a test runs is built with the same flags, so the test
// binary's own macro answers for it too. ASan reserves some 20 TB of shadow
// address space at start-up, which no `ulimit -v` a test can set leaves room
// for: a process under one dies before main, so the tests that set one
// skip, saying so (they run in every other build, CI's included).
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace trainbench::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

inline constexpr const char* kNoAddressSpaceLimitUnderAsan =
    "AddressSanitizer build: its shadow memory cannot be mapped under any ulimit -v, so this check of one is "
    "left to the other builds";

// A shell prefix for a command run under a tight `ulimit -n`: LeakSanitizer's
// walk at exit opens /proc, and with no descriptor left it ends the process
// with exit 1 ("LeakSanitizer has encountered a fatal error") whatever the
// process did. Under ASan such a command runs without the leak check (every
// other check stays on); elsewhere the prefix is empty. Put it before `exec`.
inline std::string without_leak_check_under_asan() {
  return kAddressSanitizer ? "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" " : "";
}

// The coverage build (scripts/coverage.sh) defines TRAINBENCH_COVERAGE_BUILD.
#if defined(TRAINBENCH_COVERAGE_BUILD)
inline constexpr bool kCoverageBuild = true;
#else
inline constexpr bool kCoverageBuild = false;
#endif

// A process's stderr without the lines libgcov adds in the coverage build
// when it cannot write the process's counts at exit ("profiling:...:Cannot
// open", "libgcov profiling error:..."): under a tight `ulimit -n` it has no
// descriptor for its error file either, and falls back to stderr. Those
// lines are not trainbench's words; in every other build the text is
// returned as it is.
inline std::string without_coverage_lines(const std::string& text) {
  if (!kCoverageBuild) return text;
  std::string kept;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const size_t next = end == std::string::npos ? text.size() : end + 1;
    const std::string line = text.substr(start, next - start);
    if (line.rfind("profiling:", 0) != 0 && line.rfind("libgcov profiling error:", 0) != 0) kept += line;
    start = next;
  }
  return kept;
}

}  // namespace trainbench::testing

// Skips the rest of a test that needs an address-space limit (ulimit -v).
#define SKIP_ADDRESS_SPACE_LIMIT_UNDER_ASAN()                                           \
  do {                                                                                   \
    if (::trainbench::testing::kAddressSanitizer)                                        \
      GTEST_SKIP() << ::trainbench::testing::kNoAddressSpaceLimitUnderAsan;              \
  } while (0)
