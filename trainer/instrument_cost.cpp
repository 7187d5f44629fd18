#include "trainer/instrument_cost.h"

#include <algorithm>  // std::sort
#include <cmath>      // std::exp, std::lgamma, std::log
#include <memory>
#include <stdexcept>

#include "trainer/saved_state.h"      // the job starts where it would have
#include "trainer/statistics.h"       // median
#include "trainer/train_loop.h"       // run_training, measurement_batches

namespace trainbench {

namespace {

// The median's distribution-free interval [x(k+1), x(n−k)] (1-based order
// statistics), with k the largest whose exact binomial coverage,
// 1 − 2·P(Bin(n, ½) ≤ k), is at least 95%. The normal approximation
// (n/2 ± 0.98·√n) gave k = 0, [min, max], for n ≤ 7 and called it 95% where
// it is 50% at n = 2. Below 6 values no interval reaches 95%: [min, max]
// with its own coverage, which the caller reports.
void median_interval(std::vector<double> values, double* low, double* high, double* coverage) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double dn = static_cast<double>(n);
  // P(Bin(n, ½) = i) through lgamma: no underflow of 2^−n for many pairs.
  const auto probability = [dn](double i) {
    return std::exp(std::lgamma(dn + 1) - std::lgamma(i + 1) - std::lgamma(dn - i + 1) - dn * std::log(2.0));
  };
  size_t k = 0;
  double cumulative = probability(0);  // P(X ≤ k)
  for (size_t i = 1; i < n / 2; ++i) {
    const double next = cumulative + probability(static_cast<double>(i));
    if (1.0 - 2.0 * next < 0.95) break;
    cumulative = next;
    k = i;
  }
  const double chosen = 1.0 - 2.0 * cumulative;
  *low = values[k];
  *high = values[n - 1 - k];
  *coverage = chosen;
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
    const RunOutcome outcome = run_training(block, engine, *resident, comm, nullptr);
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
  median_interval(overheads, &cost.overhead_low, &cost.overhead_high, &cost.interval_coverage);
  cost.untimed_step_s = median(cost.untimed_s) / static_cast<double>(block_steps);
  return cost;
}

nlohmann::json instrumentation_cost_json(const InstrumentationCost& cost) {
  return {{"pairs", cost.timed_s.size()},
          {"block_steps", cost.block_steps},
          {"untimed_step_s", cost.untimed_step_s},
          {"overhead_median", cost.overhead_median},
          {"overhead_ci95", {cost.overhead_low, cost.overhead_high}},
          {"overhead_ci_coverage", cost.interval_coverage},
          {"timed_s", cost.timed_s},
          {"untimed_s", cost.untimed_s}};
}

void print_instrumentation_cost(FILE* out, const InstrumentationCost& cost) {
  std::fprintf(out, "instrumentation cost: %zu pairs of %ld-step blocks, timed and untimed alternating in one process\n",
               cost.timed_s.size(), static_cast<long>(cost.block_steps));
  std::fprintf(out, "  untimed step        %.3f ms (median)\n", 1e3 * cost.untimed_step_s);
  std::fprintf(out, "  overhead            %+.2f%% median of the pairs, %.1f%% interval %+.2f%% .. %+.2f%%\n",
               100.0 * cost.overhead_median, 100.0 * cost.interval_coverage, 100.0 * cost.overhead_low,
               100.0 * cost.overhead_high);
  const bool confident = cost.interval_coverage >= 0.95;
  // Timed blocks faster than untimed ones, beyond the interval: hardly a
  // cost of the timers, which add work, but most likely the host's speed
  // varying between the blocks; the target holds, the figure is the host's.
  const char* verdict = !confident ? "not resolved (fewer than 6 pairs give no 95% interval; more --pairs)"
                        : cost.overhead_high < 0
                            ? "met, but the 95% interval lies wholly below 0: the timed blocks ran faster, which the "
                              "timers, adding work, are unlikely to cause; the host's speed most likely varied between "
                              "the blocks (a quieter host, more --pairs)"
                        : cost.overhead_high <= 0.01 ? "met (the 95% interval lies below 1%)"
                        : cost.overhead_low > 0.01   ? "NOT met (the 95% interval lies above 1%)"
                                                     : "not resolved (the 95% interval spans 1%; more --pairs)";
  std::fprintf(out, "  target <= 1%%        %s\n", verdict);
}

}  // namespace trainbench
