#include "trainer/hung_storage.h"

#include <algorithm>     // std::min
#include <atomic>
#include <memory>        // std::make_shared: run_for_at_most's flag outlives the wait
#include <system_error>  // a thread that cannot be had
#include <utility>       // std::move

#include "comm/deadline_clock.h"  // format_seconds
#include "trainer/cli.h"          // kExitEnvironmentError

namespace trainbench {

bool run_for_at_most(std::chrono::milliseconds longest, const std::function<void()>& work) {
  auto finished = std::make_shared<std::atomic<bool>>(false);
  const auto run = [finished, work]() {
    work();
    *finished = true;
  };
  try {
    std::thread(run).detach();
  } catch (const std::system_error&) {
    run();  // no thread to be had: unbounded, rather than not at all
  }
  const auto until = std::chrono::steady_clock::now() + longest;
  while (!*finished && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return *finished;
}

StorageWatchdog::StorageWatchdog(Communicator& comm, double limit_s, std::string doing)
    : comm_(comm), limit_s_(limit_s), doing_(std::move(doing)) {
  try {
    thread_ = std::thread([this] { watch(); });
  } catch (const std::system_error&) {
    // No thread to be had (a process or memory limit): the calls go
    // unwatched, as they went before, rather than the run failing here.
  }
}

StorageWatchdog::~StorageWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StorageWatchdog::watch() {
  using Clock = std::chrono::steady_clock;
  // Checked every 200 ms at most: a limit of a second ends within 1.2 s.
  constexpr std::chrono::milliseconds kPoll{200};
  const Clock::duration limit = comm_clock::duration_of(limit_s_);
  Clock::time_point counting_since = Clock::now();
  std::unique_lock lock(mutex_);
  for (;;) {
    const Clock::duration left = counting_since + limit - Clock::now();
    if (wake_.wait_for(lock, std::min<Clock::duration>(kPoll, std::max(left, Clock::duration::zero())),
                       [this] { return stop_; }))
      return;
    // Held up by a peer in a collective: the clock starts again once that
    // wait ends (the collective's own timeout, comm.timeout_s, bounds it).
    if (comm_.waiting_since() > 0) {
      counting_since = Clock::now();
      continue;
    }
    if (Clock::now() - counting_since < limit) continue;
    const std::string rank = comm_.world_size() > 1 ? "rank " + std::to_string(comm_.rank()) + ": " : "";
    const std::string message = rank + doing_ + " did not finish within checkpoint.timeout_s=" +
                                comm_clock::format_seconds(limit_s_) +
                                " s: the storage stopped responding (raise checkpoint.timeout_s if it is only slow)";
    lock.unlock();
    comm_.abort(kExitEnvironmentError, message);  // the storage's fault, not the config's
  }
}

}  // namespace trainbench
