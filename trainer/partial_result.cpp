#include "trainer/partial_result.h"

#include <atomic>
#include <chrono>
#include <cstdio>  // the line that says where the steps went
#include <memory>  // std::make_shared: the write outlives a call that gave up on it
#include <mutex>
#include <vector>

#include "checkpoint/atomic_file.h"  // write_file_atomically
#include "trainer/hung_storage.h"    // run_for_at_most: the write, bounded
#include "trainer/json_text.h"       // json_text: written whatever its strings hold

namespace trainbench {

namespace {

// The abort's whole cleanup is bounded by the communicator (the temporary
// folders' removal after this) and Slurm kills 30 s after its SIGTERM.
constexpr std::chrono::seconds kWriteBound{5};
constexpr std::chrono::seconds kLockBound{2};

struct Kept {
  std::timed_mutex mutex;
  bool active = false;  // begun, not ended, not yet written
  std::string path;
  nlohmann::json header;
  std::vector<nlohmann::json> steps;
};

Kept& kept() {
  static auto* instance = new Kept;  // never destroyed: an abort may come during the exit
  return *instance;
}

}  // namespace

void begin_partial_result(const std::string& path, nlohmann::json header) {
  Kept& k = kept();
  const std::lock_guard<std::timed_mutex> lock(k.mutex);
  k.active = true;
  k.path = path;
  k.header = std::move(header);
  k.steps.clear();
}

void add_partial_result_step(nlohmann::json step) {
  Kept& k = kept();
  const std::lock_guard<std::timed_mutex> lock(k.mutex);
  if (k.active) k.steps.push_back(std::move(step));
}

void end_partial_result() {
  Kept& k = kept();
  const std::lock_guard<std::timed_mutex> lock(k.mutex);
  k.active = false;
  k.steps.clear();
}

std::string aborted_result_path(const std::string& result_path) {
  const std::string suffix = ".json";
  const bool json = result_path.size() > suffix.size() &&
                    result_path.compare(result_path.size() - suffix.size(), suffix.size(), suffix) == 0;
  return json ? result_path.substr(0, result_path.size() - suffix.size()) + ".aborted.json"
              : result_path + ".aborted.json";
}

bool write_partial_result(int exit_code, const std::string& why) {
  Kept& k = kept();
  // Bounded: the thread that holds it (the main thread adding a step) may be
  // the one this abort or signal stops for good.
  std::unique_lock<std::timed_mutex> lock(k.mutex, std::defer_lock);
  if (!lock.try_lock_for(kLockBound) || !k.active || k.steps.empty()) return false;
  k.active = false;  // once: an abort racing a signal writes one of them
  nlohmann::json result = k.header;
  result["schema"] = kAbortedRunSchema;
  result["aborted"] = {{"exit_code", exit_code},
                       {"reason", why},
                       {"steps_completed", k.steps.size()},
                       {"last_step", k.steps.empty() ? nlohmann::json() : k.steps.back().at("step")}};
  result["steps"] = std::move(k.steps);
  const size_t steps = result["steps"].size();
  auto write = std::make_shared<std::pair<std::string, std::string>>(k.path, json_text(result, 2) + "\n");
  lock.unlock();
  auto written = std::make_shared<std::atomic<bool>>(false);
  const bool finished = run_for_at_most(kWriteBound, [write, written] {
    try {
      write_file_atomically(write->first, write->second);
      *written = true;
    } catch (const std::exception&) {  // the process is ending on another error: nothing more to say
    }
  });
  if (finished && *written)
    std::fprintf(stderr, "trainbench: the %zu step(s) it trained are in %s (%s)\n", steps, write->first.c_str(),
                 kAbortedRunSchema);
  else
    std::fprintf(stderr, "trainbench: the %zu step(s) it trained could not be written to %s\n", steps,
                 write->first.c_str());
  std::fflush(stderr);
  return finished && *written;
}

}  // namespace trainbench
