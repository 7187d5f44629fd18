// The `memory` line a run's header prints (trainer/report.cpp) for the
// result's summary.memory_per_rank: the header must show what the engine
// allocated, which the result records.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainer/report.h"  // human_bytes

namespace trainbench::testing {

inline std::string header_memory_line(const nlohmann::json& memory_per_rank) {
  const auto bytes = [&](const char* key) { return human_bytes(memory_per_rank.at(key).get<double>()); };
  return "  memory    " + bytes("total_bytes") + " = params " + bytes("parameter_bytes") + " + grads " +
         bytes("gradient_bytes") + " + optimizer " + bytes("optimizer_bytes") + " + activations " +
         bytes("activation_bytes") + " + workspace " + bytes("workspace_bytes") + "\n";
}

}  // namespace trainbench::testing
