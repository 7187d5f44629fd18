// What a command built on `run` adds to the training job (trainbench burnin):
// the same setup, loop and result as `run`, plus its own work before the
// first step, after every step and after the last one. run_cli's `run` path
// calls it (trainer/cli.h: run_with_extension).
#pragma once

#include <cstdio>  // FILE*
#include <string>

#include <nlohmann/json.hpp>  // the result it adds to

#include "comm/communicator.h"
#include "kernels/engine.h"
#include "trainer/config.h"
#include "trainer/train_loop.h"  // StepRecord, RunOutcome

namespace trainbench {

class Checkpointer;        // trainer/checkpointing.h
struct Environment;        // trainer/environment.h

// The job, as set up for step 1.
struct RunContext {
  const Config& config;
  TrainingEngine& engine;
  Communicator& comm;
  int gpu_index = -1;                    // the rank's CUDA device; -1 on the cpu engine
  Checkpointer* checkpointer = nullptr;  // the run's checkpoints (their folder: dir()); nullptr when off
  const Environment* environment = nullptr;  // the job's hosts, GPUs and CPU (collect_environment)
};

class RunExtension {
 public:
  virtual ~RunExtension() = default;
  // Every rank, collectively, after setup and before step 1.
  virtual void begin(const RunContext& context) = 0;
  // Every rank after every step (a StepHook): false ends the run, and must be
  // the same on every rank.
  virtual bool after_step(const StepRecord& step) = 0;
  // Every rank, collectively, after the run; `result` is the result JSON on
  // rank 0 (to add to), null elsewhere. Returns the command's exit code.
  virtual int finish(const RunOutcome& outcome, nlohmann::json* result) = 0;
  // Rank 0, after the run's summary: the extension's own report.
  virtual void print(FILE* out) const = 0;
  // Every rank, when the run's scope ends — also by an exception — before
  // the communicator and the engine go: stops whatever begin() started.
  virtual void end() {}
  // The extension's own options that shape the job, as typed (e.g. bench
  // instrument's "--pairs 3 --block-steps 2"): compared across ranks with
  // the config, since a rank that counts other pairs waits in a collective
  // its peers never enter.
  virtual std::string job_options() const { return ""; }
  // How the console header says train.steps where the extension, not the
  // count, ends the run (burnin: its duration, under a count of 2^40
  // nobody set); "" for the count itself.
  virtual std::string steps_said() const { return ""; }
  // How the run's summary names the run when the extension's measurement is
  // not it (print_summary's `job`), "" when it is the run (burnin).
  virtual std::string summary_job() const { return ""; }
  // The rank whose GPU call failed mid-run (`error`: "device error: ..."):
  // the extension's verdict line for it, which ends the job with exit 4, or
  // "" to leave it an environment failure (exit 3). Burn-in fails the GPU.
  virtual std::string device_failure_verdict(const Communicator& /*comm*/, const std::string& /*error*/) const {
    return "";
  }
};

}  // namespace trainbench
