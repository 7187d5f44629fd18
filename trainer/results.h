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

// Writes the JSON atomically (temporary file, fsync, rename): an interrupted
// run never leaves a truncated result, and an older result survives until the
// new one is complete.
void write_result_json(const std::string& path, const nlohmann::json& result);

}  // namespace trainbench
