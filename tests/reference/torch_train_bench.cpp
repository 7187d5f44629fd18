// The PyTorch baseline trainbench's CPU engine is measured against: the same
// model, weights, tokens, micro-batching and AdamW as `trainbench run CONFIG`,
// trained the way a libtorch user would write it (autograd, zero_grad,
// clip_grad_norm_, torch::optim::AdamW), timed the way the trainer times a step.
//
//   torch_train_bench CONFIG [--set section.key=value]... [--steps N] [--threads N]
//
// Prints one JSON line to stdout:
//   {"tokens_per_s", "median_step_s", "steps", "threads", "loss_first", "loss_last"}
#include <chrono>     // step timing
#include <cstdint>    // int64_t
#include <cstdio>     // std::fprintf to stderr
#include <iostream>   // the JSON line
#include <memory>     // std::unique_ptr
#include <stdexcept>  // std::exception
#include <string>
#include <thread>     // std::thread::hardware_concurrency for threads = 0
#include <vector>

#include <CLI/CLI.hpp>        // command line
#include <cblas.h>            // openblas_set_num_threads
#include <nlohmann/json.hpp>  // the result line
#include <torch/torch.h>      // set_num_threads, optim, autograd

#include "dataloader/batch_source.h"      // make_synthetic_source: the trainer's tokens
#include "kernels/model_shape.h"          // ParameterLayout
#include "kernels/parameter_init.h"       // init_parameters_host: the trainer's weights
#include "tests/reference/torch_llama.h"  // TorchLlama
#include "trainer/config.h"               // load_config, ConfigError
#include "trainer/statistics.h"           // median, as the trainer computes it
#include "trainer/train_loop.h"           // adamw_settings: the trainer's optimizer settings

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUserError = 2;  // as the trainbench CLI

struct BenchResult {
  std::vector<double> measured_step_s;  // steps after warm-up
  double loss_first = 0.0;
  double loss_last = 0.0;
};

BenchResult train(const trainbench::Config& config) {
  const trainbench::ModelShape& shape = config.model;
  const trainbench::TrainSection& run = config.train;

  const trainbench::ParameterLayout layout(shape);
  std::vector<float> initial(layout.total_params());
  trainbench::init_parameters_host(layout, shape.n_layers, static_cast<uint64_t>(run.seed),
                                   initial.data());
  trainbench::reference::TorchLlama model(shape, initial);
  model.train();
  const std::unique_ptr<torch::optim::AdamW> optimizer =
      model.make_optimizer(adamw_settings(run));
  const std::unique_ptr<trainbench::BatchSource> source = trainbench::make_synthetic_source(
      run.micro_batch, shape.seq_len, shape.vocab, config.data.synthetic_batches,
      static_cast<uint64_t>(config.data.seed));
  // The gradient of the mean over the whole step's tokens.
  const double loss_scale = 1.0 / static_cast<double>(run.grad_accum);

  BenchResult result;
  Clock::time_point previous_end = Clock::now();
  for (int64_t step = 1; step <= run.steps; ++step) {
    optimizer->zero_grad();
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < run.grad_accum; ++micro) {
      double wait_s = 0.0;
      const trainbench::HostBatch& batch = source->next(&wait_s);
      const torch::Tensor inputs =
          trainbench::reference::token_tensor(batch.inputs, batch.batch, batch.seq_len);
      const torch::Tensor targets =
          trainbench::reference::token_tensor(batch.targets, batch.batch, batch.seq_len);
      const torch::Tensor loss = model.forward(inputs, targets).loss;
      (loss * loss_scale).backward();
      loss_sum += loss.item<double>();
    }
    model.clip_gradients(run.grad_clip);
    optimizer->step();
    const Clock::time_point end = Clock::now();

    // As the trainer: a step runs from the end of the previous one to its own end.
    if (step > run.warmup_steps)
      result.measured_step_s.push_back(std::chrono::duration<double>(end - previous_end).count());
    previous_end = end;
    const double loss = loss_sum / static_cast<double>(run.grad_accum);
    if (step == 1) result.loss_first = loss;
    result.loss_last = loss;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"torch_train_bench: the libtorch training baseline on a trainbench config"};
  std::string config_arg;
  std::vector<std::string> overrides;
  int64_t steps = 0;
  int threads = -1;
  app.add_option("config", config_arg, "YAML config file or embedded preset name")->required();
  app.add_option("--set", overrides, "override a key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_option("--steps", steps, "optimizer steps (overrides train.steps)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads,
                 "CPU threads, 0 = all hardware threads (overrides train.threads)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    if (steps > 0) overrides.push_back("train.steps=" + std::to_string(steps));
    if (threads >= 0) overrides.push_back("train.threads=" + std::to_string(threads));
    const trainbench::Config config = trainbench::load_config(config_arg, overrides);
    const int resolved_threads =
        config.train.threads > 0 ? static_cast<int>(config.train.threads)
                                 : static_cast<int>(std::thread::hardware_concurrency());
    torch::set_num_threads(resolved_threads);
    // libtorch hands its GEMMs to OpenBLAS, whose thread pool set_num_threads
    // does not reach (it only sets MKL's); hold both to the same count so the
    // baseline runs on exactly the cores the CPU engine gets.
    openblas_set_num_threads(resolved_threads);
    std::fprintf(stderr,
                 "torch_train_bench: %s, %lld steps (%lld warm-up), %d threads, libtorch %s\n",
                 config.origin.c_str(), static_cast<long long>(config.train.steps),
                 static_cast<long long>(config.train.warmup_steps), resolved_threads,
                 TORCH_VERSION);

    const BenchResult result = train(config);
    const double median_step_s = trainbench::median(result.measured_step_s);
    const double tokens_per_step = static_cast<double>(config.train.micro_batch *
                                                       config.train.grad_accum *
                                                       config.model.seq_len);
    const nlohmann::json line = {
        {"tokens_per_s", tokens_per_step / median_step_s},
        {"median_step_s", median_step_s},
        {"steps", config.train.steps},
        {"threads", resolved_threads},
        {"loss_first", result.loss_first},
        {"loss_last", result.loss_last},
    };
    std::cout << line.dump() << std::endl;
    return 0;
  } catch (const trainbench::ConfigError& e) {
    std::fprintf(stderr, "torch_train_bench: %s\n", e.what());
    return kExitUserError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_train_bench: %s\n", e.what());
    return 1;
  }
}
