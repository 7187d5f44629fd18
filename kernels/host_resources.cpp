#include "kernels/host_resources.h"

#include <dirent.h>  // opendir: /proc/self/task
#include <sched.h>   // sched_getaffinity, CPU_ALLOC

#include <algorithm>   // std::min, std::max: the tightest limit
#include <cerrno>      // EINVAL: a mask too small for the kernel's
#include <cmath>       // std::ceil: a quota of 2.5 CPUs keeps 3 busy
#include <filesystem>  // the cgroup folders
#include <fstream>
#include <sstream>
#include <thread>  // hardware_concurrency: where the mask cannot be read
#include <vector>

namespace trainbench {

int affinity_cpu_count() {
  // A cpu_set_t holds 1024 CPUs; a larger machine's kernel refuses it with
  // EINVAL, so the set grows until it holds the kernel's mask.
  for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) return 0;
    const size_t bytes = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(bytes, set);
    const int status = sched_getaffinity(0, bytes, set);
    const int count = status == 0 ? CPU_COUNT_S(bytes, set) : 0;
    const int error = errno;
    CPU_FREE(set);
    if (status == 0) return count;
    if (error != EINVAL) return 0;
  }
  return 0;
}

namespace {
namespace fs = std::filesystem;

// Limits of v1 that read as "none": the kernel writes its page counter's
// maximum (9223372036854771712) where no limit was set.
constexpr int64_t kNoLimitAbove = int64_t{1} << 62;

// The first two words of a cgroup file ("max 100000"; none when it cannot
// be read).
std::vector<std::string> words_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> words;
  std::string word;
  while (words.size() < 2 && in >> word) words.push_back(word);
  return words;
}

// A cgroup file's number: -1 when absent, not a number or "max" (v2's none).
int64_t number_in(const fs::path& file, size_t index = 0) {
  const std::vector<std::string> words = words_of(file);
  if (words.size() <= index) return -1;
  try {
    size_t used = 0;
    const long long value = std::stoll(words[index], &used);
    return used == words[index].size() ? value : -1;
  } catch (const std::exception&) {
    return -1;  // "max", or a number past int64
  }
}

// `key`'s value in a memory.stat ("key value" lines); 0 when absent.
int64_t stat_field(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string name;
  long long value = 0;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

// The folders of one controller's hierarchy from the process's cgroup up
// to the hierarchy's root, which `mount` is. In a container without its own
// cgroup namespace /proc/self/cgroup names the host's path while `mount`
// holds the container's own cgroup: that path is not there, and the mount's
// root is the process's cgroup.
std::vector<fs::path> cgroup_and_ancestors(const fs::path& mount, const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(mount, error)) return {};
  std::vector<fs::path> chain{mount};
  for (const fs::path& part : fs::path(path).relative_path()) {
    if (part.empty() || part == ".") continue;
    if (part == "..") return {mount};  // not a path the kernel writes
    chain.push_back(chain.back() / part);
  }
  if (!fs::is_directory(chain.back(), error)) return {mount};
  return chain;
}

void keep_tightest_memory(CgroupLimits& limits, int64_t limit, int64_t held) {
  if (limit <= 0 || limit >= kNoLimitAbove) return;
  const int64_t room = std::max<int64_t>(0, limit - std::max<int64_t>(0, held));
  limits.memory_bytes = limits.memory_bytes == 0 ? limit : std::min(limits.memory_bytes, limit);
  limits.memory_room_bytes = limits.memory_room_bytes < 0 ? room : std::min(limits.memory_room_bytes, room);
}

void keep_tightest_cpus(CgroupLimits& limits, int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return;
  const double cpus = static_cast<double>(quota) / static_cast<double>(period);
  limits.cpus = limits.cpus == 0 ? cpus : std::min(limits.cpus, cpus);
}

// cgroup v2: one hierarchy, its files in each cgroup's folder. What the
// cgroup holds but cannot give back is memory.current less the file pages
// it could drop (inactive_file), as `docker stats` counts it.
void read_v2(CgroupLimits& limits, const fs::path& mount, const std::string& path) {
  for (const fs::path& dir : cgroup_and_ancestors(mount, path)) {
    const int64_t max = number_in(dir / "memory.max");
    if (max > 0) keep_tightest_memory(limits, max, number_in(dir / "memory.current") -
                                                   stat_field(dir / "memory.stat", "inactive_file"));
    keep_tightest_cpus(limits, number_in(dir / "cpu.max", 0), number_in(dir / "cpu.max", 1));
  }
}

// cgroup v1: a hierarchy per controller, mounted as a folder named by its
// controllers ("cpu,cpuacct", often with a link "cpu" beside it).
fs::path v1_mount(const fs::path& root, const std::string& controllers, const std::string& wanted) {
  std::error_code error;
  if (fs::is_directory(root / controllers, error)) return root / controllers;
  return root / wanted;
}

bool names_controller(const std::string& controllers, const std::string& wanted) {
  std::istringstream list(controllers);
  std::string name;
  while (std::getline(list, name, ','))
    if (name == wanted) return true;
  return false;
}
}  // namespace

CgroupLimits read_cgroup_limits(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  CgroupLimits limits;
  const fs::path root(cgroup_root);
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; the path may hold colons.
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (id == "0" && controllers.empty()) {
      std::error_code error;
      // Unified alone (v2), or beside v1's folders (hybrid) under "unified".
      const bool unified_at_root = fs::exists(root / "cgroup.controllers", error);
      read_v2(limits, unified_at_root ? root : root / "unified", path);
      continue;
    }
    if (names_controller(controllers, "memory")) {
      for (const fs::path& dir : cgroup_and_ancestors(v1_mount(root, controllers, "memory"), path))
        keep_tightest_memory(limits, number_in(dir / "memory.limit_in_bytes"),
                             number_in(dir / "memory.usage_in_bytes") -
                                 stat_field(dir / "memory.stat", "total_inactive_file"));
    }
    if (names_controller(controllers, "cpu")) {
      for (const fs::path& dir : cgroup_and_ancestors(v1_mount(root, controllers, "cpu"), path))
        keep_tightest_cpus(limits, number_in(dir / "cpu.cfs_quota_us"), number_in(dir / "cpu.cfs_period_us"));
    }
  }
  return limits;
}

CgroupLimits cgroup_limits() {
  std::ifstream file("/proc/self/cgroup");
  std::ostringstream text;
  text << file.rdbuf();
  return read_cgroup_limits(text.str(), "/sys/fs/cgroup");
}

int usable_cpu_count() {
  int cpus = affinity_cpu_count();
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  const double quota = cgroup_limits().cpus;
  if (quota > 0) cpus = std::min(cpus, static_cast<int>(std::ceil(quota)));
  return std::max(cpus, 1);
}

int cpu_engine_threads(int requested) { return requested > 0 ? requested : usable_cpu_count(); }

std::vector<std::string> thread_ids() {
  std::vector<std::string> ids;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return ids;
  while (const dirent* entry = ::readdir(tasks)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") ids.push_back(name);
  }
  ::closedir(tasks);
  return ids;
}

std::vector<std::string> stat_fields_after_name(const std::string& stat) {
  std::vector<std::string> fields;
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return fields;
  std::istringstream words(stat.substr(name_end + 1));
  for (std::string field; words >> field;) fields.push_back(field);
  return fields;
}

}  // namespace trainbench
