// What a rank may use of its host: the CPUs of its affinity mask, its
// cgroup's CPU quota and memory limit, read from cgroup trees built here in
// the shapes the kernel writes (v2, v1, hybrid, a container's).
#include <gtest/gtest.h>
#include <sched.h>  // sched_setaffinity: a thread of one CPU

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kernels/host_resources.h"

namespace trainbench {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kGiB = int64_t{1} << 30;

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("trainbench-cgroup-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& relative, const std::string& text) {
    const fs::path file = root_ / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  CgroupLimits read(const std::string& proc_self_cgroup) { return read_cgroup_limits(proc_self_cgroup, root_); }
  fs::path root_;
};

// cgroup v2: the tightest of the cgroup's and its ancestors' limits; the
// room is the limit less what the cgroup holds but its inactive file pages.
TEST_F(CgroupTree, V2TakesTheTightestLimitOverTheCgroupAndItsAncestors) {
  write("cgroup.controllers", "cpuset cpu memory\n");
  write("job/memory.max", std::to_string(8 * kGiB) + "\n");
  write("job/memory.current", std::to_string(5 * kGiB) + "\n");
  write("job/memory.stat", "anon 1234\ninactive_file " + std::to_string(2 * kGiB) + "\nactive_file 7\n");
  write("job/cpu.max", "max 100000\n");
  write("job/step/memory.max", "max\n");
  write("job/step/memory.current", std::to_string(1 * kGiB) + "\n");
  write("job/step/cpu.max", "250000 100000\n");
  const CgroupLimits limits = read("0::/job/step\n");
  EXPECT_EQ(limits.memory_bytes, 8 * kGiB);
  EXPECT_EQ(limits.memory_room_bytes, 8 * kGiB - (5 * kGiB - 2 * kGiB));
  EXPECT_DOUBLE_EQ(limits.cpus, 2.5);
}

TEST_F(CgroupTree, V2WithoutLimitsHasNone) {
  write("cgroup.controllers", "cpu memory\n");
  write("user.slice/memory.max", "max\n");
  write("user.slice/cpu.max", "max 100000\n");
  const CgroupLimits limits = read("0::/user.slice\n");
  EXPECT_EQ(limits.memory_bytes, 0);
  EXPECT_EQ(limits.memory_room_bytes, -1);
  EXPECT_EQ(limits.cpus, 0);
}

// cgroup v1: a folder per controller, "cpu,cpuacct" named as the kernel
// lists it; the page counter's maximum reads as no limit.
TEST_F(CgroupTree, V1ReadsTheMemoryAndCpuControllersFolders) {
  write("memory/memory.limit_in_bytes", "9223372036854771712\n");
  write("memory/slurm/job_7/memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
  write("memory/slurm/job_7/memory.usage_in_bytes", std::to_string(3 * kGiB) + "\n");
  write("memory/slurm/job_7/memory.stat", "cache 99\ntotal_inactive_file " + std::to_string(kGiB) + "\n");
  write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("cpu,cpuacct/slurm/job_7/cpu.cfs_quota_us", "150000\n");
  write("cpu,cpuacct/slurm/job_7/cpu.cfs_period_us", "100000\n");
  const CgroupLimits limits =
      read("12:pids:/slurm/job_7\n4:memory:/slurm/job_7\n3:cpu,cpuacct:/slurm/job_7\n1:name=systemd:/x\n0::/\n");
  EXPECT_EQ(limits.memory_bytes, 4 * kGiB);
  EXPECT_EQ(limits.memory_room_bytes, 4 * kGiB - (3 * kGiB - kGiB));
  EXPECT_DOUBLE_EQ(limits.cpus, 1.5);
}

// A container without its own cgroup namespace: /proc/self/cgroup names the
// host's path, and the mount holds the container's cgroup at its root.
TEST_F(CgroupTree, AContainersHostPathFallsBackToTheMountsRoot) {
  write("cgroup.controllers", "cpu memory\n");
  write("memory.max", std::to_string(2 * kGiB) + "\n");
  write("memory.current", std::to_string(kGiB) + "\n");
  write("cpu.max", "400000 100000\n");
  const CgroupLimits limits = read("0::/kubepods.slice/pod-1/cri-containerd-abc.scope\n");
  EXPECT_EQ(limits.memory_bytes, 2 * kGiB);
  EXPECT_EQ(limits.memory_room_bytes, kGiB);
  EXPECT_DOUBLE_EQ(limits.cpus, 4.0);
}

// Hybrid: v1 controllers beside an empty unified hierarchy; a path that
// climbs out of the mount is not followed.
TEST_F(CgroupTree, HybridReadsV1AndRefusesPathsOutOfTheMount) {
  write("unified/cgroup.procs", "1\n");
  write("memory/memory.limit_in_bytes", std::to_string(6 * kGiB) + "\n");
  write("memory/a/memory.limit_in_bytes", std::to_string(kGiB) + "\n");
  const CgroupLimits limits = read("4:memory:/a/../../..\n0::/\n");
  EXPECT_EQ(limits.memory_bytes, 6 * kGiB);  // the mount's root only
  EXPECT_EQ(read("garbage\n\n4:memory\n").memory_bytes, 0);
  EXPECT_EQ(read_cgroup_limits("0::/\n4:memory:/\n", (root_ / "absent").string()).memory_room_bytes, -1);
}

// A thread bound to one CPU (taskset -c 0, mpirun --bind-to core) sees one,
// and the CPU engine's default is one thread there; an explicit count stays.
TEST(HostCpus, AThreadBoundToOneCpuUsesOne) {
  int bound = -1, usable = -1, engine_default = -1, engine_asked = -1;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
    bound = affinity_cpu_count();
    usable = usable_cpu_count();
    engine_default = cpu_engine_threads(0);
    engine_asked = cpu_engine_threads(3);
  }).join();
  if (bound == -1) GTEST_SKIP() << "sched_setaffinity refused here, so no thread could be bound to CPU 0";
  EXPECT_EQ(bound, 1);
  EXPECT_EQ(usable, 1);
  EXPECT_EQ(engine_default, 1);
  EXPECT_EQ(engine_asked, 3);
  EXPECT_GE(affinity_cpu_count(), 1);  // this thread's mask was left alone
  EXPECT_LE(usable_cpu_count(), static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace trainbench
