// NETWORK. The clock arithmetic the backends' timeouts share: steady-clock
// durations to and from seconds, and seconds printed the way the timeout
// messages print them ("timed out after 300 s").
#pragma once

#include <chrono>
#include <cstdio>  // std::snprintf
#include <string>

namespace trainbench::comm_clock {

using Clock = std::chrono::steady_clock;

inline double seconds_of(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

inline Clock::duration duration_of(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

}  // namespace trainbench::comm_clock
