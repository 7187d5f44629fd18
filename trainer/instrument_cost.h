// What trainbench's own per-step timing costs (issue 7's ≤ 1% target),
// measured inside one process: blocks of steps with report.instrument on
// and off alternate on the job's engine, communicator and resident batches.
// Two processes run one after the other (scripts/bench_instrumentation.sh)
// see this 2-vCPU VM change speed by ±10% and more between them, which hid
// a 1% effect; blocks a fraction of a second apart see the same host, and
// the median of many pairs cancels what drift is left. `trainbench bench
// instrument` runs it (trainer/bench_command.h).
#pragma once

#include <cstdint>
#include <cstdio>  // FILE*
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "kernels/engine.h"
#include "trainer/config.h"

namespace trainbench {

struct InstrumentationCost {
  int64_t block_steps = 0;
  // Each block's measured wall time (the slowest rank's), in pair order.
  std::vector<double> timed_s, untimed_s;
  // Per pair: timed / untimed − 1. The median, and a distribution-free
  // confidence interval of it: order statistics whose exact binomial
  // coverage is at least 95%, or [min, max] below 6 pairs, whose coverage
  // (1 − 2^(1−n)) is interval_coverage.
  double overhead_median = 0, overhead_low = 0, overhead_high = 0;
  double interval_coverage = 0;
  double untimed_step_s = 0;  // median untimed block / block_steps
};

// `pairs` pairs of `block_steps` measured steps each (plus one warm-up step
// per block), alternating which side goes first (ABBA: linear drift cancels
// within two pairs). Collective: every rank calls it. The engine's state is
// restored afterwards. Throws std::invalid_argument for pairs < 2 or
// block_steps < 1.
InstrumentationCost measure_instrumentation_cost(const Config& config, TrainingEngine& engine, Communicator& comm,
                                                 int64_t pairs, int64_t block_steps);

nlohmann::json instrumentation_cost_json(const InstrumentationCost& cost);
void print_instrumentation_cost(FILE* out, const InstrumentationCost& cost);

}  // namespace trainbench
