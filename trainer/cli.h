// The command line of DESIGN.md. main.cpp only calls run_cli.
//   trainbench run [CONFIG] [--set section.key=value]... [--steps N] [--out FILE]
//   trainbench --version | --help | <cmd> --help
// Exit codes: 0 ok; 2 user error (bad option, config, path); 3 environment
// failure (not enough memory, backend or device missing); 4 a failed check
// (non-finite loss, ranks diverged).
#pragma once

#include <memory>  // std::unique_ptr
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/device_info.h"  // GpuInventory for resolve_device
#include "kernels/engine.h"      // EngineOptions in RunReport
#include "trainer/config.h"
#include "trainer/train_loop.h"  // RunOutcome in RunReport

namespace trainbench {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUserError = 2;
inline constexpr int kExitEnvironmentError = 3;
inline constexpr int kExitCheckFailed = 4;

// An error that ends a command with `code` and one line of text.
struct CommandError {
  int code;
  std::string message;
};

// comm.backend → a communicator: auto takes MPI when an MPI launcher started
// the process. nccl gives its bootstrap (MPI under a launcher, else local),
// which `run` wraps with make_nccl_communicator once the local rank has picked
// the GPU. Throws CommandError (exit 3) when MPI is asked for, or launched, but
// not built, and when nccl is asked for but not built. Its collectives time
// out after `timeout_s` (comm.timeout_s) from the first.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, double timeout_s);

// train.device → the engine a run takes: auto is cuda when this binary has
// the CUDA engine and `gpus` (query_gpus) lists a GPU, else cpu; a named
// device is itself.
std::string resolve_device(const std::string& requested, const GpuInventory& gpus);
// Whether a run's gradients go through NCCL: comm.backend nccl, or auto on
// the cuda engine (`device`, resolved) with several ranks when this build
// has NCCL. `run` and `bench comm` choose alike.
bool takes_nccl(const std::string& backend, const std::string& device, int world_size);

// The config `run` trains without CONFIG (DESIGN.md: a newcomer sees the
// whole pipeline in one command): preset:tiny where train.device (auto, or
// the last --set of it in `overrides`) takes the cpu engine;
// preset:gpt2-124m, GPU-sized (about 4 GiB of GPU memory, 30 steps), where
// it takes the cuda engine. Every other command's default stays tiny.
std::string default_run_config(const std::vector<std::string>& overrides, const GpuInventory& gpus);

// Every rank of a multi-rank command must run the same job: rank 0's
// resolved config (report.* aside) and `command_options` (the command's own
// options as one string: --ceilings, --iters, --layers ...) go to every
// rank, and all ranks throw CommandError (exit 2) together when any differs,
// the differing rank naming the first key. A no-op for one rank.
void check_ranks_run_the_same_job(const Config& config, const std::string& command_options, Communicator& comm);

// Throws CommandError (exit 2) when a command's result could not be written
// to `path` at the end (write_file_atomically) or writing it would destroy
// something: checked before the work, so no measurement is lost to a bad
// --out. Refused: an empty path, a folder that does not exist or is not one,
// a name the file system refuses, anything that is not a regular file, and a
// non-empty file that is not an earlier trainbench result (the config, a
// shard, a checkpoint's `latest`). `named`: how the message names where the
// path came from (the option, or the config key).
void check_result_path(const std::string& path, const std::string& named = "--out");

// Throws CommandError (exit 2) for a comm.inject_delay_ms the job has no
// collective to hold on: one rank, or NCCL's (on the GPU, not the MPI
// backend's host requests that the fault holds). For run, burnin and bench comm.
void check_inject_delay_has_a_target(const Config& config, bool use_nccl, int world);

// The key of a --set assignment ("section.key" of " section.key =value"),
// without the blanks around it.
std::string override_key(const std::string& assignment);

// Throws CommandError (exit 2) for a `--set report.out=...` given to a
// command whose result goes where its own --out says (bench, project): it
// was ignored without a word, the result written under the default name.
// (A config file's report.out is run's and burnin's, and stays unread here.)
void refuse_report_out_override(const std::string& command, const std::vector<std::string>& overrides);

// Throws CommandError (exit 2) when the result path is the same file as an
// input the command reads an earlier result from (burnin --baseline, bench
// io --against): check_result_path accepts it, an earlier result, and the
// comparison's yardstick was replaced by the run compared with it.
void check_result_is_not_input(const std::string& path, const std::string& named, const std::string& input,
                               const std::string& input_named);

// load_config with `overrides`, of which `typed` came from options rather
// than --set: each pair is the override ("train.steps=2") and the option as
// the user typed it ("--steps 2"), which an error names instead of the
// config layer's "--set train.steps=2".
Config load_config_as_typed(const std::string& config, std::vector<std::string> overrides,
                            const std::vector<std::pair<std::string, std::string>>& typed);

// The `run` path on a loaded config, for commands that train more than once
// in one process (project). MPI initialises once per process, so the caller
// makes the communicator (make_communicator) and hands it to every run; a
// nccl bootstrap is wrapped on the first run and kept for the next.
class RunExtension;  // trainer/run_extension.h

struct RunSettings {
  std::string command_line;
  std::string resume;        // run --resume
  bool ceilings = false;     // run --ceilings
  bool write_result = true;  // false: the result JSON is only returned
  RunExtension* extension = nullptr;  // work added to the run (trainbench burnin), or none
  bool out_option = false;   // the result path came from --out (else from report.out or its default)
  // The command has --resume (run): a used checkpoint.dir's refusal offers
  // it; burnin, bench instrument and project have none to offer.
  bool offers_resume = false;
};
struct RunReport {
  int exit_code = kExitOk;
  RunOutcome outcome;
  nlohmann::json result;         // the result JSON (rank 0; null elsewhere)
  EngineOptions engine_options;  // as the engine was built: plans memory at other depths
  int64_t state_bytes = 0;       // this rank's checkpointed state
  // Rank 0 could not write the result at the end (a full disk, an immutable
  // file): why, printed by the caller; the summary was printed, exit 3.
  std::string result_write_failure;
};
// Throws what run_command throws (ConfigError, CommandError, DataError, ...).
RunReport run_config(Config config, std::unique_ptr<Communicator>& comm, const RunSettings& settings);

// What run_config checks of the engine before it allocates anything (the
// device, the memory plan against GPU or host memory, ulimit -v): throws the
// same CommandError it would. `project` checks every depth with it before
// training the first.
void check_engine_fits(const Config& config, Communicator& comm);

int run_cli(int argc, char** argv);

// `run` CONFIG with these --set overrides and result path ("" = report.out),
// and `extension`'s work added (trainbench burnin). Returns the exit code;
// throws what `run` throws (run_cli's handlers turn it into one line).
int run_with_extension(const std::string& config, const std::vector<std::string>& overrides,
                       const std::string& out, const std::string& command_line, RunExtension& extension);

}  // namespace trainbench
