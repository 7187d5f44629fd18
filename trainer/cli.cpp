#include "trainer/cli.h"

#include <fcntl.h>     // open: --out's probe
#include <sys/stat.h>  // stat: what --out and its folder are
#include <sys/statvfs.h>  // statvfs: room for --out
#include <unistd.h>    // close, unlink

#include <CLI/CLI.hpp>  // the command line parser
#include <nlohmann/json.hpp>  // the ranks' configs compared
#include <algorithm>  // std::max, std::min, std::mismatch
#include <cerrno>
#include <chrono>  // let_rank_zero_speak_first's wait
#include <cstdio>
#include <cstring>  // strerror
#include <exception>
#include <filesystem>  // the result and checkpoint paths, compared and sized
#include <optional>  // the shard listing's watchdog, for user shards only
#include <regex>  // whether a failure names its rank
#include <string>
#include <system_error>  // a thread that could not start: exit 3
#include <thread>  // sleep_for
#include <vector>

#include "comm/communicator.h"        // make_local/mpi/nccl_communicator, nccl_version
#include "comm/launch_detect.h"       // launcher_rank: who speaks for a job that failed before MPI; launcher_task_count
#include "dataloader/data_error.h"    // DataError: exit 2
#include "dataloader/shard_loader.h"  // LoaderTimeout: exit 3
#include "dataloader/shard_list.h"    // shard_identities: what a checkpoint records of the data
#include "dataloader/shard_tools.h"   // path_is_within: the result inside checkpoint.dir
#include "checkpoint/atomic_file.h"   // parent_directory, replaced_file, atomic_write_temporary_template of --out
#include "checkpoint/checkpoint_files.h"  // CheckpointError, CheckpointWriteError: exit 2, 3
#include "checkpoint/checkpoint_io.h"     // read_small_file: an earlier result at --out
#include "checkpoint/dir_lock.h"  // CheckpointDirLock: one run per checkpoint.dir
#include "kernels/device_error.h"     // DeviceError: exit 3
#include "kernels/device_info.h"      // query_gpus for device auto
#include "kernels/cpu/cpu_ops.h"      // blas_workers_yet_to_map: the address-space check
#include "kernels/engine.h"           // make_engine, plan_engine_memory
#include "kernels/host_resources.h"   // cpu_engine_threads: train.threads=0
#include "trainer/cli_validators.h"  // home_path: a path option's ~/
#include "trainer/config.h"
#include "trainer/data_source.h"
#include "trainer/temporary_folder.h"  // make_temporary_directory, remove_temporary_folder: the default checkpoint folder
#include "trainer/environment.h"
#include "trainer/gpu_placement.h"  // the rank's GPU: one engine over the ranks, a GPU of its own
#include "trainer/json_text.h"       // json_text: rank configs compared as text; error_line
#include "trainer/interrupt_cleanup.h"  // wait_if_interrupted: no error line after a signal
#include "trainer/partial_result.h"     // an aborted or interrupted run leaves its steps
#include "trainer/report.h"
#include "trainer/results.h"
#include "trainer/bench_command.h"
#include "trainer/ceilings.h"
#include "trainer/checkpointing.h"
#include "trainer/burnin_command.h"
#include "trainer/run_extension.h"    // RunExtension: burnin's work inside a run
#include "trainer/plan_command.h"
#include "trainer/project_command.h"
#include "trainer/shards_command.h"
#include "trainer/hung_storage.h"  // checkpoint.dir's calls before step 1, bounded
#include "trainer/train_loop.h"
#include "trainer/zero_optimizer.h"    // zero_shard

namespace trainbench {

namespace {

struct RunOptions {
  std::string config;  // "": none given, default_run_config picks
  std::vector<std::string> overrides;
  // --steps N overrides train.steps, passed on as typed so the config layer
  // validates it like the key (an integer CLI11 saturates: 10^20 ran forever).
  std::string steps;
  bool steps_given = false;
  std::string out;
  bool out_given = false;       // --out "" is an error, not the default path
  std::string resume;           // --resume latest|PATH
  bool ceilings = false;        // --ceilings: measure each resource alone first
  RunExtension* extension = nullptr;  // a command built on run (burnin): its own work
};

// The checkpoint folder of a run: checkpoint.dir, or a temporary folder
// that rank 0 makes (and removes at exit) and every rank is told, so the
// default run shows checkpointing without leaving files behind.
struct CheckpointDir {
  std::string path;
  bool temporary = false;
  bool remover = false;  // rank 0 of a temporary folder
  // Rank 0 made checkpoint.dir: a run that fails before writing anything
  // there removes it again (a refused --resume PATH left it, lock file and
  // all, for the next run to find): with its lock file when the lock is its
  // own (release_removing_unused_folder), else only when empty, holding no
  // one's lock (two runs started together on a new folder both found it
  // absent, and the one refused the lock removed the other's).
  bool made_by_this_run = false;
  const int exceptions_at_start = std::uncaught_exceptions();
  CheckpointDirLock lock;  // rank 0's: no second run writes into the folder meanwhile
  CheckpointDir() = default;
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;
  ~CheckpointDir() {
    if (made_by_this_run && std::uncaught_exceptions() > exceptions_at_start) {
      lock.release_removing_unused_folder();
      (void)::rmdir(path.c_str());  // an empty folder only: fails on anything else
    }
    drop();
  }
  // No checkpoints after all: a temporary folder goes now.
  void drop() {
    lock.release();
    if (remover) remove_temporary_folder(path);
    path.clear();
    temporary = remover = false;
  }
};

void setup_checkpoint_dir(const Config& config, Communicator& comm, CheckpointDir* dir) {
  // On storage that stopped responding the folder's mkdir, the probe's fsync
  // or the flock never returns: bounded (StorageWatchdog), the job ends
  // naming the rank.
  const StorageWatchdog watchdog(
      comm, config.checkpoint.timeout_s,
      config.checkpoint.dir.empty()
          ? "making the run's checkpoint folder in " + temporary_directory_name() + " and checking that it is writable"
          : "checking that checkpoint.dir " + config.checkpoint.dir + " is writable and taking its lock");
  if (!config.checkpoint.dir.empty()) {
    dir->path = config.checkpoint.dir;
    std::error_code ignored;
    dir->made_by_this_run = comm.rank() == 0 && !std::filesystem::exists(dir->path, ignored);
  } else {
    // The default is a folder in rank 0's TMPDIR. Ranks on another host
    // wrote their files into a folder of that name on their own disk, which
    // rank 0's commit never saw, retention never pruned and nothing removed:
    // every checkpoint's files piled up in those hosts' /tmp, and no
    // checkpoint could be resumed.
    if (comm.world_size() > 1 && ranks_on_this_host(comm) < comm.world_size())
      throw CommandError{kExitUserError,
                         "checkpoint.dir: this job's ranks are on more than one host, and the default checkpoint "
                         "folder is in one host's temporary directory: set checkpoint.dir to a folder every host "
                         "sees, or checkpoint.every_steps=0"};
    dir->path = broadcast_string(comm, comm.rank() == 0 ? make_temporary_directory("trainbench-ckpt") : "", 0);
    dir->temporary = true;
    dir->remover = comm.rank() == 0;
  }
  check_checkpoint_dir(dir->path, comm, dir->temporary);
  // Rank 0 speaks for the job; its peers wait in their next collective and
  // end with its abort should the folder be taken.
  if (comm.rank() == 0) dir->lock.acquire(dir->path);
}

// The checkpoint folder is the run's: commits replace `latest` and step_N,
// retention removes old step folders whole, the lock is its file. A result
// written there replaced `latest` (the next --resume latest failed), went
// with a removed step folder, or met a step folder of its name at the end
// (exit 3, the result lost): refused before step 1.
void check_result_outside_checkpoints(const std::string& result_path, const std::string& named,
                                      const std::string& checkpoint_dir) {
  // A bare "latest" written from inside the folder is in it too.
  if (!path_is_within(result_path, checkpoint_dir)) return;
  throw CommandError{kExitUserError, named + " " + result_path + ": inside checkpoint.dir " + checkpoint_dir +
                                         ", whose names (latest, step_N) the checkpoints replace and remove: "
                                         "write the result elsewhere"};
}

std::string quoted_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.find_first_of(" \t\"'") != std::string::npos) arg = "'" + arg + "'";
    line += (i ? " " : "") + arg;
  }
  return line;
}

// The exit code and one-line message of the exception being handled: what
// the CLI prints for each kind of failure (DESIGN: 2 bad input, 3 the
// environment, 1 a bug).
struct ErrorReport {
  int code;
  std::string message;
  bool device = false;  // a DeviceError the GPU's failure caused, which burn-in judges
};

// A thread that could not start (EAGAIN: ulimit -u; ENOMEM: no room left
// for its stack under ulimit -v) is the machine's limit, not a bug.
bool is_thread_start_failure(const std::system_error& e) {
  return e.code() == std::errc::resource_unavailable_try_again || e.code() == std::errc::not_enough_memory;
}
constexpr const char* kThreadLimitsNamed = "threads or address space: ulimit -u, ulimit -v";

// The exit code and one-line message of the exception being handled (above).
ErrorReport describe_current_exception() {
  try {
    throw;
  } catch (const ConfigError& e) {
    return {kExitUserError, e.what()};
  } catch (const CommandError& e) {
    return {e.code, e.message};
  } catch (const DataError& e) {
    return {e.scope() == CorruptScope::kEnvironment ? kExitEnvironmentError : kExitUserError, e.what()};
  } catch (const CheckpointError& e) {
    return {e.environment() ? kExitEnvironmentError : kExitUserError, e.what()};
  } catch (const CheckpointFailure& e) {
    return {kExitEnvironmentError, e.what()};
  } catch (const CheckpointWriteError& e) {
    return {kExitEnvironmentError, e.what()};
  } catch (const AtomicWriteError& e) {  // a result file (disk full, a folder gone since the check)
    return {kExitEnvironmentError, e.what()};
  } catch (const LoaderTimeout& e) {
    return {kExitEnvironmentError, e.what()};
  } catch (const DeviceError& e) {  // the GPU's, not a bug (an "internal error", exit 1, sent users to the code)
    return {kExitEnvironmentError, std::string("device error: ") + e.what(), e.device_fault()};
  } catch (const std::bad_alloc&) {
    // Under an address-space limit, the limit is the likelier cause.
    const int64_t limit = address_space_limit_bytes();
    return {kExitEnvironmentError, limit > 0 ? "out of memory under the address-space limit (ulimit -v) of " +
                                                   human_bytes(static_cast<double>(limit))
                                             : std::string("out of memory")};
  } catch (const std::system_error& e) {
    if (is_thread_start_failure(e))
      return {kExitEnvironmentError,
              std::string("out of a system resource: ") + e.what() + " (" + kThreadLimitsNamed + ")"};
    return {1, std::string("internal error: ") + e.what()};
  } catch (const std::exception& e) {
    return {1, std::string("internal error: ") + e.what()};
  } catch (...) {
    return {1, "internal error: an unknown exception"};
  }
}

// Out of file descriptors or kernel memory while probing --out is the
// machine's limit, not the path's fault: exit 3, as everywhere else.
[[noreturn]] void refuse_result_path(const std::string& message, int error) {
  throw CommandError{is_machine_limit(error) ? kExitEnvironmentError : kExitUserError,
                     message + ": " + std::strerror(error) + (error == EMFILE ? " (ulimit -n)" : "")};
}

// The schemas of what trainbench writes as a result, any version.
constexpr const char* kResultKinds[] = {"result", "aborted_run", "bench_io", "bench_io_write", "bench_comm",
                                        "projection"};

// Whether `path` holds a JSON object whose "schema" names a trainbench
// result (trainbench.result/v1, trainbench.bench_io/v1, ...): what --out may
// replace. Results are a few MB; anything far larger is not one.
bool is_trainbench_result(const std::string& path, const std::string& named) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error || size > static_cast<uintmax_t>(checkpoint_io::kMaxSmallFileBytes)) return false;
  std::string text;
  try {
    text = checkpoint_io::read_small_file(path, named);
  } catch (const CheckpointError& e) {
    // No descriptor or memory left is the machine's limit (exit 3); a file
    // that cannot be read otherwise is not a result.
    if (e.environment())
      throw CommandError{kExitEnvironmentError,
                         std::string(e.what()) + " (to tell whether it is an earlier result; ulimit -n)"};
    return false;
  }
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("schema") || !json["schema"].is_string()) return false;
  // Results only: a checkpoint's manifest.json is a trainbench file too, and
  // replacing it lost that checkpoint.
  const std::string schema = json["schema"].get<std::string>();
  for (const char* kind : kResultKinds)
    if (schema.rfind(std::string("trainbench.") + kind + "/", 0) == 0) return true;
  return false;
}

// The first key, in a dotted path, where `mine` differs from `root`'s; "" if
// none.
std::string first_difference(const nlohmann::json& root, const nlohmann::json& mine, const std::string& at) {
  if (root.is_object() && mine.is_object()) {
    for (const auto& [key, value] : mine.items()) {
      const std::string path = at.empty() ? key : at + "." + key;
      const std::string difference =
          first_difference(root.contains(key) ? root.at(key) : nlohmann::json(), value, path);
      if (!difference.empty()) return difference;
    }
    for (const auto& [key, value] : root.items())
      if (!mine.contains(key)) return (at.empty() ? key : at + "." + key) + " unset where rank 0 has " + json_text(value);
    return "";
  }
  return root == mine ? "" : at + " = " + json_text(mine) + " where rank 0 has " + json_text(root);
}

// Host memory a rank holds beside the engine's plan and its data: the
// checkpoint staging (Checkpointer::allocate_staging touches every page
// before step 1; page-locked under CUDA) and, on several ranks, the host copy
// of the parameters the consistency check hashes (parameter_checksum). Left
// out of the checks below, a cpu-small run's staging was 0.43 times its plan
// and an 8B model's parameter copy 32 GB a rank: past the checks, to the OOM
// killer, or to a mid-run "out of memory" under ulimit -v.
struct HostMemoryBeside {
  int64_t staging = 0;
  int64_t parameter_copy = 0;
  int64_t total() const { return staging + parameter_copy; }
  // ", checkpoint staging 1.2 GiB, ..." for the messages.
  std::string described() const {
    std::string text;
    if (staging > 0) text += ", checkpoint staging " + human_bytes(static_cast<double>(staging));
    if (parameter_copy > 0)
      text += ", the parameters' copy the rank check hashes " + human_bytes(static_cast<double>(parameter_copy));
    return text;
  }
};
HostMemoryBeside host_memory_beside(const Config& config, const EngineOptions& options, int world, int rank) {
  HostMemoryBeside beside;
  if (config.checkpoint.every_steps > 0)
    beside.staging = rank_staging_bytes(planned_state_tensors(options), config, world, rank);
  if (world > 1) beside.parameter_copy = make_layout(options).total_params() * static_cast<int64_t>(sizeof(float));
  return beside;
}

// An address-space limit (ulimit -v) below what a run maps: OpenBLAS
// retried its per-thread buffer allocation forever (a hang at 500 MB for
// tiny's 10 MiB plan), or a thread failed to start. The figure is a floor:
// what is mapped already, the plan's host bytes on the CPU engine,
// OpenBLAS's buffer per thread (up to 128 MiB), the stacks of the loader's
// and the checkpoints' threads (the latter start at the first checkpoint: a
// limit that left no room for them failed it, "Resource temporarily
// unavailable", after the steps before it had run) and 64 MiB of slack; a
// CUDA context maps far more.
void check_address_space_limit(const Config& config, const EngineOptions& options, const MemoryPlan& plan,
                               const HostMemoryBeside& beside) {
  const int64_t allowed = address_space_limit_bytes();
  if (allowed == 0) return;
  constexpr int64_t kOpenBlasBufferBytes = int64_t{128} << 20;
  constexpr int64_t kSlackBytes = int64_t{64} << 20;
  const int64_t threads = cpu_engine_threads(options.threads);
  const int64_t reader_threads = config.data.source == "shards" ? config.data.readers : 0;
  // The persisting thread, and a writer and a hasher per file: checkpoint.writers
  // files of the state the ranks hold alike, as many of ZeRO-1's shard, and
  // the trainer's own (staging_layout, Checkpointer::submit_persist).
  const bool sharded = options.optimizer_shard.end >= 0;
  const int64_t files = config.checkpoint.writers * (sharded ? 2 : 1) + 1;
  const int64_t checkpoint_threads = config.checkpoint.every_steps > 0 ? 1 + 2 * files : 0;
  // OpenBLAS's workers that have not mapped their buffers yet will: counted
  // beside those take_blas_buffers maps (waiting a moment for them, as they
  // have normally settled long before).
  const int64_t starting = cpu::blas_workers_yet_to_map(std::chrono::seconds(2));
  // The data source's batches, the staging and the parameters' copy too:
  // accepted without them, the run failed after allocating, "out of host
  // memory for the synthetic batches" or at its first checkpoint.
  const int64_t data_bytes = data_source_host_bytes(config);
  const int64_t needed = mapped_bytes() + (options.device == "cpu" ? plan.total_bytes() : 0) + data_bytes +
                         beside.total() + (threads + starting) * kOpenBlasBufferBytes +
                         (reader_threads + checkpoint_threads) * thread_stack_bytes() + kSlackBytes;
  if (needed > allowed)
    throw CommandError{kExitEnvironmentError,
                       "the address-space limit (ulimit -v) is " + human_bytes(static_cast<double>(allowed)) +
                           " but this run maps at least " + human_bytes(static_cast<double>(needed)) +
                           " (the program as loaded, the memory plan, the data's " +
                           human_bytes(static_cast<double>(data_bytes)) + beside.described() +
                           ", OpenBLAS's buffers for " +
                           std::to_string(threads) + " threads" +
                           (starting > 0 ? " and " + std::to_string(starting) + " of its own still starting" : "") +
                           (reader_threads + checkpoint_threads > 0
                                ? ", the stacks of " + std::to_string(reader_threads) + " loader and " +
                                      std::to_string(checkpoint_threads) + " checkpoint threads"
                                : "") +
                           "): raise it (ulimit -v unlimited) or set train.threads lower" +
                           (reader_threads + checkpoint_threads > 0 ? " (or data.readers, checkpoint.writers)" : "") +
                           (beside.staging > 0 ? "; checkpoint.every_steps=0 stages nothing" : "")};
}

// Most failures are the same on every rank (a bad --set, a checkpoint of
// another world size): N ranks printed N copies of one line. The ranks other
// than 0 wait a moment before they speak; when rank 0 fails too, the
// launcher ends them within it (mpirun on a non-zero exit, MPI_Abort) and one
// line is left. A rank failing alone still says why, a moment later.
void let_rank_zero_speak_first(int rank) {
  if (rank > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
}

}  // namespace

bool takes_nccl(const std::string& backend, const std::string& device, int world_size) {
  return backend == "nccl" || (backend == "auto" && device == "cuda" && world_size > 1 && !nccl_version().empty());
}

std::string resolve_device(const std::string& requested, const GpuInventory& gpus) {
  if (requested != "auto") return requested;
  const bool cuda_built = built_backends().find("cuda") != std::string::npos;
  return cuda_built && !gpus.gpus.empty() ? "cuda" : "cpu";
}

std::string default_run_config(const std::vector<std::string>& overrides, const GpuInventory& gpus) {
  const std::string device = last_override_scalar(overrides, "train.device", "auto");
  return resolve_device(device, gpus) == "cuda" ? "preset:gpt2-124m" : "preset:tiny";
}

// A rank started with another config (a --set given to one rank, a --resume
// or --ceilings missing on one) stalled its peers in a collective until
// comm.timeout_s, its own error never shown, trained on silently (another
// micro-batch: tokens/s counted wrong), or corrupted the heap (bench comm's
// and project's buffers sized by each rank's own options). Of the report
// section only what every rank does is compared: where the result goes and
// how often progress is printed are rank 0's, but a rank that times no step
// (report.instrument) or times every op (report.op_times) steps at another
// pace, and its peers were reported as stragglers.
void check_ranks_run_the_same_job(const Config& config, const std::string& command_options, Communicator& comm) {
  if (comm.world_size() < 2) return;
  nlohmann::json mine = config_to_json(config);
  mine["report"].erase("out");
  mine["report"].erase("progress_every");
  mine["command line"] = utf8_escaped(command_options);
  const std::string root_text = broadcast_string(comm, comm.rank() == 0 ? json_text(mine) : std::string(), 0);
  const std::string difference = first_difference(nlohmann::json::parse(root_text), mine, "");
  std::vector<double> differs(static_cast<size_t>(comm.world_size()));
  comm.all_gather(difference.empty() ? 0.0 : 1.0, differs.data());
  int first = -1;
  std::string others;
  int other_count = 0;
  for (size_t r = 0; r < differs.size(); ++r) {
    if (differs[r] == 0.0) continue;
    if (first < 0) {
      first = static_cast<int>(r);
    } else {
      others += (others.empty() ? "" : ", ") + std::to_string(r);
      ++other_count;
    }
  }
  if (first < 0) return;
  // The first differing rank's difference goes to all, so every rank fails
  // with the same line and rank 0's is the one printed (let_rank_zero_speak_first).
  const std::string first_text = broadcast_string(comm, comm.rank() == first ? difference : std::string(), first);
  throw CommandError{kExitUserError, "rank " + std::to_string(first) + " has " + first_text +
                                         (other_count == 0   ? ""
                                          : other_count == 1 ? " (rank " + others + " differs too)"
                                                             : " (ranks " + others + " differ too)") +
                                         ": every rank must be started with the same config, --set overrides "
                                         "and options"};
}

std::string override_key(const std::string& assignment) {
  std::string key = assignment.substr(0, assignment.find('='));
  key.erase(0, key.find_first_not_of(" \t"));
  key.erase(key.find_last_not_of(" \t") + 1);
  return key;
}

void refuse_report_out_override(const std::string& command, const std::vector<std::string>& overrides) {
  for (const std::string& assignment : overrides) {
    if (override_key(assignment) == "report.out")
      throw CommandError{kExitUserError, "--set " + excerpt(assignment) + ": " + command +
                                             " writes its result where --out says, not report.out (run's)"};
  }
}

// The result is written once the work is over (write_file_atomically: a
// temporary file next to it, renamed over it). Every reason that could fail
// is found here instead: it probes by creating and removing that very
// temporary file (an unwritable folder, a regular file as the folder, a name
// too long). Only an earlier result is replaced: the rename would destroy a
// device node, a FIFO, or an input given by mistake (the config, a shard).
void check_result_path(const std::string& path, const std::string& named) {
  if (path.empty()) throw CommandError{kExitUserError, named + ": the path is empty"};
  struct stat target {};
  if (::stat(path.c_str(), &target) == 0) {
    if (!S_ISREG(target.st_mode))
      throw CommandError{kExitUserError, named + " " + path + ": exists and is not a regular file; name a file"};
    if (target.st_size > 0 && ::access(path.c_str(), R_OK) != 0)
      throw CommandError{kExitUserError, named + " " + path + ": exists and cannot be read (" + std::strerror(errno) +
                                         ") to tell whether it is an earlier result; refusing to replace it"};
    if (target.st_size > 0 && !is_trainbench_result(path, named)) {
      std::string kinds;
      for (const char* kind : kResultKinds) kinds += std::string(kinds.empty() ? "trainbench." : ", .") + kind;
      throw CommandError{kExitUserError, named + " " + path + ": exists and is not a trainbench result (schema " +
                                         kinds + "); refusing to replace it: name another file"};
    }
  }
  // A link is written through (replaced_file): the folder and the probe are its target's.
  std::string file;
  try {
    file = replaced_file(path);
  } catch (const AtomicWriteError& e) {
    throw CommandError{kExitUserError, named + ": " + e.what()};
  }
  const std::string dir = parent_directory(file);
  struct stat folder {};
  if (::stat(dir.c_str(), &folder) != 0)
    throw CommandError{kExitUserError, named + " " + path + ": directory '" + dir + "' does not exist"};
  if (!S_ISDIR(folder.st_mode))
    throw CommandError{kExitUserError, named + " " + path + ": '" + dir + "' is not a directory"};
  // A name of its own, so nothing already there is touched, as long as the
  // temporary write_file_atomically makes, so a name the file system
  // refuses is refused now. (It probed with the PID's name: a run killed
  // while writing its result left PATH.tmp.PID, and where the PID repeats —
  // a container's PID 1 — every later run was refused with "File exists".)
  std::string probe = atomic_write_temporary_template(file);
  const int fd = ::mkostemp(probe.data(), O_CLOEXEC);
  if (fd < 0) refuse_result_path(named + " " + path + ": cannot create a file there", errno);
  ::close(fd);
  ::unlink(probe.c_str());
  // A full disk takes an empty probe file but not the result: found only at
  // the end, with the measurement lost. A result is tens of KiB plus a few
  // hundred bytes a step; a disk without 1 MiB free is refused now (the
  // environment's: exit 3).
  constexpr uint64_t kResultRoom = 1 << 20;
  struct statvfs disk {};
  if (::statvfs(dir.c_str(), &disk) == 0 && static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize < kResultRoom)
    throw CommandError{kExitEnvironmentError,
                       named + " " + path + ": its disk has " +
                           human_bytes(static_cast<double>(static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize)) +
                           " free; the result needs room (at least 1 MiB free): free space or name another disk"};
}

void check_result_is_not_input(const std::string& path, const std::string& named, const std::string& input,
                               const std::string& input_named) {
  if (path.empty() || input.empty()) return;
  std::error_code not_both;  // either missing: not the same file
  if (!std::filesystem::equivalent(path, input, not_both)) return;
  throw CommandError{kExitUserError, named + " " + path + " is the " + input_named + " file (" + input +
                                         "): the result would replace what it is compared with; give --out "
                                         "another path"};
}

Config load_config_as_typed(const std::string& config, std::vector<std::string> overrides,
                            const std::vector<std::pair<std::string, std::string>>& typed) {
  for (const auto& [override_text, option] : typed) overrides.push_back(override_text);
  try {
    return load_config(config, overrides);
  } catch (const ConfigError& e) {
    std::string message = e.what();
    for (const auto& [override_text, option] : typed) {
      const std::string as_set = "--set " + override_text;
      const size_t at = message.find(as_set);
      if (at != std::string::npos) message.replace(at, as_set.size(), option);
    }
    throw ConfigError(message);
  }
}

namespace {

int run_command(const RunOptions& options, const std::string& command_line) {
  if (options.out_given && options.out.empty()) throw CommandError{kExitUserError, "--out: the path is empty"};
  std::vector<std::pair<std::string, std::string>> typed;
  if (options.steps_given) typed.push_back({"train.steps=" + options.steps, "--steps " + options.steps});
  Config config = load_config_as_typed(options.config, options.overrides, typed);
  // The path as typed, not through YAML as a --set value is read: "r #1.json"
  // wrote "r", "'q'.json" wrote "q", "null" the default, and "[1].json" was
  // refused as a list.
  if (!options.out.empty()) config.report.out = options.out;
  // With nccl this is its bootstrap (MPI or local) until the GPU is known:
  // wrapped in run_config, after the engine.
  std::unique_ptr<Communicator> comm = make_communicator(config.comm.backend, config.comm.timeout_s);
  // The options besides --set that change the job, as typed.
  std::string job_options = options.resume.empty() ? "" : "--resume " + options.resume;
  if (options.ceilings) job_options += job_options.empty() ? "--ceilings" : " --ceilings";
  if (options.extension != nullptr && !options.extension->job_options().empty())
    job_options += (job_options.empty() ? "" : " ") + options.extension->job_options();
  check_ranks_run_the_same_job(config, job_options, *comm);
  try {
    RunSettings settings{command_line, options.resume, options.ceilings, true, options.extension};
    settings.out_option = options.out_given;
    settings.offers_resume = options.extension == nullptr;
    const RunReport report = run_config(config, comm, settings);
    // The failure that ended the run and a result write that failed after
    // it (both out of descriptors, say) are one error: one line.
    std::string error_line;
    if (report.outcome.failure.happened() && !options.extension && comm->rank() == 0) {
      wait_if_interrupted();  // a failure the signal's cleanup caused: the signal speaks
      error_line = report.outcome.failure.message;
    }
    // Rank 0's alone, with no collective after it: every rank ends as usual
    // (the temporary folders go), and the job's exit code is rank 0's 3.
    if (!report.result_write_failure.empty())
      error_line += (error_line.empty() ? "" : "; and then ") + report.result_write_failure;
    if (!error_line.empty()) std::fprintf(stderr, "trainbench: %s\n", trainbench::error_line(error_line).c_str());
    return report.exit_code;
  } catch (...) {
    ErrorReport error = describe_current_exception();
    // A GPU that fails mid-burn-in is burn-in's verdict on it (exit 4).
    const std::string verdict =
        error.device && options.extension ? options.extension->device_failure_verdict(*comm, error.message) : "";
    if (!verdict.empty()) error = {kExitCheckFailed, verdict, true};
    // One rank's own failure (a file only its node lacks, rank 0's --out):
    // its peers would wait for it in their next collective until
    // comm.timeout_s, and its message would be lost in the timeout's. It
    // ends the job now, with its message.
    if (comm->world_size() < 2) {
      if (verdict.empty()) throw;
      throw CommandError{error.code, error.message};
    }
    wait_if_interrupted();  // a failure the signal's cleanup caused: the signal speaks
    let_rank_zero_speak_first(comm->rank());
    // A failure the ranks agreed on names the rank it is about ("rank 1's
    // part", "rank 1 resolved 6 shards"); "rank 0: " before it, from the
    // rank that speaks first, blamed rank 0.
    // ("ranks 2 and 3 on nodeB", "rank(s) 1, 2" name theirs too.)
    const bool names_its_rank = std::regex_search(error.message, std::regex("\\brank(s|\\(s\\))? [0-9]"));
    comm->abort(error.code, trainbench::error_line(names_its_rank ? error.message
                                                                  : "rank " + std::to_string(comm->rank()) + ": " +
                                                                        error.message));
    return error.code;  // not reached: abort ends the process
  }
}

}  // namespace

namespace {

// ZeRO-1: this rank's optimizer state only, buffers in `world` blocks of 256-byte multiples.
void shard_optimizer_state(const Config& config, Communicator& comm, bool use_nccl, EngineOptions& engine_options) {
  if (config.comm.zero != 1 || comm.world_size() <= 1) return;
  const int64_t trainable = make_layout(engine_options).trainable_params();
  engine_options.optimizer_shard = zero_shard(trainable, comm.rank(), comm.world_size());
  engine_options.pad_buffers_to = zero_padding_multiple(comm.world_size());
  // A block past MPI's int count ended the job at step 1 (exit 3), after
  // the engine and the data were set up.
  if (!use_nccl && std::string(comm.backend_name()) == "mpi") {
    const std::string past = zero_block_past_mpi_count(trainable, comm.world_size());
    if (!past.empty()) throw CommandError{kExitUserError, past};
  }
}

// The precision and attention the config asks for, against the engine it resolved to.
void check_engine_supports(const Config& config, const std::string& device) {
  if (device == "cpu" && config.train.precision == "bf16")
    throw CommandError{kExitUserError, "train.precision: bf16 needs the cuda engine; the cpu engine is fp32"};
  if (device == "cuda" && config.train.precision == "fp32")
    throw CommandError{kExitUserError, "train.precision: fp32 needs the cpu engine (train.device " +
                                           config.train.device + " took the cuda engine, which trains bf16 with "
                                           "fp32 master weights): use train.precision bf16 or auto"};
  if (device == "cpu" && config.train.attention == "cudnn")
    throw CommandError{kExitUserError,
                       "train.attention: cudnn needs the cuda engine; the cpu engine runs attention as GEMMs"};
}

// What to change for a plan that does not fit, the larger part first: it
// named the batch and the depth whatever the plan held, so a model of
// ffn_hidden 2147483647 (48 TiB) was never told of its widths.
std::string what_to_lower(const MemoryPlan& plan) {
  const int64_t state = plan.parameter_bytes + plan.gradient_bytes + plan.optimizer_bytes;
  const int64_t working = plan.activation_bytes + plan.workspace_bytes;
  const std::string batch = "train.micro_batch or model.seq_len (activations and workspace " +
                            human_bytes(static_cast<double>(working)) + ")";
  const std::string model = "the model: model.n_layers, d_model, ffn_hidden or vocab (weights, gradients and "
                            "AdamW state " +
                            human_bytes(static_cast<double>(state)) + "; the widths set the activations too)";
  return "lower " + (working >= state ? batch + ", or " + model : model + ", or " + batch);
}

// The plan against the memory of this rank's GPU (train.device cuda).
void check_gpu_memory(const MemoryPlan& plan, const GpuInventory& gpus, const GpuInfo* gpu) {
  if (gpus.gpus.empty())
    throw CommandError{kExitEnvironmentError, "train.device=cuda: " + gpus.why_none};
  // What `trainbench plan` calls "fits": the GPU's memory less the reserve
  // for the CUDA context, NCCL's buffers and the allocator. (The engine
  // checks again against the free memory once it knows its attention.)
  const int64_t gpu_memory = gpu->memory_bytes;
  const int64_t usable = usable_gpu_bytes(gpu_memory);
  if (plan.total_bytes() > usable)
    throw CommandError{kExitEnvironmentError,
                    "model needs " + human_bytes(static_cast<double>(plan.total_bytes())) +
                        " of GPU memory (activations " +
                        human_bytes(static_cast<double>(plan.activation_bytes)) + ") but " +
                        gpu->name + " has " + human_bytes(static_cast<double>(gpu_memory)) + ", " +
                        human_bytes(static_cast<double>(usable)) +
                        " usable after the reserve for the CUDA context, NCCL and the allocator: " +
                        what_to_lower(plan) + " (trainbench plan shows the sizes)"};
}

// The data source's batches, and the cpu engine's plan, against the host
// memory the ranks on this host share. A collective (ranks_on_this_host).
void check_host_memory(const Config& config, Communicator& comm, const EngineOptions& engine_options,
                       const MemoryPlan& plan, const HostMemoryBeside& beside) {
  // The cpu engine's plan is host memory, which the ranks on one host share
  // (4 ranks of a plan that fit once were 4 times MemAvailable: the OOM killer).
  const int64_t available = available_memory_bytes();
  const int host_ranks = ranks_on_this_host(comm);
  // The data source's batches are host memory on every engine, allocated in
  // pieces and filled: 25 GB of synthetic batches failed at the first that
  // did not fit, as "the data loader's batch ring" whatever the source, or
  // met the OOM killer.
  const int64_t data_bytes = data_source_host_bytes(config);
  const int64_t model_bytes = engine_options.device == "cpu" ? plan.total_bytes() : 0;
  if (available > 0 && static_cast<double>(data_bytes) * host_ranks > static_cast<double>(available)) {
    const bool synthetic = config.data.source == "synthetic";
    throw CommandError{
        kExitEnvironmentError,
        "the data source needs " + human_bytes(static_cast<double>(data_bytes)) + " of host memory per rank (" +
            (synthetic ? "data.synthetic_batches " + std::to_string(config.data.synthetic_batches) +
                             " batches held in memory"
                       : "the loader's batch ring, read blocks and shuffle buffers") +
            ")" +
            (host_ranks > 1 ? ", " + human_bytes(static_cast<double>(data_bytes) * host_ranks) + " for the " +
                                  std::to_string(host_ranks) + " ranks on this host,"
                            : "") +
            " but " + human_bytes(static_cast<double>(available)) + " is available: " +
            (synthetic ? "lower data.synthetic_batches"
                       : "lower data.prefetch, data.readers, data.shuffle_buffer or data.block_bytes") +
            " or train.micro_batch"};
  }
  // In double: the data's figure is capped at 2^62, and the parts add up.
  const double host_bytes =
      (static_cast<double>(model_bytes) + static_cast<double>(data_bytes) + static_cast<double>(beside.total())) *
      host_ranks;
  if (available > 0 && host_bytes > static_cast<double>(available)) {
    const bool cpu = engine_options.device == "cpu";
    const std::string parts = "its data " + human_bytes(static_cast<double>(data_bytes)) + beside.described();
    throw CommandError{kExitEnvironmentError,
                       (cpu ? "model needs " + human_bytes(static_cast<double>(plan.total_bytes())) +
                                  " of host memory per rank (activations " +
                                  human_bytes(static_cast<double>(plan.activation_bytes)) + "; " + parts +
                                  " besides)"
                            : "this run needs " + human_bytes(host_bytes / host_ranks) +
                                  " of host memory per rank beside its GPU (" + parts + ")") +
                           (host_ranks > 1 ? ", " + human_bytes(host_bytes) + " for the " +
                                                 std::to_string(host_ranks) + " ranks on this host,"
                                           : "") +
                           " but " + human_bytes(static_cast<double>(available)) + " is available: " +
                           (cpu ? what_to_lower(plan) : "lower data.prefetch") +
                           (beside.staging > 0 ? ", take no checkpoints (checkpoint.every_steps=0)" : "") +
                           (host_ranks > 1 ? ", or run fewer ranks per host" : "")};
  }
}

// The engine a run of `config` builds on this rank, and its memory plan,
// checked against what this rank can have (GPU memory, host memory shared by
// the ranks on this host, ulimit -v): CommandError (exit 3 or 2) when it does
// not fit, before anything is allocated.
struct ResolvedEngine {
  EngineOptions options;
  MemoryPlan plan;
  bool use_nccl = false;  // the gradients go through NCCL
};
ResolvedEngine resolve_engine(const Config& config, Communicator& comm, const GpuInventory& gpus) {
  ResolvedEngine resolved;
  EngineOptions& engine_options = resolved.options;
  MemoryPlan& plan = resolved.plan;
  engine_options.shape = config.model;
  engine_options.micro_batch = config.train.micro_batch;
  engine_options.lora = lora_spec(config);
  engine_options.lora_state_includes_base = config.checkpoint.include_base;
  engine_options.device = resolve_device(config.train.device, gpus);
  // Every rank alike, before a rank's own refusal below: both are collectives.
  const std::string why_cpu = gpus.gpus.empty() ? gpus.why_none : "train.device " + config.train.device;
  if (const std::string differ = engines_differ_over_ranks(comm, engine_options.device, why_cpu); !differ.empty())
    throw CommandError{kExitEnvironmentError, differ};
  if (engine_options.device == "cuda")
    if (const std::string problem = cuda_engine_shape_problem(config.model); !problem.empty())
      throw CommandError{kExitUserError, "model: " + problem};
  const bool on_gpu = engine_options.device == "cuda" && !gpus.gpus.empty();
  if (on_gpu) engine_options.gpu_index = gpu_for_local_rank(comm.local_rank(), gpus);
  const int gpus_visible = static_cast<int>(gpus.gpus.size());
  const GpuInfo* gpu = on_gpu ? &gpus.gpus[static_cast<size_t>(engine_options.gpu_index)] : nullptr;
  if (const std::string shared = gpu_shared_over_ranks(comm, gpu, gpus_visible); !shared.empty())
    throw CommandError{kExitEnvironmentError, shared};
  // nccl: asked for, or auto on the cuda engine when this build has it. (An
  // explicit train.device that contradicts these was refused with the config.)
  // auto takes NCCL for a multi-rank CUDA run; one GPU trains without a
  // gradient sync (as a single-process PyTorch run would), unless nccl is
  // asked for, which a 1-GPU run then times on the multi-GPU path.
  const bool use_nccl = resolved.use_nccl =
      takes_nccl(config.comm.backend, engine_options.device, comm.world_size());
  if (use_nccl && engine_options.device != "cuda")
    throw CommandError{kExitEnvironmentError,
                       "comm.backend=nccl needs the cuda engine, but train.device=" + config.train.device +
                           " resolved to " + engine_options.device + ": " +
                           (built_backends().find("cuda") == std::string::npos ? "this build has no CUDA engine"
                                                                               : gpus.why_none)};
  engine_options.threads = static_cast<int>(config.train.threads);
  shard_optimizer_state(config, comm, use_nccl, engine_options);
  check_engine_supports(config, engine_options.device);
  engine_options.attention = config.train.attention;
  engine_options.deterministic = config.train.deterministic;
  if (engine_options.device == "cuda" && config.train.attention == "cudnn")
    if (const std::string refusal = cudnn_attention_shape_refusal(engine_options); !refusal.empty())
      throw CommandError{kExitUserError, "train.attention=cudnn: " + refusal +
                                             "; train.attention auto runs the GEMM attention for it"};

  // Everything is sized before anything is allocated.
  try {
    plan = plan_engine_memory(engine_options);
  } catch (const std::runtime_error& e) {
    throw CommandError{kExitEnvironmentError, std::string("train.device=") + engine_options.device +
                                               ": " + e.what()};
  }
  if (engine_options.device == "cuda") check_gpu_memory(plan, gpus, gpu);
  const HostMemoryBeside beside = host_memory_beside(config, engine_options, comm.world_size(), comm.rank());
  check_host_memory(config, comm, engine_options, plan, beside);
  check_address_space_limit(config, engine_options, plan, beside);
  return resolved;
}

}  // namespace

void check_engine_fits(const Config& config, Communicator& comm) { resolve_engine(config, comm, query_gpus()); }

namespace {

// Whether a run's checkpoints fit where they go: every rank's state and data
// position, as many at once as retention leaves while the next one is
// written (checkpoints_added_at_peak), against the folder's free space.
struct CheckpointRoom {
  bool fits = true;  // or the free space is unknown
  std::string needed;  // "3 checkpoint(s) of up to 1.9 MiB at once (...)"
  std::string free;    // "DIR has 5.0 MiB free"
};
CheckpointRoom checkpoint_room(const Config& config, const std::string& dir, int64_t state_bytes, Communicator& comm,
                               int64_t first_step) {
  const StorageWatchdog watchdog(comm, config.checkpoint.timeout_s,
                                 "listing checkpoint.dir " + dir + " and measuring its free space");
  const int world = comm.world_size();
  int64_t committed_before = 0;
  try {
    committed_before = static_cast<int64_t>(list_committed(dir).size());
  } catch (const CheckpointError&) {
  }
  const int64_t at_once = checkpoints_added_at_peak(config.checkpoint, first_step, config.train.steps, committed_before);
  const int64_t each = (state_bytes + data_position_bytes_bound(config)) * world;
  const int64_t needed = at_once * each;
  const int64_t free_bytes = describe_filesystem("checkpoint", dir).free_bytes;
  CheckpointRoom room;
  // Unknown (statfs failed) fits; a full disk (0 bytes free) does not.
  room.fits = free_bytes < 0 || needed < free_bytes;
  room.needed = std::to_string(at_once) + " checkpoint(s) of up to " + human_bytes(static_cast<double>(each)) +
                " at once (" + human_bytes(static_cast<double>(needed)) + ": checkpoint.keep " +
                std::to_string(config.checkpoint.keep) + ", the oldest removed only once the next one is committed)";
  room.free = dir + " has " + human_bytes(static_cast<double>(free_bytes)) + " free";
  return room;
}

// A fault injected into a rank the job does not have did nothing, and the
// burn-in it was to test said PASS: the target is checked against the world.
void check_fault_injection_targets(const Config& config, int64_t world) {
  const auto refuse = [&](const char* key, int64_t rank) {
    throw CommandError{kExitUserError, std::string(key) + " " + std::to_string(rank) +
                                           " is not a rank of this job (ranks 0.." + std::to_string(world - 1) +
                                           "): the fault would be injected nowhere"};
  };
  const BurninSection& b = config.burnin;
  if (b.inject_slow_ms > 0 && b.inject_slow_rank >= world) refuse("burnin.inject_slow_rank", b.inject_slow_rank);
  if (b.inject_bitflip_step > 0 && b.inject_bitflip_rank >= world)
    refuse("burnin.inject_bitflip_rank", b.inject_bitflip_rank);
  if (config.comm.inject_divergence_step > 0 && world < 2)
    throw CommandError{kExitUserError, "comm.inject_divergence_step: one rank has no other to diverge from; run "
                                       "at least 2 ranks"};
  // Slow storage where the run reads or writes none: it passed untouched.
  if (config.data.inject_delay_ms > 0 && config.data.source == "synthetic")
    throw CommandError{kExitUserError, "data.inject_delay_ms: data.source is synthetic, which reads no storage "
                                       "(the fault would be injected nowhere); set data.source shards"};
  if (config.checkpoint.inject_delay_ms > 0 && config.checkpoint.every_steps == 0)
    throw CommandError{kExitUserError, "checkpoint.inject_delay_ms: checkpoint.every_steps is 0, so no checkpoint "
                                       "is written (the fault would be injected nowhere)"};
  if (config.comm.inject_divergence_step > 0 && config.comm.zero == 1)
    throw CommandError{kExitUserError, "comm.inject_divergence_step: under comm.zero 1 every rank's parameters are "
                                       "all-gathered from their owners each step, so a nudge on one rank is "
                                       "overwritten and there is no divergence to catch; set comm.zero 0"};
}

// A file-size limit (ulimit -f) below the result's size: found only when
// the result's write failed with EFBIG, after training, it cost the run
// its result (exit 3). Said before step 1. The size is a floor: a header
// and 256 bytes a listed step (a step's record is some 300; at most 1,000
// counted: burn-in runs for a time, not a step count). A checkpoint file
// over the limit is not refused here: to the writer EFBIG is a full disk,
// which checkpoint.on_full decides (the tests' stand-in for one).
void check_result_file_size_limit(const Config& config) {
  const int64_t limit = file_size_limit_bytes();
  if (limit <= 0) return;
  const int64_t stride = step_record_stride(config.train.steps);
  const int64_t listed = std::min<int64_t>((config.train.steps + stride - 1) / stride, 1000);
  const int64_t result = 8192 + 256 * listed;
  if (result > limit)
    throw CommandError{kExitEnvironmentError, "the file-size limit (ulimit -f) is " +
                                                  human_bytes(static_cast<double>(limit)) + " but the result of " +
                                                  std::to_string(config.train.steps) + " steps takes at least " +
                                                  human_bytes(static_cast<double>(result)) +
                                                  ": raise it (ulimit -f unlimited)"};
}

// The result's path (report.out, its default filled in so that the resolved
// config, printed and in the result, says where the result goes), checked by
// rank 0 before anything is allocated.
std::string check_result_destination(Config& config, Communicator& comm, const RunSettings& options) {
  const std::string named = options.out_option      ? "--out"
                            : config.report.out.empty() ? "report.out (its default)"
                                                        : "report.out";
  if (config.report.out.empty()) config.report.out = "trainbench-result.json";
  const std::string result_path = config.report.out;
  if (comm.rank() == 0 && options.write_result) {
    // Storage that stopped responding under the result's folder held rank 0
    // in the probe for ever, before step 1 (one rank: nothing else ended it):
    // bounded as the checkpoint folder's check is.
    const StorageWatchdog watchdog(comm, config.checkpoint.timeout_s,
                                   "checking that " + named + " " + result_path + " can be written");
    if (config.checkpoint.every_steps > 0 && !config.checkpoint.dir.empty())
      check_result_outside_checkpoints(result_path, named, config.checkpoint.dir);
    check_result_path(result_path, named);
    // Where a signal or an abort leaves the partial result: replaced then,
    // mid-run, so said now (a user's file of that name was lost).
    check_result_path(aborted_result_path(result_path), named + "'s partial result for an interrupted run,");
    check_result_file_size_limit(config);
  }
  return result_path;
}

void check_resume_target(const std::string& resume, const Config& config, Communicator& comm) {
  if (resume.empty()) return;
  if (resume != "latest") {
    // A folder that is no checkpoint (a typo) is said before checkpoint.dir
    // is made and locked and the engine allocated: it was said after, and a
    // run started beside it on that checkpoint.dir was refused the lock it
    // held meanwhile. What is in the checkpoint is read, and checked, later.
    std::string problem;
    int kind = kExitUserError;
    try {
      const StorageWatchdog watchdog(comm, config.checkpoint.timeout_s,
                                     "finding the checkpoint to resume from (--resume " + resume + ")");
      (void)resolve_checkpoint(resume, config.checkpoint.dir);
    } catch (const CheckpointError& e) {
      problem = e.what();
      kind = e.environment() ? kExitEnvironmentError : kExitUserError;
    }
    // Every rank alike: a folder on some nodes' disks only stops them all,
    // none goes on to make checkpoint.dir alone.
    const RankReason first = first_reason_over_ranks(comm, problem, kind);
    if (first.rank < 0) return;
    const int world = comm.world_size();
    throw CommandError{first.kind,
                       first.reason + (first.ranks < world ? " (rank " + std::to_string(first.rank) + "; " +
                                                                 std::to_string(first.ranks) + " of " +
                                                                 std::to_string(world) +
                                                                 " ranks cannot find it: give --resume a "
                                                                 "checkpoint every rank can read)"
                                                           : "")};
  }
  if (config.checkpoint.dir.empty())
    throw CommandError{kExitUserError, "--resume latest: set checkpoint.dir to the folder the checkpoints are in"};
  // Said before the folder would be made, which left an empty one behind.
  std::error_code no_folder;
  if (!std::filesystem::exists(config.checkpoint.dir, no_folder))
    throw CommandError{kExitUserError, "--resume latest: checkpoint.dir " + config.checkpoint.dir +
                                           " does not exist: no checkpoint to resume from"};
}

std::unique_ptr<TrainingEngine> allocate_engine(const EngineOptions& options, const MemoryPlan& plan) {
  try {
    return make_engine(options);
  } catch (const std::bad_alloc&) {
    throw CommandError{kExitEnvironmentError,
                       "out of memory allocating " + human_bytes(static_cast<double>(plan.total_bytes()))};
  } catch (const std::runtime_error& e) {
    throw CommandError{kExitEnvironmentError, e.what()};
  }
}

// Unwinding from an error, the collectives in flight are abandoned before
// the engine frees its memory (declared after it, so it runs first):
// cudaFree waits for the device, and a collective that a peer, stopped by
// its own error, never joins would hold this rank for ever. An MPI
// all-reduce already under way on the progress thread still writes the
// engine's gradients: the engine is then kept, not freed, as the job is
// aborted next (freed, its memory was written by MPI while the error path
// wrote the partial result).
struct AbandonCollectivesOnError {
  std::unique_ptr<Communicator>& comm;  // the NCCL one once made
  std::unique_ptr<TrainingEngine>& engine;
  const int exceptions_at_start = std::uncaught_exceptions();
  ~AbandonCollectivesOnError() {
    if (std::uncaught_exceptions() > exceptions_at_start && comm && comm->abandon_collectives())
      (void)engine.release();
  }
};

// The gradients' collectives where the engine keeps them: NCCL on the
// engine's GPU (the local rank's); the bootstrap keeps the host control
// collectives. A failed init aborts every rank (exit 3). A host-buffer
// backend under a device engine of several ranks is refused.
void connect_gradient_collectives(std::unique_ptr<Communicator>& comm, TrainingEngine& engine,
                                  const EngineOptions& engine_options, const Config& config, bool use_nccl) {
  if (use_nccl && !comm->device_buffers()) {
    comm = make_nccl_communicator(std::move(comm), engine_options.gpu_index, config.comm.timeout_s);
    if (comm == nullptr)
      throw CommandError{kExitEnvironmentError, "comm.backend=nccl: this build has no NCCL backend"};
  } else if (comm->world_size() > 1 && engine.host_gradient_buffer() == nullptr) {
    const bool nccl_built = !nccl_version().empty();
    throw CommandError{nccl_built ? kExitUserError : kExitEnvironmentError,
                       std::string("comm.backend ") + comm->backend_name() + " reduces host buffers, but the " +
                           engine.backend_name() + " engine keeps its gradients on the device: multi-rank " +
                           engine.backend_name() + " needs comm.backend nccl" +
                           (nccl_built ? " (or auto)"
                                       : ", which this build lacks (build with nccl.h and libnccl: NCCL_HOME or "
                                         "libnccl-dev)")};
  }
}

// The run's batches, from where a resume left them.
DataSetup set_up_data(const Config& config, TrainingEngine& engine, Communicator& comm, const ResumePoint& resume) {
  try {
    // The temporary shards: every rank on a host writes its own copy at once.
    const int host_ranks =
        config.data.source == "shards" && config.data.shards.empty() ? ranks_on_this_host(comm) : 1;
    // Listing the user's shards (globs, folders, list files: stat, opendir)
    // on storage that stopped responding held the rank before step 1 for
    // ever: bounded by data.timeout_s, the storage-read wait. (The
    // synthetic shards' writing is not: its time grows with their size.)
    std::optional<StorageWatchdog> listing;
    if (config.data.source == "shards" && !config.data.shards.empty())
      listing.emplace(comm, config.data.timeout_s, "listing data.shards " + config.data.shards, "data.timeout_s");
    return make_data_source(config, engine, comm.rank(), comm.world_size(), resume.data_position, host_ranks, &comm);
  } catch (const DataError&) {
    throw;  // the shard list or data options: exit 2
  } catch (const std::bad_alloc&) {
    throw CommandError{kExitEnvironmentError,
                       config.data.source == "synthetic"
                           ? "out of host memory for the synthetic batches: lower data.synthetic_batches"
                           : "out of host memory for the data loader's batch ring: lower data.prefetch or "
                             "data.readers"};
  } catch (const std::system_error& e) {
    // A loader thread that could not start: said as the top level says it
    // (it was a bare "data: Resource temporarily unavailable").
    if (is_thread_start_failure(e))
      throw CommandError{kExitEnvironmentError, std::string("data: cannot start a thread: ") + e.what() +
                                                    " (" + kThreadLimitsNamed + "; or lower data.readers)"};
    throw CommandError{kExitEnvironmentError, std::string("data: ") + e.what()};
  } catch (const std::exception& e) {
    throw CommandError{kExitEnvironmentError, std::string("data: ") + e.what()};
  }
}

// The shards a checkpoint's data position counts into, given ones only
// (in-memory tokens have none, the run's own temporary shards are made alike
// again): rank 0's, which commits and which compares a resume's. A resume
// from a checkpoint that counted into other shards is refused (exit 2).
std::vector<std::string> identify_checkpointed_shards(const Config& config, Communicator& comm, const DataSetup& data,
                                                      const ResumePoint& resume) {
  std::vector<std::string> shard_ids;
  const bool reporter = comm.rank() == 0;
  const bool given_shards = config.data.source == "shards" && !config.data.shards.empty();
  if (reporter && given_shards && (config.checkpoint.every_steps > 0 || !resume.folder.empty())) {
    const StorageWatchdog watchdog(comm, config.data.timeout_s, "reading the size and first 4 KiB of data.shards " +
                                   config.data.shards, "data.timeout_s");
    shard_ids = shard_identities(data.shards);
  }
  if (!resume.folder.empty()) {
    const std::string differs = reporter ? resumed_shards_difference(resume.shards, data.shards, shard_ids) : "";
    const std::string first = first_reason_over_ranks(comm, differs).reason;
    if (!first.empty()) throw DataError(CorruptScope::kConfig, "--resume " + resume.folder + ": data.shards: " + first);
  }
  return shard_ids;
}

// What the config asks of this job that it will not do as meant: said
// before step 1 and kept in the result's warnings.
void warn_of_config(const Config& config, int world, std::vector<std::string>& warnings) {
  // A rank whose storage stalls tells its peers, and the run keeps its
  // result, only if its own wait gives up before theirs in the all-reduce:
  // said before training (the case it warns of ends without a summary).
  if (config.data.source == "shards" && world > 1 && config.data.timeout_s > config.comm.timeout_s) {
    char line[320];
    std::snprintf(line, sizeof(line),
                  "data.timeout_s (%g s) is above comm.timeout_s (%g s): a rank whose storage stalls is caught by its "
                  "peers' all-reduce timeout first, which aborts the job without a result",
                  config.data.timeout_s, config.comm.timeout_s);
    warnings.push_back(line);
  }
  // A run slowed or perturbed on purpose: its figures are not the cluster's,
  // and a report or comparison of it said nothing of it. (Not the burn-in's
  // flipped bit: it changes no figure, only the golden check, and `run`
  // ignores it.)
  std::string faults;
  for (const std::string& fault : injected_faults(config))
    if (!fault.starts_with("burnin.inject_bitflip_step")) faults += (faults.empty() ? "" : ", ") + fault;
  if (!faults.empty())
    warnings.push_back("fault injected (" + faults + "): this run is slowed or perturbed on purpose, and its "
                       "figures are not the cluster's");
  // Asked for and measuring nothing: said, as a run's result is taken for what its config says.
  if (config.comm.zero == 1 && world == 1)
    warnings.push_back("comm.zero=1 on one rank: ZeRO-1 shards the optimizer state across the ranks, and one "
                       "rank has nothing to share it with: this run's memory and time are those of comm.zero=0");
}

// Whether the checkpoints fit their folder, asked once the data is set up
// (temporary shards made for the run are on the temporary folder's
// filesystem too). The default run must not fill /tmp: a temporary folder
// they do not fit is dropped, and the returned line says why the run takes
// no checkpoints ("" when it does). The user's folder may still have room
// freed, so there it is a warning, not a refusal.
std::string check_checkpoint_room(const Config& config, Communicator& comm, int64_t state_bytes, int64_t first_step,
                                  CheckpointDir& checkpoint_dir, std::vector<std::string>& warnings) {
  if (checkpoint_dir.path.empty()) return "";
  const CheckpointRoom room = comm.rank() == 0
                                  ? checkpoint_room(config, checkpoint_dir.path, state_bytes, comm, first_step)
                                  : CheckpointRoom{};
  std::string checkpoint_off;
  if (checkpoint_dir.temporary) {
    if (!room.fits) {
      checkpoint_off = "checkpoint: off: checkpoint.dir is not set and " + room.needed + " do not fit; " + room.free +
                       "; set checkpoint.dir to measure checkpointing";
      std::fprintf(stdout, "%s\n", checkpoint_off.c_str());
    }
    int64_t fits = room.fits ? 1 : 0;
    comm.broadcast(&fits, sizeof(fits), 0);
    if (!fits) checkpoint_dir.drop();
  } else if (!room.fits) {
    warnings.push_back("this run writes " + room.needed + " but " + room.free +
                       ": a checkpoint will find the disk full (checkpoint.on_full=" + config.checkpoint.on_full +
                       "); free space, lower checkpoint.keep or name another checkpoint.dir");
  }
  return checkpoint_off;
}

// A CPU engine's threads over the cores of its host, the first rank's
// warning said for all of them.
void warn_of_cpu_contention(const TrainingEngine& engine, Communicator& comm, const Environment& env, int threads,
                            std::vector<std::string>& warnings) {
  // A collective: the ranks on each host are counted on every engine.
  const int host_ranks = ranks_on_this_host(comm);
  // The host named: "this host" in rank 0's output read as rank 0's.
  const std::string contention =
      engine.cpu_threads() > 0
          ? cpu_oversubscription(threads, env.usable_threads, host_ranks, env.hardware_threads,
                                 comm.world_size() > 1 ? "host " + comm.host_name() : "this host")
          : "";
  // The first rank speaks; how many more would have is said with it.
  const RankReason first = first_reason_over_ranks(comm, contention);
  const int others = first.ranks - 1;
  if (first.reason.empty()) return;
  warnings.push_back(comm.world_size() > 1 ? "rank " + std::to_string(first.rank) + ": " + first.reason +
                                                 (others > 0 ? " (and " + std::to_string(others) +
                                                                   " more rank(s) warn of theirs)"
                                                             : "")
                                           : first.reason);
}

// The filesystems the run reads and writes, each described under the
// watchdog of its storage.
void describe_filesystems(const Config& config, Communicator& comm, const std::string& data_path,
                          const std::string& result_path, const std::string& checkpoint_path, Environment& env) {
  if (!data_path.empty()) {
    const StorageWatchdog watchdog(comm, config.data.timeout_s,
                                   "describing the data folder " + data_path + "'s filesystem", "data.timeout_s");
    env.filesystems.push_back(describe_filesystem("data", data_path));
  }
  {
    const StorageWatchdog watchdog(comm, config.checkpoint.timeout_s,
                                   "describing the filesystem of the result " + result_path);
    env.filesystems.push_back(describe_filesystem("results", result_path));
  }
  if (!checkpoint_path.empty()) {
    const StorageWatchdog watchdog(comm, config.checkpoint.timeout_s,
                                   "describing checkpoint.dir " + checkpoint_path + "'s filesystem");
    env.filesystems.push_back(describe_filesystem("checkpoint", checkpoint_path));
  }
}

// Rank 0's console header: the job, its data, the setup's warnings, its
// checkpoints and the checkpoint it resumed from.
void print_run_header(const Config& config, const Environment& env, const TrainingEngine& engine,
                      const DataSetup& data, const std::vector<std::string>& warnings,
                      const CheckpointDir& checkpoint_dir, const ResumePoint& resume, const RunExtension* extension) {
  // The engine's own plan, what it allocated: the one checked before
  // allocating assumed cuDNN's attention with an estimated workspace, and
  // auto may have fallen back to the GEMMs and their probabilities
  // (gigabytes per layer at long sequences) or cuDNN asked for another size.
  print_header(stdout, config, env, engine.memory_plan(), engine.layout().total_params(),
               engine.layout().trainable_params(), extension != nullptr ? extension->steps_said() : "");
  std::fprintf(stdout, "data: %s\n", data.description.c_str());
  for (const std::string& warning : warnings) std::fprintf(stdout, "warning: %s\n", warning.c_str());
  if (!checkpoint_dir.path.empty())
    std::fprintf(stdout, "checkpoint: every %ld steps to %s%s, %s, keep %ld\n",
                 static_cast<long>(config.checkpoint.every_steps), checkpoint_dir.path.c_str(),
                 checkpoint_dir.temporary ? " (temporary, removed at exit; set checkpoint.dir to keep them)" : "",
                 config.checkpoint.async ? "async" : "synchronous", static_cast<long>(config.checkpoint.keep));
  if (!resume.folder.empty())
    std::fprintf(stdout, "resume: %s, continuing at step %ld (read %s in %.3f s, the slowest rank's; %.3f s to pass "
                         "the ranks' slices on; %.3f s in all)\n",
                 resume.folder.c_str(), static_cast<long>(resume.step + 1),
                 human_bytes(static_cast<double>(resume.bytes_read)).c_str(), resume.read_s, resume.exchange_s,
                 resume.load_s);
}

// The run's checkpointer, none without a folder to write: its manifests
// record the build and the given shards the data position counts into.
std::unique_ptr<Checkpointer> make_checkpointer(const Config& config, const std::string& folder, TrainingEngine& engine,
                                               BatchSource& source, Communicator& comm, const Environment& env,
                                               const std::string& resumed_from, bool offers_resume,
                                               const std::vector<std::string>& shard_ids) {
  if (folder.empty()) return nullptr;
  auto checkpointer = std::make_unique<Checkpointer>(config, folder, engine, source, comm,
                                                     nlohmann::json{{"trainbench", env.trainbench_version},
                                                                    {"engine", env.compute_backend},
                                                                    {"built_backends", env.built_backends},
                                                                    {"openblas", env.openblas},
                                                                    {"compiler", env.compiler},
                                                                    {"os", env.os},
                                                                    {"comm", env.comm_backend}},
                                                     resumed_from, offers_resume);
  if (!shard_ids.empty()) checkpointer->record_shards(shard_ids);
  return checkpointer;
}

// The isolation ceilings measured before the run (--ceilings), set against
// what the run delivered: the result's `ceilings`, their warnings, the
// console line and the bottleneck explained by them.
void add_ceilings(const Ceilings& ceilings, bool no_checkpoints, RunOutcome& outcome) {
  RunSummary& summary = outcome.summary;
  outcome.ceilings = ceilings_to_json(ceilings, summary.tokens_per_s);
  if (!ceilings.write_failure.empty())
    outcome.warnings.push_back("ceilings: storage write not measured: " + ceilings.write_failure);
  if (!ceilings.network_failure.empty())
    outcome.warnings.push_back("ceilings: network not measured: " + ceilings.network_failure);
  for (std::string& doubt :
       ceilings_warnings(ceilings, summary.tokens_per_s, no_checkpoints, summary.timed ? summary.wall_tokens_per_s : 0))
    outcome.warnings.push_back(std::move(doubt));
  outcome.ceilings_line = ceilings_line(ceilings, summary.tokens_per_s);
  summary.bottleneck = explain_bottleneck(summary.bottleneck, ceilings, summary.tokens_per_s);
  // The read bandwidth these GPUs need at the compute ceiling (DESIGN):
  // measured now, so it replaces the GEMM calibration's estimate, which
  // assumes the whole step runs at GEMM speed (5x too high on tiny).
  if (ceilings.compute_tokens_per_s > 0 && summary.bytes_per_token > 0) {
    summary.required_read_gbs = summary.bytes_per_token * ceilings.compute_tokens_per_s * 1e-9;
    summary.required_read_basis = "compute_ceiling";
  }
}

// Rank 0's result JSON written (unless the command keeps it) and the
// summary printed. A result that cannot be written is said after the
// summary, which is printed first: the measurement is on the console at
// least (abort printed nothing of it, and the temporary folders stayed
// behind); report->result_write_failure says why.
void write_and_print_result(const RunSettings& options, const Config& config, const Environment& env,
                            const RunOutcome& outcome, const nlohmann::json& result, const std::string& result_path,
                            int world, RunReport* report) {
  try {
    if (options.write_result) write_result_json(result_path, result, config, world > 1);
    end_partial_result();  // the result is written: a signal from now on leaves no partial one beside it
  } catch (const std::exception& e) {
    end_partial_result();
    report->result_write_failure = std::string("cannot write the result: ") + e.what();
  }
  // `project`'s runs go into its own result, which it writes only when
  // every depth trained; it stops at one that failed.
  const bool stops_the_projection = outcome.failure.happened() || !outcome.all_checks_passed();
  print_summary(stdout, outcome,
                !report->result_write_failure.empty() ? "NOT WRITTEN: " + report->result_write_failure
                : options.write_result               ? result_path
                : stops_the_projection ? "none: this run failed, so the projection stops here"
                                       : "(in the projection's result)",
                options.extension ? options.extension->summary_job() : "");
  if (env.gemm.algorithms == "timed") std::fprintf(stdout, "gemm algorithms: %s\n", env.gemm.detail.c_str());
  if (options.extension) options.extension->print(stdout);
}

// A failure that stopped the run (a checkpoint, a batch: exit 3 or 2)
// first; then a failed check (exit 4); else what the extension decided
// (burn-in's verdict). The failure's line, the one it was when it ended the
// run without a result, is the caller's to print: `run` prints it,
// `project` names it in its own; burn-in's verdict names it as FAIL (exit 4,
// as every burn-in that did not pass). A result not written is the
// environment's, whatever else the run found (the caller prints the line).
int run_exit_code(RunOutcome& outcome, int extension_code, bool has_extension, bool reporter,
                  bool result_write_failed) {
  int code = extension_code;
  if (!outcome.all_checks_passed()) {
    // Beside a failure that stopped the run, the checks it failed too (a
    // checkpoint that a full memory failed after the batch that stopped the
    // run) go into its one line: a second line broke the error policy's one.
    for (const Check& c : outcome.checks) {
      if (c.passed || c.name == outcome.failure.check) continue;
      if (outcome.failure.happened() && !has_extension)
        outcome.failure.message += "; and check failed: " + c.name + ": " + c.detail;
      else if (reporter)
        std::fprintf(stderr, "trainbench: check failed: %s: %s\n", c.name.c_str(), c.detail.c_str());
    }
    code = kExitCheckFailed;
  }
  if (outcome.failure.happened() && !has_extension)
    code = outcome.failure.environment ? kExitEnvironmentError : kExitUserError;
  if (result_write_failed) code = kExitEnvironmentError;
  return code;
}

}  // namespace

// The slow-network fault holds the MPI backend's requests as they progress
// on the host. NCCL's collectives run on the GPU, and one rank has none:
// there it held nothing, and the run it was to slow passed.
void check_inject_delay_has_a_target(const Config& config, bool use_nccl, int world) {
  if (config.comm.inject_delay_ms <= 0 || (!use_nccl && world >= 2)) return;
  throw CommandError{kExitUserError,
                     std::string("comm.inject_delay_ms: ") +
                         (world < 2 ? "one rank has no collective to hold; run at least 2 ranks"
                                    : "holds the MPI backend's host collectives, and this run's go through NCCL, "
                                      "which it cannot hold; leave it 0") +
                         " (the fault would be injected nowhere)"};
}

RunReport run_config(Config config, std::unique_ptr<Communicator>& comm, const RunSettings& options) {
  RunReport report;
  check_fault_injection_targets(config, comm->world_size());
  const std::string result_path = check_result_destination(config, *comm, options);
  // Rank 0 speaks for the job: the console report and the result JSON.
  const bool reporter = comm->rank() == 0;
  check_resume_target(options.resume, config, *comm);
  // An unusable checkpoint folder fails here, before anything is allocated.
  CheckpointDir checkpoint_dir;
  if (config.checkpoint.every_steps > 0) setup_checkpoint_dir(config, *comm, &checkpoint_dir);

  // Asked once: device choice, memory check and the environment report share it.
  const GpuInventory gpus = query_gpus();
  const ResolvedEngine resolved = resolve_engine(config, *comm, gpus);
  const EngineOptions& engine_options = resolved.options;
  check_inject_delay_has_a_target(config, resolved.use_nccl, comm->world_size());
  std::unique_ptr<TrainingEngine> engine = allocate_engine(engine_options, resolved.plan);
  const AbandonCollectivesOnError abandon_on_error{comm, engine};
  engine->init_parameters(static_cast<uint64_t>(config.train.seed));
  report.engine_options = engine_options;
  report.state_bytes = state_bytes_per_rank(*engine, config, comm->world_size());
  connect_gradient_collectives(comm, *engine, engine_options, config, resolved.use_nccl);
  ResumePoint resume;
  if (!options.resume.empty()) resume = resume_from_checkpoint(options.resume, config, *engine, *comm);
  // The temporary shards' size is fixed in the config, so checkpoints record it.
  if (config.data.source == "shards" && config.data.shards.empty() && config.data.synth_samples_per_shard == 0)
    config.data.synth_samples_per_shard = synth_samples_per_shard_for_run(config, comm->world_size());
  // Declared after the engine: the loader's pinned batches go back to it first.
  DataSetup data = set_up_data(config, *engine, *comm, resume);
  const std::vector<std::string> shard_ids = identify_checkpointed_shards(config, *comm, data, resume);

  // Said before step 1 and kept in the result's warnings.
  std::vector<std::string> setup_warnings = data.warnings;
  warn_of_config(config, comm->world_size(), setup_warnings);
  // Why this run takes no checkpoints it was configured for, if it does not.
  const std::string checkpoint_off =
      check_checkpoint_room(config, *comm, report.state_bytes, resume.step + 1, checkpoint_dir, setup_warnings);
  if (!resume.warning.empty()) setup_warnings.push_back(resume.warning);
  // Of a folder the run still writes: a temporary one dropped above is not.
  if (!checkpoint_dir.path.empty() && !checkpoint_dir.lock.unlocked_reason().empty())
    setup_warnings.push_back(checkpoint_dir.lock.unlocked_reason());

  const int threads = engine->cpu_threads() > 0 ? engine->cpu_threads() : cpu_engine_threads(engine_options.threads);
  Environment env = collect_environment(*comm, engine->backend_name(), threads, gpus);
  if (const std::string differ = hosts_that_differ(env); !differ.empty()) setup_warnings.push_back(differ);
  warn_of_cpu_contention(*engine, *comm, env, threads, setup_warnings);
  env.attention = engine->attention();
  env.gemm = engine->gemm();
  describe_filesystems(config, *comm, data.data_path, result_path, checkpoint_dir.path, env);
  if (reporter) print_run_header(config, env, *engine, data, setup_warnings, checkpoint_dir, resume, options.extension);

  const std::unique_ptr<Checkpointer> checkpointer =
      make_checkpointer(config, checkpoint_dir.path, *engine, *data.source, *comm, env, resume.folder,
                        options.offers_resume, shard_ids);
  Ceilings ceilings;
  if (options.ceilings) {
    if (reporter) std::fprintf(stdout, "ceilings: measuring compute, network, storage read and storage write alone...\n");
    std::fflush(stdout);
    ceilings = measure_ceilings(config, *engine, *comm, data.shards, checkpoint_dir.path);
  }
  StepHook after_step;
  if (options.extension) {
    // The slow network injected from the extension's first measurement on,
    // as the steps will have it (StepLoop sets it again): the burn-in's
    // fabric check measured its start without it and called the constant
    // fault a 98% drop.
    comm->set_injected_delay(config.comm.inject_delay_ms * 1e-3);
    options.extension->begin(RunContext{config, *engine, *comm,
                                        engine_options.device == "cuda" ? engine_options.gpu_index : -1,
                                        checkpointer.get(), &env});
    after_step = [&options](const StepRecord& step) { return options.extension->after_step(step); };
  }
  // Rank 0 keeps every completed step for a run that an abort or a signal
  // ends before its result (trainer/partial_result.h); ended with this scope.
  PartialResultScope partial_result;
  if (reporter && options.write_result) {
    begin_partial_result(aborted_result_path(result_path), result_header_json(options.command_line, config, env));
    after_step = [inner = std::move(after_step), timed = config.report.instrument](const StepRecord& step) {
      add_partial_result_step(step_result_json(step, timed));
      return inner ? inner(step) : true;
    };
  }
  // Declared after the communicator and the engine, so it runs before they go.
  struct EndExtension {
    RunExtension* extension;
    ~EndExtension() {
      if (extension) extension->end();
    }
  } end_extension{options.extension};
  // "step N/train.steps", or "step N" where the extension ends the run (burnin).
  const bool of_steps = options.extension == nullptr || options.extension->steps_said().empty();
  RunOutcome outcome = run_training(
      config, *engine, *data.source, *comm,
      [&](const StepRecord& step, const RunSummary& so_far) {
        if (reporter) print_progress(stdout, config, step, so_far, resume.step + 1, of_steps);
      },
      checkpointer.get(), resume.step + 1, after_step);
  // A signal's cleanup removes the temporary checkpoint folder under a
  // writer: the run then ends on a "failed checkpoint" that is the signal's
  // doing. Neither its result (over an earlier one at --out) nor burn-in's
  // FAIL verdict may be written for it: the signal speaks.
  wait_if_interrupted();
  // Training is over: the readers stop and close their shards now, so the
  // result's write has the descriptors they held (under ulimit -n, a run
  // that trained to the end lost its result to its own idle readers, and a
  // reader's failed open was followed by a failed result write).
  data.source.reset();
  // In the result too: its config still says every_steps, and no checkpoint
  // record nor stall would read as checkpointing that costs nothing.
  if (!checkpoint_off.empty()) outcome.warnings.insert(outcome.warnings.begin(), checkpoint_off);
  if (!resume.folder.empty()) outcome.resume = resume_json(resume);
  outcome.warnings.insert(outcome.warnings.end(), setup_warnings.begin(), setup_warnings.end());
  if (options.ceilings) add_ceilings(ceilings, checkpoint_dir.path.empty(), outcome);
  // What the GEMM timing chose is known only now that the run met its shapes.
  env.gemm = engine->gemm();
  nlohmann::json result;
  if (reporter) result = build_result_json(options.command_line, config, env, outcome);
  const int extension_code = options.extension ? options.extension->finish(outcome, reporter ? &result : nullptr) : kExitOk;
  if (reporter) write_and_print_result(options, config, env, outcome, result, result_path, comm->world_size(), &report);
  report.result = std::move(result);
  report.exit_code = run_exit_code(outcome, extension_code, options.extension != nullptr, reporter,
                                   !report.result_write_failure.empty());
  report.outcome = std::move(outcome);
  return report;
}

namespace {

std::string version_text() {
  std::string text = "trainbench " + trainbench_version() + "\n";
  text += "compute engines: " + built_backends() + "\n";
  const std::string cuda = cuda_build_info();
  text += "CUDA kernels: " + (cuda.empty() ? std::string("not built") : cuda) + "\n";
  const std::string cudnn = cudnn_attention_build_info();
  text += "cuDNN attention: " + (cudnn.empty() ? std::string("not built") : cudnn) + "\n";
  return text;
}

}  // namespace

int run_with_extension(const std::string& config, const std::vector<std::string>& overrides, const std::string& out,
                       const std::string& command_line, RunExtension& extension) {
  RunOptions options;
  options.config = config;
  options.overrides = overrides;
  options.out = out;
  options.out_given = !out.empty();  // burnin's --out, or its default name
  options.extension = &extension;
  return run_command(options, command_line);
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend, double timeout_s) {
  if (backend == "nccl")
    if (const std::string problem = nccl_environment_problem(); !problem.empty())
      throw CommandError{kExitUserError, "comm.backend=nccl: " + problem};
  if (backend == "nccl" && nccl_version().empty())
    throw CommandError{kExitEnvironmentError,
                       "comm.backend=nccl: this build has no NCCL backend (it needs the CUDA backend and nccl.h "
                       "and libnccl: set NCCL_HOME or install libnccl-dev, then rebuild)"};
  // nccl: its bootstrap, which gives the ranks and carries the ncclUniqueId.
  const bool bootstrap = backend == "auto" || backend == "nccl";
  // One of several tasks of a launcher, each alone, would measure the wrong
  // thing in silence (and write the same --out and checkpoints).
  if (const int world = torchrun_world_size(); world > 1)
    throw CommandError{kExitUserError, "started as one of WORLD_SIZE=" + std::to_string(world) +
                                           " processes by a torchrun-style launcher (RANK and WORLD_SIZE set), "
                                           "each of which would train alone: trainbench's ranks are MPI processes; "
                                           "start them with mpirun or srun (or unset RANK and WORLD_SIZE for one "
                                           "process)"};
  if (const int tasks = launcher_task_count(); backend == "local" && tasks > 1)
    throw CommandError{kExitUserError, "comm.backend=local: started by a launcher as one of " + std::to_string(tasks) +
                                          " tasks, each of which would train alone; use comm.backend=auto (or "
                                          "mpi, nccl), or start one process"};
  if (backend == "local" || (bootstrap && !launched_by_mpi())) return make_local_communicator();
  // comm.timeout_s from MPI_Init on: the start-up waits for every rank, and
  // the first collectives (the config comparison, the checkpoint folder's
  // agreement before step 1) waited out the default 300 s whatever it said.
  std::unique_ptr<Communicator> mpi = make_mpi_communicator(timeout_s);
  if (mpi == nullptr)
    throw CommandError{kExitEnvironmentError,
                       backend == "mpi" ? "comm.backend=mpi: this build has no MPI backend (build with "
                                          "OpenMPI's headers installed: scripts/setup.sh)"
                                        : "started by an MPI launcher, but this build has no MPI backend: "
                                          "every rank would run alone (build with OpenMPI installed, or "
                                          "set comm.backend=local)"};
  return mpi;
}

namespace {
// CLI11 would only say "a subcommand is required"; name the commands, and
// the word that is not one of them. Returns kExitUserError, the line said,
// for a command line without a known command (or subcommand of bench or
// shards); kExitOk for one CLI11 is to parse.
int refuse_missing_command(CLI::App& app, int argc, char** argv) {
  // "a, b, c": the commands `parent` has; *given: whether `word` is one.
  const auto names_of = [](CLI::App& parent, const char* word, bool* given) {
    std::string names;
    *given = false;
    for (const CLI::App* sub : parent.get_subcommands([](CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      *given = *given || (word != nullptr && sub->get_name() == word);
    }
    return names;
  };
  bool known = false;
  const std::string commands = names_of(app, argc > 1 ? argv[1] : nullptr, &known);
  if (argc == 1) {
    std::fprintf(stderr, "trainbench: a command is required (commands: %s; see trainbench --help)\n",
                 commands.c_str());
    return kExitUserError;
  }
  if (argv[1][0] != '-' && !known) {
    let_rank_zero_speak_first(launcher_rank());
    std::fprintf(stderr, "trainbench: unknown command '%s' (commands: %s; see trainbench --help)\n",
                 error_line(argv[1]).c_str(), commands.c_str());
    return kExitUserError;
  }
  // An option before any command (-v): CLI11 said only "A subcommand is
  // required", as if none had been typed.
  if (argv[1][0] == '-') {
    const std::string first = argv[1];
    const bool top_level = first == "-h" || first == "--help" || first == "--version";
    if (!top_level) {
      let_rank_zero_speak_first(launcher_rank());
      std::fprintf(stderr, "trainbench: unknown option '%s' before the command (trainbench has --help and "
                   "--version; commands: %s)\n", error_line(first).c_str(), commands.c_str());
      return kExitUserError;
    }
  }
  // The same one level down (bench, shards): `bench compute` in a build or a
  // doc that did not have it said only "A subcommand is required".
  if (known) {
    bool below_known = false;
    const std::string below = names_of(*app.get_subcommand(argv[1]), argc > 2 ? argv[2] : nullptr, &below_known);
    if (!below.empty() && (argc == 2 || (argv[2][0] != '-' && !below_known))) {
      let_rank_zero_speak_first(launcher_rank());
      if (argc == 2)
        std::fprintf(stderr, "trainbench: %s: a command is required (%s; see trainbench %s --help)\n", argv[1],
                     below.c_str(), argv[1]);
      else
        std::fprintf(stderr, "trainbench: unknown %s command '%s' (%s; see trainbench %s --help)\n", argv[1],
                     error_line(argv[2]).c_str(), below.c_str(), argv[1]);
      return kExitUserError;
    }
  }
  return kExitOk;
}

}  // namespace

namespace {

int parse_and_run(int argc, char** argv) {
  CLI::App app{"trainbench: end-to-end training throughput of a GPU cluster, and where the time goes"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.require_subcommand(1);

  RunOptions run_options;
  CLI::App* run = app.add_subcommand("run", "train a model and report tokens/s, MFU and stalls");
  CLI::Option* config_option = run->add_option(
      "config", run_options.config,
      "YAML config file or embedded preset name (default: tiny; gpt2-124m where it trains on the cuda engine)")
      ->transform(home_path());
  // One value per --set, so `--set k=v CONFIG` leaves CONFIG to the positional.
  run->add_option("--set", run_options.overrides, "override a key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  CLI::Option* steps_option =
      run->add_option("--steps", run_options.steps, "optimizer steps (overrides train.steps)");
  CLI::Option* out_option =
      run->add_option("--out", run_options.out, "result JSON path (overrides report.out)")->transform(home_path());
  run->add_flag("--ceilings", run_options.ceilings,
                "first measure compute, network, storage read and storage write alone on this config "
                "and these ranks, then the run; the report sets the run against each ceiling");
  CLI::Option* resume_option =
      run->add_option("--resume", run_options.resume,
                      "continue from a checkpoint: latest (under checkpoint.dir) or a checkpoint folder")
          ->transform(home_path());
  ShardsCommand shards(app);
  BenchCommand bench(app);
  BurninCommand burnin(app);
  PlanCommand plan(app);
  ProjectCommand project(app);

  if (const int refused = refuse_missing_command(app, argc, argv); refused != kExitOk) return refused;
  try {
    app.parse(argc, argv);
    run_options.steps_given = steps_option->count() > 0;
    run_options.out_given = out_option->count() > 0;
    // `--resume "$CKPT"` with the variable unset: a fresh run would start
    // over without a word.
    if (resume_option->count() > 0 && run_options.resume.empty())
      throw CLI::ValidationError("--resume", "an empty path: give latest or a checkpoint folder");
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    std::fputs(version_text().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    let_rank_zero_speak_first(launcher_rank());  // N ranks, one line
    std::fprintf(stderr, "trainbench: %s (see trainbench --help)\n", error_line(e.what()).c_str());
    return kExitUserError;
  }

  if (run->parsed()) {
    if (config_option->count() == 0) run_options.config = default_run_config(run_options.overrides, query_gpus());
    return run_command(run_options, quoted_command_line(argc, argv));
  }
  if (shards.parsed()) return shards.run();
  if (bench.parsed()) return bench.run(quoted_command_line(argc, argv));
  if (burnin.parsed()) return burnin.run(quoted_command_line(argc, argv));
  if (plan.parsed()) return plan.run(quoted_command_line(argc, argv));
  if (project.parsed()) return project.run(quoted_command_line(argc, argv));
  return kExitUserError;
}

}  // namespace

int run_cli(int argc, char** argv) {
  // Around the command line's building and parsing too (CLI11 copies every
  // option's strings): out of memory there, under a tight ulimit -v, ended
  // in std::terminate (exit 134).
  try {
    return parse_and_run(argc, argv);
  } catch (...) {
    bool said = false;
    try {
      const ErrorReport error = describe_current_exception();
      wait_if_interrupted();  // a failure the signal's cleanup caused: the signal speaks
      let_rank_zero_speak_first(launcher_rank());
      std::fprintf(stderr, "trainbench: %s\n", error_line(error.message).c_str());
      said = true;
      // A run this error ended mid-way (a GPU that failed) keeps its steps;
      // with several ranks the abort writes them (run_command).
      write_partial_result(error.code, error.message);
      return error.code;
    } catch (...) {  // no memory left to say more
      if (!said) std::fputs("trainbench: out of memory\n", stderr);
      return kExitEnvironmentError;
    }
  }
}

}  // namespace trainbench
