// What a person reads: a header before the run, a progress line every N
// steps, a summary table at the end. Machines read the result JSON instead.
#pragma once

#include <cstdio>  // FILE*
#include <string>

#include "kernels/engine.h"       // MemoryPlan
#include "trainer/config.h"
#include "trainer/environment.h"
#include "trainer/train_loop.h"

namespace trainbench {

// `steps_said`: what the config lines say for train.steps, "" for its count
// (RunExtension::steps_said).
void print_header(FILE* out, const Config& config, const Environment& env, const MemoryPlan& plan,
                  int64_t total_params, int64_t trainable_params, const std::string& steps_said = "");
// A line every report.progress_every steps, and for the run's first step
// (`first_step`: 1, or the step a resume continues at) and its last.
// `of_steps`: "step N/train.steps", else "step N" (a run that ends at a
// duration: burnin).
void print_progress(FILE* out, const Config& config, const StepRecord& step,
                    const RunSummary& so_far, int64_t first_step = 1, bool of_steps = true);
// `job`: how the summary names the run, "" for the run itself; a command
// whose measurement is not the run (bench compute, bench instrument) names
// the short job it measured in, so its figures are not read as the result.
void print_summary(FILE* out, const RunOutcome& outcome, const std::string& result_path,
                   const std::string& job = "");

// 1234567 → "1.23 M"; used for counts and rates.
std::string human_count(double value);
std::string human_bytes(double bytes);
// A rate given in GB/s (1e9 B/s, as every *_gbs figure of the result) in
// decimal units, "1.23 GB/s", "45.60 MB/s": the console says what the JSON
// says (human_bytes' GiB/s read 7% below the JSON's GB/s beside it).
std::string human_rate(double gbs);
// A loss to 4 decimals; "nan", "inf" or "-inf" when it is not finite (printf
// writes a NaN with its sign bit as "-nan", which reads like a figure).
std::string loss_text(double loss);

}  // namespace trainbench
