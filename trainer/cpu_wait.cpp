#include "trainer/cpu_wait.h"

#include <dirent.h>  // opendir: /proc/self/task

#include <cstdio>  // std::sscanf
#include <fstream>
#include <sstream>

namespace trainbench {

namespace {

std::string whole_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A thread's start time (clock ticks after boot: field 22 of its stat, the
// 20th after the name's closing parenthesis); "" when unreadable. With the
// id it names the thread: the kernel gives a thread id again.
std::string start_time(const std::string& stat) {
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return "";
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  for (int i = 0; i < 20; ++i)
    if (!(fields >> field)) return "";
  return field;
}

// Every thread's times, by thread id and start time; false where
// /proc/self/task cannot be listed or no thread has a schedstat.
bool read_threads(std::map<std::string, ThreadCpuTimes>* threads) {
  threads->clear();
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  while (const dirent* entry = ::readdir(tasks)) {
    const std::string id = entry->d_name;
    if (id == "." || id == "..") continue;
    const std::string folder = "/proc/self/task/" + id;
    const std::string started = start_time(whole_file(folder + "/stat"));
    ThreadCpuTimes times;
    // A thread that ended meanwhile has neither.
    if (!started.empty() && parse_schedstat(whole_file(folder + "/schedstat"), &times))
      (*threads)[id + "@" + started] = times;
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
  for (const auto& [thread, times] : now) {
    const auto before = at_start_.find(thread);
    const bool seen = before != at_start_.end();
    running += times.running_ns - (seen ? before->second.running_ns : 0);
    waiting += times.waiting_ns - (seen ? before->second.waiting_ns : 0);
  }
  return running + waiting > 0 ? static_cast<double>(waiting) / static_cast<double>(running + waiting) : -1;
}

}  // namespace trainbench
