#include "trainer/instrument_cost.h"

#include <algorithm>  // std::sort
#include <cmath>      // std::sqrt, std::floor
#include <memory>
#include <stdexcept>

#include "trainer/saved_state.h"      // the job starts where it would have
#include "trainer/statistics.h"       // median
#include "trainer/train_loop.h"       // run_training, measurement_batches

namespace trainbench {

namespace {

// The median's distribution-free 95% interval: the order statistics
// n/2 ± 0.98·√n (the normal approximation to the binomial).
void median_interval(std::vector<double> values, double* low, double* high) {
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  const auto k = static_cast<size_t>(std::max(0.0, std::floor(n / 2.0 - 0.98 * std::sqrt(n))));
  *low = values[std::min(k, values.size() - 1)];
  *high = values[values.size() - 1 - std::min(k, values.size() - 1)];
}

}  // namespace

InstrumentationCost measure_instrumentation_cost(const Config& config, TrainingEngine& engine, Communicator& comm,
                                                 int64_t pairs, int64_t block_steps) {
  if (pairs < 2) throw std::invalid_argument("--pairs must be at least 2, got " + std::to_string(pairs));
  if (block_steps < 1)
    throw std::invalid_argument("--block-steps must be at least 1, got " + std::to_string(block_steps));
  // One warm-up step per block: the step after a switch settles caches.
  Config block = measurement_run_config(config, 1, block_steps);
  const SavedState saved(engine);
  std::unique_ptr<BatchSource> resident = measurement_batches(config);
  const auto wall_seconds = [&](bool instrument) {
    block.report.instrument = instrument;
    const RunOutcome outcome = run_training(block, engine, *resident, comm, nullptr, nullptr, 1, nullptr, false);
    // The slowest rank's window: with several ranks, what the job paid.
    return max_over_ranks(comm, outcome.summary.measured_wall_s);
  };
  InstrumentationCost cost;
  cost.block_steps = block_steps;
  std::vector<double> overheads;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    double timed = 0, untimed = 0;
    if (pair % 2 == 0) {
      timed = wall_seconds(true);
      untimed = wall_seconds(false);
    } else {
      untimed = wall_seconds(false);
      timed = wall_seconds(true);
    }
    cost.timed_s.push_back(timed);
    cost.untimed_s.push_back(untimed);
    overheads.push_back(untimed > 0 ? timed / untimed - 1.0 : 0.0);
  }
  cost.overhead_median = median(overheads);
  median_interval(overheads, &cost.overhead_low, &cost.overhead_high);
  cost.untimed_step_s = median(cost.untimed_s) / static_cast<double>(block_steps);
  return cost;
}

nlohmann::json instrumentation_cost_json(const InstrumentationCost& cost) {
  return {{"pairs", cost.timed_s.size()},
          {"block_steps", cost.block_steps},
          {"untimed_step_s", cost.untimed_step_s},
          {"overhead_median", cost.overhead_median},
          {"overhead_ci95", {cost.overhead_low, cost.overhead_high}},
          {"timed_s", cost.timed_s},
          {"untimed_s", cost.untimed_s}};
}

void print_instrumentation_cost(FILE* out, const InstrumentationCost& cost) {
  std::fprintf(out, "instrumentation cost: %zu pairs of %ld-step blocks, timed and untimed alternating in one process\n",
               cost.timed_s.size(), static_cast<long>(cost.block_steps));
  std::fprintf(out, "  untimed step        %.3f ms (median)\n", 1e3 * cost.untimed_step_s);
  std::fprintf(out, "  overhead            %+.2f%% median of the pairs, 95%% interval %+.2f%% .. %+.2f%%\n",
               100.0 * cost.overhead_median, 100.0 * cost.overhead_low, 100.0 * cost.overhead_high);
  const char* verdict = cost.overhead_high <= 0.01   ? "met (the interval lies below 1%)"
                        : cost.overhead_low > 0.01   ? "NOT met (the interval lies above 1%)"
                                                     : "not resolved (the interval spans 1%; more --pairs)";
  std::fprintf(out, "  target <= 1%%        %s\n", verdict);
}

}  // namespace trainbench
