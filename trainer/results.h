// The result file of DESIGN.md, schema trainbench.result/v1: one JSON object
// per run that machines (scripts/report.py, later) read. A schema change bumps
// kResultSchema.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainer/config.h"       // Config
#include "trainer/environment.h"  // Environment
#include "trainer/train_loop.h"   // RunOutcome

namespace trainbench {

inline constexpr const char* kResultSchema = "trainbench.result/v1";

nlohmann::json build_result_json(const std::string& command_line, const Config& config,
                                 const Environment& env, const RunOutcome& outcome);
// `config` with the `auto`s the run resolved put as they ran: train.device
// (the engine), comm.backend and train.precision. What the result's config
// and the run's header say.
Config with_auto_resolved(const Config& config, const Environment& env);
// What describes the run, before any step: schema, version, command, the
// resolved config and the environment (the start of build_result_json's).
nlohmann::json result_header_json(const std::string& command_line, const Config& config, const Environment& env);
// One step's record as the result's `steps` list it; `timed`: the per-step
// timers ran (report.instrument), else the times are null.
nlohmann::json step_result_json(const StepRecord& step, bool timed);

// A result lists every step up to this many, and beyond every k-th (k the
// smallest power of two that fits; the last step always), k in
// `steps_every`: a 72-hour burn-in at a few steps a second wrote hundreds
// of MB of records (more than report.py and --baseline read) and held
// several GB building them. The summary is over every step all the same.
int64_t max_step_records();  // 100,000; TRAINBENCH_TEST_MAX_STEP_RECORDS for tests
// The k above for a run of `steps` steps.
int64_t step_record_stride(int64_t steps);
// The checkpoint records a result lists every one of: 1,000 (or the test
// hook's step limit, if lower); past it, every k-th (checkpoints_every) and
// those not committed.
int64_t max_checkpoint_records();
// The smallest power of two k that lists at most `limit` of `records`
// records as every k-th and the last.
int64_t record_stride(int64_t records, int64_t limit);

// Writes `text` atomically (temporary file, fsync, rename): an interrupted
// run never leaves a truncated file, and an older one survives until the
// new one is complete. Storage that stopped responding (a write or fsync
// that never returns) held the process there for ever: the write runs on a
// thread of its own, left behind after `timeout_s` with an AtomicWriteError
// saying so (`bound_named`: where the bound comes from), as for any write
// that failed.
void write_file_within(const std::string& path, std::string text, double timeout_s, const std::string& bound_named);
// A result JSON (run's, a bench's, project's) through write_file_within,
// bounded by checkpoint.timeout_s; with `peers` (other ranks wait for rank 0
// at the job's end) by a quarter of comm.timeout_s when that is less.
void write_result_json(const std::string& path, const nlohmann::json& result, const Config& config, bool peers);

// A result JSON given as an input (`--against`, `--baseline`): the parsed
// document, read by checkpoint_io::read_small_file. Throws
// std::invalid_argument, its text "OPTION PATH: why", for a path that is not
// a regular file (a FIFO would block the read forever), cannot be read, or is
// not JSON; `wanted` names what to give instead ("a trainbench run result").
// A read the machine's limits stopped (no descriptor left) is its
// CheckpointError, environment() true.
nlohmann::json read_json_input(const std::string& option, const std::string& path, const std::string& wanted);

// "" for a `run` or `burnin` result of this build's schema; else what the
// document is instead: another schema ("not a trainbench run or burnin
// result (schema '...'; this build reads trainbench.result/v1)"), or a
// `bench compute` or `bench instrument` result, which has the schema and a
// summary.tokens_per_s too, of a two-step job on resident data that no
// training run's figures are comparable with.
std::string not_a_training_result(const nlohmann::json& result);

}  // namespace trainbench
