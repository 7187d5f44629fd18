#include "trainer/environment.h"

#include <CLI/Version.hpp>  // CLI11_VERSION
#include <cblas.h>         // openblas_get_config
#include <omp.h>           // _OPENMP
#include <pthread.h>       // pthread_getattr_default_np: a new thread's stack size
#include <sys/resource.h>  // getrlimit: the address-space limit
#include <sys/statfs.h>    // statfs: filesystem type and free space
#include <sys/utsname.h>   // uname

#include <algorithm>  // std::min: the limit as int64; std::none_of: hosts once each
#include <cctype>   // std::isdigit: the driver version
#include <cstdio>   // std::snprintf: GiB in words
#include <cstdlib>  // std::atoll: /proc fields
#include <cstring>  // std::strlen
#include <fstream>  // /proc/cpuinfo, /proc/meminfo, /proc/self/status
#include <map>      // /proc/cpuinfo's keys; the arm64 parts
#include <sstream>
#include <thread>   // hardware_concurrency

#include "checkpoint/atomic_file.h"  // parent_directory
#include "comm/bench_buffer.h"       // device_bench_room_shortfall: the bench's buffers beside a run
#include "kernels/engine.h"  // built_backends
#include "kernels/host_resources.h"  // usable_cpu_count, cgroup_limits: what a rank may use
#include "trainer/json_text.h"  // json_text: host names that are not UTF-8

namespace trainbench {

const char* trainbench_git_describe();  // generated at build time: trainer/version.cmake
std::string trainbench_version() { return trainbench_git_describe(); }

namespace {
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::ostringstream text;
  text << cpuinfo.rdbuf();
  return cpu_model_in(text.str());
}

// "Key:   123 kB" from a /proc file (/proc/meminfo, /proc/self/status), in
// bytes; 0 when the file or the key is not there.
int64_t proc_kib_field_bytes(const char* path, const std::string& key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line))
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':')
      return std::atoll(line.c_str() + key.size() + 1) * 1024;
  return 0;
}

// statfs f_type magic numbers of the filesystems clusters use (linux/magic.h
// and the vendors' headers).
std::string filesystem_type_name(int64_t magic) {
  switch (static_cast<uint64_t>(magic) & 0xFFFFFFFFull) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x01021994: return "tmpfs";
    case 0x6969: return "nfs";
    case 0x0BD00BD0: return "lustre";
    case 0x47504653: return "gpfs";
    case 0x19830326: return "beegfs";
    case 0x9123683E: return "btrfs";
    case 0x794C7630: return "overlayfs";
    case 0x65735546: return "fuse";
    case 0x5346414F: return "afs";
    case 0xFF534D42: return "cifs";
    case 0x00C36400: return "ceph";
    default: break;
  }
  std::ostringstream hex;
  hex << "0x" << std::hex << (static_cast<uint64_t>(magic) & 0xFFFFFFFFull);
  return hex.str();
}
HostGpus host_gpus_here(const std::string& host_name, const GpuInventory& inventory, const std::string& nvidia_driver) {
  HostGpus host;
  host.host = host_name;
  host.gpu_count = static_cast<int>(inventory.gpus.size());
  std::vector<std::string> names;
  for (const GpuInfo& g : inventory.gpus) {
    if (std::find(names.begin(), names.end(), g.name) == names.end()) names.push_back(g.name);
    if (host.gpu_memory_bytes == 0 || g.memory_bytes < host.gpu_memory_bytes) host.gpu_memory_bytes = g.memory_bytes;
  }
  for (const std::string& name : names) host.gpu_name += (host.gpu_name.empty() ? "" : " + ") + name;
  host.nvidia_driver = nvidia_driver;
  host.cuda_driver = inventory.driver_version;
  return host;
}

nlohmann::json host_gpus_to_json(const HostGpus& h) {
  const auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  return {{"host", h.host},
          {"gpus", h.gpu_count},
          {"gpu_name", or_null(h.gpu_name)},
          // None without a GPU, as its name and drivers (it read 0).
          {"gpu_memory_bytes", h.gpu_count > 0 ? nlohmann::json(h.gpu_memory_bytes) : nlohmann::json()},
          {"nvidia_driver", or_null(h.nvidia_driver)},
          {"cuda_driver", or_null(h.cuda_driver)}};
}

HostGpus host_gpus_from_json(const nlohmann::json& json) {
  const auto text = [&json](const char* key) {
    return json.at(key).is_string() ? json.at(key).get<std::string>() : std::string();
  };
  HostGpus h;
  h.host = text("host");
  h.gpu_count = json.at("gpus").get<int>();
  h.gpu_name = text("gpu_name");
  h.gpu_memory_bytes = json.at("gpu_memory_bytes").is_number() ? json.at("gpu_memory_bytes").get<int64_t>() : 0;
  h.nvidia_driver = text("nvidia_driver");
  h.cuda_driver = text("cuda_driver");
  return h;
}

// "8 × NVIDIA H200 (139.8 GiB)", "no GPU".
std::string gpus_in_words(const HostGpus& h) {
  if (h.gpu_count == 0) return "no GPU";
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB", static_cast<double>(h.gpu_memory_bytes) / (1ull << 30));
  return std::to_string(h.gpu_count) + " × " + h.gpu_name + " (" + memory + ")";
}

}  // namespace

std::string host_gpus_difference(const HostGpus& host, const HostGpus& reference) {
  const auto driver = [](const std::string& version) { return version.empty() ? std::string("none") : version; };
  if (host.gpu_count != reference.gpu_count || host.gpu_name != reference.gpu_name ||
      host.gpu_memory_bytes != reference.gpu_memory_bytes)
    return host.host + " has " + gpus_in_words(host) + " where " + reference.host + " has " +
           gpus_in_words(reference);
  if (host.nvidia_driver != reference.nvidia_driver)
    return host.host + " has NVIDIA driver " + driver(host.nvidia_driver) + " where " + reference.host + " has " +
           driver(reference.nvidia_driver);
  if (host.cuda_driver != reference.cuda_driver)
    return host.host + " has a driver for CUDA " + driver(host.cuda_driver) + " where " + reference.host +
           " has one for CUDA " + driver(reference.cuda_driver);
  return "";
}

std::string hosts_that_differ(const Environment& env) {
  std::string first;
  int differing = 0;
  for (size_t i = 1; i < env.host_gpus.size(); ++i) {
    const std::string difference = host_gpus_difference(env.host_gpus[i], env.host_gpus[0]);
    if (difference.empty()) continue;
    if (first.empty()) first = difference;
    ++differing;
  }
  if (first.empty()) return "";
  return "the hosts differ: " + first + " (rank 0's host); " + std::to_string(differing) + " of " +
         std::to_string(env.host_gpus.size()) + " hosts differ from rank 0's: the job runs at its slowest host's " +
         "pace, and its figures are not one kind of node's";
}

std::string cpu_model_in(const std::string& proc_cpuinfo) {
  // The first value of each key, blanks around it dropped.
  std::map<std::string, std::string> first;
  std::istringstream lines(proc_cpuinfo);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto trimmed = [](std::string text) {
      const size_t begin = text.find_first_not_of(" \t");
      const size_t end = text.find_last_not_of(" \t");
      return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
    };
    first.emplace(trimmed(line.substr(0, colon)), trimmed(line.substr(colon + 1)));
  }
  if (const auto model = first.find("model name"); model != first.end() && !model->second.empty())
    return model->second;  // x86, 32-bit Arm
  if (const auto cpu = first.find("cpu"); cpu != first.end() && !cpu->second.empty())
    return cpu->second;  // POWER ("POWER9, altivec supported")
  // arm64 names no model: its implementer and part, named as lscpu names
  // the ones GPU nodes carry (Grace is a Neoverse-V2).
  const auto implementer = first.find("CPU implementer");
  const auto part = first.find("CPU part");
  if (implementer == first.end() || part == first.end()) return "unknown";
  static const std::map<std::pair<std::string, std::string>, std::string> kParts = {
      {{"0x41", "0xd0c"}, "ARM Neoverse-N1"}, {{"0x41", "0xd40"}, "ARM Neoverse-V1"},
      {{"0x41", "0xd49"}, "ARM Neoverse-N2"}, {{"0x41", "0xd4f"}, "ARM Neoverse-V2"},
      {{"0x41", "0xd84"}, "ARM Neoverse-V3"}, {{"0x41", "0xd8e"}, "ARM Neoverse-N3"},
      {{"0x41", "0xd08"}, "ARM Cortex-A72"},  {{"0x41", "0xd0b"}, "ARM Cortex-A76"},
      {{"0x48", "0xd01"}, "HiSilicon Kunpeng-920"}, {{"0xc0", "0xac3"}, "Ampere Ampere-1"},
      {{"0xc0", "0xac4"}, "Ampere Ampere-1a"}};
  if (const auto known = kParts.find({implementer->second, part->second}); known != kParts.end())
    return known->second;
  return "arm64 implementer " + implementer->second + " part " + part->second;
}

std::string cpu_oversubscription(int threads, int usable_cpus, int host_ranks, int hardware_threads,
                                 const std::string& host) {
  const std::string effect = ": the threads take turns on the cores and the step time is the scheduler's; ";
  if (usable_cpus > 0 && threads > usable_cpus)
    return "train.threads=" + std::to_string(threads) + " but this rank may run on " + std::to_string(usable_cpus) +
           " CPU(s) (its affinity mask or cgroup CPU limit)" + effect + "set train.threads=" +
           std::to_string(usable_cpus) + ", or 0 for the CPUs a rank may use";
  const int64_t together = int64_t{threads} * host_ranks;
  if (host_ranks > 1 && hardware_threads > 0 && together > hardware_threads) {
    const int share = hardware_threads / host_ranks;
    return std::to_string(host_ranks) + " ranks on " + host + " run " + std::to_string(threads) +
           " CPU thread(s) each, " + std::to_string(together) + " on its " + std::to_string(hardware_threads) +
           " hardware threads" + effect +
           (share >= 1 ? "give each rank its share (train.threads=" + std::to_string(share) +
                             ") or bind each rank to its own cores (mpirun --map-by slot:PE=" +
                             std::to_string(share) + " --bind-to core, srun --cpus-per-task)"
                       : "run at most " + std::to_string(hardware_threads) + " ranks on it");
  }
  return "";
}

int64_t available_memory_bytes() {
  const int64_t host = proc_kib_field_bytes("/proc/meminfo", "MemAvailable");
  const int64_t room = cgroup_limits().memory_room_bytes;
  return room >= 0 && (host <= 0 || room < host) ? room : host;
}

std::string device_bench_room_over_ranks(Communicator& comm, int64_t bytes) {
  if (!comm.device_buffers()) return "";  // alike on every rank
  const int ranks = ranks_on_this_host(comm);
  const int64_t available = available_memory_bytes();
  const int64_t host_room = available > 0 ? available / ranks : -1;
  return first_reason_over_ranks(comm, device_bench_room_shortfall(comm, bytes, host_room)).reason;
}

int64_t total_memory_bytes() {
  const int64_t host = proc_kib_field_bytes("/proc/meminfo", "MemTotal");
  const int64_t limit = cgroup_limits().memory_bytes;
  return limit > 0 && (host <= 0 || limit < host) ? limit : host;
}

int64_t mapped_bytes() { return proc_kib_field_bytes("/proc/self/status", "VmSize"); }

namespace {
int64_t limit_bytes(int resource) {
  struct rlimit limit {};
  if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT64_MAX));
}
}  // namespace

int64_t address_space_limit_bytes() { return limit_bytes(RLIMIT_AS); }

int64_t thread_stack_bytes() {
  constexpr int64_t kGlibcDefault = int64_t{8} << 20;
  pthread_attr_t attributes;
  if (::pthread_getattr_default_np(&attributes) != 0) return kGlibcDefault;
  size_t bytes = 0;
  const bool known = ::pthread_attr_getstacksize(&attributes, &bytes) == 0 && bytes > 0;
  ::pthread_attr_destroy(&attributes);
  return known ? static_cast<int64_t>(bytes) : kGlibcDefault;
}

int64_t file_size_limit_bytes() { return limit_bytes(RLIMIT_FSIZE); }

std::string nvidia_driver_version_in(const std::string& proc_text) {
  std::istringstream lines(proc_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("NVRM version:", 0) != 0) continue;
    const size_t module = line.find("Kernel Module");
    if (module == std::string::npos) return "";
    // The first word after it that reads as a version: digits and dots, a dot
    // among them ("for" and "x86_64" come first in the open module's line).
    std::istringstream words(line.substr(module + std::strlen("Kernel Module")));
    std::string word;
    while (words >> word)
      if (std::isdigit(static_cast<unsigned char>(word[0])) && word.find('.') != std::string::npos &&
          word.find_first_not_of("0123456789.") == std::string::npos)
        return word;
    return "";
  }
  return "";
}

FilesystemInfo describe_filesystem(const std::string& role, const std::string& path) {
  FilesystemInfo fs;
  fs.role = role;
  fs.path = path;
  // The path itself where it exists (a checkpoint.dir may be a mount point,
  // whose parent is another filesystem); a file not written yet: its folder.
  struct statfs info {};
  if (statfs(path.c_str(), &info) == 0 || statfs(parent_directory(path).c_str(), &info) == 0) {
    fs.type = filesystem_type_name(static_cast<int64_t>(info.f_type));
    fs.free_bytes = static_cast<int64_t>(info.f_bavail) * static_cast<int64_t>(info.f_bsize);
  } else {
    fs.type = "unknown";
  }
  return fs;
}

Environment collect_environment(Communicator& comm, const std::string& compute_backend,
                                int threads_used, const GpuInventory& gpus) {
  Environment env;
  env.trainbench_version = trainbench_version();
  env.world_size = comm.world_size();
  env.comm_backend = comm.backend_name();
  env.cpu_model = cpu_model_name();
  env.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  env.usable_threads = usable_cpu_count();
  env.threads_used = threads_used;
  env.memory_limit_bytes = cgroup_limits().memory_bytes;
  env.memory_total_bytes = total_memory_bytes();
  env.memory_available_bytes = available_memory_bytes();
  env.gpus = gpus;
  {
    std::ifstream version("/proc/driver/nvidia/version");
    std::ostringstream text;
    text << version.rdbuf();
    env.nvidia_driver = nvidia_driver_version_in(text.str());
  }
  // Every host, not rank 0's alone (report.py counts a sweep's hosts from
  // them, and a 4-node point read as "1 host"), with its GPUs and drivers.
  // json_text: a host or GPU name that is not UTF-8 (a hostname is bytes)
  // made dump() throw, an internal error before step 1.
  for (const std::string& text : strings_of_ranks(comm, json_text(host_gpus_to_json(host_gpus_here(
                                                            comm.host_name(), gpus, env.nvidia_driver))))) {
    const HostGpus host = host_gpus_from_json(nlohmann::json::parse(text));
    const auto same_host = [&host](const HostGpus& h) { return h.host == host.host; };
    if (std::none_of(env.host_gpus.begin(), env.host_gpus.end(), same_host)) env.host_gpus.push_back(host);
  }
  env.compute_backend = compute_backend;
  env.built_backends = built_backends();
  env.openblas = openblas_get_config();
  env.nccl = nccl_version();
  env.mpi = mpi_library_version();
  env.compiler = std::string("g++ ") + __VERSION__;
  struct utsname uts {};
  if (uname(&uts) == 0)
    env.os = std::string(uts.sysname) + " " + uts.release + " " + uts.machine;
  return env;
}

nlohmann::json environment_to_json(const Environment& env) {
  nlohmann::json hosts = nlohmann::json::array(), host_gpus = nlohmann::json::array();
  for (const HostGpus& h : env.host_gpus) {
    hosts.push_back(h.host);
    host_gpus.push_back(host_gpus_to_json(h));
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuInfo& g : env.gpus.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"memory_bytes", g.memory_bytes},
                    {"compute_capability", std::to_string(g.compute_major) + "." +
                                               std::to_string(g.compute_minor)},
                    {"uuid", g.uuid.empty() ? nlohmann::json() : nlohmann::json(g.uuid)},
                    {"pci_bus_id", g.pci_bus_id.empty() ? nlohmann::json() : nlohmann::json(g.pci_bus_id)}});
  }
  nlohmann::json filesystems = nlohmann::json::array();
  for (const FilesystemInfo& fs : env.filesystems) {
    filesystems.push_back({{"role", fs.role},
                           {"path", fs.path},
                           {"type", fs.type},
                           {"free_bytes", fs.free_bytes >= 0 ? nlohmann::json(fs.free_bytes) : nlohmann::json()}});
  }
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  return {
      {"hosts", hosts},
      {"host_gpus", host_gpus},
      {"ranks", env.world_size},
      {"comm_backend", env.comm_backend},
      {"compute_backend", env.compute_backend},
      {"attention", {{"kernel", env.attention.kernel}, {"detail", env.attention.detail}}},
      {"gemm", {{"algorithms", env.gemm.algorithms}, {"detail", env.gemm.detail}}},
      {"built_backends", env.built_backends},
      {"cpu", {{"model", env.cpu_model},
               {"hardware_threads", env.hardware_threads},
               {"usable_threads", env.usable_threads},
               {"threads_used", env.threads_used}}},
      {"memory", {{"total_bytes", env.memory_total_bytes},
                  {"available_bytes", env.memory_available_bytes},
                  {"cgroup_limit_bytes", env.memory_limit_bytes > 0 ? nlohmann::json(env.memory_limit_bytes)
                                                                    : nlohmann::json()}}},
      {"gpus", gpus},
      {"gpus_unavailable_reason", or_null(env.gpus.gpus.empty() ? env.gpus.why_none : "")},
      {"cuda_runtime", or_null(env.gpus.runtime_version)},
      {"cuda_driver", or_null(env.gpus.driver_version)},
      {"nvidia_driver", or_null(env.nvidia_driver)},
      {"nccl", or_null(env.nccl)},
      {"mpi", or_null(env.mpi)},
      {"openblas", env.openblas},
      {"libraries",
       {{"openblas", env.openblas},
        {"openmp", std::to_string(_OPENMP)},
        {"nlohmann_json", std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                              std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                              std::to_string(NLOHMANN_JSON_VERSION_PATCH)},
        {"cli11", CLI11_VERSION},
        {"cuda_runtime", or_null(env.gpus.runtime_version)},
        {"nccl", or_null(env.nccl)},
        {"mpi", or_null(env.mpi)}}},
      {"compiler", env.compiler},
      {"os", env.os},
      {"filesystems", filesystems},
  };
}

}  // namespace trainbench
