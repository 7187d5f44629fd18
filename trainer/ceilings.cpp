#include "trainer/ceilings.h"

#include <algorithm>  // std::min
#include <cmath>      // std::ceil
#include <cstdio>     // snprintf: the ceilings line

#include "checkpoint/checkpoint_files.h"  // CheckpointWriteError: a full disk
#include "checkpoint/write_bench.h"     // run_write_bench: the storage-write ceiling
#include "comm/collective_bench.h"      // bench_gradient_step, bench_zero_one_step: the network ceiling
#include "dataloader/io_bench.h"        // measure_loader: the storage-read ceiling
#include "trainer/checkpointing.h"      // state_bytes_per_rank: what a rank writes per checkpoint
#include "trainer/data_source.h"        // loader_options, data_position_bytes_bound
#include "trainer/environment.h"        // device_bench_room_over_ranks: the network ceiling on the GPU
#include "trainer/temporary_folder.h"   // make_temporary_directory, FolderRemovedAtScopeEnd: the write ceiling's scratch
#include "trainer/gradient_sync.h"      // gradient_bucket_bytes: the step's buckets
#include "trainer/hung_storage.h"       // StorageWatchdog: the write measurement, bounded
#include "trainer/report.h"             // human_count, human_bytes, human_rate
#include "trainer/saved_state.h"        // SavedState: the run starts where it would have
#include "trainer/train_loop.h"         // run_training, measurement_batches for the compute ceiling
#include "trainer/zero_optimizer.h"     // zero_padded_elements: ZeRO-1's network ceiling

namespace trainbench {

namespace {

constexpr double kComputeCeilingSeconds = 1.0;
constexpr int64_t kComputeCeilingMaxSteps = 200;
// The network ceiling reads the communicator's paths only (the run's own
// calls, with their comm.timeout_s), not bench comm's raw MPI calls beside them.
constexpr CollectiveBenchOptions kCommunicatorPathsOnly{.raw_path = false};

}  // namespace

// Every rank trains on resident synthetic batches, alone (a local
// communicator): the step with nothing to wait for. A few steps give the
// step time; when they span less than kComputeCeilingSeconds the measurement
// is repeated with enough steps to fill it. The ceiling is the 10th
// percentile step, not the median: interference only ever adds time, and on
// a shared 2-vCPU VM one process alone saw bursts of 0.5-1 s at twice its
// step time, which moved six-step medians by a quarter, so that the run
// "beat" its compute ceiling. On a quiet machine the two differ by ~1%.
ComputeCeiling measure_compute_ceiling(const Config& config, TrainingEngine& engine, Communicator& comm) {
  const SavedState saved(engine);
  std::unique_ptr<BatchSource> resident = measurement_batches(config);
  std::unique_ptr<Communicator> local = make_local_communicator();
  auto pace_step_s = [&](int64_t measured_steps) {
    const Config alone = measurement_run_config(config, 2, measured_steps);
    const RunOutcome outcome = run_training(alone, engine, *resident, *local, nullptr);
    // The slowest rank sets a data-parallel step's pace.
    return max_over_ranks(comm, outcome.summary.step_s.p10);
  };
  const int64_t probe_steps = 6;
  double rank_step_s = pace_step_s(probe_steps);
  if (rank_step_s > 0 && rank_step_s * probe_steps < kComputeCeilingSeconds) {
    // Every rank agrees on the count (the max is the same everywhere), so
    // the ranks measure side by side, as they train.
    const auto steps = static_cast<int64_t>(std::ceil(kComputeCeilingSeconds / rank_step_s));
    rank_step_s = pace_step_s(std::min(steps, kComputeCeilingMaxSteps));
  }
  const double global_tokens = static_cast<double>(config.train.micro_batch * config.train.grad_accum *
                                                   config.model.seq_len * comm.world_size());
  return {rank_step_s > 0 ? global_tokens / rank_step_s : 0.0, rank_step_s};
}

WriteRate measure_write_rate(const Config& config, Communicator& comm, const std::string& checkpoint_dir,
                             int64_t bytes) {
  // Storage that stopped responding would hold the measurement for ever
  // (the --ceilings run's, burn-in's before step 1): the job ends instead.
  const StorageWatchdog watchdog(comm, config.checkpoint.timeout_s,
                                 "measuring the write rate in checkpoint.dir " + checkpoint_dir);
  WriteRate rate;
  WriteBenchResult result;
  // A rank's failure (a full disk, a file-size limit) is every rank's, told
  // in its own words: it ended the job from that rank alone, with a bare
  // message naming a rank_00000 file whatever the rank.
  std::string failure;
  bool disk_full = false;
  // Every rank's persist starts together, after every rank has built and
  // filled its images (up to 1 GiB: a rank still filling while another
  // wrote let that one write alone). A collective each rank makes once:
  // one that fails before it brings its reason there, and the others stop.
  struct PeerFailedFirst {};
  bool agreed = false;
  const auto agree = [&](const std::string& mine) {
    agreed = true;
    return first_reason_over_ranks(comm, mine);
  };
  try {
    // Each rank in a folder of its own: the bench names its files as rank 0's.
    const std::string folder = make_temporary_directory(".ceiling-write", checkpoint_dir);
    const FolderRemovedAtScopeEnd remove_folder(folder);
    WriteBenchOptions write;
    write.folder = folder;
    write.bytes = std::max<int64_t>(bytes, 1 << 20);  // the bench's smallest
    write.files = static_cast<int>(config.checkpoint.writers);
    write.direct_io = config.checkpoint.direct_io;
    write.block_bytes = config.checkpoint.block_bytes;
    write.repeats = 1;
    write.persist_only = true;
    write.before_persist = [&] {
      if (agree("").rank >= 0) throw PeerFailedFirst{};
    };
    result = run_write_bench(write);
  } catch (const PeerFailedFirst&) {
    // told below, in the failing rank's words
  } catch (const CheckpointWriteError& e) {
    failure = e.what();
    disk_full = e.disk_full;
  } catch (const std::exception& e) {  // the folder could not be made, memory for the image
    failure = e.what();
  }
  if (!agreed) (void)agree(failure);
  const RankReason first = first_reason_over_ranks(comm, failure);
  if (first.rank >= 0) {
    rate.failure = comm.world_size() > 1 ? "rank " + std::to_string(first.rank) + ": " + first.reason : first.reason;
    // A disk full only where every failing rank's was.
    rate.disk_full = max_over_ranks(comm, !failure.empty() && !disk_full ? 1.0 : 0.0) == 0.0;
    return rate;
  }
  rate.bytes = result.bytes;
  rate.rank_gbs = result.persist_gbs;
  // Every rank writes at once, as a checkpoint does: the slowest sets the pace.
  const double rank_seconds = result.persist_gbs > 0 ? static_cast<double>(result.bytes) / (result.persist_gbs * 1e9) : 0;
  const double seconds = max_over_ranks(comm, rank_seconds);
  rate.job_gbs = seconds > 0 ? static_cast<double>(result.bytes) * comm.world_size() / seconds * 1e-9 : 0;
  return rate;
}

void set_network_ceiling(Ceilings& c, const std::vector<CollectiveBenchResult>& timed, double global_tokens_per_step) {
  c.network_timed.clear();
  c.network_step_s = 0;
  c.network_tokens_per_s = 0;
  // Nothing of it is kept (the report's busbw, the JSON's timed list).
  if (const std::string failed = failed_data_check(timed); !failed.empty()) {
    c.network_failure = "the " + failed + " returned wrong values (data check failed): its time is no ceiling; "
                        "`trainbench bench comm` shows every collective's check";
    return;
  }
  c.network_timed = timed;
  for (const CollectiveBenchResult& r : timed) c.network_step_s += r.time_s;
  if (c.network_step_s > 0) c.network_tokens_per_s = global_tokens_per_step / c.network_step_s;
}

Ceilings measure_ceilings(const Config& config, TrainingEngine& engine, Communicator& comm,
                          const std::vector<std::string>& shards, const std::string& checkpoint_dir) {
  Ceilings c;
  comm.set_timeout(config.comm.timeout_s);
  comm.set_context("measuring the ceilings");
  const double global_tokens_per_step = static_cast<double>(
      config.train.micro_batch * config.train.grad_accum * config.model.seq_len * comm.world_size());

  c.compute_tokens_per_s = measure_compute_ceiling(config, engine, comm).tokens_per_s;

  const int64_t gradient_bytes = engine.layout().trainable_params() * 4;
  const int64_t zero_bytes = zero_padded_elements(engine.layout().trainable_params(), comm.world_size()) * 4;
  // What one rank holds at once: the whole gradient (DDP's buckets), or
  // ZeRO-1's padded buffer and one rank's block beside it.
  const int64_t network_bytes = config.comm.zero == 1 ? zero_bytes + zero_bytes / comm.world_size() : gradient_bytes;
  // On NCCL the buffers go on the GPU beside the run's model and
  // activations, only where it has them free: the ceiling must not end the
  // run. Agreed over ranks, as every rank takes part.
  if (comm.world_size() > 1) {
    const std::string short_of_room = device_bench_room_over_ranks(comm, network_bytes);
    if (!short_of_room.empty())
      c.network_failure = short_of_room + "; `trainbench bench comm` measures the same collectives on an idle GPU";
  }
  if (comm.world_size() > 1 && c.network_failure.empty()) {
    if (config.comm.zero == 1) {
      // ZeRO-1's step has no all-reduce: the padded gradients reduce-scattered
      // and the parameters all-gathered, through the communicator's blocking
      // calls as ZeroOneOptimizer makes them (the all-reduce timed instead
      // was ~1.7x faster than these two on 2 ranks).
      c.network_collectives = "reduce-scatter and all-gather";
      set_network_ceiling(c, bench_zero_one_step(comm, zero_bytes, kCommunicatorPathsOnly), global_tokens_per_step);
    } else {
      // The run's own schedule: comm.bucket_mb buckets as backward fills them, or
      // under comm.overlap=false the whole buffer at once (timing the buckets
      // there described a step the run did not take).
      const std::vector<int64_t> bucket_bytes = gradient_bucket_bytes(
          engine.layout().trainable_params(), config.comm.bucket_mb, config.comm.overlap);
      std::vector<CollectiveBenchResult> bucketed;
      for (const CollectiveBenchResult& r : bench_gradient_step(comm, bucket_bytes, kCommunicatorPathsOnly))
        if (r.path == "bucketed") bucketed.push_back(r);
      set_network_ceiling(c, bucketed, global_tokens_per_step);
    }
  }

  if (!shards.empty()) {
    LoaderOptions options = loader_options(config, shards, comm.rank(), comm.world_size());
    const ReadRate rate = measure_loader(options, 3.0);
    c.read_tokens_per_s = sum_over_ranks(comm, rate.tokens_per_s());
    c.read_gbs = sum_over_ranks(comm, rate.gbs());
  }

  if (!checkpoint_dir.empty()) {
    // A checkpoint holds the data position too: its shuffle buffers (counted
    // full, as the room check counts them) were half of tiny's checkpoint,
    // left out of the size the write time per step is figured for.
    const int64_t state_bytes = data_position_bytes_bound(config) + state_bytes_per_rank(engine, config, comm.world_size());
    c.checkpoint_bytes = sum_over_ranks(comm, static_cast<double>(state_bytes));
    // A rank's checkpoint, up to 1 GiB: enough to reach the disk's rate
    // without doubling a large model's memory for long.
    const WriteRate rate = measure_write_rate(config, comm, checkpoint_dir, std::min<int64_t>(state_bytes, 1LL << 30));
    c.write_bytes = rate.bytes;
    c.write_gbs = rate.job_gbs;
    c.write_failure = rate.failure;
    if (config.checkpoint.every_steps > 0 && c.write_gbs > 0)
      c.write_s_per_step = c.checkpoint_bytes / (c.write_gbs * 1e9) / static_cast<double>(config.checkpoint.every_steps);
  }
  return c;
}

double network_busbw_gbs(const std::vector<CollectiveBenchResult>& timed) {
  double moved = 0, seconds = 0;  // busbw × time summed: the bus bytes
  for (const CollectiveBenchResult& r : timed) {
    moved += r.busbw_gbs * r.time_s;
    seconds += r.time_s;
  }
  return seconds > 0 ? moved / seconds : 0;
}

nlohmann::json ceilings_to_json(const Ceilings& c, double achieved) {
  const auto share = [achieved](double ceiling) { return ceiling > 0 ? nlohmann::json(achieved / ceiling) : nlohmann::json(); };
  const auto value = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); };
  nlohmann::json timed = nlohmann::json::array();
  for (const CollectiveBenchResult& r : c.network_timed)
    timed.push_back({{"collective", r.collective},
                     {"bytes", r.bytes},
                     {"buckets", r.buckets},
                     {"time_s", r.time_s},
                     {"busbw_gbs", r.busbw_gbs}});
  return {{"compute", {{"tokens_per_s", value(c.compute_tokens_per_s)}, {"achieved_share", share(c.compute_tokens_per_s)}}},
          {"network",
           {{"tokens_per_s", value(c.network_tokens_per_s)},
            {"step_all_reduce_s", value(c.network_step_s)},
            // None timed (one rank, or no room on the GPU): no collectives to
            // name (the report read "timed: all-reduces" beside no figure).
            {"collectives", c.network_timed.empty() ? nlohmann::json() : nlohmann::json(c.network_collectives)},
            {"busbw_gbs", value(network_busbw_gbs(c.network_timed))},
            {"timed", timed},
            {"achieved_share", share(c.network_tokens_per_s)}}},
          {"storage_read",
           {{"tokens_per_s", value(c.read_tokens_per_s)}, {"gbs", value(c.read_gbs)},
            {"achieved_share", share(c.read_tokens_per_s)}}},
          // Not measured (checkpoints off, or the write failed): every figure
          // null, not a 0 s a step that reads as checkpoints costing nothing.
          {"storage_write",
           {{"gbs", value(c.write_gbs)},
            {"bytes_per_rank", c.write_gbs > 0 ? nlohmann::json(c.write_bytes) : nlohmann::json()},
            // Whole, as bytes_per_rank (summed over the ranks as a double).
            {"checkpoint_bytes", c.checkpoint_bytes > 0 ? nlohmann::json(std::llround(c.checkpoint_bytes))
                                                        : nlohmann::json()},
            {"sync_checkpoint_s_per_step", c.write_gbs > 0 ? nlohmann::json(c.write_s_per_step) : nlohmann::json()}}}};
}

namespace {

// The measured ceilings in tokens/s, in the order the line names them.
std::vector<std::pair<const char*, double>> measured_ceilings(const Ceilings& c) {
  std::vector<std::pair<const char*, double>> measured;
  for (const auto& ceiling : {std::pair<const char*, double>{"compute", c.compute_tokens_per_s},
                              {"network", c.network_tokens_per_s},
                              {"storage read", c.read_tokens_per_s}})
    if (ceiling.second > 0) measured.push_back(ceiling);
  return measured;
}

// The lowest of them ({nullptr, 0} when none was measured).
std::pair<const char*, double> lowest_ceiling(const Ceilings& c) {
  std::pair<const char*, double> lowest{nullptr, 0.0};
  for (const auto& ceiling : measured_ceilings(c))
    if (lowest.first == nullptr || ceiling.second < lowest.second) lowest = ceiling;
  return lowest;
}

}  // namespace

std::vector<std::string> ceilings_warnings(const Ceilings& c, double achieved, bool checkpoints_off,
                                           double wall) {
  std::vector<std::string> warnings;
  // Not a structured binding: the lambda below reads `lowest`, and clang
  // before 16 (scripts/fuzz.sh, scripts/sanitize.sh) cannot capture one.
  const std::pair<const char*, double> lowest_pair = lowest_ceiling(c);
  const char* const lowest_name = lowest_pair.first;
  const double lowest = lowest_pair.second;
  if (lowest_name != nullptr && achieved > lowest) {
    const auto percent_of_lowest = [&](double rate) {
      return std::to_string(static_cast<int>(100.0 * rate / lowest + 0.5)) + "%";
    };
    // The loader's ceiling is a sustained rate; the median step is not, where
    // stalls hit fewer than half the steps (storage read at 237 % of its
    // ceiling, 75 % over the wall: every 4th step waited for a burst of
    // batches). The compute and network ceilings are medians of steps too:
    // above them, only the host's speed changed.
    const std::string why =
        std::string(lowest_name) == "storage read" && wall > 0 && wall <= lowest
            ? "its median step leaves out the steps that stalled: over the wall it reached " + human_count(wall) +
                  " tokens/s, " + percent_of_lowest(wall) + " of that ceiling; set the wall rate against it"
            : "the host's speed varied between the measurement and the run; treat the ceilings as approximate";
    warnings.push_back("ceilings: the run reached " + human_count(achieved) + " tokens/s, " + percent_of_lowest(achieved) +
                       " of its " + lowest_name + " ceiling (" + human_count(lowest) + " measured alone): " + why);
  }
  if (checkpoints_off)
    warnings.push_back("ceilings: storage write not measured: this run writes no checkpoints (no folder to write "
                       "them to)");
  return warnings;
}

std::string ceilings_line(const Ceilings& c, double achieved) {
  std::string line;
  for (const auto& [name, tokens_per_s] : measured_ceilings(c))
    line += std::string(line.empty() ? "" : ", ") + name + " " + human_count(tokens_per_s);
  line += " tokens/s";
  const auto [lowest_name, lowest] = lowest_ceiling(c);
  if (const double busbw = network_busbw_gbs(c.network_timed); busbw > 0) line += "; network busbw " + human_rate(busbw);
  // With the write rate, what it costs a synchronous run (the JSON's
  // sync_checkpoint_s_per_step), which async checkpointing is set against.
  if (c.write_gbs > 0) {
    char cost[64];
    std::snprintf(cost, sizeof(cost), " (a synchronous checkpoint: +%.3g ms a step)", 1e3 * c.write_s_per_step);
    line += "; storage write " + human_rate(c.write_gbs) + cost;
  }
  if (lowest_name != nullptr && achieved > 0)
    line += "; the run reached " + human_count(achieved) + " = " +
            std::to_string(static_cast<int>(100.0 * achieved / lowest + 0.5)) + "% of the lowest (" + lowest_name + ")";
  return line;
}

std::string explain_bottleneck(const std::string& bottleneck, const Ceilings& c, double achieved) {
  const auto starts = [&bottleneck](const char* resource) { return bottleneck.rfind(resource, 0) == 0; };
  const std::string compute =
      c.compute_tokens_per_s > 0 ? ", compute alone " + human_count(c.compute_tokens_per_s) + " tokens/s" : "";
  if (starts("storage read") && c.read_tokens_per_s > 0)
    return bottleneck + "; the loader alone feeds " + human_count(c.read_tokens_per_s) + " tokens/s" + compute;
  if (starts("network") && c.network_tokens_per_s > 0)
    return bottleneck + "; the step's " + c.network_collectives + " alone allow " + human_count(c.network_tokens_per_s) +
           " tokens/s" + compute;
  if (starts("storage write") && c.write_gbs > 0)
    return bottleneck + "; a checkpoint (" + human_bytes(c.checkpoint_bytes) + ") persists at " +
           human_rate(c.write_gbs);
  if (starts("compute") && c.compute_tokens_per_s > 0)
    return bottleneck + "; " + human_count(achieved) + " tokens/s = " +
           std::to_string(static_cast<int>(100.0 * achieved / c.compute_tokens_per_s + 0.5)) +
           "% of the compute ceiling";
  return bottleneck;
}

}  // namespace trainbench
