// `trainbench bench io [CONFIG] [--set k=v]... [--readers 1,2,4] [--seconds S]
//  [--small-files] [--against RESULT.json] [--out FILE]`: the storage-read
// ceiling. The loader alone at full speed per reader count, beside a plain
// sequential read of the same shards and, with --small-files, the same
// samples read as one file per member.
//
// `trainbench bench io --write [--dir DIR] [--bytes N] [--files N] [--buffered]
//  [--block-bytes N] [--repeats N] [--out FILE]`: the storage-write ceiling.
// A checkpoint of N bytes persisted alone exactly as a run persists it
// (write_rank_files: parallel writers, XXH64, fsyncs), alternating with a
// plain sequential write of the same bytes to the same folder (`dd bs=64M
// oflag=direct conv=fsync`) and the same single stream written from the
// checkpoint's own memory; medians of each and persist / plain write. The
// config is not used. An unwritable --dir exits 2, and so does an option of
// the other bench (--readers with --write, --bytes without it).
//
// `trainbench bench comm [CONFIG] [--set k=v]... [--min-bytes N] [--max-bytes N]
//  [--factor F] [--iters N] [--out FILE]`, under mpirun/srun: the network
// ceiling. The configured model's gradient buckets back to back, then
// all-reduce, reduce-scatter and all-gather over those sizes and a sweep, as
// nccl-tests prints them: time, algbw, busbw, and an exact data check.
// Buffers (and MPI's scratch) beyond the host's memory shared by its ranks,
// or beyond ulimit -v, exit 3 before anything is allocated.
//
// `trainbench bench instrument [CONFIG] [--set k=v]... [--pairs N]
//  [--block-steps N] [--out FILE]`, alone or under mpirun/srun: what the
// per-step timing costs. Blocks of steps with report.instrument on and off
// alternate in one process on the job's engine (trainer/instrument_cost.h);
// the median overhead of the pairs with its 95% interval, against the ≤ 1%
// target. A two-step run of the config follows, and its result JSON gains
// `instrumentation_cost`.
#pragma once

#include <memory>  // std::unique_ptr
#include <string>

namespace CLI {
class App;
}

namespace trainbench {

class BenchCommand {
 public:
  // Adds `bench` and its `compute`, `io`, `comm` and `instrument` subcommands to `app`.
  explicit BenchCommand(CLI::App& app);
  ~BenchCommand();
  bool parsed() const;
  // Runs it; returns the exit code. Throws ConfigError, DataError or
  // CommandError, which the CLI turns into one line and an exit code.
  int run(const std::string& command_line);

 private:
  CLI::App* bench_ = nullptr;
  CLI::App* io_ = nullptr;
  CLI::App* comm_ = nullptr;
  CLI::App* instrument_ = nullptr;
  CLI::App* compute_ = nullptr;
  // bench io's options of the other bench (read vs --write): exit 2.
  void check_io_options() const;
  // command_line: recorded in the result JSON (`command`), as run's is.
  int run_io(const std::string& command_line);
  int run_io_write(const std::string& command_line);
  int run_comm(const std::string& command_line);
  int run_instrument(const std::string& command_line);
  int run_compute(const std::string& command_line);
  struct Options;
  std::unique_ptr<Options> options_;  // the App's options write into it
};

}  // namespace trainbench
