#include "trainer/progress_display.h"

#include <unistd.h>  // isatty

#include <algorithm>  // std::min
#include <cstdio>
#include <cstdlib>  // std::getenv, std::strtoll
#include <utility>  // std::move

#include "trainer/report.h"  // human_bytes

namespace trainbench {

namespace {

std::chrono::steady_clock::duration batch_interval() {
  if (const char* value = std::getenv("TRAINBENCH_TEST_PROGRESS_EVERY_MS")) {
    char* end = nullptr;
    const long long ms = std::strtoll(value, &end, 10);
    if (end != value && *end == '\0' && ms >= 0) return std::chrono::milliseconds(ms);
  }
  return std::chrono::seconds(10);
}

}  // namespace

ProgressDisplay::ProgressDisplay(std::string label)
    : label_(std::move(label)),
      terminal_(isatty(STDERR_FILENO) != 0),
      interval_(terminal_ ? std::chrono::milliseconds(100) : batch_interval()),
      last_(Clock::now()) {}

ProgressDisplay::~ProgressDisplay() {
  if (drawn_) std::fputs("\r\033[K", stderr);
}

ProgressCallback ProgressDisplay::callback() {
  return [this](int64_t done, int64_t total, const char* unit) { update(done, total, unit); };
}

void ProgressDisplay::update(int64_t done, int64_t total, const char* unit) {
  const Clock::time_point now = Clock::now();
  if (now - last_ < interval_) return;
  last_ = now;
  const double fraction = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 0.0;
  const std::string amount =
      std::string(unit) == "bytes"
          ? human_bytes(static_cast<double>(done)) + " of " + human_bytes(static_cast<double>(total))
          : std::to_string(done) + " of " + std::to_string(total) + " " + unit;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::fprintf(stderr, "\r%s [%s%s] %3d%%  %s\033[K", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), static_cast<int>(fraction * 100), amount.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s: %d%% (%s)\n", label_.c_str(), static_cast<int>(fraction * 100), amount.c_str());
  }
}

}  // namespace trainbench
