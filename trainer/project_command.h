// `trainbench project [CONFIG] [--set k=v]... [--layers 2,4] [--steps N]
//  [--fabric ib-ndr400|roce400|measured|<GB/s>,<us>] [--nodes 1,2,4,...]
//  [--verify] [--out FILE]`, alone or under mpirun/srun: a mini run
// projected to the customer's whole model and to more nodes
// (docs/projection.md).
//  - depth: the config trained at each --layers depth (same shapes
//    otherwise), every step-time category fitted as a + b·layers and
//    evaluated at model.n_layers_full (0: model.n_layers); tokens/s, MFU,
//    checkpoint size and memory per GPU there. --verify then trains the full
//    depth too and prints the projection's error.
//  - scale: the all-reduce between the ranks at hand timed over sizes (the
//    ring's busbw and hop latency), then the full-depth step on 1..64 nodes
//    of this node's ranks joined by --fabric, with the overlap measured.
//  - a fit that cannot be right (a per-layer cost below zero, a category
//    above step_s) is a warning, printed and in the JSON's `warnings`; a
//    step fitted at or below zero leaves tokens/s, MFU and the scale table
//    null and exits 4 once the JSON is written.
#pragma once

#include <memory>  // std::unique_ptr

namespace CLI {
class App;
}

namespace trainbench {

class ProjectCommand {
 public:
  // Adds `project` to `app`.
  explicit ProjectCommand(CLI::App& app);
  ~ProjectCommand();
  bool parsed() const;
  // Runs it; returns the exit code. Throws ConfigError, CommandError and
  // whatever `run` throws, which the CLI turns into one line and an exit code.
  int run(const std::string& command_line);  // recorded in the projection JSON

 private:
  CLI::App* project_ = nullptr;
  struct Options;
  std::unique_ptr<Options> options_;  // the App's options write into it
};

}  // namespace trainbench
