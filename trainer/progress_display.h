#pragma once

#include <chrono>
#include <string>

#include "dataloader/shard_tools.h"  // ProgressCallback

namespace trainbench {

// Progress of a long write or read on stderr: a bar redrawn in place on a
// terminal (every 0.1 s, cleared when the display ends, so the summary and
// any error start on a clean line); in a batch log (stderr not a terminal)
// a plain line "LABEL: 42% (DONE of TOTAL UNIT)" every 10 s, so work shorter
// than that leaves the log clean. TRAINBENCH_TEST_PROGRESS_EVERY_MS sets the
// batch interval (a test hook: 0 prints every update).
class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::string label);
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;
  ~ProgressDisplay();

  // For synthesize_shards, pack_directory, verify_shards: it refers to this
  // display, which must outlive its calls.
  ProgressCallback callback();
  // UNIT "bytes" shows DONE and TOTAL as sizes (human_bytes); any other as counts.
  void update(int64_t done, int64_t total, const char* unit);

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  bool terminal_;
  Clock::duration interval_;
  Clock::time_point last_;
  bool drawn_ = false;
};

}  // namespace trainbench
