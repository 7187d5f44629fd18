// `trainbench burnin [CONFIG] --duration 2h [--set k=v]... [--baseline
//  known_good.json] [--out FILE]`, alone or under mpirun/srun: the training
// job of `run` (loader, gradient buckets, checkpoints unless
// checkpoint.every_steps=0) for the duration, with burn-in's checks
// (trainer/burnin.h) and a PASS/FAIL verdict per GPU, per node and for the
// job. Exit 0 when everything passed, 4 when anything failed, 2 for bad input.
#pragma once

#include <memory>  // std::unique_ptr
#include <string>

namespace CLI {
class App;
}

namespace trainbench {

class BurninCommand {
 public:
  // Adds `burnin` to `app`.
  explicit BurninCommand(CLI::App& app);
  ~BurninCommand();
  bool parsed() const;
  // Runs it; returns the exit code. Throws what `run` throws (ConfigError,
  // CommandError, ...), which the CLI turns into one line and an exit code.
  int run(const std::string& command_line);

 private:
  CLI::App* burnin_ = nullptr;
  struct Options;
  std::unique_ptr<Options> options_;  // the App's options write into it
};

}  // namespace trainbench
