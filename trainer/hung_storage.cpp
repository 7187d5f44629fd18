#include "trainer/hung_storage.h"

#include <atomic>
#include <memory>        // std::make_shared: run_for_at_most's flag outlives the wait
#include <system_error>  // a thread that cannot be had
#include <thread>        // run_for_at_most's thread and its polls
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

StorageWatchdog::StorageWatchdog(Communicator& comm, double limit_s, std::string doing, const std::string& limit_key)
    : watchdog_(comm, limit_s, std::move(doing), [&comm, limit_s, limit_key](double, const std::string& what) {
        const std::string rank = comm.world_size() > 1 ? "rank " + std::to_string(comm.rank()) + ": " : "";
        // Exit 3: the storage's fault, not the config's.
        return std::pair{kExitEnvironmentError,
                         rank + what + " did not finish within " + limit_key + "=" +
                             comm_clock::format_seconds(limit_s) + " s: the storage stopped responding (raise " +
                             limit_key + " if it is only slow)"};
      }) {}

}  // namespace trainbench
