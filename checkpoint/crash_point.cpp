// Test-only fault injection for the checkpoint fault tests: a SIGKILL at a
// named phase, as a node that loses power would stop. Checked at every
// checkpoint phase of every run, so it must cost nothing when unset.
#include <signal.h>  // raise, SIGKILL
#include <unistd.h>  // write

#include <cstdlib>  // std::getenv, std::strtoll
#include <string>

#include "checkpoint/checkpoint_files.h"

namespace trainbench {

namespace {

struct CrashRequest {
  bool armed = false;
  std::string phase;
  int64_t step = -1;  // -1: any step
};

// TRAINBENCH_TEST_CRASH_AT = "phase" or "phase@step", read once.
CrashRequest read_crash_request() {
  CrashRequest request;
  const char* value = std::getenv("TRAINBENCH_TEST_CRASH_AT");
  if (value == nullptr || *value == '\0') return request;
  const std::string text = value;
  const size_t at = text.find('@');
  request.phase = text.substr(0, at);
  if (at != std::string::npos) {
    char* end = nullptr;
    request.step = std::strtoll(text.c_str() + at + 1, &end, 10);
    // A malformed step must not turn into "any step" and kill a run early.
    if (end == text.c_str() + at + 1 || *end != '\0' || request.step < 0) return request;
  }
  request.armed = true;
  return request;
}

}  // namespace

void crash_point(const char* phase, int64_t step) {
  static const CrashRequest request = read_crash_request();
  if (!request.armed || request.phase != phase) return;
  if (request.step >= 0 && request.step != step) return;
  // One line on stderr so a test log shows the kill was deliberate; write(2)
  // because stdio may hold a lock of a thread that is about to vanish.
  const std::string line = "trainbench: TRAINBENCH_TEST_CRASH_AT: killed at " + request.phase + " of step " +
                           std::to_string(step) + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::raise(SIGKILL);
}

}  // namespace trainbench
