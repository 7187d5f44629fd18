#include "trainer/cpu_wait.h"

#include <dirent.h>  // opendir: /proc/self/task

#include <cstdio>  // std::sscanf
#include <fstream>
#include <sstream>

namespace trainbench {

namespace {

// Every thread's times, by thread id; false where /proc/self/task cannot be
// listed or no thread has a schedstat.
bool read_threads(std::map<std::string, ThreadCpuTimes>* threads) {
  threads->clear();
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  while (const dirent* entry = ::readdir(tasks)) {
    const std::string id = entry->d_name;
    if (id == "." || id == "..") continue;
    std::ifstream file("/proc/self/task/" + id + "/schedstat");
    std::stringstream text;
    text << file.rdbuf();
    ThreadCpuTimes times;
    if (parse_schedstat(text.str(), &times)) (*threads)[id] = times;  // a thread that ended meanwhile has none
  }
  ::closedir(tasks);
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
  for (const auto& [id, times] : now) {
    // A thread id the kernel gave again to a thread started since reads less than before.
    const auto before = at_start_.find(id);
    const bool same = before != at_start_.end() && times.running_ns >= before->second.running_ns &&
                      times.waiting_ns >= before->second.waiting_ns;
    running += times.running_ns - (same ? before->second.running_ns : 0);
    waiting += times.waiting_ns - (same ? before->second.waiting_ns : 0);
  }
  return running + waiting > 0 ? static_cast<double>(waiting) / static_cast<double>(running + waiting) : -1;
}

}  // namespace trainbench
