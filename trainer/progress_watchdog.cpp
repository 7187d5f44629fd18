#include "trainer/progress_watchdog.h"

#include <algorithm>     // std::min, std::max
#include <system_error>  // a thread that cannot be had

#include "comm/deadline_clock.h"  // duration_of

namespace trainbench {

ProgressWatchdog::ProgressWatchdog(Communicator& comm, double limit_s, std::string what, Expired expired)
    : comm_(comm),
      limit_(comm_clock::duration_of(limit_s)),
      expired_(std::move(expired)),
      last_progress_(Clock::now()),
      what_(std::move(what)) {
  try {
    thread_ = std::thread([this] { watch(); });
  } catch (const std::system_error&) {
  }
}

ProgressWatchdog::~ProgressWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressWatchdog::progress(const std::string& what) {
  std::lock_guard lock(mutex_);
  last_progress_ = Clock::now();
  if (!what.empty()) what_ = what;
}

void ProgressWatchdog::arm(bool armed) {
  std::lock_guard lock(mutex_);
  armed_ = armed;
  last_progress_ = Clock::now();
}

void ProgressWatchdog::watch() {
  // Checked every 200 ms at most, and at the limit itself.
  constexpr std::chrono::milliseconds kPoll{200};
  std::unique_lock lock(mutex_);
  for (;;) {
    // Disarmed, the time since the last progress means nothing: a full poll.
    // (The time left went negative once disarmed for longer than the limit,
    // and the thread spun on zero-length waits, a quarter of a core through
    // burn-in's checkpoint drain.)
    const Clock::duration left = armed_ ? last_progress_ + limit_ - Clock::now() : Clock::duration(kPoll);
    if (wake_.wait_for(lock, std::min<Clock::duration>(kPoll, std::max(left, Clock::duration::zero())),
                       [this] { return stop_; }))
      return;
    if (!armed_) continue;
    if (comm_.waiting_since() > 0) {  // held up by a peer: the clock starts again once that wait ends
      last_progress_ = Clock::now();
      continue;
    }
    const Clock::duration stuck = Clock::now() - last_progress_;
    if (stuck < limit_) continue;
    const auto [exit_code, message] = expired_(comm_clock::seconds_of(stuck), what_);
    lock.unlock();
    comm_.abort(exit_code, message);
  }
}

}  // namespace trainbench
