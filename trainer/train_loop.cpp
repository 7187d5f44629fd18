#include "trainer/train_loop.h"

#include <algorithm>  // std::max_element; std::count: the checksum the majority holds
#include <chrono>     // step timing
#include <cmath>      // std::isfinite
#include <cstdlib>    // std::getenv, std::strtoll: the test hooks
#include <limits>     // the loss-overflow test hook's infinity
#include <new>        // std::bad_alloc: a sample the loader had no memory for
#include <optional>   // the gradient sync of a multi-rank run
#include <set>        // distinct shards over ranks
#include <stdexcept>  // a device engine under a host-buffer communicator
#include <thread>     // sleep_for: burnin.inject_slow_ms
#include <utility>    // std::pair: a test hook's step and rank

#include <xxhash.h>  // XXH64: the parameters' and the golden gradients' checksums

#include "dataloader/data_error.h"    // DataError: a batch this rank cannot get
#include "dataloader/shard_loader.h"  // LoaderTimeout: no batch within data.timeout_s
#include "kernels/device_error.h"  // DeviceError: the test hook's
#include "kernels/flops.h"      // model_flops_per_token
#include "kernels/op_timing.h"  // zero_op_times: report.op_times' sums
#include "trainer/cpu_wait.h"   // CpuWaitMeter: the measured steps' wait for a CPU
#include "trainer/gradient_sync.h"
#include "trainer/report.h"  // loss_text: a loss that is not finite, in a check's message
#include "trainer/zero_optimizer.h"
#include "trainer/statistics.h" // median, quantile

namespace trainbench {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Spread spread_of(const std::vector<StepRecord>& steps, double StepRecord::*field) {
  std::vector<double> values;
  for (const StepRecord& s : steps)
    if (!s.warmup) values.push_back(s.*field);
  return Spread{median(values), quantile(values, 0.1), quantile(values, 0.9)};
}

double share_of(const std::vector<StepRecord>& steps, double StepRecord::*field) {
  double part = 0, whole = 0;
  for (const StepRecord& s : steps) {
    if (s.warmup) continue;
    part += s.*field;
    whole += s.step_s;
  }
  return whole > 0 ? part / whole : 0.0;
}
double steady_seconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// A test hook's "STEP" or "STEP@RANK" (every rank without @) from the
// environment variable `name`; {-1, -1}, arming nothing, when it is unset or
// malformed.
std::pair<int64_t, int64_t> step_at_rank_from(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return {-1, -1};
  char* end = nullptr;
  const int64_t on_step = std::strtoll(value, &end, 10);
  int64_t on_rank = -1;
  if (*end == '@') {
    char* digits = end + 1;
    on_rank = std::strtoll(digits, &end, 10);
    if (end == digits) return {-1, -1};  // "6@": no rank
  }
  if (*end != '\0' || end == value || on_step < 1) return {-1, -1};
  return {on_step, on_rank};
}
bool armed_at(const std::pair<int64_t, int64_t>& at, int64_t step, int rank) {
  return step == at.first && (at.second < 0 || at.second == rank);
}

// Test hook: TRAINBENCH_TEST_DEVICE_ERROR = "STEP" or "STEP@RANK" throws,
// at that step on that rank, the DeviceError a GPU that fails mid-run makes
// an engine call throw. Read once.
void fail_as_a_device_would(int64_t step, int rank) {
  static const std::pair<int64_t, int64_t> at = step_at_rank_from("TRAINBENCH_TEST_DEVICE_ERROR");
  if (armed_at(at, step, rank))
    throw DeviceError("TRAINBENCH_TEST_DEVICE_ERROR: cudaStreamSynchronize failed: cudaErrorECCUncorrectable "
                      "(uncorrectable ECC error encountered), as injected at step " + std::to_string(step));
}

// Test hook: TRAINBENCH_TEST_LOSS_INF = "STEP" or "STEP@RANK" makes that
// rank's loss +inf at that step, its gradients left as they are: a
// cross-entropy whose log-sum-exp overflowed on logits near the float range,
// where the softmax and so the gradients stay finite. Read once.
double loss_as_overflowed(double loss, int64_t step, int rank) {
  static const std::pair<int64_t, int64_t> at = step_at_rank_from("TRAINBENCH_TEST_LOSS_INF");
  return armed_at(at, step, rank) ? std::numeric_limits<double>::infinity() : loss;
}

// The next batch, or nullptr with `*failure` set when this rank cannot get it
// (a corrupt shard under data.on_corrupt=fail, no batch within
// data.timeout_s, no host memory for a sample). Not thrown: the rank must
// still take its part in the step's collectives, or its peers wait for it
// there until comm.timeout_s, and the result of the steps trained is lost.
constexpr int kDataFailure = 1, kDataFailureByEnvironment = 2;  // agree_on_step's kinds, each below 4
const HostBatch* next_batch(BatchSource& source, double* wait_s, std::string* failure, int* kind) {
  try {
    return &source.next(wait_s);
  } catch (const DataError& e) {
    *failure = e.what();
    *kind = e.scope() == CorruptScope::kEnvironment ? kDataFailureByEnvironment : kDataFailure;
  } catch (const LoaderTimeout& e) {
    *failure = e.what();
    *kind = kDataFailureByEnvironment;
  } catch (const std::bad_alloc&) {  // a reader's buffer for a large sample: the allocation failed, nothing else
    *failure = "data: out of host memory reading a sample (data.max_sample_bytes bounds one member; lower it, "
               "data.readers or data.prefetch)";
    *kind = kDataFailureByEnvironment;
  }
  return nullptr;
}

// The step's one agreement across ranks, a gathered number a rank: did any
// rank fail to get a batch (the first such rank, its kind and reason), and is
// any rank's loss not finite (the first such rank and its loss). The loss is
// each rank's own, of its own batches: decided alone, a rank whose loss
// overflowed while its gradients (reduced with everyone's) stayed finite
// ended its loop and gave up its checkpoints while its peers went on into
// the next step's collectives, and the job hung until comm.timeout_s.
struct StepAgreement {
  RankReason data;
  int loss_rank = -1;  // the first rank whose loss is not finite; -1: none
  double loss = 0.0;   // that rank's loss: NaN, +inf or -inf
};
StepAgreement agree_on_step(Communicator& comm, const std::string& data_failure, int data_kind, double loss) {
  // The data failure's kind (0-2) plus 4 times the loss's class.
  static_assert(kDataFailure < 4 && kDataFailureByEnvironment < 4);
  enum LossClass { kFinite = 0, kNan = 1, kPlusInf = 2, kMinusInf = 3 };
  const int loss_class = std::isnan(loss) ? kNan : std::isinf(loss) ? (loss > 0 ? kPlusInf : kMinusInf) : kFinite;
  const int mine = (data_failure.empty() ? 0 : data_kind) + 4 * loss_class;
  const std::vector<double> all = gather_from_ranks(comm, static_cast<double>(mine));
  StepAgreement agreed;
  for (size_t r = 0; r < all.size(); ++r) {
    const int value = static_cast<int>(all[r]);
    if (agreed.data.rank < 0 && value % 4 != 0) {
      agreed.data.rank = static_cast<int>(r);
      agreed.data.kind = value % 4;
    }
    if (agreed.loss_rank < 0 && value / 4 != kFinite) {
      agreed.loss_rank = static_cast<int>(r);
      const double inf = std::numeric_limits<double>::infinity();
      agreed.loss = value / 4 == kNan ? std::numeric_limits<double>::quiet_NaN() : value / 4 == kPlusInf ? inf : -inf;
    }
  }
  if (agreed.data.rank >= 0) agreed.data.reason = broadcast_string(comm, data_failure, agreed.data.rank);
  return agreed;
}

// XXH64 over the parameters' bytes: equal on every rank while data
// parallelism keeps them identical, which it must bit for bit (every rank
// applies the same averaged gradients with the same optimizer).
uint64_t parameter_checksum(TrainingEngine& engine, std::vector<float>& parameters) {
  parameters.resize(static_cast<size_t>(engine.layout().total_params()));
  engine.get_parameters(parameters.data());
  return checksum_bytes(parameters.data(), parameters.size() * sizeof(float));
}

// "" when every rank has rank 0's checksum, else which ranks differ
// (checksum_divergence). `*local`: this rank's own part (the parameters' copy
// and hash), without the all-gathers' wait for its peers, which is theirs to
// finish the step.
std::string compare_parameter_checksums(TrainingEngine& engine, Communicator& comm, std::vector<float>& parameters,
                                        int64_t step, Clock::duration* local, std::vector<int>* diverged) {
  // Test hook: TRAINBENCH_TEST_CHECK_DELAY_MS makes each comparison take that
  // much longer, as a GPU's gigabytes of parameters do.
  static const double delay_ms = [] {
    const char* value = std::getenv("TRAINBENCH_TEST_CHECK_DELAY_MS");
    return value != nullptr ? std::atof(value) : 0.0;
  }();
  const Clock::time_point begin = Clock::now();
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
  const uint64_t hash = parameter_checksum(engine, parameters);
  *local = Clock::now() - begin;
  // Two exact 32-bit halves: a double carries 53 bits, not 64.
  const auto world = static_cast<size_t>(comm.world_size());
  std::vector<double> low(world), high(world);
  comm.all_gather(static_cast<double>(hash & 0xffffffffULL), low.data());
  comm.all_gather(static_cast<double>(hash >> 32), high.data());
  std::vector<uint64_t> checksums(world);
  for (size_t r = 0; r < world; ++r)
    checksums[r] = static_cast<uint64_t>(high[r]) << 32 | static_cast<uint64_t>(low[r]);
  return checksum_divergence(checksums, step, diverged);
}

// Fault injection (comm.inject_divergence_step): one parameter nudged on one
// rank, which the consistency check must catch.
void perturb_parameters(TrainingEngine& engine, std::vector<float>& parameters) {
  parameters.resize(static_cast<size_t>(engine.layout().total_params()));
  engine.get_parameters(parameters.data());
  parameters[0] += 1e-3f;
  engine.set_parameters(parameters.data());
}

// The median of a rank's own work per step, step_s − comm_exposed_s: what
// it spent on everything but waiting in the collectives.
double median_own_seconds(const std::vector<StepRecord>& steps) {
  std::vector<double> own;
  for (const StepRecord& s : steps)
    if (!s.warmup) own.push_back(s.step_s - s.comm_exposed_s);
  return median(own);
}

// Each rank's medians, gathered to every rank, and which rank sets the pace.
// In synchronous data parallelism every rank's step ends with the same
// all-reduce, so step_s is the same everywhere and cannot tell a straggler:
// the rank that sets the pace has the most work of its own per step; a
// faster rank spends the difference waiting in the collective, which its
// comm_exposed_s counts. That rank's view becomes the run's summary (its
// spreads and shares, broadcast from it), so the bottleneck names what the
// pacing rank spent its time on, not another rank's wait for it: on a noisy
// 2-vCPU host one rank's 40% slower compute read as "network 19%" on rank 0.
void summarize_ranks(Communicator& comm, RunSummary& summary, double own_s) {
  const std::vector<double> step = gather_from_ranks(comm, summary.step_s.median);
  const std::vector<double> compute = gather_from_ranks(comm, summary.compute_s.median);
  const std::vector<double> comm_exposed = gather_from_ranks(comm, summary.comm_exposed_s.median);
  const std::vector<double> data_stall = gather_from_ranks(comm, summary.data_stall_s.median);
  const std::vector<double> ckpt_stall = gather_from_ranks(comm, summary.ckpt_stall_s.median);
  const std::vector<double> other = gather_from_ranks(comm, summary.other_s.median);
  const std::vector<double> own = gather_from_ranks(comm, own_s);
  const std::vector<double> cpu_wait = gather_from_ranks(comm, summary.cpu_wait_share);
  const std::vector<std::string> hosts = host_names_of_ranks(comm);
  summary.ranks.clear();
  for (size_t r = 0; r < step.size(); ++r)
    summary.ranks.push_back({static_cast<int>(r), hosts[r], step[r], compute[r], comm_exposed[r], data_stall[r],
                             ckpt_stall[r], other[r], own[r], cpu_wait[r]});
  // The run's: the largest, where the wait hurt most (-1 when no rank measured it).
  summary.cpu_wait_share = *std::max_element(cpu_wait.begin(), cpu_wait.end());
  const auto slowest = std::max_element(own.begin(), own.end());
  summary.slowest_rank = slowest - own.begin();
  // Against the other ranks' median, as burn-in's straggler check: with the
  // slowest rank in it, two ranks' "median" was their mean, and a rank 4x
  // slower than its peer read 61 % above it (the 10 % and 20 % marks were
  // met only at 22 % and 50 % slower).
  std::vector<double> others = own;
  others.erase(others.begin() + summary.slowest_rank);
  const double typical = others.empty() ? 0.0 : median(others);
  summary.slowest_rank_excess = typical > 0 ? *slowest / typical - 1.0 : 0.0;

  // The pacing rank's per-category figures, as one block of doubles.
  Spread* spreads[] = {&summary.step_s,         &summary.compute_s,    &summary.comm_s,  &summary.comm_exposed_s,
                       &summary.data_stall_s,   &summary.ckpt_stall_s, &summary.other_s};
  double* shares[] = {&summary.compute_share, &summary.comm_exposed_share, &summary.data_stall_share,
                      &summary.ckpt_stall_share, &summary.other_share, &summary.comm_hidden_share};
  std::vector<double> block;
  for (const Spread* sp : spreads) block.insert(block.end(), {sp->median, sp->p10, sp->p90});
  for (const double* share : shares) block.push_back(*share);
  comm.broadcast(block.data(), static_cast<int64_t>(block.size() * sizeof(double)),
                 static_cast<int>(summary.slowest_rank));
  size_t i = 0;
  for (Spread* sp : spreads) *sp = Spread{block[i], block[i + 1], block[i + 2]}, i += 3;
  for (double* share : shares) *share = block[i++];
}

// How many distinct shards the ranks' index lists name together: a shard
// two ranks read (epochs hand shards to other ranks) is one shard. The
// lengths are gathered, then each rank with a list broadcasts it (host
// memory on every backend): none at all in the usual case, where no shard
// looks damaged.
int64_t distinct_over_ranks(const std::vector<int64_t>& mine, Communicator& comm) {
  const std::vector<double> lengths = gather_from_ranks(comm, static_cast<double>(mine.size()));
  std::set<int64_t> all(mine.begin(), mine.end());
  for (int root = 0; root < comm.world_size(); ++root) {
    const auto length = static_cast<size_t>(lengths[static_cast<size_t>(root)]);
    if (length == 0) continue;
    std::vector<int64_t> list = root == comm.rank() ? mine : std::vector<int64_t>(length);
    comm.broadcast(list.data(), static_cast<int64_t>(length * sizeof(int64_t)), root);
    all.insert(list.begin(), list.end());
  }
  return static_cast<int64_t>(all.size());
}

// Storage-read figures of the whole run: every rank's loader counters summed,
// over the time its loaders read, from their start before step 1: over the
// steps' time alone the rates took in the read-ahead before step 1 (every
// shuffle buffer and prefetch slot) without its time, and 8 tiny steps
// "delivered" 27 times the bytes they trained on.
// No rate where no step trained (`trained` false): nothing was delivered
// to training.
void summarize_storage_read(const SourceStats& stats, bool trained, Communicator& comm, RunSummary& summary) {
  const auto summed = [&comm](double value) { return sum_over_ranks(comm, value); };
  summary.bytes_read = static_cast<int64_t>(summed(static_cast<double>(stats.storage_bytes)));
  summary.samples_read = static_cast<int64_t>(summed(static_cast<double>(stats.samples)));
  summary.tokens_read = static_cast<int64_t>(summed(static_cast<double>(stats.tokens)));
  summary.samples_skipped = static_cast<int64_t>(summed(static_cast<double>(stats.samples_skipped)));
  summary.shards_skipped = static_cast<int64_t>(summed(static_cast<double>(stats.shards_skipped)));
  summary.shards_cut_short = distinct_over_ranks(stats.shards_cut_short, comm);
  summary.shards_without_samples = distinct_over_ranks(stats.shards_without_samples, comm);
  const double reading_seconds = max_over_ranks(comm, stats.reading_seconds);
  if (trained && reading_seconds > 0) {
    summary.read_gbs = static_cast<double>(summary.bytes_read) / reading_seconds * 1e-9;
    summary.samples_per_s = static_cast<double>(summary.samples_read) / reading_seconds;
  }
  // Per token trained of every sample read, those a resume stepped over
  // included (their bytes are in bytes_read): a sample trains its tokens and
  // the separator the packer puts after it, and tokens/s counts both, which
  // required_read_gbs multiplies this by (per token decoded, 5-token
  // samples needed a fifth more than they do).
  summary.tokens_stepped_over = static_cast<int64_t>(summed(static_cast<double>(stats.tokens_stepped_over)));
  summary.samples_stepped_over = static_cast<int64_t>(summed(static_cast<double>(stats.samples_stepped_over)));
  const double tokens_in_bytes_read =
      static_cast<double>(summary.tokens_read) + static_cast<double>(summary.tokens_stepped_over) +
      static_cast<double>(summary.samples_read) + static_cast<double>(summary.samples_stepped_over);
  if (tokens_in_bytes_read > 0)
    summary.bytes_per_token = static_cast<double>(summary.bytes_read) / tokens_in_bytes_read;
  summary.required_read_gbs_measured = summary.bytes_per_token * summary.tokens_per_s * 1e-9;
  if (summary.model_flops_per_token > 0) {
    const double ceiling_tokens_per_s = summary.gemm_ceiling_flops_per_s *
                                        static_cast<double>(comm.world_size()) /
                                        summary.model_flops_per_token;
    summary.required_read_gbs = summary.bytes_per_token * ceiling_tokens_per_s * 1e-9;
  }
}
}  // namespace

std::string checksum_divergence(const std::vector<uint64_t>& checksums, int64_t step, std::vector<int>* diverged) {
  diverged->clear();
  const size_t world = checksums.size();
  const auto holders = [&](uint64_t value) { return std::count(checksums.begin(), checksums.end(), value); };
  size_t majority = world;  // the first rank whose checksum more than half hold; world: none
  for (size_t r = 0; r < world && majority == world; ++r)
    if (2 * static_cast<size_t>(holders(checksums[r])) > world) majority = r;
  const uint64_t reference = checksums[majority == world ? 0 : majority];
  std::string differing;
  for (size_t r = 0; r < world; ++r)
    if (checksums[r] != reference) {
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
      if (majority != world) diverged->push_back(static_cast<int>(r));
    }
  if (differing.empty()) return "";
  const std::string at = "parameters diverged at step " + std::to_string(step) + ": rank(s) " + differing;
  if (majority != world)
    return at + " differ from the other " + std::to_string(world - diverged->size()) + " ranks, which agree";
  return at + " differ from rank 0 (no checksum is held by more than half the ranks: which is wrong is not known)";
}

uint64_t checksum_bytes(const void* data, size_t bytes) {
  // XXH64 (the checkpoint files' hash): ~10 GB/s on a core, where the
  // FNV-1a it replaced took 1.3 ns a byte, 10 s for h200-llama8b-4l's 7.7 GB.
  return XXH64(data, bytes, 0);
}

bool RunOutcome::all_checks_passed() const {
  for (const Check& c : checks)
    if (!c.passed) return false;
  return true;
}

Config measurement_run_config(const Config& config, int64_t warmup_steps, int64_t measured_steps) {
  Config run = config;
  run.train.warmup_steps = warmup_steps;
  run.train.steps = warmup_steps + measured_steps;
  run.checkpoint.every_steps = 0;
  run.comm.inject_delay_ms = 0;
  run.comm.inject_divergence_step = 0;
  run.burnin.inject_slow_ms = 0;
  run.data.inject_delay_ms = 0;
  run.report.gemm_ceiling_s = 0;  // the measurement's own figure is its point, not MFU
  // Its figure is the steps' times: untimed (report.instrument false), the
  // compute ceiling read 0 (bench compute exit 4, run --ceilings dropped it).
  run.report.instrument = true;
  return run;
}

std::unique_ptr<BatchSource> measurement_batches(const Config& config) {
  return make_synthetic_source(config.train.micro_batch, config.model.seq_len, config.model.vocab, 4,
                               static_cast<uint64_t>(config.data.seed));
}

AdamWSettings adamw_settings(const TrainSection& train) {
  AdamWSettings adam;
  adam.lr = train.lr;
  adam.beta1 = train.beta1;
  adam.beta2 = train.beta2;
  adam.eps = train.eps;
  adam.weight_decay = train.weight_decay;
  adam.grad_clip = train.grad_clip;
  return adam;
}

std::string bottleneck_line(const RunSummary& s) {
  struct Category {
    const char* resource;
    const char* time;
    double share;
  };
  const Category others[] = {{"network", "exposed communication", s.comm_exposed_share},
                             {"storage read", "data stall", s.data_stall_share},
                             {"storage write", "checkpoint stall", s.ckpt_stall_share},
                             {"host overhead", "other (launch gaps, host work)", s.other_share}};
  const Category* worst = &others[0];
  for (const Category& c : others)
    if (c.share > worst->share) worst = &c;
  const auto percent = [](double share) { return std::to_string(static_cast<int>(100.0 * share + 0.5)) + "%"; };
  if (worst->share < 0.10)
    return std::string("compute — compute ") + percent(s.compute_share) + " of step; no other resource takes 10%";
  return std::string(worst->resource) + " — " + worst->time + " " + percent(worst->share) + " of step (compute " +
         percent(s.compute_share) + ")";
}

void largest_gemm_shape(const ModelShape& s, int64_t micro_batch, int64_t* m, int64_t* n,
                        int64_t* k) {
  // Candidates: (out, in) of every projection; the one with the most work wins.
  const int64_t candidates[][2] = {{s.vocab, s.d_model},  {s.ffn_hidden, s.d_model},
                                   {s.d_model, s.ffn_hidden}, {s.q_dim(), s.d_model},
                                   {s.d_model, s.q_dim()}};
  *m = micro_batch * s.seq_len;
  *n = candidates[0][0];
  *k = candidates[0][1];
  for (const auto& c : candidates) {
    if (c[0] * c[1] > *n * *k) {
      *n = c[0];
      *k = c[1];
    }
  }
  // Each side rounded up to a multiple of 64, as fast implementations pad
  // (llm.c's padded vocabulary): the ceiling is the hardware's rate on this
  // work, not on an awkward size. On an H200, GPT-2's LM head at n = 50257
  // ran at 96 TFLOP/s against 800 at 50304 (docs/perf.md); an engine that
  // loses that shows it as MFU below the ceiling, not as a ceiling below MFU.
  const auto round_up = [](int64_t x) { return (x + 63) / 64 * 64; };
  *m = round_up(*m);
  *n = round_up(*n);
  *k = round_up(*k);
}

namespace {
// The summary's figures of the workload itself, before any step: tokens a
// step, FLOPs a token, memory, the largest GEMM and its measured ceiling.
void describe_workload(const Config& config, TrainingEngine& engine, Communicator& comm, RunOutcome& outcome) {
  const TrainSection& train = config.train;
  RunSummary& summary = outcome.summary;
  summary.global_tokens_per_step = train.micro_batch * train.grad_accum * config.model.seq_len * comm.world_size();
  summary.model_flops_per_token = model_flops_per_token(config.model, engine.layout()).total();
  summary.memory_per_rank = engine.memory_plan();
  summary.optimizer_bytes_per_rank = summary.memory_per_rank.optimizer_bytes;
  summary.optimizer_bytes_unsharded = 2 * engine.layout().trainable_params() * 4;
  largest_gemm_shape(config.model, train.micro_batch, &summary.gemm_m, &summary.gemm_n, &summary.gemm_k);
  // report.gemm_ceiling_s = 0 asks for no ceiling: MFU against the datasheet
  // peak alone, and no warning, since nothing failed.
  if (config.report.gemm_ceiling_s > 0) {
    summary.gemm_ceiling_flops_per_s = engine.measure_gemm_flops(summary.gemm_m, summary.gemm_n, summary.gemm_k,
                                                                 config.report.gemm_ceiling_s);
    if (summary.gemm_ceiling_flops_per_s <= 0)
      outcome.warnings.push_back("the GEMM ceiling was not measured (not enough free device memory for its " +
                                 std::to_string(summary.gemm_m) + " x " + std::to_string(summary.gemm_n) + " x " +
                                 std::to_string(summary.gemm_k) + " operands): MFU is against the datasheet peak only");
  }
}

// The ranks' parameter comparison (a host copy and a hash of every
// parameter, two small collectives) is trainbench's check, not the
// workload's: seconds at a GPU's 7.7 GB of parameters, which the steps'
// times and the measured window would otherwise take as other_s (75 % of
// h200-llama8b-4l's steps by that count). Each comparison says how long its
// own part took (not its wait for peers still in their step, which stays
// the step's); the loop leaves that out of both, and the summary says it in
// consistency_check_s.
class RankComparison {
 public:
  RankComparison(TrainingEngine& engine, Communicator& comm, RunOutcome& outcome)
      : engine_(engine), comm_(comm), outcome_(outcome) {}

  // Compares the parameters as they are after `step`; returns this rank's own part's time.
  Clock::duration at(int64_t step) {
    Clock::duration local{0};
    inconsistency_ = compare_parameter_checksums(engine_, comm_, parameters_, step, &local, &outcome_.diverged_ranks);
    last_compared_ = step;
    outcome_.summary.consistency_check_s += std::chrono::duration<double>(local).count();
    return local;
  }
  // at(step), unless there is nothing to learn: one rank, a divergence
  // already found (the first one is the finding), or `step` compared already.
  Clock::duration at_if_new(int64_t step) {
    if (comm_.world_size() <= 1 || !consistent() || last_compared_ == step) return Clock::duration{0};
    return at(step);
  }
  bool consistent() const { return inconsistency_.empty(); }
  int64_t last_compared() const { return last_compared_; }  // -1: none yet
  // Fault injection (comm.inject_divergence_step), through the same host copy.
  void nudge_one_parameter() { perturb_parameters(engine_, parameters_); }

  // Only a comparison made is a check passed: a run stopped (a non-finite
  // loss) before its first comparison has none to report.
  void add_check(int64_t check_every, std::vector<Check>& checks) const {
    if (comm_.world_size() <= 1 || last_compared_ < 0) return;
    const std::string when = check_every > 0 ? "every " + std::to_string(check_every) + " steps and " : std::string();
    checks.push_back({"ranks_consistent", consistent(),
                      consistent() ? "parameter checksums equal on all " + std::to_string(comm_.world_size()) +
                                         " ranks (" + when + "at the end; last at step " +
                                         std::to_string(last_compared_) + ")"
                                   : inconsistency_});
  }

 private:
  TrainingEngine& engine_;
  Communicator& comm_;
  RunOutcome& outcome_;
  std::vector<float> parameters_;  // the host copy the checksum hashes
  std::string inconsistency_;      // the first checksum mismatch, if any
  int64_t last_compared_ = -1;     // the step whose parameters were last compared across ranks
};

// Back on when the run is done: other callers expect the default. A device
// error here is left to the engine's next call to report (a destructor must
// not throw, least of all while another error unwinds).
struct RestoreComputeTiming {
  TrainingEngine& engine;
  ~RestoreComputeTiming() {
    try {
      engine.set_compute_timing(true);
      engine.set_op_timing(false);
    } catch (...) {
    }
  }
};

// A batch this rank could not get this step (next_batch); empty `reason`: none.
struct DataFailure {
  std::string reason;
  int kind = 0;  // kDataFailure or kDataFailureByEnvironment
};

// The steps of one run, each a record in outcome.steps, until the last, a
// failure or the extension's end; and the measured window they took.
class StepLoop {
 public:
  StepLoop(const Config& config, TrainingEngine& engine, BatchSource& source, Communicator& comm,
           Checkpointer* checkpointer, RunOutcome& outcome);
  void run(int64_t first_step, const ProgressFn& on_progress, const StepHook& after_step);
  bool loss_finite() const { return loss_finite_; }
  const RankComparison& ranks() const { return ranks_; }

 private:
  void set_up_gradient_sync();
  void start_timing();
  // One step; false ends the run after it.
  bool train_step(int64_t step, bool warmup, const ProgressFn& on_progress, const StepHook& after_step);
  double inject_faults(int64_t step);
  DataFailure accumulate_gradients(StepRecord& record);
  void finish_gradient_sync(StepRecord& record);
  StepAgreement agree_across_ranks(const DataFailure& mine, double loss, double* agreement_s);
  void apply_update(StepRecord& record, double agreement_s);
  Clock::duration checkpoint_after(StepRecord& record, bool step_finite);
  void close_step_timing(StepRecord& record, Clock::duration check_in_step, double injected_slow_s);
  void compare_ranks_after(const StepRecord& record);
  bool extension_goes_on(const StepHook& after_step, const StepRecord& record);
  void fail_not_finite(const StepAgreement& agreed, const StepRecord& record);
  void close_measured_window(Clock::time_point measured_begin);

  const Config& config_;
  const TrainSection& train_;
  TrainingEngine& engine_;
  BatchSource& source_;
  Communicator& comm_;
  Checkpointer* checkpointer_;
  RunOutcome& outcome_;
  RunSummary& summary_;
  const int world_;
  // Each micro-batch's loss is scaled so the accumulated gradient, summed
  // over the ranks by the all-reduce, is that of the mean over the whole
  // global step's tokens.
  const float loss_scale_;
  // report.instrument=false leaves out every per-step timer, the engine's
  // included (to measure what they cost): only the wall time of the
  // measured steps is taken.
  const bool instrument_;
  const AdamWSettings adam_;
  std::optional<GradientSync> sync_;
  std::optional<ZeroOneOptimizer> zero_;
  // An engine built for ZeRO-1 that trains here alone (the compute ceiling's
  // local communicator) updates its own shard without the collectives.
  bool sharded_alone_ = false;
  RankComparison ranks_;
  // Checks made inside the measured window (from the end of warm-up to the
  // end of the last step): taken out of measured_wall_s.
  Clock::duration checks_in_window_{0};
  bool stopped_mid_step_ = false;  // a data failure ended the loop before a step's update
  bool loss_finite_ = true;
  Clock::time_point previous_end_;  // the end of the step before
  CpuWaitMeter cpu_wait_;           // over the measured window
};

StepLoop::StepLoop(const Config& config, TrainingEngine& engine, BatchSource& source, Communicator& comm,
                   Checkpointer* checkpointer, RunOutcome& outcome)
    : config_(config),
      train_(config.train),
      engine_(engine),
      source_(source),
      comm_(comm),
      checkpointer_(checkpointer),
      outcome_(outcome),
      summary_(outcome.summary),
      world_(comm.world_size()),
      loss_scale_(1.0f / static_cast<float>(config.train.grad_accum * comm.world_size())),
      instrument_(config.report.instrument),
      adam_(adamw_settings(config.train)),
      ranks_(engine, comm, outcome) {
  set_up_gradient_sync();
  comm_.set_timeout(config_.comm.timeout_s);
  comm_.set_injected_delay(config_.comm.inject_delay_ms * 1e-3);
  start_timing();
}

void StepLoop::set_up_gradient_sync() {
  const OptimizerShard shard = engine_.optimizer_shard();
  sharded_alone_ = world_ == 1 && (shard.begin != 0 || shard.end != engine_.layout().trainable_params());
  if (world_ > 1 && config_.comm.zero == 1) {
    zero_.emplace(comm_, engine_, zero_padded_elements(engine_.layout().trainable_params(), world_));
    summary_.zero_sharded = true;
    return;
  }
  // A device-buffer backend (nccl) syncs even at world size 1, where the
  // all-reduce changes nothing: a 1-GPU run then takes, and times, the path
  // of every multi-GPU run (and scaling from 1 GPU compares like with like).
  if (world_ == 1 && !comm_.device_buffers()) return;
  const bool on_device = comm_.device_buffers();
  float* gradients = on_device ? engine_.device_gradient_buffer() : engine_.host_gradient_buffer();
  if (gradients == nullptr)
    throw std::runtime_error(std::string("comm.backend ") + comm_.backend_name() + " reduces " +
                             (on_device ? "device" : "host") + " buffers, but the " + engine_.backend_name() +
                             " engine keeps its gradients " + (on_device ? "in host memory" : "on the device"));
  RecordComputeEventFn record_compute_event;  // device buffers: backward's readiness is "enqueued"
  if (on_device) record_compute_event = [this] { return engine_.record_compute_event(); };
  sync_.emplace(comm_, gradients, engine_.layout().trainable_params(),
                static_cast<int64_t>(config_.comm.bucket_mb * (1 << 20)), config_.comm.overlap,
                record_compute_event);
}

void StepLoop::start_timing() {
  engine_.synchronize();
  engine_.set_compute_timing(instrument_);
  engine_.take_compute_seconds();  // discard the calibration
  // report.op_times: each measured step's ops timed by the engine, summed here.
  summary_.op_times_requested = instrument_ && config_.report.op_times;
  summary_.op_times_available = summary_.op_times_requested && engine_.set_op_timing(true);
  if (summary_.op_times_available) summary_.op_seconds_per_step = zero_op_times();
}

void StepLoop::run(int64_t first_step, const ProgressFn& on_progress, const StepHook& after_step) {
  // The background collectives made before step 1 (the network ceiling's
  // timed loop: --ceilings) are not its comm_s: step 1 read 26 of them.
  comm_.take_comm_seconds();
  Clock::time_point measured_begin;
  // The meter's reads (two files a thread) before the window's clock
  // starts, not in its first step.
  const auto open_window = [&] {
    cpu_wait_.start();
    previous_end_ = Clock::now();
    measured_begin = previous_end_;
  };
  open_window();
  for (int64_t step = first_step; step <= train_.steps; ++step) {
    if (step == first_step + train_.warmup_steps) open_window();
    if (!train_step(step, step < first_step + train_.warmup_steps, on_progress, after_step)) break;
  }
  close_measured_window(measured_begin);
}

bool StepLoop::train_step(int64_t step, bool warmup, const ProgressFn& on_progress, const StepHook& after_step) {
  StepRecord record;
  record.step = step;
  record.warmup = warmup;
  record.lr = train_.lr;
  comm_.set_context("step " + std::to_string(step));
  const double injected_slow_s = inject_faults(step);
  const DataFailure data_failure = accumulate_gradients(record);
  if (sync_) finish_gradient_sync(record);
  double agreement_s = 0;
  const StepAgreement agreed = agree_across_ranks(data_failure, record.loss, &agreement_s);
  if (agreed.data.kind != 0) {
    // A rank failed to get a batch: none takes this step's update. Every
    // rank stops here, with its parameters as the last step left them, and
    // the steps before are the result.
    const RankReason& data = agreed.data;
    outcome_.failure = {"data_read",
                        (world_ > 1 ? "rank " + std::to_string(data.rank) + ": " : std::string()) + data.reason,
                        data.kind == kDataFailureByEnvironment};
    ranks_.at_if_new(step - 1);
    stopped_mid_step_ = true;
    return false;
  }
  apply_update(record, agreement_s);
  // The job's: every rank's loss finite (agreed above), and the gradient
  // norm, which is the reduced gradients' and so the same on every rank.
  const bool step_finite = agreed.loss_rank < 0 && std::isfinite(record.grad_norm);
  const Clock::duration check_in_step = checkpoint_after(record, step_finite);
  close_step_timing(record, check_in_step, injected_slow_s);
  outcome_.steps.push_back(record);
  if (!record.warmup) checks_in_window_ += check_in_step;
  compare_ranks_after(record);
  if (!ranks_.consistent() || outcome_.failure.happened()) return false;

  // The extension sees every step, a non-finite one too (burn-in names the
  // GPU whose loss it was); its say comes after the loss check below.
  const bool goes_on = extension_goes_on(after_step, record);
  // A non-finite loss on any rank, or gradient norm, made non-finite
  // weights: the run ends at this step, not at the next one's NaN loss.
  if (!step_finite) {
    fail_not_finite(agreed, record);
    return false;
  }
  if (!goes_on) {
    // The extension ends the run here (burn-in's duration): the ranks'
    // parameters are compared as at a last step (a divergence after the
    // last periodic comparison, or with comm.check_every 0, passed).
    const Clock::duration took = ranks_.at_if_new(step);
    if (!record.warmup) checks_in_window_ += took;
    return false;
  }
  if (on_progress && instrument_) {
    RunSummary so_far;
    so_far.global_tokens_per_step = summary_.global_tokens_per_step;
    so_far.model_flops_per_token = summary_.model_flops_per_token;
    so_far.gemm_ceiling_flops_per_s = summary_.gemm_ceiling_flops_per_s;
    on_progress(record, so_far);
  }
  return true;
}

// The step's injected faults (test hooks and the fault-injection keys);
// returns the seconds of burnin.inject_slow_ms slept.
double StepLoop::inject_faults(int64_t step) {
  fail_as_a_device_would(step, comm_.rank());
  if (step == config_.comm.inject_divergence_step && comm_.rank() == world_ - 1) ranks_.nudge_one_parameter();
  // burnin.inject_slow_ms: this rank's own work takes longer, as a slow
  // GPU's would; its peers wait in the all-reduce. Its compute, as a slow
  // GPU's is (untimed, it read as host overhead).
  if (config_.burnin.inject_slow_ms <= 0 || comm_.rank() != config_.burnin.inject_slow_rank) return 0.0;
  const Clock::time_point slow_begin = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(config_.burnin.inject_slow_ms));
  return seconds_between(slow_begin, Clock::now());
}

// Forward and backward of the step's micro-batches: the gradients, the loss,
// the data stall. Stops at a batch this rank cannot get, which it returns.
DataFailure StepLoop::accumulate_gradients(StepRecord& record) {
  engine_.zero_gradients();
  double loss_sum = 0.0;
  DataFailure failure;
  for (int64_t micro = 0; micro < train_.grad_accum; ++micro) {
    // On a device engine the previous micro-batch's backward may still
    // run: a wait for a batch that is not there, timed now, overlaps it
    // and counts in compute_s and data_stall_s both (other_s below zero,
    // a failed accounting check). The device idles once that backward
    // ends anyway, with nothing more to run: its end first, then the wait
    // left is the stall. (The step before ended synchronized.)
    if (micro > 0 && instrument_ && !source_.batch_ready()) engine_.synchronize();
    double wait_s = 0.0;
    const HostBatch* host = next_batch(source_, instrument_ ? &wait_s : nullptr, &failure.reason, &failure.kind);
    if (host == nullptr) break;  // to the step's collectives without a backward: their data no longer matters
    record.data_stall_s += wait_s;
    const TokenBatch batch{host->inputs, host->targets, host->batch, host->seq_len};
    engine_.forward(batch);
    // Earlier micro-batches only accumulate locally (DDP's no_sync); the
    // last one's backward starts the buckets as their gradients complete.
    const bool last = micro == train_.grad_accum - 1;
    if (sync_ && last && !zero_)
      engine_.backward(batch, loss_scale_, [this](int64_t ready_from) { sync_->on_gradients_ready(ready_from); });
    else
      engine_.backward(batch, loss_scale_, nullptr);
    // After backward is enqueued: on a device backend the loss waits for
    // its forward, and read before backward that wait left the GPU idle
    // while the host came back and launched backward's first kernels.
    loss_sum += engine_.last_loss();
  }
  record.loss = loss_as_overflowed(loss_sum / static_cast<double>(train_.grad_accum), record.step, comm_.rank());
  return failure;
}

void StepLoop::finish_gradient_sync(StepRecord& record) {
  // A device engine returns from backward once it is enqueued; its end is
  // when the compute stream drains. Waiting for that delays nothing: every
  // bucket is started by now, and finish() waits for the last one anyway.
  if (comm_.device_buffers()) engine_.synchronize();
  const double backward_end = instrument_ ? steady_seconds() : 0.0;
  sync_->finish();
  if (!instrument_) return;
  record.comm_s = comm_.take_comm_seconds();
  // The part of comm_s not hidden behind backward: at most comm_s. The
  // tail after backward can be longer when no collective runs in part of
  // it (the hand-off to the progress thread, a core busy with another
  // rank): that is host time, left to other_s.
  record.comm_exposed_s = std::min(record.comm_s, std::max(0.0, comm_.last_completion_time() - backward_end));
}

// Did any rank fail to get a batch, or make a loss that is not finite? One
// small host collective a step, after the all-reduce has brought the ranks
// together anyway (on one rank, the local communicator's identity).
// Under ZeRO-1 there was no gradient all-reduce before it, so this is where
// a rank first waits for its slower peers: timed (`*agreement_s`) as
// communication, as DDP's wait shows in its all-reduce (left untimed, the
// wait went to other_s, and the straggler looked no slower than the ranks it
// held). A device engine's backward is only enqueued: its end first, so that
// the agreement times the wait for peers, not this GPU's backward, which
// compute_s has already (ZeroOneOptimizer::step waits for it anyway).
StepAgreement StepLoop::agree_across_ranks(const DataFailure& mine, double loss, double* agreement_s) {
  if (zero_) engine_.synchronize();
  const double agreement_begin = instrument_ && zero_ ? steady_seconds() : 0.0;
  const StepAgreement agreed = agree_on_step(comm_, mine.reason, mine.kind, loss);
  *agreement_s = instrument_ && zero_ ? steady_seconds() - agreement_begin : 0.0;
  return agreed;
}

void StepLoop::apply_update(StepRecord& record, double agreement_s) {
  // A checkpoint's state copy must land before the optimizer changes the state.
  if (checkpointer_) record.ckpt_stall_s += checkpointer_->before_optimizer_step();
  if (zero_) {
    record.grad_norm = zero_->step(adam_, record.step, &record.comm_s);
    record.comm_s += agreement_s;
    record.comm_exposed_s = record.comm_s;  // not overlapped: the step waits for all three collectives
  } else if (sharded_alone_) {
    record.grad_norm = zero_shard_step_alone(engine_, adam_, record.step);
  } else {
    record.grad_norm = engine_.optimizer_step(adam_, record.step);
  }
  engine_.synchronize();
}

// Inside the step's window: what a checkpoint blocks is this step's time.
// A step whose loss or gradient norm is not finite made weights no
// checkpoint may keep (nor may retention delete a good one for them); both
// are on the host already, so telling costs no extra sync. Nor parameters
// the ranks disagree on: a step due a checkpoint has them compared first,
// whatever comm.check_every says (a divergence found at a later check had
// already been committed as `latest`). Returns that comparison's time.
Clock::duration StepLoop::checkpoint_after(StepRecord& record, bool step_finite) {
  if (checkpointer_ == nullptr) return Clock::duration{0};
  const int64_t step = record.step;
  Clock::duration check_in_step{0};
  if (checkpointer_->due(step)) check_in_step = ranks_.at_if_new(step);
  const double checkpoint_begin = steady_seconds();
  try {
    record.ckpt_stall_s += !ranks_.consistent()
                               ? checkpointer_->refuse_inconsistent(step, "the ranks' parameters differ")
                           : step_finite
                               ? checkpointer_->after_step(step)
                               : checkpointer_->give_up(step);
  } catch (const CheckpointFailure& e) {
    // Every rank learnt of it in the same agreement round: all of them end
    // the run after this step, whose record is complete, and the result
    // says what happened (the CLI exits 3 with the message).
    record.ckpt_stall_s += steady_seconds() - checkpoint_begin;
    outcome_.failure = {"checkpoints_written", e.what(), true};
  }
  return check_in_step;
}

void StepLoop::close_step_timing(StepRecord& record, Clock::duration check_in_step, double injected_slow_s) {
  if (!instrument_) {
    // Untimed, one clock reading a step (~25 ns): the end of warm-up, where
    // the measured window starts, and of the last step trained, where it
    // ends should a data failure stop the next one part way.
    previous_end_ = Clock::now();
    return;
  }
  const Clock::time_point end = Clock::now();
  record.step_s = seconds_between(previous_end_, end) - std::chrono::duration<double>(check_in_step).count();
  record.compute_s = engine_.take_compute_seconds() + injected_slow_s;
  if (summary_.op_times_available) {
    const std::vector<OpTime> ops = engine_.take_op_times();  // warm-up steps': taken and dropped
    std::vector<OpTime>& op_sums = summary_.op_seconds_per_step;
    if (!record.warmup)
      for (size_t i = 0; i < ops.size() && i < op_sums.size(); ++i) op_sums[i].seconds += ops[i].seconds;
  }
  record.other_s = record.step_s - record.compute_s - record.comm_exposed_s - record.data_stall_s - record.ckpt_stall_s;
  previous_end_ = end;
}

// The ranks' periodic parameter comparison (comm.check_every), and the last
// step's. A failed checkpoint ends the run after this step: its end, for the
// comparison too. Between steps: the next one starts after it (after the
// last step, the storage-read rate's span ends before it).
void StepLoop::compare_ranks_after(const StepRecord& record) {
  const int64_t step = record.step;
  const bool last_step = step == train_.steps || outcome_.failure.happened();
  const bool check_now = config_.comm.check_every > 0 && step % config_.comm.check_every == 0;
  if (!check_now && !last_step) return;
  const Clock::duration took = ranks_.at_if_new(step);
  if (!last_step) previous_end_ += took;
  if (!record.warmup) checks_in_window_ += took;
}

bool StepLoop::extension_goes_on(const StepHook& after_step, const StepRecord& record) {
  if (!after_step) return true;
  try {
    return after_step(record);
  } catch (const CheckpointFailure& e) {
    // The extension waited for the checkpoint in flight (burn-in's storage
    // measurement) and it failed there, agreed by every rank as in the
    // loop: the run ends at this step with its result.
    outcome_.failure = {"checkpoints_written", e.what(), true};
    return false;
  }
}

void StepLoop::fail_not_finite(const StepAgreement& agreed, const StepRecord& record) {
  loss_finite_ = false;
  const std::string at_step = " at step " + std::to_string(record.step);
  const std::string on_rank = world_ > 1 ? " on rank " + std::to_string(agreed.loss_rank) : "";
  outcome_.checks.push_back(
      {"loss_finite", false,
       agreed.loss_rank >= 0 ? "loss is " + loss_text(agreed.loss) + at_step + on_rank
                             : "gradient norm is " + loss_text(record.grad_norm) + at_step + " (loss " +
                                   loss_text(record.loss) + "): the update made non-finite weights"});
}

void StepLoop::close_measured_window(Clock::time_point measured_begin) {
  // A step a data failure stopped is not trained: the measured window ends
  // with the last step that was, not with the failed one's wait.
  const Clock::time_point loop_end = stopped_mid_step_ ? previous_end_ : Clock::now();
  int64_t measured = 0;
  for (const StepRecord& s : outcome_.steps) measured += s.warmup ? 0 : 1;
  // A check after a step of the window (the last one's included) is in the
  // window's span but not its work; one after the last warm-up step moved
  // previous_end_, and so the window's start, past it.
  summary_.measured_wall_s =
      seconds_between(measured_begin, loop_end) - std::chrono::duration<double>(checks_in_window_).count();
  if (measured > 0)
    for (OpTime& op : summary_.op_seconds_per_step) op.seconds /= static_cast<double>(measured);
  if (measured > 0) summary_.cpu_wait_share = cpu_wait_.waiting_share();
  if (measured > 0 && summary_.measured_wall_s > 0)
    summary_.wall_tokens_per_s =
        static_cast<double>(summary_.global_tokens_per_step * measured) / summary_.measured_wall_s;
}

// The last checkpoint in flight finished, and the checkpoints' figures.
void summarize_checkpoints(Checkpointer& checkpointer, int64_t first_measured, RunOutcome& outcome) {
  RunSummary& summary = outcome.summary;
  const double drain_begin = steady_seconds();
  try {
    summary.checkpoint_drain_s = checkpointer.finish();
  } catch (const CheckpointFailure& e) {  // the last one in flight failed: agreed, as in the loop
    summary.checkpoint_drain_s = steady_seconds() - drain_begin;
    // After a data failure that one speaks for the run; this one is the
    // failed check (and the checkpoint's record) beside it.
    if (!outcome.failure.happened()) outcome.failure = {"checkpoints_written", e.what(), true};
    else outcome.checks.push_back({"checkpoints_written", false, e.what()});
  }
  outcome.checkpoints = checkpointer.records();
  summary.checkpoint_staging_bytes = checkpointer.staging_bytes();
  for (const std::string& w : checkpointer.warnings()) outcome.warnings.push_back(w);
  // The medians are the measured steps' checkpoints' (DESIGN: per run,
  // steps after warm-up): a warm-up checkpoint wrote at a tenth of the
  // later ones' rate and halved the median stall. Where every committed
  // one came in warm-up, theirs rather than none.
  std::vector<double> write_gbs, stall_s, warmup_write_gbs, warmup_stall_s;
  for (const CheckpointRecord& c : outcome.checkpoints) {
    if (c.status == "failed") {
      ++summary.checkpoints_failed;
      continue;
    }
    if (c.status != "committed") {
      ++summary.checkpoints_skipped;
      continue;
    }
    ++summary.checkpoints_committed;
    summary.bytes_written += c.bytes;
    (c.step >= first_measured ? write_gbs : warmup_write_gbs).push_back(c.write_gbs);
    (c.step >= first_measured ? stall_s : warmup_stall_s).push_back(c.stall_s);
  }
  if (write_gbs.empty()) write_gbs.swap(warmup_write_gbs), stall_s.swap(warmup_stall_s);
  summary.checkpoint_write_gbs = median(write_gbs);
  summary.checkpoint_stall_s = median(stall_s);
}

// Statistics over the measured (post-warm-up) steps: each category's spread
// and share of the step, and the loss at either end.
void summarize_steps(const std::vector<StepRecord>& steps, RunSummary& summary) {
  for (const StepRecord& s : steps) (s.warmup ? summary.warmup_steps : summary.measured_steps)++;
  summary.step_s = spread_of(steps, &StepRecord::step_s);
  summary.compute_s = spread_of(steps, &StepRecord::compute_s);
  summary.comm_s = spread_of(steps, &StepRecord::comm_s);
  summary.comm_exposed_s = spread_of(steps, &StepRecord::comm_exposed_s);
  double comm_total = 0, comm_exposed_total = 0;
  for (const StepRecord& s : steps) {
    if (s.warmup) continue;
    comm_total += s.comm_s;
    comm_exposed_total += s.comm_exposed_s;
  }
  if (comm_total > 0) summary.comm_hidden_share = std::max(0.0, 1.0 - comm_exposed_total / comm_total);
  summary.data_stall_s = spread_of(steps, &StepRecord::data_stall_s);
  summary.ckpt_stall_s = spread_of(steps, &StepRecord::ckpt_stall_s);
  summary.other_s = spread_of(steps, &StepRecord::other_s);
  summary.compute_share = share_of(steps, &StepRecord::compute_s);
  summary.comm_exposed_share = share_of(steps, &StepRecord::comm_exposed_s);
  summary.data_stall_share = share_of(steps, &StepRecord::data_stall_s);
  summary.ckpt_stall_share = share_of(steps, &StepRecord::ckpt_stall_s);
  summary.other_share = share_of(steps, &StepRecord::other_s);
  if (!steps.empty()) {
    summary.loss_first = steps.front().loss;
    summary.loss_last = steps.back().loss;
  }
}

// The ranks' views gathered (summarize_ranks), and from them the run's
// tokens/s and MFU.
void summarize_throughput(TrainingEngine& engine, Communicator& comm, bool instrument, RunOutcome& outcome) {
  RunSummary& summary = outcome.summary;
  // tokens/s is set by the slowest rank's median step: the largest median
  // step_s of any rank (not necessarily that of the rank with the most own
  // work, whose step may end a little earlier): a data-parallel step ends
  // when its slowest rank does.
  summarize_ranks(comm, summary, median_own_seconds(outcome.steps));
  double slowest_step_s = 0;
  for (const RankSummary& r : summary.ranks) slowest_step_s = std::max(slowest_step_s, r.step_s);
  if (slowest_step_s > 0) summary.tokens_per_s = static_cast<double>(summary.global_tokens_per_step) / slowest_step_s;
  summary.timed = instrument;
  if (!instrument) {
    summary.tokens_per_s = summary.wall_tokens_per_s;
    outcome.warnings.push_back("report.instrument=false: no per-step timing; tokens/s is the measured steps' wall "
                               "time, and the categories and the bottleneck are not measured");
  }
  summary.achieved_flops_per_s = summary.model_flops_per_token * summary.tokens_per_s / comm.world_size();
  if (summary.gemm_ceiling_flops_per_s > 0)
    summary.mfu_vs_gemm_ceiling = summary.achieved_flops_per_s / summary.gemm_ceiling_flops_per_s;
  summary.datasheet_peak_flops_per_s = engine.datasheet_peak_flops_per_s();
  if (summary.datasheet_peak_flops_per_s > 0)
    summary.mfu = summary.achieved_flops_per_s / summary.datasheet_peak_flops_per_s;
}

// What the loader left out or found odd, over every rank, as warnings.
void warn_of_data_read(const SourceStats& read, int world, RunOutcome& outcome) {
  const RunSummary& summary = outcome.summary;
  // The totals are every rank's (as in the result JSON); rank 0 prints
  // this, so its own count and first message are told apart from them.
  if (summary.samples_skipped + summary.shards_skipped > 0) {
    std::string line = "data.on_corrupt=skip left out " + std::to_string(summary.samples_skipped) +
                       " corrupt sample(s) and " + std::to_string(summary.shards_skipped) + " shard(s)";
    if (world > 1)
      line += " over " + std::to_string(world) + " ranks (this rank: " + std::to_string(read.samples_skipped) +
              " and " + std::to_string(read.shards_skipped) + ")";
    if (!read.skip_messages.empty()) line += "; first: " + read.skip_messages.front();
    outcome.warnings.push_back(line);
  }
  // Shards every tar reader reads as whole, so nothing failed, but which
  // hold less than was written: the tokens/s is real, the data set is not
  // the one meant. The loader's count: prefetching may have read a shard's
  // end that no step reached.
  if (summary.shards_cut_short + summary.shards_without_samples > 0) {
    std::string line = odd_shards_text(summary.shards_cut_short, summary.shards_without_samples) +
                       "; the loader read them as they are";
    if (!read.first_odd_shard.empty())
      line += " (first" + std::string(world > 1 ? " on this rank" : "") + ": " + read.first_odd_shard + ")";
    outcome.warnings.push_back(line + "; `trainbench shards verify` names every such shard");
  }
}

// The bottleneck line, and the straggler that sets the pace.
void name_bottleneck(bool instrument, int world, RunOutcome& outcome) {
  RunSummary& summary = outcome.summary;
  summary.bottleneck = instrument && summary.measured_steps > 0 ? bottleneck_line(summary) : "";
  const std::string slowest_rank_name = "rank " + std::to_string(summary.slowest_rank) + " (" +
                                        summary.ranks[static_cast<size_t>(summary.slowest_rank)].host + ")";
  const std::string slowest_rank_excess =
      std::to_string(static_cast<int>(100 * summary.slowest_rank_excess + 0.5)) + "%";
  if (instrument && world > 1 && summary.slowest_rank_excess >= 0.1)
    summary.bottleneck += "; seen from " + slowest_rank_name + ", which sets the pace: its own work per step is " +
                          slowest_rank_excess + " above the other ranks' median";
  // A straggler whose threads waited for a CPU: its host's contention, not
  // necessarily its hardware (the wait's own warning has the figure).
  const double slowest_wait = summary.ranks[static_cast<size_t>(summary.slowest_rank)].cpu_wait_share;
  if (summary.slowest_rank_excess > 0.2 && world > 1)
    outcome.warnings.push_back(slowest_rank_name + " works " + slowest_rank_excess +
                               " longer per step than the other ranks' median (step less exposed communication): a "
                               "straggler sets everyone's pace" +
                               (slowest_wait >= kCpuWaitNotedShare
                                    ? "; its threads " + cpu_wait_words(slowest_wait) + ": look at what else runs on its CPUs"
                                    : ""));
}

// Timer noise may make other_s a hair negative; more than 1 ms means a
// category was double counted. The detail is the true minimum (it started
// from 0 and printed 6 decimals: always "0.000000 s").
Check step_time_accounted(const std::vector<StepRecord>& steps) {
  const auto worst = std::min_element(steps.begin(), steps.end(),
                                      [](const StepRecord& a, const StepRecord& b) { return a.other_s < b.other_s; });
  char detail[96];
  std::snprintf(detail, sizeof(detail), "min other_s = %.3g ms (step %ld)", 1e3 * worst->other_s,
                static_cast<long>(worst->step));
  return {"step_time_accounted", worst->other_s > -1e-3, detail};
}

// A rank whose threads waited for a CPU a quarter of the time they were
// ready to run: its steps measured the host's contention as much as the
// workload.
std::string cpu_wait_warning(const RunSummary& summary) {
  const RankSummary* worst = nullptr;
  for (const RankSummary& r : summary.ranks)
    if (worst == nullptr || r.cpu_wait_share > worst->cpu_wait_share) worst = &r;
  if (worst == nullptr || worst->cpu_wait_share < kCpuWaitNotedShare) return "";
  const std::string who = summary.ranks.size() > 1 ? "rank " + std::to_string(worst->rank) + "'s threads (" + worst->host + ")"
                                                   : "this run's threads";
  return who + " " + cpu_wait_words(worst->cpu_wait_share) +
         " in the measured steps: the CPUs were oversubscribed (another "
         "process on them, or more threads than the CPUs the process may use: train.threads, data.readers, ranks "
         "per host), and step_s holds that wait";
}

// What the measurement itself warns of: figures to read with care.
void warn_of_measurement(RunOutcome& outcome) {
  const RunSummary& summary = outcome.summary;
  if (summary.mfu_vs_gemm_ceiling > 1.0)
    outcome.warnings.push_back(
        "training ran faster than the GEMM calibration (" +
        std::to_string(static_cast<int>(100 * summary.mfu_vs_gemm_ceiling)) +
        "% of the ceiling): the host's speed varied during the run; treat MFU as approximate");
  if (summary.measured_steps > 0 && summary.measured_steps < 10)
    outcome.warnings.push_back("only " + std::to_string(summary.measured_steps) +
                               (summary.measured_steps == 1 ? " measured step" : " measured steps") +
                               ": step-time statistics are rough");
  if (summary.measured_steps == 0) outcome.warnings.push_back("no step after warm-up: tokens/s is not measured");
  if (const std::string waited = cpu_wait_warning(summary); !waited.empty()) outcome.warnings.push_back(waited);
}
}  // namespace

RunOutcome run_training(const Config& config, TrainingEngine& engine, BatchSource& source,
                        Communicator& comm, const ProgressFn& on_progress, Checkpointer* checkpointer,
                        int64_t first_step, const StepHook& after_step) {
  RunOutcome outcome;
  describe_workload(config, engine, comm, outcome);
  StepLoop loop(config, engine, source, comm, checkpointer, outcome);
  const RestoreComputeTiming restore_compute_timing{engine};
  loop.run(first_step, on_progress, after_step);

  const int64_t every = config.checkpoint.every_steps;
  if (every > 0 && config.train.steps / every * every < first_step)
    outcome.warnings.push_back("checkpoint.every_steps=" + std::to_string(every) + " and this run's steps are " +
                               std::to_string(first_step) + ".." + std::to_string(config.train.steps) +
                               ": no step was due a checkpoint, so storage write is not measured");
  if (checkpointer) summarize_checkpoints(*checkpointer, first_step + config.train.warmup_steps, outcome);
  summarize_steps(outcome.steps, outcome.summary);
  const bool instrument = config.report.instrument;
  summarize_throughput(engine, comm, instrument, outcome);
  const SourceStats read = source.stats();
  summarize_storage_read(read, !outcome.steps.empty(), comm, outcome.summary);
  warn_of_data_read(read, comm.world_size(), outcome);
  name_bottleneck(instrument, comm.world_size(), outcome);

  if (loop.loss_finite()) outcome.checks.push_back({"loss_finite", true, "every step's loss is finite"});
  if (outcome.failure.happened()) outcome.checks.push_back({outcome.failure.check, false, outcome.failure.message});
  loop.ranks().add_check(config.comm.check_every, outcome.checks);
  // Without the timers, or a step, there is nothing to account.
  if (instrument && !outcome.steps.empty()) outcome.checks.push_back(step_time_accounted(outcome.steps));
  warn_of_measurement(outcome);
  return outcome;
}

}  // namespace trainbench
