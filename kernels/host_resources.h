// What of its host this process may use: the CPUs and the memory its
// affinity mask and its cgroup leave it. A rank under Slurm (srun
// --cpus-per-task, --mem), mpirun --bind-to, taskset or a Kubernetes limit
// sees the whole machine in std::thread::hardware_concurrency() and
// /proc/meminfo: sized by those, the CPU engine ran one thread per core of
// the machine on the one core a rank was bound to, and the memory plan
// passed where the cgroup's OOM killer would end the run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainbench {

// The CPUs in this thread's affinity mask; 0 when it cannot be read.
int affinity_cpu_count();

// The tightest of the limits of a cgroup and of its ancestors.
struct CgroupLimits {
  double cpus = 0;                 // CPU quota over period (v2 cpu.max, v1 cpu.cfs_quota_us); 0 = none
  int64_t memory_bytes = 0;        // v2 memory.max, v1 memory.limit_in_bytes; 0 = none
  int64_t memory_room_bytes = -1;  // the limit less what the cgroup holds but cannot give back; -1 = no limit
};

// From /proc/self/cgroup's text and the folder the cgroup filesystems are
// mounted on ("/sys/fs/cgroup"): cgroup v2 (the unified hierarchy) and v1
// (a folder per controller). Split out for tests, which build a tree.
CgroupLimits read_cgroup_limits(const std::string& proc_self_cgroup, const std::string& cgroup_root);
// This process's, from /proc/self/cgroup and /sys/fs/cgroup.
CgroupLimits cgroup_limits();

// The CPUs this process may keep busy: its affinity mask's, fewer where its
// cgroup's CPU quota allows fewer (rounded up), the host's where the mask
// cannot be read; at least 1.
int usable_cpu_count();

// train.threads as the CPU engine runs it: `requested`, else (0) the CPUs
// this process may keep busy.
int cpu_engine_threads(int requested);

// The ids of this process's threads now (/proc/self/task); empty when it
// cannot be listed.
std::vector<std::string> thread_ids();

// The fields of a /proc stat line after the name, which may hold spaces and
// parentheses: [0] is the state (field 3: 'R', 'S', ...), [19] the start
// time (field 22); empty without a closing parenthesis.
std::vector<std::string> stat_fields_after_name(const std::string& stat);

}  // namespace trainbench
