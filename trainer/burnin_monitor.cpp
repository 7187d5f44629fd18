// The burn-in's work inside the training job (make_burnin_monitor): every
// check of trainer/burnin.h wired to the run. Everything a verdict needs is
// gathered to every rank as it is found (the per-step flags, the golden
// values, the health figures), so every rank reaches the same verdict and
// no rank waits on a decision it cannot see.
#include <algorithm>           // std::min, std::max, std::find
#include <chrono>
#include <cmath>               // std::isfinite
#include <condition_variable>  // the NVML sampler's period and stop
#include <cstdio>
#include <cstdlib>             // std::getenv: the test hook
#include <mutex>
#include <optional>            // the fabric's way, once chosen
#include <thread>              // the NVML sampler

#include "trainer/environment.h"    // device_bench_room_over_ranks: the fabric check on the GPU
#include "comm/collective_bench.h"  // bench_collectives, bus_bandwidth_factor: the fabric check
#include "kernels/device_info.h"    // query_gpus: which physical GPU a rank trains on
#include "kernels/gpu_health.h"     // open_gpu_health: NVML
#include "trainer/burnin.h"
#include "trainer/ceilings.h"       // measure_write_rate: the storage check
#include "trainer/cpu_wait.h"       // kCpuWaitNotedShare: a rank's wait for a CPU, in its row
#include "trainer/checkpointing.h"  // Checkpointer::wait_until_idle (no checkpoint writing during it), state_bytes_per_rank
#include "trainer/progress_watchdog.h"  // the hang watch
#include "trainer/cli.h"            // CommandError: a baseline of another attention is exit 2
#include "trainer/report.h"         // human_count
#include "trainer/run_extension.h"
#include "trainer/statistics.h"     // median

namespace trainbench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// What one rank tells the others after every step, in one all_gather.
constexpr int kLossNotFinite = 1;
constexpr int kGradNormNotFinite = 2;
constexpr int kStop = 4;        // rank 0: the duration is over
constexpr int kHealthDue = 8;   // rank 0: time for the fabric and storage measurements
constexpr size_t kStragglerSteps = 5;  // measured steps before stragglers are judged

// Samples one GPU through NVML every `every_s` on its own thread, so a slow
// NVML call never holds up a step, and sampling goes on during long steps.
// The state is shared with the thread: stop() may give up on a hung thread
// (detach it) without anything it touches going away.
class HealthSampler {
 public:
  struct Summary {
    int64_t samples = 0;
    double max_temperature_c = -1, max_power_w = -1, min_sm_clock_mhz = -1;
    int64_t reasons_seen = 0;  // OR over the samples
    int64_t hardware_slowdown_samples = 0, software_cap_samples = 0;
    int64_t ecc_corrected = -1, ecc_uncorrected = -1, pcie_replays = -1;  // deltas; -1 = not reported
    bool hung = false;  // the sampler did not stop in time: an NVML call hung
  };

  HealthSampler(std::unique_ptr<GpuHealthProbe> probe, double every_s) : state_(std::make_shared<State>()) {
    state_->probe = std::move(probe);
    state_->every = std::chrono::duration<double>(every_s);
    thread_ = std::thread([state = state_] {
      for (;;) {
        const GpuHealthSample sample = state->probe->sample();
        std::unique_lock lock(state->mutex);
        state->samples.push_back(sample);
        if (state->stop) break;
        // Then one more sample: the last one, taken when stopping.
        state->wake.wait_for(lock, state->every, [&state] { return state->stop; });
      }
      std::lock_guard lock(state->mutex);
      state->stopped = true;
      state->wake.notify_all();
    });
  }
  ~HealthSampler() {
    if (thread_.joinable()) stop(10.0);
  }

  Summary stop(double timeout_s) {
    std::unique_lock lock(state_->mutex);
    state_->stop = true;
    state_->wake.notify_all();
    const bool stopped = state_->wake.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                               [this] { return state_->stopped; });
    lock.unlock();
    if (thread_.joinable()) {  // a second stop() only summarizes again
      if (stopped) thread_.join(); else thread_.detach();
    }
    lock.lock();
    Summary s = summarize(state_->samples);
    s.hung = !stopped;
    return s;
  }

 private:
  struct State {
    std::unique_ptr<GpuHealthProbe> probe;
    std::chrono::duration<double> every{5.0};
    std::mutex mutex;
    std::condition_variable wake;
    bool stop = false, stopped = false;
    std::vector<GpuHealthSample> samples;
  };

  static int64_t delta(const std::vector<GpuHealthSample>& samples, int64_t GpuHealthSample::*counter) {
    int64_t first = -1, last = -1;
    for (const GpuHealthSample& s : samples) {
      if (s.*counter < 0) continue;
      if (first < 0) first = s.*counter;
      last = s.*counter;
    }
    return first < 0 ? -1 : last - first;
  }

  static Summary summarize(const std::vector<GpuHealthSample>& samples) {
    Summary s;
    s.samples = static_cast<int64_t>(samples.size());
    for (const GpuHealthSample& g : samples) {
      s.max_temperature_c = std::max(s.max_temperature_c, g.temperature_c);
      s.max_power_w = std::max(s.max_power_w, g.power_w);
      if (g.sm_clock_mhz >= 0)
        s.min_sm_clock_mhz = s.min_sm_clock_mhz < 0 ? g.sm_clock_mhz : std::min(s.min_sm_clock_mhz, g.sm_clock_mhz);
      if (g.clock_event_reasons < 0) continue;
      s.reasons_seen |= g.clock_event_reasons;
      if (g.clock_event_reasons & static_cast<int64_t>(kClockEventsHardware)) ++s.hardware_slowdown_samples;
      if (g.clock_event_reasons & static_cast<int64_t>(kClockEventSwPowerCap | kClockEventSwThermalSlowdown))
        ++s.software_cap_samples;
    }
    s.ecc_corrected = delta(samples, &GpuHealthSample::ecc_corrected);
    s.ecc_uncorrected = delta(samples, &GpuHealthSample::ecc_uncorrected);
    s.pcie_replays = delta(samples, &GpuHealthSample::pcie_replays);
    return s;
  }

  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Bounds a hung rank (ProgressWatchdog): a rank whose steps stop while it
// is not waiting for a peer is stuck in its own work — a hung GPU, a stuck
// kernel, a frozen loader — and its watchdog ends the job with exit 4 and a
// FAIL line naming it, after half of comm.timeout_s. Its peers, waiting for
// it in a collective, would time out only after the whole comm.timeout_s
// (exit 3, naming no one).
std::unique_ptr<ProgressWatchdog> watch_for_a_hang(Communicator& comm, double limit_s) {
  return std::make_unique<ProgressWatchdog>(
      comm, limit_s, "starting", [&comm, host = comm.host_name()](double stuck_s, const std::string& what) {
        return std::pair{4, "burn-in: rank " + std::to_string(comm.rank()) + " (" + host +
                                "): FAIL: hung: no progress for " + format("%.0f s", stuck_s) +
                                " while not waiting for any peer (" + what +
                                "); its GPU or host is stuck (half of comm.timeout_s)"};
      });
}

// One fabric + storage measurement.
struct HealthPoint {
  double t_s = 0;                     // since the burn-in started
  double busbw_gbs = 0;               // all-reduce busbw (0 = not measured)
  bool fabric_exact = true;           // the all-reduce's data check
  double write_gbs = 0;               // every rank's checkpoint write at once (0 = not measured)
  std::vector<double> rank_write_gbs; // each rank's own rate
  double checkpoint_wait_s = 0;       // waited for the run's checkpoint in flight before measuring
  std::string write_failure;          // the write check failed (or, disk_full, was skipped): why
  bool write_disk_full = false;
};

// Test hook: TRAINBENCH_TEST_HEALTH_GBS fixes every fabric and storage rate
// a health measurement took at that many GB/s; the collective and the write
// still run and are checked. The tests' clean burn-ins must PASS, and two
// oversubscribed ranks' sub-millisecond measurements on a loaded CI machine
// read 4.35 then 0.007 GB/s: a "degradation" of the machine's load, not of
// the fabric. A list ("5,5,5,1") gives the k-th measurement the k-th
// figure, and the later ones the last: a drop the verdict must find.
const std::vector<double>& test_health_gbs() {
  static const std::vector<double> figures = [] {
    std::vector<double> parsed;
    const char* value = std::getenv("TRAINBENCH_TEST_HEALTH_GBS");
    for (const char* at = value; at != nullptr && *at != '\0';) {
      char* end = nullptr;
      parsed.push_back(std::strtod(at, &end));
      if (end == at) break;
      at = *end == ',' ? end + 1 : end;
    }
    return parsed;
  }();
  return figures;
}

void fix_rates_for_tests(HealthPoint& point, size_t index) {
  const std::vector<double>& figures = test_health_gbs();
  if (figures.empty()) return;
  const double gbs = figures[std::min(index, figures.size() - 1)];
  if (!(gbs > 0)) return;
  for (double* rate : {&point.busbw_gbs, &point.write_gbs})
    if (*rate > 0) *rate = gbs;
  for (double& rate : point.rank_write_gbs)
    if (rate > 0) rate = gbs;
}

class BurninMonitor final : public RunExtension {
 public:
  BurninMonitor(double duration_s, const std::optional<BaselineFigures>& baseline)
      : duration_s_(duration_s), baseline_(baseline) {}

  void begin(const RunContext& context) override {
    config_ = &context.config;
    engine_ = &context.engine;
    comm_ = &context.comm;
    checkpointer_ = context.checkpointer;
    const size_t world = static_cast<size_t>(comm_->world_size());
    start_failures_.assign(world, {});
    golden_mismatches_.assign(world, {});
    golden_first_mismatch_.assign(world, "");
    loss_step_.assign(world, 0);
    comm_->set_timeout(config_->comm.timeout_s);
    if (baseline_) check_baseline_matches(context);
    comm_->set_context("burn-in: golden step at the start");
    if (comm_->rank() == 0) std::fprintf(stdout, "burn-in: %s; golden step, GPU health, fabric and storage at the start...\n",
                                         describe_duration().c_str());
    std::fflush(stdout);
    // This rank's GPU as the driver lists it, asked once: the golden step's
    // grouping and the verdict's identity both read it.
    const std::optional<GpuInfo> gpu = own_gpu(context.gpu_index);
    gather_numerics(context, gpu);
    golden_step_at_start();
    identify_gpu(context, gpu);
    start_ = Clock::now();
    measure_health();
    last_health_ = Clock::now();
    watchdog_ = watch_for_a_hang(*comm_, 0.5 * config_->comm.timeout_s);
    watchdog_->progress("step 1");
    // A wait for the checkpoint writers is bounded by checkpoint.timeout_s,
    // past which the checkpoint fails and the storage check with it (a
    // result is written): a slow write that moved was called a hung rank,
    // the job ended without one.
    if (checkpointer_ != nullptr)
      checkpointer_->set_writer_wait_hook([this](bool waiting) {
        writer_wait_ = waiting;
        update_watch();
      });
  }

  std::string steps_said() const override { return "until --duration " + format_double(duration_s_) + "s"; }

  // Compared across ranks before the job starts: rank 0 alone decides when
  // it stops, and a baseline on some ranks only put them in collectives the
  // others never entered (a hang to comm.timeout_s, or MPI_ERR_TRUNCATE);
  // another baseline on another rank was ignored. Its figures too: one path
  // may hold other files on other nodes.
  std::string job_options() const override {
    std::string options = "--duration " + format_double(duration_s_) + "s";
    if (baseline_)
      options += " --baseline " + baseline_->path + " (tokens/s " + format_double(baseline_->tokens_per_s) +
                 ", busbw " + format_double(baseline_->busbw_gbs) + " GB/s, write " +
                 format_double(baseline_->write_gbs) + " GB/s)";
    return options;
  }

  bool after_step(const StepRecord& step) override {
    watchdog_->progress("burn-in checks after step " + std::to_string(step.step));
    ++steps_;
    if (!step.warmup) comm_s_since_health_.push_back(step.comm_s);
    int flags = 0;
    if (!std::isfinite(step.loss)) flags |= kLossNotFinite;
    if (!std::isfinite(step.grad_norm)) flags |= kGradNormNotFinite;
    if (comm_->rank() == 0) {
      if (seconds_since(start_) >= duration_s_) flags |= kStop;
      if (std::chrono::duration<double>(Clock::now() - last_health_).count() >= config_->burnin.health_every_s)
        flags |= kHealthDue;
    }
    comm_->set_context("burn-in: after step " + std::to_string(step.step));
    const std::vector<double> all = gather_from_ranks(*comm_, static_cast<double>(flags));
    bool stop = (static_cast<int>(all[0]) & kStop) != 0;
    // A rank's loss is its own; the gradient norm is all-reduced, the same
    // on every rank, and tells no GPU from another (one shared reason
    // string, overwritten rank by rank, named the wrong rank's cause, and
    // every GPU failed for one rank's gradients).
    for (size_t r = 0; r < all.size(); ++r) {
      const int f = static_cast<int>(all[r]);
      if ((f & kLossNotFinite) != 0 && loss_step_[r] == 0) loss_step_[r] = step.step;
      if ((f & kGradNormNotFinite) != 0 && grad_norm_step_ == 0) grad_norm_step_ = step.step;
      if ((f & (kLossNotFinite | kGradNormNotFinite)) != 0) stop = true;  // nothing after it means anything
    }
    if (step.step % config_->burnin.golden_every == 0) golden_check(step.step);
    if (!stop && (static_cast<int>(all[0]) & kHealthDue)) {
      watchdog_->progress("fabric and storage measurement after step " + std::to_string(step.step));
      measure_health();
      last_health_ = Clock::now();
    }
    if (comm_->rank() == 0) print_progress(step);
    watchdog_->progress("step " + std::to_string(step.step + 1));
    if (stop) {
      watch_wanted_ = false;  // the run drains its checkpoint; finish() re-arms
      update_watch();
    }
    return !stop;
  }

  int finish(const RunOutcome& outcome, nlohmann::json* result) override {
    elapsed_s_ = seconds_since(start_);
    watch_wanted_ = true;
    update_watch();
    if (watchdog_) watchdog_->progress("the verdict");
    comm_->set_context("burn-in: the verdict");
    HealthSampler::Summary health;
    if (sampler_) health = sampler_->stop(10.0);
    build_verdict(outcome, health);
    // Every rank computed the same verdict from gathered figures but for its
    // own drift figure: rank 0's word is the job's.
    double passed = verdict_.passed() ? 1.0 : 0.0;
    comm_->broadcast(&passed, sizeof(passed), 0);
    if (result != nullptr) {
      (*result)["burnin"] = to_json(outcome);
      // The steps it trained, not the 2^40 it ran under to reach its
      // duration (burnin_command.cpp): the config says what the job was.
      (*result)["config"]["train"]["steps"] = outcome.steps.size();
    }
    return passed != 0 ? 0 : 4;
  }

  // A GPU call that failed mid-run (an uncorrectable ECC error, a GPU off
  // the bus) is what a burn-in is for: FAIL, as a hung rank is, not an
  // environment error that reads like the tool's.
  std::string device_failure_verdict(const Communicator& comm, const std::string& error) const override {
    const std::string gpu = !gpu_identity_.empty() ? ", " + gpu_identity_
                            : gpu_index_ >= 0      ? ", GPU " + std::to_string(gpu_index_)
                                                   : std::string();
    return "burn-in: rank " + std::to_string(comm.rank()) + " (" + comm.host_name() + gpu + "): FAIL: " + error;
  }

  // The threads go before the communicator they watch.
  void end() override {
    // The checkpointer outlives this scope (declared before it in run_cli).
    if (checkpointer_ != nullptr) checkpointer_->set_writer_wait_hook(nullptr);
    watchdog_.reset();
    if (sampler_) sampler_->stop(10.0);
  }

  void print(FILE* out) const override {
    std::fputs(verdict_table(verdict_).c_str(), out);
    std::fflush(out);
    const auto report = [](const VerdictRow& row) {
      for (const std::string& why : row.failures)
        std::fprintf(stderr, "trainbench: burn-in: %s%s: FAIL: %s\n", row.name.c_str(),
                     row.host.empty() ? "" : (" (" + row.host + ")").c_str(), why.c_str());
    };
    for (const VerdictRow& row : verdict_.gpus) report(row);
    for (const VerdictRow& row : verdict_.nodes) report(row);
    report(verdict_.job);
  }

 private:
  // --baseline's ranks, hardware and attention against this job's: every
  // rank stops alike (a user error) where they differ.
  void check_baseline_matches(const RunContext& context) {
    const size_t world = static_cast<size_t>(comm_->world_size());
    // The launcher's task count, read before MPI was up, may be missing
    // (a PMIx launcher that exports none reads as 1 rank): the job's own
    // size, alike on every rank, settles it.
    if (const std::string other = baseline_ranks_difference(*baseline_, static_cast<int64_t>(world)); !other.empty())
      throw CommandError{kExitUserError, "--baseline " + baseline_->path + ": " + other};
    if (const Environment* env = context.environment; env != nullptr) {
      // The hosts are the job's, alike on every rank; the CPU model is each
      // rank's own: the first rank to differ speaks, and every rank stops.
      const std::string gpu_name = env->host_gpus.empty() ? "" : env->host_gpus.front().gpu_name;
      comm_->set_context("burn-in: the baseline's hardware");
      const RankReason other = first_reason_over_ranks(
          *comm_, baseline_hardware_difference(*baseline_, static_cast<int64_t>(env->host_gpus.size()), gpu_name,
                                               env->cpu_model, env->compute_backend));
      if (other.rank >= 0)
        throw CommandError{kExitUserError, "--baseline " + baseline_->path + ": " +
                                               (world > 1 ? "rank " + std::to_string(other.rank) + ": " : "") +
                                               other.reason};
    }
    // Only the engine knows which attention it runs; every rank stops alike.
    comm_->set_context("burn-in: the baseline's attention");
    const AttentionInfo attention = engine_->attention();
    const RankReason differs =
        first_reason_over_ranks(*comm_, baseline_attention_difference(*baseline_, attention.kernel, attention.detail));
    if (differs.rank >= 0)
      throw CommandError{kExitUserError, "--baseline " + baseline_->path + ": " +
                                             (world > 1 ? "rank " + std::to_string(differs.rank) + ": " : "") +
                                             differs.reason};
  }

  // The golden step computed twice at the start and compared over ranks:
  // the reference of every later golden check.
  void golden_step_at_start() {
    const size_t world = static_cast<size_t>(comm_->world_size());
    // The golden weights kept on the host up to 1 GiB (made again at every
    // check above that: host memory is shared by every rank of a node).
    const int64_t parameters = engine_->layout().total_params();
    if (parameters * static_cast<int64_t>(sizeof(float)) <= (1LL << 30)) {
      std::vector<float> saved(static_cast<size_t>(parameters));
      engine_->get_parameters(saved.data());
      engine_->init_parameters(golden_seed());
      golden_weights_.resize(static_cast<size_t>(parameters));
      engine_->get_parameters(golden_weights_.data());
      engine_->set_parameters(saved.data());
    }
    // Twice: a GPU (or an engine) that cannot repeat itself is caught before
    // anything is compared with it. The first makes its weights itself.
    const GoldenValue first = compute_golden_step(*engine_, golden_seed(), false);
    const GoldenValue second = compute_golden_step(*engine_, golden_seed(), false, golden_weights());
    const std::vector<GoldenValue> values = gather_golden(first);
    const std::vector<double> repeatable = gather_from_ranks(*comm_, first == second ? 1.0 : 0.0);
    GoldenStart start = judge_golden_start(values, numerics_);
    golden_reference_ = std::move(start.reference);
    golden_compared_ = std::move(start.compared);
    for (size_t r = 0; r < world; ++r) {
      if (repeatable[r] == 0)
        start_failures_[r].push_back("golden step not reproducible: two computations at the start differ "
                                     "(a faulty GPU, or kernels that are not deterministic)");
      for (std::string& why : start.failures[r]) start_failures_[r].push_back(std::move(why));
    }
  }

  // What a rank's golden step is compared with other ranks' by
  // (judge_golden_start): its engine, and the CPU engine's threads or the
  // GPU model. Every rank's, on every rank.
  void gather_numerics(const RunContext& context, const std::optional<GpuInfo>& gpu) {
    std::string mine = std::string(engine_->backend_name()) + " engine";
    if (const int threads = engine_->cpu_threads(); threads > 0) {
      // OpenBLAS picks its kernels by the CPU (AVX2, AVX-512): another model sums otherwise.
      mine += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
      if (context.environment != nullptr && !context.environment->cpu_model.empty())
        mine += " on " + context.environment->cpu_model;
    } else if (gpu) {
      mine += " on " + gpu->name;
    }
    numerics_ = strings_of_ranks(*comm_, mine);
  }

  // Which physical GPU this rank trains on, for its row and its verdict
  // (an index depends on CUDA_VISIBLE_DEVICES, a rack's technician finds a
  // card by its PCI bus id or UUID, as nvidia-smi and DCGM name it), and
  // its health sampler.
  void identify_gpu(const RunContext& context, const std::optional<GpuInfo>& gpu) {
    gpu_index_ = context.gpu_index;
    if (gpu && !gpu->pci_bus_id.empty())
      gpu_identity_ = "GPU " + std::to_string(gpu->index) + " " + gpu->pci_bus_id + " " + gpu->uuid;
    gpu_identities_ = strings_of_ranks(*comm_, gpu_identity_);  // a collective, on every engine
    if (context.gpu_index >= 0) {
      std::unique_ptr<GpuHealthProbe> probe = open_gpu_health(context.gpu_index, &nvml_why_not_);
      if (probe) {
        gpu_name_ = probe->gpu_name();
        sampler_ = std::make_unique<HealthSampler>(std::move(probe), config_->burnin.nvml_every_s);
      }
    } else {
      nvml_why_not_ = "the cpu engine: no GPU to sample";
    }
  }

  // The GPU of CUDA index `gpu_index` in the driver's list; none on the cpu
  // engine (-1) or where the driver does not list it.
  static std::optional<GpuInfo> own_gpu(int gpu_index) {
    if (gpu_index < 0) return std::nullopt;
    for (const GpuInfo& gpu : query_gpus().gpus)
      if (gpu.index == gpu_index) return gpu;
    return std::nullopt;
  }

  uint64_t golden_seed() const { return static_cast<uint64_t>(config_->train.seed); }
  const float* golden_weights() const { return golden_weights_.empty() ? nullptr : golden_weights_.data(); }

  // Rank 0, about 20 lines per run (every 5 to 60 s): where the burn-in is.
  void print_progress(const StepRecord& step) {
    const double every_s = std::clamp(duration_s_ / 20, 5.0, 60.0);
    const double elapsed = seconds_since(start_);
    if (elapsed - last_progress_s_ < every_s) return;
    last_progress_s_ = elapsed;
    int64_t mismatches = 0;
    for (const std::vector<int64_t>& steps : golden_mismatches_) mismatches += static_cast<int64_t>(steps.size());
    const double tokens_per_step = static_cast<double>(config_->train.micro_batch * config_->train.grad_accum *
                                                       config_->model.seq_len * comm_->world_size());
    std::fprintf(stdout, "burn-in %6.0f/%.0f s  step %7ld  tokens/s %10s  golden checks %ld, mismatches %ld\n", elapsed,
                 duration_s_, static_cast<long>(step.step),
                 human_count(step.step_s > 0 ? tokens_per_step / step.step_s : 0.0).c_str(),
                 static_cast<long>(golden_checks_), static_cast<long>(mismatches));
    std::fflush(stdout);
  }

  std::string describe_duration() const { return "duration " + format("%.0f s", duration_s_); }

  // Every rank's golden value, on every rank: three exact doubles each (a
  // double carries 53 bits, so the 64-bit checksum goes in two halves).
  std::vector<GoldenValue> gather_golden(const GoldenValue& mine) {
    const std::vector<double> loss = gather_from_ranks(*comm_, static_cast<double>(mine.loss_bits));
    const std::vector<double> low = gather_from_ranks(*comm_, static_cast<double>(mine.gradient_checksum & 0xffffffffULL));
    const std::vector<double> high = gather_from_ranks(*comm_, static_cast<double>(mine.gradient_checksum >> 32));
    std::vector<GoldenValue> values(loss.size());
    for (size_t r = 0; r < values.size(); ++r) {
      values[r].loss_bits = static_cast<uint32_t>(loss[r]);
      values[r].gradient_checksum = (static_cast<uint64_t>(high[r]) << 32) | static_cast<uint64_t>(low[r]);
    }
    return values;
  }

  void golden_check(int64_t step) {
    comm_->set_context("burn-in: golden step at step " + std::to_string(step));
    const BurninSection& b = config_->burnin;
    const bool flip = b.inject_bitflip_step > 0 && step >= b.inject_bitflip_step && !bitflip_done_ &&
                      comm_->rank() == b.inject_bitflip_rank;
    if (b.inject_bitflip_step > 0 && step >= b.inject_bitflip_step) bitflip_done_ = true;
    const std::vector<GoldenValue> values =
        gather_golden(compute_golden_step(*engine_, golden_seed(), flip, golden_weights()));
    ++golden_checks_;
    for (size_t r = 0; r < values.size(); ++r) {
      if (values[r] == golden_reference_[r]) continue;
      if (golden_mismatches_[r].empty())
        golden_first_mismatch_[r] = describe_golden_difference(values[r], golden_reference_[r]);
      golden_mismatches_[r].push_back(step);
    }
  }

  // The fabric and storage measurements (collective).
  void measure_health() {
    comm_->set_context("burn-in: fabric and storage measurement");
    HealthPoint point;
    point.t_s = seconds_since(start_);
    // A checkpoint still being written would share the disk with the write
    // measurement and read as degraded storage, and its writer threads the
    // host with the fabric's (the first measurement, before step 1, has both
    // to itself): it is finished before either is measured.
    if (checkpointer_ != nullptr) point.checkpoint_wait_s = checkpointer_->wait_until_idle();
    const int world = comm_->world_size();
    const int64_t gradient_bytes = engine_->layout().trainable_params() * 4;
    // A short bench comm: the all-reduce of one gradient bucket, on the
    // GPU for NCCL where it has room beside the run (agreed over ranks; the
    // harness runs reduce-scatter and all-gather too, a bucket and 1/n more).
    // Which of the two ways is chosen at the first measurement and kept: the
    // drift and baseline checks compare the points, and the other way
    // measures another thing (every bucket, from the run's own comm_s). A
    // later point without room measures nothing (no busbw: not compared).
    const int64_t bucket = static_cast<int64_t>(config_->comm.bucket_mb * (1 << 20));
    const int64_t bytes = std::max<int64_t>(4096, std::min(bucket, gradient_bytes)) / 4 * 4;
    const bool room = world > 1 && device_bench_room_over_ranks(*comm_, bytes + bytes / world).empty();
    if (!fabric_by_harness_.has_value()) fabric_by_harness_ = room;
    if (*fabric_by_harness_ && room) {
      // nccl-tests' defaults (-w 5 -n 20): 5 timed iterations of a bucket
      // over a fast fabric took a few milliseconds, one hiccup's worth.
      CollectiveBenchOptions options;
      options.warmup_iters = 5;
      options.iters = 20;
      options.raw_path = false;  // only the trainer's path is read: no call without the communicator's timeout
      for (const CollectiveBenchResult& r : bench_collectives(*comm_, {bytes}, options))
        if (r.collective == "all_reduce" && r.path == "bucketed") {  // the trainer's own path
          point.busbw_gbs = r.busbw_gbs;
          point.fabric_exact = r.check_ok;
        }
    } else if (world > 1 && !*fabric_by_harness_) {
      // No room on a GPU for even one bucket at the first measurement: the
      // training's own gradient all-reduces since the last measurement, the
      // slowest rank's median (bandwidth only: no data check).
      const double rank_comm_s = median(comm_s_since_health_);
      const double comm_s = max_over_ranks(*comm_, rank_comm_s);
      if (comm_s > 0)
        point.busbw_gbs = static_cast<double>(gradient_bytes) * bus_bandwidth_factor("all_reduce", world) / comm_s * 1e-9;
    }
    comm_s_since_health_.clear();
    if (checkpointer_ != nullptr) {
      const int64_t state_bytes = state_bytes_per_rank(*engine_, *config_, comm_->world_size());
      // Up to 256 MiB per rank: long enough to see the disk, short enough to repeat.
      const WriteRate rate = measure_write_rate(*config_, *comm_, checkpointer_->dir(), std::min<int64_t>(state_bytes, 256LL << 20));
      point.write_gbs = rate.job_gbs;
      point.rank_write_gbs = gather_from_ranks(*comm_, rate.rank_gbs);
      point.write_failure = rate.failure;
      point.write_disk_full = rate.disk_full;
    }
    fix_rates_for_tests(point, health_.size());
    health_.push_back(point);
  }

  // "4.73 GB/s at the start, 3.28 GB/s at the last measurement", or over
  // the first and the last three.
  static std::string ends_text(const JudgedEnds& ends) {
    // One measurement (a run shorter than burnin.health_every_s) read as
    // "X at the start, X at the last measurement": a comparison never made.
    if (ends.count == 1)
      return format("%.3g GB/s", ends.start) + ", measured once, so not compared";
    return format("%.3g GB/s", ends.start) + " " + ends.start_words() + ", " + format("%.3g GB/s", ends.end) + " " +
           ends.end_words();
  }

  // A figure's measurements in order, those made (> 0).
  template <typename Getter>
  std::vector<double> measurements_of(Getter figure) const {
    std::vector<double> made;
    for (const HealthPoint& p : health_)
      if (figure(p) > 0) made.push_back(figure(p));
    return made;
  }
  // The ends a figure is judged between (judged_ends), and its median.
  template <typename Getter>
  JudgedEnds ends_of(Getter figure) const {
    return judged_ends(measurements_of(figure));
  }
  template <typename Getter>
  double median_of(Getter figure) const {
    return median(measurements_of(figure));
  }

  void build_verdict(const RunOutcome& outcome, const HealthSampler::Summary& health) {
    // From the run's records, as its result's own_s: after_step never sees
    // the step a failed check ended the run on, whose time (a rank that
    // waited out a divergence check: +48%) made the verdict name another
    // straggler than the result.
    step_s_.clear();
    own_step_s_.clear();
    for (const StepRecord& s : outcome.steps)
      if (!s.warmup) {
        step_s_.push_back(s.step_s);
        own_step_s_.push_back(s.step_s - s.comm_exposed_s);
      }
    const std::vector<double> own = gather_from_ranks(*comm_, median(own_step_s_));
    const RanksHealth ranks_health = gather_health(health);
    verdict_ = Verdict{};
    for (size_t r = 0; r < static_cast<size_t>(comm_->world_size()); ++r)
      verdict_.gpus.push_back(judge_gpu(outcome, r, own, ranks_health));
    judge_nodes(outcome);
    judge_job(outcome);
  }

  static std::string host_of(const RunOutcome& outcome, size_t r) {
    return r < outcome.summary.ranks.size() ? outcome.summary.ranks[r].host : std::string();
  }

  // Every rank's GPU health, gathered to every rank (-1: not sampled).
  struct RanksHealth {
    std::vector<double> samples, temperature, power, sm_clock, reasons, hardware, software, ecc_corrected,
        ecc_uncorrected, pcie, hung;
  };
  RanksHealth gather_health(const HealthSampler::Summary& health) const {
    const bool sampled = sampler_ != nullptr;
    const auto gathered = [&](double value) { return gather_from_ranks(*comm_, sampled ? value : -1.0); };
    RanksHealth h;
    h.samples = gathered(static_cast<double>(health.samples));
    h.temperature = gathered(health.max_temperature_c);
    h.power = gathered(health.max_power_w);
    h.sm_clock = gathered(health.min_sm_clock_mhz);
    h.reasons = gathered(static_cast<double>(health.reasons_seen));
    h.hardware = gathered(static_cast<double>(health.hardware_slowdown_samples));
    h.software = gathered(static_cast<double>(health.software_cap_samples));
    h.ecc_corrected = gathered(static_cast<double>(health.ecc_corrected));
    h.ecc_uncorrected = gathered(static_cast<double>(health.ecc_uncorrected));
    h.pcie = gathered(static_cast<double>(health.pcie_replays));
    h.hung = gathered(health.hung ? 1.0 : 0.0);
    return h;
  }

  // Rank r's row: its GPU's numerics (golden step, divergence, loss), its
  // pace, and its health.
  VerdictRow judge_gpu(const RunOutcome& outcome, size_t r, const std::vector<double>& own,
                       const RanksHealth& health) const {
    const BurninSection& b = config_->burnin;
    const size_t world = static_cast<size_t>(comm_->world_size());
    VerdictRow row{"rank " + std::to_string(r), host_of(outcome, r)};
    const bool identified = r < gpu_identities_.size() && !gpu_identities_[r].empty();
    if (identified) row.notes.push_back(gpu_identities_[r]);
    for (const std::string& why : start_failures_[r]) row.fail(why);
    if (!golden_mismatches_[r].empty()) {
      std::string steps;
      for (size_t i = 0; i < golden_mismatches_[r].size() && i < 5; ++i)
        steps += (i ? ", " : "") + std::to_string(golden_mismatches_[r][i]);
      row.fail("silent data corruption: golden step differs from the reference at step " + steps +
               (golden_mismatches_[r].size() > 5 ? ", ..." : "") + " (" + std::to_string(golden_mismatches_[r].size()) +
               " of " + std::to_string(golden_checks_) + " checks; first: " + golden_first_mismatch_[r] + ")");
    }
    // The ranks outside the majority's parameters (the job's ranks_consistent
    // names the step): the GPU that computed them, not the job alone.
    if (std::find(outcome.diverged_ranks.begin(), outcome.diverged_ranks.end(), static_cast<int>(r)) !=
        outcome.diverged_ranks.end())
      row.fail("numerics: its parameters diverged from those the other ranks agree on (see the job's "
               "ranks_consistent)");
    if (loss_step_[r] > 0) row.fail("numerics: loss not finite at step " + std::to_string(loss_step_[r]));
    // One rank: the norm is its gradients' alone.
    if (world == 1 && grad_norm_step_ > 0)
      row.fail("numerics: gradient norm not finite at step " + std::to_string(grad_norm_step_));
    // A median of a handful of steps says nothing about "consistently slower".
    const std::string straggler =
        own_step_s_.size() >= kStragglerSteps ? straggler_finding(own, r, b.straggler_pct) : "";
    if (!straggler.empty()) row.fail(straggler);
    // A busy neighbour on the rank's cores slows it as a failing part would.
    const double cpu_wait = r < outcome.summary.ranks.size() ? outcome.summary.ranks[r].cpu_wait_share : -1;
    if (cpu_wait >= kCpuWaitNotedShare)
      row.notes.push_back("host: its threads " + cpu_wait_words(cpu_wait) +
                          " (another process on its cores, or more threads than its CPUs): its step times measure "
                          "that contention too");
    // A rank that no other computes alike agreed with no one: said, not failed.
    const std::string start_note =
        !start_failures_[r].empty() ? ""
        : world > 1 && !golden_compared_[r]
            ? "no other rank computes as it does (" + numerics_[r] + "), so compared with its own at the start, "
            : "agreed at the start, ";
    row.notes.push_back("golden step: " + start_note +
                        (golden_checks_ == 0
                             ? "no check since (every " + std::to_string(b.golden_every) + " steps: none came)"
                             : "bit-identical in " + std::to_string(golden_checks_ - golden_mismatches_[r].size()) +
                                   " of " + std::to_string(golden_checks_) + " checks since (every " +
                                   std::to_string(b.golden_every) + " steps)"));
    row.notes.push_back(own[r] > 0 ? "own step time " + format("%.2f ms", 1e3 * own[r]) +
                                          " (median, waits for peers left out)"
                                    : std::string("own step time: not measured (no step after warm-up)"));
    row.figures = {{"own_step_s", own[r] > 0 ? nlohmann::json(own[r]) : nlohmann::json()},
                   {"cpu_wait_share", cpu_wait >= 0 ? nlohmann::json(cpu_wait) : nlohmann::json()},
                   {"golden_checks", golden_checks_},
                   {"golden_mismatch_steps", golden_mismatches_[r]}};
    // After the figures are made, not before: they replaced it, and no row
    // of a CUDA burn-in had the card's identity its docs promise.
    if (identified) row.figures["gpu_id"] = gpu_identities_[r];
    judge_gpu_health(health, r, row);
    return row;
  }

  void judge_gpu_health(const RanksHealth& h, size_t r, VerdictRow& row) const {
    if (h.samples[r] > 0) {
      if (h.ecc_uncorrected[r] > 0)
        row.fail("GPU: " + format("%.0f", h.ecc_uncorrected[r]) + " uncorrected ECC error(s) during the run");
      if (h.hardware[r] > 0) {
        char bits[32];
        std::snprintf(bits, sizeof(bits), "0x%llx", static_cast<unsigned long long>(h.reasons[r]));
        row.fail("GPU: hardware slowdown (clock-event reasons seen " + std::string(bits) + ") in " +
                 format("%.0f", h.hardware[r]) + " of " + format("%.0f", h.samples[r]) + " samples");
      }
      std::string line = "GPU: " + format("%.0f samples", h.samples[r]) + ", max " +
                         format("%.0f C", h.temperature[r]) + ", max " + format("%.0f W", h.power[r]) +
                         ", SM clock min " + format("%.0f MHz", h.sm_clock[r]);
      if (h.software[r] > 0) line += ", power/thermal cap in " + format("%.0f samples", h.software[r]);
      line += h.ecc_corrected[r] >= 0 ? ", ECC corrected +" + format("%.0f", h.ecc_corrected[r]) : ", ECC not reported";
      if (h.pcie[r] >= 0) line += ", PCIe replays +" + format("%.0f", h.pcie[r]);
      row.notes.push_back(line);
      row.figures["gpu"] = {{"samples", h.samples[r]},
                            {"max_temperature_c", h.temperature[r]},
                            {"max_power_w", h.power[r]},
                            {"min_sm_clock_mhz", h.sm_clock[r]},
                            {"clock_event_reasons_seen", static_cast<int64_t>(h.reasons[r])},
                            {"hardware_slowdown_samples", h.hardware[r]},
                            {"power_or_thermal_cap_samples", h.software[r]},
                            {"ecc_corrected_delta", h.ecc_corrected[r]},
                            {"ecc_uncorrected_delta", h.ecc_uncorrected[r]},
                            {"pcie_replay_delta", h.pcie[r]}};
    } else {
      // Rank 0's reason, which a job of alike nodes shares.
      row.notes.push_back("GPU health: not sampled (" + nvml_why_not_ + ")");
    }
    if (h.hung[r] > 0) row.fail("GPU: NVML sampling hung (no answer within 10 s at the end)");
  }

  // Nodes: their GPUs, and their storage.
  void judge_nodes(const RunOutcome& outcome) {
    const BurninSection& b = config_->burnin;
    for (size_t r = 0; r < verdict_.gpus.size(); ++r) {
      const std::string host = host_of(outcome, r);
      VerdictRow* node = nullptr;
      for (VerdictRow& n : verdict_.nodes)
        if (n.host == host) node = &n;
      if (node == nullptr) {
        verdict_.nodes.push_back(VerdictRow{"node", host});
        node = &verdict_.nodes.back();
        node->figures["ranks"] = nlohmann::json::array();
      }
      node->figures["ranks"].push_back(r);
      if (!verdict_.gpus[r].passed) node->fail("rank " + std::to_string(r) + " failed");
    }
    for (VerdictRow& node : verdict_.nodes) {
      // The node's write rate at each measurement: its slowest rank's.
      std::vector<double> node_write;
      for (const HealthPoint& p : health_) {
        if (p.rank_write_gbs.empty() || !p.write_failure.empty()) continue;
        double slowest = 0;
        for (const auto& r : node.figures["ranks"]) {
          const double v = p.rank_write_gbs[r.get<size_t>()];
          if (v > 0) slowest = slowest == 0 ? v : std::min(slowest, v);  // 0: that rank measured nothing
        }
        if (slowest > 0) node_write.push_back(slowest);
      }
      const JudgedEnds write = judged_ends(node_write);
      if (write.start > 0) {
        const std::string drop =
            degradation_finding("storage: checkpoint write", write.start, write.end, b.degrade_pct, "GB/s");
        if (!drop.empty()) node.fail(drop + write.finding_words());
        node.notes.push_back("checkpoint write " + ends_text(write) + " (slowest rank)");
        node.figures["write_gbs_first"] = write.start;
        node.figures["write_gbs_last"] = write.end;
        node.figures["write_gbs_judged"] = write.medians ? "median_of_" + std::to_string(kEndsOfMedians) : "single";
      } else {
        node.notes.push_back(checkpointer_ == nullptr
                                 ? "storage: not measured (checkpoints off)"
                                 : "storage: not measured (its write check failed or was skipped: see the job)");
      }
      if (node.passed) node.notes.insert(node.notes.begin(), "all its GPUs passed");
    }
  }

  // The job: the run's own checks, fabric, storage, drift, numerics, baseline.
  void judge_job(const RunOutcome& outcome) {
    VerdictRow& job = verdict_.job;
    for (const Check& c : outcome.checks) {
      if (!c.passed) job.fail(c.name + ": " + c.detail);
      else if (c.name == "ranks_consistent") job.notes.push_back(c.detail);
    }
    // The run's own count: a step that a failed checkpoint ended is trained
    // and recorded, but its after_step (which counts steps_) never ran.
    job.notes.push_back(std::to_string(outcome.steps.size()) + " steps in " + format("%.1f s", elapsed_s_) + ", tokens/s " +
                        (outcome.summary.tokens_per_s > 0 ? human_count(outcome.summary.tokens_per_s)
                                                          : std::string("not measured")));
    if (elapsed_s_ + 1e-9 < duration_s_ && !outcome.steps.empty())
      job.notes.push_back("ended before the duration (" + format("%.0f s", duration_s_) + "): a check stopped it");
    judge_fabric(job);
    judge_storage_writes(job);
    judge_drift(outcome, job);
    if (own_step_s_.size() < kStragglerSteps && comm_->world_size() > 1)
      job.notes.push_back("stragglers: not judged (fewer than " + std::to_string(kStragglerSteps) + " measured steps)");
    judge_numerics_and_measurement(outcome, job);
    if (baseline_) judge_against_baseline(outcome, job);
  }

  void judge_fabric(VerdictRow& job) const {
    const JudgedEnds busbw = ends_of([](const HealthPoint& p) { return p.busbw_gbs; });
    for (const HealthPoint& p : health_)
      if (!p.fabric_exact) {
        job.fail("fabric: the all-reduce returned wrong values (measurement at " + format("%.0f s", p.t_s) + ")");
        break;
      }
    if (busbw.start > 0) {
      const std::string drop =
          degradation_finding("fabric: all-reduce busbw", busbw.start, busbw.end, config_->burnin.degrade_pct, "GB/s");
      if (!drop.empty()) job.fail(drop + busbw.finding_words());
      job.notes.push_back("busbw " + ends_text(busbw));
    } else {
      job.notes.push_back(comm_->world_size() > 1
                              ? "fabric: not measured yet (needs a measurement after training steps)"
                              : "fabric: one rank, nothing to measure");
    }
  }

  void judge_storage_writes(VerdictRow& job) const {
    const JudgedEnds job_write = ends_of([](const HealthPoint& p) { return p.write_gbs; });
    if (job_write.start > 0)
      job.notes.push_back("checkpoint write " + ends_text(job_write) + " (all ranks at once)");
    // A write check that failed is a storage finding (the first one said);
    // a full disk under checkpoint.on_full=skip is a measurement skipped.
    for (const HealthPoint& p : health_) {
      if (p.write_failure.empty()) continue;
      const std::string when = " (measurement at " + format("%.0f s", p.t_s) + "): " + p.write_failure;
      if (p.write_disk_full && config_->checkpoint.on_full == "skip") {
        job.notes.push_back("storage: the write check was skipped, disk full" + when + "; checkpoint.on_full=skip");
      } else {
        job.fail("storage: the checkpoint write check failed" + when);
        break;
      }
    }
  }

  void judge_drift(const RunOutcome& outcome, VerdictRow& job) {
    drift_ = measure_drift(step_s_, static_cast<double>(outcome.summary.global_tokens_per_step));
    if (!drift_.judged) {
      job.notes.push_back("drift: not judged (fewer than " + std::to_string(kDriftMinSteps) + " measured steps)");
      return;
    }
    const std::string drop = degradation_finding("drift: tokens/s", drift_.first_tokens_per_s,
                                                 drift_.last_tokens_per_s, config_->burnin.degrade_pct, "");
    if (!drop.empty()) job.fail(drop + " between the first and the last tenth of the run");
    job.notes.push_back("tokens/s " + human_count(drift_.first_tokens_per_s) + " in the first tenth, " +
                        human_count(drift_.last_tokens_per_s) + " in the last");
  }

  void judge_numerics_and_measurement(const RunOutcome& outcome, VerdictRow& job) const {
    // A burn-in that measured nothing has shown nothing: no tokens/s to hold
    // against a baseline or a drift, whatever else passed.
    // (When a failure stopped the run, that failure is the finding, above,
    // as is a GPU's non-finite loss or gradient norm in its row.)
    const bool a_loss_failed = std::any_of(loss_step_.begin(), loss_step_.end(), [](int64_t step) { return step > 0; });
    const bool numerics_failed = grad_norm_step_ > 0 || a_loss_failed;
    if (comm_->world_size() > 1 && grad_norm_step_ > 0)
      job.fail("numerics: the gradient norm, all-reduced over the ranks, was not finite at step " +
               std::to_string(grad_norm_step_) + " (it does not tell which GPU's gradients were not" +
               (a_loss_failed ? "; a GPU whose loss was not finite is named in its row)"
                              : "; no rank's loss was non-finite)"));
    if ((outcome.summary.measured_steps == 0 || !(outcome.summary.tokens_per_s > 0)) && !outcome.failure.happened() &&
        !numerics_failed)
      job.fail("no step was measured (the run ended within its " + std::to_string(config_->train.warmup_steps) +
               " warm-up steps): give --duration time for measured steps");
  }

  void judge_against_baseline(const RunOutcome& outcome, VerdictRow& job) {
    now_.tokens_per_s = outcome.summary.tokens_per_s;
    now_.busbw_gbs = median_of([](const HealthPoint& p) { return p.busbw_gbs; });
    now_.write_gbs = median_of([](const HealthPoint& p) { return p.write_gbs; });
    const std::vector<std::string> below =
        compare_with_baseline(now_, *baseline_, config_->burnin.baseline_tolerance_pct);
    for (const std::string& why : below) job.fail("below the baseline: " + why);
    if (!below.empty()) return;
    // Named: only the figures both runs measured were compared.
    std::vector<std::string> compared;
    if (now_.tokens_per_s > 0 && baseline_->tokens_per_s > 0) compared.push_back("tokens/s");
    if (now_.busbw_gbs > 0 && baseline_->busbw_gbs > 0) compared.push_back("busbw");
    if (now_.write_gbs > 0 && baseline_->write_gbs > 0) compared.push_back("write GB/s");
    std::string names;
    for (size_t i = 0; i < compared.size(); ++i)
      names += (i == 0 ? "" : i + 1 == compared.size() ? " and " : ", ") + compared[i];
    job.notes.push_back(compared.empty() ? "baseline: no figure measured in both runs to compare"
                                         : "baseline: " + names + " within the tolerance");
  }

  nlohmann::json to_json(const RunOutcome& outcome) const {
    // 0 stands for "not measured" in the figures (one rank has no fabric);
    // the result says null, as everywhere else, never a measured 0.
    const auto measured = [](double figure) { return figure > 0 ? nlohmann::json(figure) : nlohmann::json(); };
    nlohmann::json measurements = nlohmann::json::array();
    for (const HealthPoint& p : health_)
      measurements.push_back({{"t_s", p.t_s},
                              {"busbw_gbs", measured(p.busbw_gbs)},
                              {"fabric_exact", p.fabric_exact},
                              {"write_gbs", measured(p.write_gbs)},
                              {"rank_write_gbs", p.rank_write_gbs},
                              {"checkpoint_wait_s", p.checkpoint_wait_s},
                              {"write_failure", p.write_failure.empty() ? nlohmann::json() : nlohmann::json(p.write_failure)}});
    nlohmann::json j = verdict_to_json(verdict_);
    j["duration_s"] = duration_s_;
    j["elapsed_s"] = elapsed_s_;
    j["steps"] = outcome.steps.size();
    j["golden"] = {{"every", config_->burnin.golden_every}, {"checks", golden_checks_}};
    j["fabric"] = {{"busbw_gbs", measured(median_of([](const HealthPoint& p) { return p.busbw_gbs; }))}};
    j["storage"] = {{"write_gbs", measured(median_of([](const HealthPoint& p) { return p.write_gbs; }))}};
    j["health_measurements"] = measurements;
    j["drift"] = {{"judged", drift_.judged},
                  {"first_tenth_tokens_per_s", measured(drift_.first_tokens_per_s)},
                  {"last_tenth_tokens_per_s", measured(drift_.last_tokens_per_s)},
                  {"change", drift_.judged ? nlohmann::json(drift_.change) : nlohmann::json()}};
    j["gpu_health"] = {{"sampled", sampler_ != nullptr}, {"gpu", gpu_name_}, {"why_not", nvml_why_not_}};
    if (baseline_)
      j["baseline"] = {{"tolerance_pct", config_->burnin.baseline_tolerance_pct},
                       {"known", {{"tokens_per_s", measured(baseline_->tokens_per_s)},
                                  {"busbw_gbs", measured(baseline_->busbw_gbs)},
                                  {"write_gbs", measured(baseline_->write_gbs)}}},
                       {"now", {{"tokens_per_s", measured(now_.tokens_per_s)}, {"busbw_gbs", measured(now_.busbw_gbs)},
                                {"write_gbs", measured(now_.write_gbs)}}}};
    (void)outcome;
    return j;
  }

  const double duration_s_;
  const std::optional<BaselineFigures> baseline_;
  const Config* config_ = nullptr;
  TrainingEngine* engine_ = nullptr;
  Communicator* comm_ = nullptr;
  Checkpointer* checkpointer_ = nullptr;  // nullptr when checkpoints are off
  Clock::time_point start_, last_health_;
  double elapsed_s_ = 0;
  double last_progress_s_ = 0;
  int64_t steps_ = 0;
  // Found collectively, so the same on every rank, indexed by rank.
  std::vector<float> golden_weights_;  // empty above 1 GiB
  std::vector<GoldenValue> golden_reference_;
  std::vector<std::string> numerics_;  // per rank: gather_numerics
  std::vector<bool> golden_compared_;  // per rank: another rank computes alike
  std::vector<std::vector<std::string>> start_failures_;
  std::vector<std::vector<int64_t>> golden_mismatches_;
  std::vector<std::string> golden_first_mismatch_;
  std::vector<int64_t> loss_step_;  // per rank: the first step its own loss was not finite, 0 none
  int64_t grad_norm_step_ = 0;      // the first step the all-reduced gradient norm was not finite, 0 none
  int64_t golden_checks_ = 0;
  bool bitflip_done_ = false;
  // This rank's measured steps, taken from the run's records for the
  // verdict, and its comm_s since the last health measurement.
  std::vector<double> step_s_, own_step_s_, comm_s_since_health_;
  // The fabric's way, chosen at the first measurement (see measure_health):
  // the bench harness, or the run's own comm_s where the GPU had no room.
  std::optional<bool> fabric_by_harness_;
  std::vector<HealthPoint> health_;
  std::unique_ptr<HealthSampler> sampler_;
  std::unique_ptr<ProgressWatchdog> watchdog_;
  bool watch_wanted_ = true;  // off from the last step's end to finish()
  bool writer_wait_ = false;  // in a wait for the checkpoint writers
  // The hang watch runs when wanted and not in a writers' wait.
  void update_watch() {
    if (watchdog_) watchdog_->arm(watch_wanted_ && !writer_wait_);
  }
  std::string nvml_why_not_, gpu_name_;
  std::string gpu_identity_;                 // "GPU 3 00000000:19:00.0 GPU-8f0e…"; "" on the cpu engine
  std::vector<std::string> gpu_identities_;  // every rank's, from begin()
  int gpu_index_ = -1;  // the rank's CUDA device, for the verdict on a device error
  Verdict verdict_;
  Drift drift_;
  BaselineFigures now_;
};

}  // namespace

std::unique_ptr<RunExtension> make_burnin_monitor(double duration_s, const std::optional<BaselineFigures>& baseline) {
  return std::make_unique<BurninMonitor>(duration_s, baseline);
}

}  // namespace trainbench
