// What the run ran on: hosts, ranks, CPU, memory, GPUs, library versions and
// the filesystem of every path the run reads or writes. Stored in the result
// JSON and summarised in the console header.
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // to_json

#include "comm/communicator.h"   // rank / world size / host
#include "kernels/device_info.h" // GpuInventory
#include "kernels/engine.h"      // AttentionInfo

namespace trainbench {

struct FilesystemInfo {
  std::string role;   // "results", later "data", "checkpoint"
  std::string path;
  std::string type;   // "ext4", "xfs", "lustre", "nfs", ... or "0x..." when unknown
  int64_t free_bytes = -1;  // for an unprivileged writer; -1 where statfs failed (0: full)
};

// One host's GPUs and drivers, as the first rank on it saw them.
struct HostGpus {
  std::string host;
  int gpu_count = 0;
  std::string gpu_name;          // the GPUs' names, distinct ones joined by " + "; "" without GPUs
  int64_t gpu_memory_bytes = 0;  // the smallest GPU's
  std::string nvidia_driver;     // "" where none is loaded
  std::string cuda_driver;       // the CUDA version that driver supports
};
// How `host` looks next to `reference` ("" when alike): the first of GPU
// count, name, memory, drivers that differs, both sides, in words.
std::string host_gpus_difference(const HostGpus& host, const HostGpus& reference);

struct Environment {
  std::string trainbench_version;
  // Every host of the job, once each, in the order of their first rank (rank
  // 0's first), with its GPUs and drivers. The CPU, memory and GPUs below
  // are rank 0's host's.
  std::vector<HostGpus> host_gpus;
  int world_size = 1;
  std::string comm_backend;
  std::string cpu_model;
  int hardware_threads = 0;  // the host's
  int usable_threads = 0;    // the CPUs its affinity mask and cgroup leave this rank (usable_cpu_count)
  int threads_used = 0;
  int64_t memory_total_bytes = 0;      // total_memory_bytes()
  int64_t memory_available_bytes = 0;  // available_memory_bytes()
  int64_t memory_limit_bytes = 0;      // the cgroup's memory limit; 0 = none
  GpuInventory gpus;
  // The NVIDIA kernel driver ("570.86.15"), what an acceptance test compares;
  // gpus.driver_version is the CUDA version that driver supports ("13.0").
  // Empty where no NVIDIA driver is loaded.
  std::string nvidia_driver;
  std::string compute_backend;
  AttentionInfo attention;  // the engine's attention kernels (TrainingEngine::attention)
  GemmInfo gemm;            // how it picks GEMM algorithms (TrainingEngine::gemm), after the run
  std::string built_backends;
  std::string openblas;   // openblas_get_config()
  std::string nccl;       // nccl_version(): "2.28.9", "" when the NCCL backend is not built
  std::string mpi;        // mpi_library_version(): "Open MPI v4.1.4", "" when the MPI backend is not built
  std::string compiler;
  std::string os;
  std::vector<FilesystemInfo> filesystems;
};

// A collective (every host's GPUs, from its first rank): every rank calls it.
Environment collect_environment(Communicator& comm, const std::string& compute_backend,
                                int threads_used, const GpuInventory& gpus);
// A warning when the job's hosts differ in their GPUs or drivers ("" when
// alike, or on one host): a job runs at its slowest host's pace, and a
// cluster under acceptance should be one build. Names the first host that
// differs from rank 0's, and how many do.
std::string hosts_that_differ(const Environment& env);
// The CPU's model from /proc/cpuinfo's text: "model name" (x86), "cpu"
// (POWER), or on arm64, which names none, its implementer and part as lscpu
// names them ("ARM Neoverse-V2", a GH200's Grace); "unknown" without them.
std::string cpu_model_in(const std::string& proc_cpuinfo);
// Why the CPU engine's threads would take turns on cores ("" when they
// would not): more threads than the CPUs this rank may use (its affinity
// mask or cgroup: usable_cpu_count), or the ranks on its host running more
// threads together than the host has hardware threads. Its steps are then
// the scheduler's, not the machine's.
// `host` names the rank's host in the words ("this host" where unnamed).
std::string cpu_oversubscription(int threads, int usable_cpus, int host_ranks, int hardware_threads,
                                 const std::string& host = "this host");
// The filesystem holding `path`: its own where it exists (a folder that is a
// mount point included), else its folder's (a result not written yet).
FilesystemInfo describe_filesystem(const std::string& role, const std::string& path);
// MemAvailable from /proc/meminfo, or the room left under the process's
// cgroup memory limit where that is less (a Slurm --mem, a Kubernetes
// limit); 0 when unknown.
int64_t available_memory_bytes();
// Why the collective bench's buffers (`bytes` per rank) cannot go on the
// ranks' GPUs beside a run (device_bench_room_shortfall, with each rank's
// share of its host's available memory for their host copies), agreed over
// ranks; "" when they can, and at once (no collective) on a host-buffer
// communicator, whose buffers the callers size themselves. Every rank calls it.
std::string device_bench_room_over_ranks(Communicator& comm, int64_t bytes);
// MemTotal from /proc/meminfo, or the process's cgroup memory limit where
// that is less (0 when unknown).
int64_t total_memory_bytes();
// This process's address space now, VmSize from /proc/self/status: the
// binary, the libraries it loaded, its threads' stacks (0 when unknown).
int64_t mapped_bytes();
// The address space a new thread's stack takes (glibc's default: ulimit -s,
// 8 MiB on most systems), which counts against ulimit -v.
int64_t thread_stack_bytes();
// The address-space limit (ulimit -v, RLIMIT_AS) in bytes; 0 when there is none.
int64_t address_space_limit_bytes();
// The file-size limit (ulimit -f, RLIMIT_FSIZE) in bytes; 0 when there is none.
int64_t file_size_limit_bytes();
// The driver version in the text of /proc/driver/nvidia/version ("NVRM
// version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  ..." or "... Open
// Kernel Module for x86_64  570.86.15  ..."); "" when it names none.
std::string nvidia_driver_version_in(const std::string& proc_text);
nlohmann::json environment_to_json(const Environment& env);
std::string trainbench_version();

}  // namespace trainbench
