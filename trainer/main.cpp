// trainbench: end-to-end training throughput benchmark. All logic is in trainer/cli.cpp.
#include <malloc.h>  // mallopt: M_ARENA_MAX

#include <csignal>  // the signal's name in the partial result
#include <cstdio>   // std::fflush
#include <cstdlib>  // std::_Exit
#include <string>

#include "checkpoint/atomic_file.h"      // cancel_ and remove_unfinished_atomic_writes
#include "dataloader/shard_writer.h"     // remove_partial_shards
#include "comm/communicator.h"       // set_before_abort
#include "trainer/cli.h"
#include "trainer/environment.h"     // address_space_limit_bytes
#include "trainer/interrupt_cleanup.h"  // temporary folders removed on SIGINT/SIGTERM/SIGHUP
#include "trainer/partial_result.h"     // write_partial_result: an aborted or interrupted run's steps
#include "trainer/standard_output.h"    // a closed pipe or a full disk under the console report

int main(int argc, char** argv) {
  // Under an address-space limit (ulimit -v; PBS's vmem) glibc's per-thread
  // malloc arenas each reserve 64 MiB, whatever they hold: the loader's and
  // the writers' threads used up most of a limit the run's own memory was
  // far below, and failed at random places. One arena, before any thread.
  const bool address_space_limited = trainbench::address_space_limit_bytes() > 0;
  if (address_space_limited) mallopt(M_ARENA_MAX, 1);
  // A signal (Ctrl-C, scancel, Slurm's time limit): rank 0's partial result
  // (trainer/partial_result.h) first; set before the handler that calls it.
  trainbench::set_interrupt_report([](int signal_number) {
    // The result being written when the signal came is not renamed over the
    // earlier one (its rename raced this report's write of the steps).
    trainbench::cancel_unfinished_atomic_writes();
    const char* name = signal_number == SIGINT    ? "SIGINT (Ctrl-C)"
                       : signal_number == SIGTERM ? "SIGTERM (scancel, a time limit, the launcher)"
                       : signal_number == SIGHUP  ? "SIGHUP (the terminal went)"
                                                  : "a signal";
    try {
      trainbench::write_partial_result(128 + signal_number, std::string("interrupted by ") + name);
    } catch (...) {  // the reason's string: out of memory; the signal goes on without it
    }
  });
  trainbench::install_interrupt_cleanup();
  trainbench::keep_running_when_the_output_reader_goes();
  // A shard being written (shards synth|pack into a folder of the user's)
  // leaves no NAME.partial behind when interrupted.
  trainbench::run_on_interrupt(trainbench::remove_partial_shards);
  // Nor a result or `latest` cut off between its temporary and its rename.
  trainbench::run_on_interrupt(trainbench::remove_unfinished_atomic_writes);
  // A communicator's abort (a collective timed out, a rank died) ends the
  // process without unwinding: rank 0's partial result, then the same
  // cleanup as a signal's.
  trainbench::set_before_abort([](int exit_code, const std::string& message) {
    trainbench::write_partial_result(exit_code, message);
    trainbench::remove_temporary_files_before_abort();
  });
  const int code = trainbench::exit_code_after_standard_output(trainbench::run_cli(argc, argv));
  trainbench::end_interrupt_cleanup();
  // OpenBLAS starts its worker threads before main, and each allocates its
  // buffer (up to 128 MiB) at once; one whose buffer does not fit under the
  // limit retries forever, and OpenBLAS's exit handler joins it: every
  // command, a run that had said why the limit stops it included, then hung
  // at its exit (a window one buffer wide per worker: 96-230 MiB on two
  // cores, gigabytes on a many-core login node). Everything this process
  // owns is closed by now (the communicator within run_cli); the C streams
  // are flushed and the exit handlers skipped.
  if (address_space_limited) {
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
