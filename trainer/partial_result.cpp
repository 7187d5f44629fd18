#include "trainer/partial_result.h"

#include <atomic>
#include <chrono>
#include <cstdio>  // the line that says where the steps went
#include <mutex>
#include <thread>  // the second of two racing ends waits for the first one's write
#include <vector>

#include "trainer/json_text.h"  // json_text: written whatever its strings hold
#include "trainer/results.h"    // write_file_within: the write, bounded

namespace trainbench {

namespace {

// The abort's whole cleanup is bounded by the communicator (the temporary
// folders' removal after this) and Slurm kills 30 s after its SIGTERM.
constexpr std::chrono::seconds kWriteBound{5};
constexpr std::chrono::seconds kLockBound{2};

enum class State { kIdle, kKeeping, kWriting, kDone };

struct Kept {
  std::timed_mutex mutex;
  std::atomic<State> state{State::kIdle};
  std::string path;
  nlohmann::json header;
  // Each step as compact JSON text, made when it completes: a json object
  // per step took ten times the memory of a run's longest burn-in's records.
  // Bounded as the result's are (max_step_records): steps[j] is the step
  // completed j·stride-th (from 0); past the limit every other one goes and
  // the stride doubles. The last step is kept aside until one comes after it.
  std::vector<std::string> steps;
  int64_t stride = 1;
  int64_t completed = 0;
  std::string last;  // the latest step's text when it is not in `steps`
  int64_t last_step = 0;
};

Kept& kept() {
  static auto* instance = new Kept;  // never destroyed: an abort may come during the exit
  return *instance;
}

}  // namespace

std::string aborted_result_path(const std::string& result_path) {
  const std::string suffix = ".json";
  const bool json = result_path.size() > suffix.size() &&
                    result_path.compare(result_path.size() - suffix.size(), suffix.size(), suffix) == 0;
  return json ? result_path.substr(0, result_path.size() - suffix.size()) + ".aborted.json"
              : result_path + ".aborted.json";
}

void begin_partial_result(const std::string& path, nlohmann::json header) {
  Kept& k = kept();
  const std::lock_guard<std::timed_mutex> lock(k.mutex);
  k.path = path;
  k.header = std::move(header);
  k.steps.clear();
  k.stride = 1;
  k.completed = 0;
  k.last.clear();
  k.last_step = 0;
  k.state = State::kKeeping;
}

void add_partial_result_step(const nlohmann::json& step) {
  Kept& k = kept();
  std::string text = step.dump();
  const std::lock_guard<std::timed_mutex> lock(k.mutex);
  if (k.state != State::kKeeping) return;
  k.last_step = step.value("step", int64_t{0});
  const bool listed = k.completed % k.stride == 0;
  ++k.completed;
  if (!listed) {
    k.last = std::move(text);
    return;
  }
  k.last.clear();
  k.steps.push_back(std::move(text));
  // At most max_step_records() listed, the last step aside included.
  if (static_cast<int64_t>(k.steps.size()) >= max_step_records()) {
    // Every other one: those at multiples of the doubled stride stay; the
    // step just added, where it is not one of them, is the last one.
    if ((k.steps.size() - 1) % 2 != 0) k.last = std::move(k.steps.back());
    size_t kept = 0;
    for (size_t j = 0; j < k.steps.size(); j += 2, ++kept)
      if (kept != j) k.steps[kept] = std::move(k.steps[j]);  // (a string moved onto itself is emptied)
    k.steps.resize(kept);
    k.stride *= 2;
  }
}

void end_partial_result() {
  Kept& k = kept();
  const std::lock_guard<std::timed_mutex> lock(k.mutex);
  if (k.state == State::kKeeping) {
    k.state = State::kIdle;
    k.steps.clear();
    k.last.clear();
  }
}

bool write_partial_result(int exit_code, const std::string& why) noexcept {
  Kept& k = kept();
  try {
    // Bounded: the thread that holds it (the main thread adding a step) may
    // be the one this abort or signal stops for good.
    std::unique_lock<std::timed_mutex> lock(k.mutex, std::defer_lock);
    if (!lock.try_lock_for(kLockBound)) return false;
    if (k.state == State::kWriting) {
      // An abort racing a signal (another rank's abort has mpirun send
      // SIGTERM while this rank's own abort writes): the second waits for
      // the first one's write, which ends the process after it otherwise.
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + kWriteBound + kLockBound;
      while (k.state == State::kWriting && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return false;
    }
    if (k.state != State::kKeeping || k.steps.empty()) return false;
    k.state = State::kWriting;
    std::vector<std::string> steps = std::move(k.steps);
    if (!k.last.empty()) steps.push_back(std::move(k.last));
    const int64_t last_step = k.last_step;
    const int64_t completed = k.completed;
    const int64_t stride = k.stride;
    nlohmann::json result = k.header;
    const std::string path = k.path;
    lock.unlock();

    result["schema"] = kAbortedRunSchema;
    result["aborted"] = {{"exit_code", exit_code},
                         {"reason", why},
                         {"steps_completed", completed},
                         {"last_step", last_step}};
    result["steps_every"] = stride;
    // The steps are text already: the list is joined in place of a
    // placeholder rather than parsed back.
    result["steps"] = "@STEPS@";
    std::string text = json_text(result, 2);
    const std::string placeholder = "\"@STEPS@\"";
    const size_t at = text.find(placeholder);
    std::string list = "[";
    for (size_t i = 0; i < steps.size(); ++i) list += (i == 0 ? "\n    " : ",\n    ") + steps[i];
    list += "\n  ]";
    if (at != std::string::npos) text.replace(at, placeholder.size(), list);
    text += "\n";

    bool written = false;
    try {
      write_file_within(path, std::move(text), static_cast<double>(kWriteBound.count()),
                        std::to_string(kWriteBound.count()) + " s");
      written = true;
    } catch (const std::exception&) {  // the process is ending on another error: the line below says it
    }
    k.state = State::kDone;
    if (written)
      std::fprintf(stderr, "trainbench: the %lld step(s) it trained are in %s (%s%s)\n",
                   static_cast<long long>(completed), path.c_str(), kAbortedRunSchema,
                   stride > 1 ? (", every " + std::to_string(stride) + "th listed").c_str() : "");
    else
      std::fprintf(stderr, "trainbench: the %lld step(s) it trained could not be written to %s\n",
                   static_cast<long long>(completed), path.c_str());
    std::fflush(stderr);
    return written;
  } catch (...) {  // out of memory, most likely: the abort or the signal goes on without it
    k.state = State::kDone;
    return false;
  }
}

}  // namespace trainbench
