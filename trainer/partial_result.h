// A run that does not reach its result: ended by a communicator's abort (a
// collective past comm.timeout_s — a rank frozen or dead, a GPU wedged) or
// by SIGINT, SIGTERM or SIGHUP (Ctrl-C, scancel, Slurm's time limit). It
// left nothing of what it had measured: hours of a burn-in or a scaling
// point lost with the very failure they were run to find. Rank 0 keeps each
// step's record as it completes and, on such an end, writes them beside the
// result (aborted_result_path: r.json's are r.aborted.json, so an earlier
// complete result at --out is not replaced by a partial one) as
// trainbench.aborted_run/v1, with why the run ended, and says so on stderr.
// Bounded: the storage may be what failed.
#pragma once

#include <exception>  // std::uncaught_exceptions: the scope left by an error
#include <string>

#include <nlohmann/json.hpp>

namespace trainbench {

inline constexpr const char* kAbortedRunSchema = "trainbench.aborted_run/v1";

// Where a run whose result goes to `result_path` leaves its partial one:
// "r.json" -> "r.aborted.json", "out" -> "out.aborted.json".
std::string aborted_result_path(const std::string& result_path);

// Rank 0 before step 1: where the partial result goes (aborted_result_path)
// and what describes the run (schema, version, command, config,
// environment: result_header_json).
void begin_partial_result(const std::string& path, nlohmann::json header);
// A completed step's record, as the result lists it (step_result_json).
void add_partial_result_step(const nlohmann::json& step);
// The run reached its own end, with its result written or said to be not
// written: nothing is written on its behalf after this.
void end_partial_result();

// Writes what was kept, once, with why the run ended (`exit_code`: the
// process's, 128 + N for signal N) into `aborted`. Callable from any
// thread: the abort's, the signal's, the CLI's error handler. Nothing when no run was begun, it has
// ended, or no step completed (the abort's line says all there is); false
// then, or when the write did not finish within a few seconds. A second
// call while the first one writes (an abort racing a signal) waits for that
// write, bounded. Never throws (an abort or a signal thread calls it).
bool write_partial_result(int exit_code, const std::string& why) noexcept;

// Ends the partial result when the scope ends as usual. Left by an
// exception (an error of trainbench's own, a GPU that failed mid-run), it
// keeps it for whoever reports that error: the CLI's handler on one rank,
// the communicator's abort on several (its before-abort action).
struct PartialResultScope {
  PartialResultScope() = default;
  PartialResultScope(const PartialResultScope&) = delete;
  PartialResultScope& operator=(const PartialResultScope&) = delete;
  ~PartialResultScope() {
    if (std::uncaught_exceptions() == exceptions_at_start) end_partial_result();
  }
  const int exceptions_at_start = std::uncaught_exceptions();
};

}  // namespace trainbench
