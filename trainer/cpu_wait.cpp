#include "trainer/cpu_wait.h"

#include <cstdio>  // std::sscanf
#include <fstream>
#include <sstream>
#include <vector>

#include "kernels/host_resources.h"  // thread_ids, stat_fields_after_name

namespace trainbench {

namespace {

std::string whole_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Every thread's times, by thread id and start time (clock ticks after
// boot, field 22 of its stat: the kernel gives a thread id again); false
// where /proc/self/task cannot be listed or no thread has a schedstat.
bool read_threads(std::map<std::string, ThreadCpuTimes>* threads) {
  threads->clear();
  for (const std::string& id : thread_ids()) {
    const std::string folder = "/proc/self/task/" + id;
    const std::vector<std::string> stat = stat_fields_after_name(whole_file(folder + "/stat"));
    ThreadCpuTimes times;
    // A thread that ended meanwhile has neither.
    if (stat.size() > 19 && parse_schedstat(whole_file(folder + "/schedstat"), &times))
      (*threads)[id + "@" + stat[19]] = times;
  }
  return !threads->empty();
}

}  // namespace

std::string cpu_wait_words(double share) {
  return "waited for a CPU " + std::to_string(static_cast<int>(100 * share + 0.5)) +
         "% of the time they were ready to run";
}

bool parse_schedstat(const std::string& text, ThreadCpuTimes* times) {
  long long running = 0, waiting = 0;
  if (std::sscanf(text.c_str(), "%lld %lld", &running, &waiting) != 2 || running < 0 || waiting < 0) return false;
  *times = {running, waiting};
  return true;
}

void CpuWaitMeter::start() { known_ = read_threads(&at_start_); }

double CpuWaitMeter::waiting_share() const {
  std::map<std::string, ThreadCpuTimes> now;
  if (!known_ || !read_threads(&now)) return -1;
  int64_t running = 0, waiting = 0;
  for (const auto& [thread, times] : now) {
    const auto before = at_start_.find(thread);
    const bool seen = before != at_start_.end();
    running += times.running_ns - (seen ? before->second.running_ns : 0);
    waiting += times.waiting_ns - (seen ? before->second.waiting_ns : 0);
  }
  return running + waiting > 0 ? static_cast<double>(waiting) / static_cast<double>(running + waiting) : -1;
}

}  // namespace trainbench
