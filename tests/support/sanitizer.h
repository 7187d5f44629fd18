// Whether this build carries AddressSanitizer (scripts/sanitize.sh).
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

}  // namespace trainbench::testing

// Skips the rest of a test that needs an address-space limit (ulimit -v).
#define SKIP_ADDRESS_SPACE_LIMIT_UNDER_ASAN()                                           \
  do {                                                                                   \
    if (::trainbench::testing::kAddressSanitizer)                                        \
      GTEST_SKIP() << ::trainbench::testing::kNoAddressSpaceLimitUnderAsan;              \
  } while (0)
