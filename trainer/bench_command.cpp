#include "trainer/bench_command.h"

#include <CLI/CLI.hpp>  // the command line parser
#include <algorithm>    // std::max, std::any_of, std::find_if
#include <cmath>        // std::floor
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>       // MPI's int counts
#include <optional>
#include <string>
#include <utility>  // std::pair: the step by path
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.h"  // check_checkpoint_dir, CheckpointWriteError
#include "checkpoint/write_bench.h"       // run_write_bench: bench io --write
#include "comm/bench_buffer.h"       // free_bench_buffer_bytes: the GPU's room for bench comm
#include "comm/collective_bench.h"   // bench_collectives, bench_gradient_step, bench_zero_one_step
#include "comm/communicator.h"       // make_mpi_communicator, launched_by_mpi
#include "comm/launch_detect.h"      // launcher_rank, launcher_task_count: bench io in one process
#include "dataloader/batch_source.h"  // odd_shards_text
#include "dataloader/data_error.h"  // DataError: a shard list that cannot be read, exit 2
#include "dataloader/io_bench.h"
#include "kernels/engine.h"          // make_layout: the gradient elements
#include "trainer/cli.h"             // CommandError, exit codes
#include "trainer/cli_validators.h"  // integer_range, number_range: numbers checked as typed
#include "trainer/config.h"
#include "trainer/data_source.h"     // shards_for_run, loader_options
#include "trainer/environment.h"     // describe_filesystem, available_memory_bytes, trainbench_version
#include "trainer/gpu_placement.h"   // the rank's GPU for NCCL, one per rank
#include "trainer/results.h"         // read_json_input, not_a_training_result: --against
#include "trainer/gradient_sync.h"   // gradient_bucket_bytes: the trainer's buckets
#include "trainer/zero_optimizer.h"  // zero_padded_elements, zero_block_past_mpi_count: ZeRO-1's step
#include "trainer/instrument_cost.h"  // bench instrument
#include "trainer/ceilings.h"        // measure_compute_ceiling: bench compute
#include "trainer/report.h"          // human_bytes, human_count
#include <system_error>              // --small-files: a file the full disk refused
#include "trainer/run_extension.h"   // bench instrument runs inside the job's setup
#include "trainer/temporary_folder.h"  // make_temporary_directory, FolderRemovedAtScopeEnd: scratch folders
#include "trainer/json_text.h"         // json_text, utf8_escaped: the result is written whatever its strings hold

namespace trainbench {

namespace fs = std::filesystem;

struct BenchCommand::Options {
  std::string config = "preset:tiny";
  std::vector<std::string> overrides;
  std::string readers = "1,2,4";  // checked by integer_list
  double seconds = 30;
  bool small_files = false;
  std::string small_files_dir;
  std::string against;
  std::string out;
  // bench io --write
  bool write = false;
  std::string write_dir;
  int64_t write_bytes = 2LL << 30;
  int64_t write_files = 2;
  bool buffered = false;
  int64_t block_bytes = 64LL << 20;
  int64_t repeats = 3;
  // bench comm
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 256 << 20;
  double factor = 4;
  int64_t iters = 20;
  int64_t warmup_iters = 5;
  int64_t average = 3;  // AcrossRanks: nccl-tests' -a, the slowest rank's by default
  // bench instrument
  int64_t pairs = 40;
  int64_t block_steps = 10;
};

namespace {

constexpr int64_t kRawReadBlock = 4 << 20;  // as `dd bs=4M`
// Each reader holds a read block, a shuffle buffer and a share of the batch
// ring: thousands of them exhaust memory (data.readers has the same bound).
constexpr int64_t kMaxReaders = 256;

// tokens/s one rank consumed in a finished run: the result JSON's global rate
// over its ranks.
double consumed_tokens_per_s_per_rank(const std::string& path) {
  nlohmann::json result;
  try {
    result = read_json_input("--against", path, "a `trainbench run --out` result");
  } catch (const std::invalid_argument& e) {
    throw CommandError{kExitUserError, e.what()};
  }
  const auto number_at = [&](const char* section, const char* key) {
    const nlohmann::json* value = nullptr;
    if (result.is_object() && result.contains(section) && result[section].is_object() &&
        result[section].contains(key))
      value = &result[section][key];
    return value != nullptr && value->is_number() ? value->get<double>() : 0.0;
  };
  // A bench's result has a summary.tokens_per_s too: a two-step job's on
  // resident tokens, which read no storage (it was taken as the run's).
  if (const std::string other = not_a_training_result(result); !other.empty())
    throw CommandError{kExitUserError, "--against " + path + ": " + other + ": give a `trainbench run --out` result"};
  const double tokens_per_s = number_at("summary", "tokens_per_s"), ranks = number_at("environment", "ranks");
  if (!(tokens_per_s > 0) || !(ranks >= 1))
    throw CommandError{kExitUserError, "--against " + path +
                                           ": not a trainbench run result with a measured summary.tokens_per_s and "
                                           "environment.ranks"};
  return tokens_per_s / ranks;
}

// What data.on_corrupt=skip left out of a read (`where`: which, and that
// its figures are the rest's), with the first reason.
std::string skip_warning(const ReadRate& r, const std::string& where) {
  return "data.on_corrupt=skip left out " + std::to_string(r.samples_skipped) + " corrupt sample(s) and " +
         std::to_string(r.shards_skipped) + " shard(s) " + where +
         (r.first_skip.empty() ? "" : "; first: " + r.first_skip);
}

// A plain read decodes no sample: its samples/s and tokens/s are null (not
// measured), as the console's "-", not 0.
nlohmann::json rate_json(const ReadRate& r) {
  return {{"bytes", r.bytes},     {"samples", r.samples},     {"tokens", r.tokens},
          {"files", r.files},     {"seconds", r.seconds},     {"gbs", r.gbs()},
          {"tokens_per_s", r.tokens > 0 ? nlohmann::json(r.tokens_per_s()) : nlohmann::json()},
          {"samples_per_s", r.samples > 0 ? nlohmann::json(r.samples_per_s()) : nlohmann::json()},
          {"complete", r.complete},
          {"samples_skipped", r.samples_skipped}, {"shards_skipped", r.shards_skipped},
          {"shards_cut_short", r.shards_cut_short}, {"shards_without_samples", r.shards_without_samples}};
}

// "37%": a share as the console prints it.
std::string percent_text(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * fraction);
  return text;
}

// data.inject_delay_ms slows every read path of bench io alike (slow storage).
double delay_s(const Config& config) { return config.data.inject_delay_ms * 1e-3; }

// The console's "read" column: all of it, or the share (`done` of `total`
// bytes or files) a measurement had read when --seconds stopped it.
std::string read_extent(bool complete, int64_t done, int64_t total) {
  if (complete) return "all";
  char text[64];
  // Floored, and below 100: a loader stopped with every byte read ahead but
  // its last batches not yet taken has not finished its epoch.
  const double percent = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0.0;
  std::snprintf(text, sizeof text, "%.1f%% (stopped)", std::min(99.9, std::floor(percent * 10) / 10));
  return text;
}

// A data check's word in the table and the JSON.
std::string check_word(bool ok) { return ok ? "ok" : "FAILED"; }

nlohmann::json collective_json(const CollectiveBenchResult& r) {
  return {{"collective", r.collective}, {"path", r.path},           {"bytes", r.bytes},
          {"count", r.count},           {"type", "float"},          {"buckets", r.buckets},
          {"time_s", r.time_s},         {"algbw_gbs", r.algbw_gbs}, {"busbw_gbs", r.busbw_gbs},
          {"check", check_word(r.check_ok)}, {"rank_time_s", r.rank_time_s}};
}

// --- bench comm's memory, sized before anything is allocated ---

// The bytes one rank holds at once while bench comm measures the gradient
// step (`bucket_bytes`) and the sweep (`sizes`, which holds the buckets too).
// collective_bench.cpp allocates each measurement's send and receive buffers
// and frees them before the next, the communicator's path and the raw one
// share them, and the data check reads them (on the host in place; on NCCL
// their host copies, as large again in host memory) with no reference copy:
// the gradient step holds one buffer of every bucket; a size S, all-reduce S
// (in place), reduce-scatter S in and S/n out, all-gather S/n in and S out.
// On the MPI backend, MPI's own scratch for the message comes on top, taken
// as twice the message: Open MPI 4.1's reduce-scatter and reduce allocate
// temporaries that large (peak RSS on 1-8 ranks of one host was at most the
// buffers plus 1.95x the size on any rank).
int64_t comm_bench_bytes_per_rank(const std::vector<int64_t>& sizes, const std::vector<int64_t>& bucket_bytes,
                                  int world, bool mpi_scratch) {
  const int64_t scratch_per_byte = mpi_scratch ? 2 : 0;
  int64_t gradient = 0, largest_bucket = 0;
  for (const int64_t bytes : bucket_bytes) {
    gradient += bytes / 4 * 4;
    largest_bucket = std::max(largest_bucket, bytes / 4 * 4);
  }
  int64_t peak = gradient + scratch_per_byte * largest_bucket;
  for (const int64_t size : sizes) {
    const int64_t all_reduce = std::max<int64_t>(1, size / 4) * 4;
    const int64_t block = std::max<int64_t>(1, size / 4 / world) * 4;  // reduce-scatter's out, all-gather's in
    peak = std::max(peak, all_reduce + scratch_per_byte * all_reduce);
    peak = std::max(peak, block * world + block + scratch_per_byte * block * world);
  }
  return peak;
}

// The sweep bench comm measures: --min-bytes .. --max-bytes by --factor,
// and the model's buckets, on `world` ranks.
struct CommBenchSweep {
  int64_t min_bytes, max_bytes;
  double factor;
  // The gradient step's buffers: the trainer's buckets, or under ZeRO-1
  // (zero_step) its one padded buffer.
  std::vector<int64_t> bucket_bytes;
  int world;
  bool mpi;  // MPI's scratch on top of the buffers
  // ZeRO-1's step: its padded buffer reduce-scattered and all-gathered, not
  // swept (an all-reduce of a whole model's gradient is no step it takes).
  bool zero_step = false;

  std::vector<int64_t> sizes() const { return with_buckets(size_sweep(min_bytes, max_bytes, factor), !zero_step); }
  int64_t bytes_per_rank() const {
    // The step's reduce-scatter and all-gather hold what a swept size of
    // the padded buffer holds for them.
    return zero_step ? comm_bench_bytes_per_rank(with_buckets(sizes(), true), {}, world, mpi)
                     : comm_bench_bytes_per_rank(sizes(), bucket_bytes, world, mpi);
  }

 private:
  std::vector<int64_t> with_buckets(std::vector<int64_t> sizes, bool add) const {
    if (add) sizes.insert(sizes.end(), bucket_bytes.begin(), bucket_bytes.end());
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    return sizes;
  }
};

// What to change when `sweep` does not fit in `room` bytes per rank: the
// largest --max-bytes (with --min-bytes lowered to it when smaller) whose
// footprint fits, or a smaller model when the gradient step alone does not.
std::string comm_bench_memory_remedy(const CommBenchSweep& sweep, int64_t room) {
  // The footprint grows with --max-bytes: a bisection.
  int64_t fits = 0;
  for (int64_t low = 1, high = sweep.max_bytes; low <= high;) {
    const int64_t middle = low + (high - low) / 2;
    CommBenchSweep smaller = sweep;
    smaller.max_bytes = middle;
    smaller.min_bytes = std::min(sweep.min_bytes, middle);
    if (smaller.bytes_per_rank() <= room) {
      fits = middle;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  // As typed: the largest size of the sweep that fits (the same sweep as
  // any --max-bytes up to `fits`), or `fits` in whole MiB when --min-bytes
  // must come down too.
  const int64_t suggested = fits >= sweep.min_bytes ? size_sweep(sweep.min_bytes, fits, sweep.factor).back()
                            : fits >= (1 << 20)     ? fits >> 20 << 20
                                                    : fits;
  const std::string fits_text = suggested % (1 << 20) == 0 ? std::to_string(suggested >> 20) + "M"
                                : suggested % 1024 == 0    ? std::to_string(suggested >> 10) + "K"
                                                           : std::to_string(suggested);
  if (fits == 0) {
    int64_t gradient = 0;
    for (const int64_t b : sweep.bucket_bytes) gradient += b;
    return (sweep.zero_step ? "ZeRO-1's padded gradient alone (" + human_bytes(static_cast<double>(gradient)) + ")"
                            : "the model's gradient step alone (" + human_bytes(static_cast<double>(gradient)) +
                                  " of buckets)") +
           " does not fit: a smaller model (model.n_layers)";
  }
  return fits < sweep.min_bytes ? "give --min-bytes and --max-bytes " + fits_text + " or less"
                                : "give --max-bytes " + fits_text + " or less";
}

// Why this rank cannot hold what `sweep` allocates ("" when it can): its
// host's MemAvailable shared by the `host_ranks` ranks there, then the
// address-space limit (ulimit -v) beside what the process maps already, and
// on NCCL (gpu_free_bytes >= 0) the GPU's free memory less kDeviceBenchReserveBytes,
// where the buffers live (their host copies, for the data check, are as
// large); with the largest --max-bytes that fits.
std::string comm_bench_memory_shortfall(const CommBenchSweep& sweep, int host_ranks, const std::string& host,
                                        int64_t gpu_free_bytes, int rank) {
  const int64_t needed = sweep.bytes_per_rank();
  const int64_t available = available_memory_bytes();
  const int64_t allowed = address_space_limit_bytes();
  const bool limited = allowed > 0;
  const bool on_gpu = gpu_free_bytes >= 0;
  const int64_t gpu_room = on_gpu ? std::max<int64_t>(0, gpu_free_bytes - kDeviceBenchReserveBytes) : 0;
  const int64_t mapped = limited ? mapped_bytes() : 0;
  const bool host_short = available > 0 && needed * host_ranks > available;
  const bool address_space_short = limited && mapped + needed > allowed;
  const bool gpu_short = on_gpu && needed > gpu_room;
  if (!host_short && !address_space_short && !gpu_short) return "";

  // One rank's room, under every limit.
  int64_t room = std::numeric_limits<int64_t>::max();
  if (available > 0) room = available / host_ranks;
  if (limited) room = std::min(room, allowed - mapped);
  if (on_gpu) room = std::min(room, gpu_room);
  const std::string what_to_do = comm_bench_memory_remedy(sweep, room);
  // The sweep stops at the last size by --factor within --max-bytes: 9G is
  // swept to 4 GiB, which "--max-bytes 9.00 GiB needs" left unsaid.
  const int64_t largest = size_sweep(sweep.min_bytes, sweep.max_bytes, sweep.factor).back();  // ascending
  const std::string needs = "bench comm: --max-bytes " + human_bytes(static_cast<double>(sweep.max_bytes)) +
                            (largest < sweep.max_bytes
                                 ? " (the sweep's largest size " + human_bytes(static_cast<double>(largest)) + ")"
                                 : "") +
                            " needs " + human_bytes(static_cast<double>(needed)) +
                            " per rank (the largest collective's send and receive buffers" +
                            (sweep.mpi ? " and MPI's scratch, twice the message" : "") +
                            (on_gpu ? ", on the GPU and again on the host for the data check" : "") + ")";
  if (gpu_short)
    return needs + ", but the GPU of rank " + std::to_string(rank) + " on " + host + " has " +
           human_bytes(static_cast<double>(gpu_free_bytes)) + " free, " +
           human_bytes(static_cast<double>(gpu_room)) + " after " +
           human_bytes(static_cast<double>(kDeviceBenchReserveBytes)) + " kept for NCCL's own buffers: " + what_to_do +
           " (nvidia-smi shows what else holds the GPU's memory)";
  if (host_short)
    return needs + ", " + human_bytes(static_cast<double>(needed * host_ranks)) + " of host memory for the " +
           std::to_string(host_ranks) + " rank(s) on " + host + ", but " +
           human_bytes(static_cast<double>(available)) + " is available: " + what_to_do +
           (host_ranks > 1 ? ", or run fewer ranks per host" : "");
  return needs + ", " + human_bytes(static_cast<double>(mapped + needed)) +
         " of address space with the program as loaded (" + human_bytes(static_cast<double>(mapped)) +
         "), but the address-space limit (ulimit -v) is " + human_bytes(static_cast<double>(allowed)) + " on " +
         host + ": raise it (ulimit -v unlimited) or " + what_to_do;
}

// The GPU bench comm measures NCCL on, picked as `run` picks it:
// comm.backend nccl, or auto on more than one rank where the run would
// train on GPUs (train.device resolves to cuda) and NCCL is built; the
// rank's place on its host picks the GPU. -1: the host backends. A rank
// without a GPU stops every rank (before NCCL's init would wait for it).
int comm_bench_gpu(const Config& config, Communicator& bootstrap) {
  const bool asked = config.comm.backend == "nccl";
  // Not even where the engine would be cuda: no GPU to ask about.
  if (!takes_nccl(config.comm.backend, "cuda", bootstrap.world_size())) return -1;
  const GpuInventory gpus = query_gpus();
  const bool on_gpus =
      takes_nccl(config.comm.backend, resolve_device(config.train.device, gpus), bootstrap.world_size());
  // Every rank answers alike: one that found no GPU while the others did
  // would leave them in NCCL's init (under auto, measuring MPI beside them).
  const double ranks_on_gpus = sum_over_ranks(bootstrap, on_gpus ? 1.0 : 0.0);
  std::string mine;
  if (on_gpus && gpus.gpus.empty())
    mine = (asked ? "comm.backend=nccl: " : "train.device=cuda (under comm.backend auto, NCCL): ") + gpus.why_none +
           " on " + bootstrap.host_name();
  else if (!on_gpus && ranks_on_gpus > 0)
    mine = "comm.backend auto: rank " + std::to_string(bootstrap.rank()) + " on " + bootstrap.host_name() +
           " would not use a GPU (" + (gpus.gpus.empty() ? gpus.why_none : "train.device " + config.train.device) +
           ") where " + std::to_string(static_cast<int>(ranks_on_gpus)) +
           " rank(s) would: NCCL needs one on every rank (or set comm.backend mpi)";
  const std::string why = first_reason_over_ranks(bootstrap, mine).reason;
  if (!why.empty()) throw CommandError{kExitEnvironmentError, "bench comm: " + why};
  if (!on_gpus) return -1;
  const int gpu = gpu_for_local_rank(bootstrap.local_rank(), gpus);
  const std::string shared =
      gpu_shared_over_ranks(bootstrap, &gpus.gpus[static_cast<size_t>(gpu)], static_cast<int>(gpus.gpus.size()));
  if (!shared.empty()) throw CommandError{kExitEnvironmentError, "bench comm: " + shared};
  return gpu;
}

// What each path of a collective is, under its table; the raw path only
// where it ran (an MPI backend: the local one has none).
std::string paths_meaning(const std::string& collective, bool raw) {
  if (collective == "all_reduce")
    return std::string("bucketed: start_all_reduce_sum + wait, as the trainer all-reduces a bucket") +
           (raw ? "; raw: MPI_Allreduce" : "");
  if (collective == "reduce_scatter")
    return std::string("comm: the communicator's reduce_scatter_sum") + (raw ? "; raw: MPI_Reduce_scatter_block" : "");
  return std::string("comm: the communicator's all_gather_floats") + (raw ? "; raw: MPI_Allgather" : "");
}

// The table nccl-tests prints, one row per size and path.
void print_collective_table(const std::vector<CollectiveBenchResult>& results) {
  const bool raw = std::any_of(results.begin(), results.end(),
                               [](const CollectiveBenchResult& r) { return r.path == "raw"; });
  std::string collective;
  for (const CollectiveBenchResult& r : results) {
    if (r.collective != collective) {
      collective = r.collective;
      std::printf("\n  %s (%s)\n", collective.c_str(), paths_meaning(collective, raw).c_str());
      std::printf("  %12s %12s %6s %6s %-9s %10s %10s %10s %7s\n", "size (B)", "count", "type", "redop",
                  "path", "time (us)", "algbw GB/s", "busbw GB/s", "check");
    }
    // Microseconds to 2 decimals, as nccl-tests prints them (1 rank's copy of 1 KiB read "0.0").
    std::printf("  %12ld %12ld %6s %6s %-9s %10.2f %10.3f %10.3f %7s\n", r.bytes, r.count, "float",
                r.collective == "all_gather" ? "none" : "sum", r.path.c_str(), r.time_s * 1e6, r.algbw_gbs,
                r.busbw_gbs, check_word(r.check_ok).c_str());
  }
}

// CONFIG and --set, as every bench that trains or sizes from a config takes them.
void add_config_options(CLI::App& bench, std::string& config, std::vector<std::string>& overrides,
                        const char* config_use) {
  bench.add_option("config", config, std::string("YAML config file or embedded preset ") + config_use)
      ->transform(home_path());
  bench.add_option("--set", overrides, "override a key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

}  // namespace

BenchCommand::BenchCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  bench_ = app.add_subcommand("bench", "measure one resource alone: the ceilings a run is compared with");
  io_ = bench_->add_subcommand(
      "io", "the data loader alone at full speed vs a plain sequential read of the same shards");
  Options& o = *options_;
  add_config_options(*io_, o.config, o.overrides, "(its data and model sections)");
  io_->add_option("--readers", o.readers, "reader counts to measure, 1..256 (default 1,2,4)")
      ->transform(integer_list(1, kMaxReaders));
  io_->add_option("--seconds", o.seconds, "longest time per measurement (default 30); "
                                          "a measurement otherwise reads every shard once")
      ->check(number_range(0.001, 86400));
  io_->add_flag("--small-files", o.small_files,
                "also unpack the samples into one file per member and read that tree");
  io_->add_option("--small-files-dir", o.small_files_dir,
                  "where to unpack for --small-files (default: the temporary directory)")
      ->check(non_empty_path())  // "" was the temporary directory, without a word
      ->transform(home_path());
  io_->add_option("--against", o.against,
                  "a trainbench result JSON: compare with the tokens/s that run consumed per rank")
      ->check(non_empty_path())  // "" compared with nothing, without a word
      ->transform(home_path());
  io_->add_option("--out", o.out, "write the figures as JSON here")
      ->check(non_empty_path())
      ->transform(home_path());
  io_->add_flag("--write", o.write,
                "measure the storage-write ceiling instead: a checkpoint persisted alone, as a run writes it, "
                "beside a plain sequential write of the same size (dd bs=64M oflag=direct conv=fsync)");
  io_->add_option("--dir", o.write_dir,
                  "--write: where to write (a fresh folder is made under it and removed; default: the "
                  "temporary directory). Put it on the checkpoint filesystem")
      ->check(non_empty_path())  // "" was the temporary directory, without a word
      ->transform(home_path());
  io_->add_option("--bytes", o.write_bytes, "--write: checkpoint size (default 2G)")
      ->transform(byte_size_range(int64_t{1} << 20, int64_t{1} << 50));
  io_->add_option("--files", o.write_files, "--write: files per rank, each with its own writer thread (default 2)")
      ->transform(integer_range(1, 1024));
  io_->add_flag("--buffered", o.buffered, "--write: write through the page cache (default: O_DIRECT, both sides)");
  io_->add_option("--block-bytes", o.block_bytes, "--write: bytes per write call of the checkpoint (default 64M)")
      ->transform(byte_size_range(4096, int64_t{1} << 32));
  io_->add_option("--repeats", o.repeats, "--write: checkpoint + plain write pairs; medians reported (default 3)")
      ->transform(integer_range(1, 1000));

  comm_ = bench_->add_subcommand(
      "comm", "the network alone: the model's gradient buckets and a size sweep of all-reduce, "
              "reduce-scatter and all-gather, as nccl-tests (run it under mpirun or srun)");
  add_config_options(*comm_, o.config, o.overrides, "(its model and comm sections)");
  // Host buffers of --max-bytes each: 16 GiB is far above any sweep's need,
  // and 1P was an allocation of petabytes ("out of memory", no figures).
  comm_->add_option("--min-bytes", o.min_bytes, "smallest size of the sweep (default 1K)")
      ->transform(byte_size_range(1, int64_t{1} << 34));
  comm_->add_option("--max-bytes", o.max_bytes,
                    "largest size of the sweep, at most 16G; over MPI at most 8589934588 bytes, one call's int "
                    "count of floats (default 256M)")
      ->transform(byte_size_range(1, int64_t{1} << 34));
  comm_->add_option("--factor", o.factor, "each size of the sweep is the previous one times this (default 4)")
      ->check(number_range(1.01, 1024.0));
  comm_->add_option("--iters", o.iters, "timed iterations per size; the median is reported (default 20)")
      ->transform(integer_range(1, 1000000));
  comm_->add_option("--warmup-iters", o.warmup_iters, "untimed iterations before them (default 5)")
      ->transform(integer_range(0, 1000000));
  comm_->add_option("--average", o.average,
                    "which rank's time, as nccl-tests' -a: 0 rank 0, 1 the mean, 2 the fastest, 3 the slowest "
                    "(default 3, what a training step waits for; nccl-tests' default is 1)")
      ->transform(integer_range(0, 3));
  comm_->add_option("--out", o.out, "write the figures as JSON here (rank 0)")
      ->check(non_empty_path())
      ->transform(home_path());

  instrument_ = bench_->add_subcommand(
      "instrument", "what the per-step timing costs: timed and untimed blocks of steps alternating in one process");
  add_config_options(*instrument_, o.config, o.overrides, "(default: tiny)");
  instrument_->add_option("--pairs", o.pairs, "timed + untimed block pairs (default 40)")
      ->transform(integer_range(2, 100000));
  instrument_->add_option("--block-steps", o.block_steps, "measured steps per block (default 10)")
      ->transform(integer_range(1, 100000));
  instrument_->add_option("--out", o.out, "result JSON path (default trainbench-instrument.json)")
      ->check(non_empty_path())
      ->transform(home_path());

  compute_ = bench_->add_subcommand(
      "compute", "the compute ceiling: the config's step on resident batches, no communication, no checkpoints");
  add_config_options(*compute_, o.config, o.overrides, "(default: tiny)");
  compute_->add_option("--out", o.out, "result JSON path (default trainbench-compute.json)")
      ->check(non_empty_path())
      ->transform(home_path());
  bench_->require_subcommand(1);
}

BenchCommand::~BenchCommand() = default;

bool BenchCommand::parsed() const { return bench_->parsed(); }

namespace {

// The job bench compute and bench instrument measure in, as their summary
// names it: its tokens/s is of one step, not the measurement.
constexpr const char* kMeasurementJob = "the 2-step job the measurement ran in (not the measurement)";

// bench instrument inside `run`'s setup: the measurement before step 1, on
// the job's engine and communicator; the job itself is two steps.
class InstrumentCostRun final : public RunExtension {
 public:
  InstrumentCostRun(int64_t pairs, int64_t block_steps) : pairs_(pairs), block_steps_(block_steps) {}
  void begin(const RunContext& context) override {
    if (context.comm.rank() == 0) {
      std::printf("instrumentation cost: %ld pairs of %ld-step blocks...\n", static_cast<long>(pairs_),
                  static_cast<long>(block_steps_));
      std::fflush(stdout);
    }
    cost_ = measure_instrumentation_cost(context.config, context.engine, context.comm, pairs_, block_steps_);
  }
  bool after_step(const StepRecord&) override { return true; }
  int finish(const RunOutcome&, nlohmann::json* result) override {
    if (result) (*result)["instrumentation_cost"] = instrumentation_cost_json(cost_);
    return kExitOk;
  }
  void print(FILE* out) const override { print_instrumentation_cost(out, cost_); }
  std::string job_options() const override {
    return "--pairs " + std::to_string(pairs_) + " --block-steps " + std::to_string(block_steps_);
  }
  std::string summary_job() const override { return kMeasurementJob; }

 private:
  int64_t pairs_, block_steps_;
  InstrumentationCost cost_;
};

// The job a measurement runs in (bench instrument, bench compute): resident
// tokens and no checkpoints unless the user's --set says otherwise; the
// two-step job after the measurement is not what is measured. Its steps are
// the measurement's own: a --set of them was overridden unseen, unchecked
// (train.steps=-5 accepted), so it is refused.
std::vector<std::string> measurement_job_overrides(const std::string& command,
                                                   const std::vector<std::string>& user) {
  for (const std::string& assignment : user) {
    const std::string key = override_key(assignment);
    if (key == "train.steps" || key == "train.warmup_steps")
      throw CommandError{kExitUserError, "--set " + excerpt(assignment) + ": " + command +
                                             " sets its own job's train.steps and train.warmup_steps (a two-step "
                                             "job after the measurement, which is not what it measures)"};
  }
  refuse_report_out_override(command, user);
  std::vector<std::string> overrides = {"data.source=synthetic", "data.shards=", "checkpoint.every_steps=0",
                                        "report.progress_every=0"};
  overrides.insert(overrides.end(), user.begin(), user.end());
  overrides.push_back("train.steps=2");
  overrides.push_back("train.warmup_steps=1");
  return overrides;
}

// bench compute inside `run`'s setup: the compute ceiling measured before
// step 1, on the job's engine (every rank alone, resident batches: what
// `run --ceilings` calls compute); the job itself is two steps, whose
// summary gives the model's FLOPs per token and the GEMM ceiling.
class ComputeCeilingRun final : public RunExtension {
 public:
  void begin(const RunContext& context) override {
    if (context.comm.rank() == 0) {
      std::printf("compute ceiling: every rank alone on resident batches...\n");
      std::fflush(stdout);
    }
    ceiling_ = measure_compute_ceiling(context.config, context.engine, context.comm);
    world_ = context.comm.world_size();
  }
  bool after_step(const StepRecord&) override { return true; }
  std::string summary_job() const override { return kMeasurementJob; }
  int finish(const RunOutcome& outcome, nlohmann::json* result) override {
    const RunSummary& s = outcome.summary;
    flops_per_s_ = world_ > 0 ? s.model_flops_per_token * ceiling_.tokens_per_s / world_ : 0;
    mfu_ = s.datasheet_peak_flops_per_s > 0 ? flops_per_s_ / s.datasheet_peak_flops_per_s : -1;
    mfu_vs_gemm_ = s.gemm_ceiling_flops_per_s > 0 ? flops_per_s_ / s.gemm_ceiling_flops_per_s : -1;
    const auto figure = [](double v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    if (result)
      (*result)["compute_ceiling"] = {{"tokens_per_s", ceiling_.tokens_per_s},
                                      {"step_s", ceiling_.step_s},
                                      {"flops_per_s_per_rank", flops_per_s_},
                                      {"mfu", figure(mfu_)},
                                      {"mfu_vs_gemm_ceiling", figure(mfu_vs_gemm_)}};
    if (ceiling_.tokens_per_s <= 0)
      throw CommandError{kExitCheckFailed, "bench compute: no step was measured (the compute ceiling is 0)"};
    return kExitOk;
  }
  void print(FILE* out) const override {
    // A CPU's GFLOP/s in GFLOP/s: "0.01 TFLOP/s" hid 11.23 GFLOP/s.
    char rate[48];
    if (flops_per_s_ >= 1e12)
      std::snprintf(rate, sizeof(rate), "%.2f TFLOP/s", flops_per_s_ * 1e-12);
    else
      std::snprintf(rate, sizeof(rate), "%.2f GFLOP/s", flops_per_s_ * 1e-9);
    std::fprintf(out, "compute ceiling: %s tokens/s over %d rank(s), step %.2f ms (p10 of the slowest rank), "
                      "%s per rank",
                 human_count(ceiling_.tokens_per_s).c_str(), world_, 1e3 * ceiling_.step_s, rate);
    if (mfu_ >= 0) std::fprintf(out, ", MFU %.1f%% of the datasheet", 100 * mfu_);
    if (mfu_vs_gemm_ >= 0) std::fprintf(out, ", %.1f%% of the GEMM ceiling", 100 * mfu_vs_gemm_);
    std::fprintf(out, "\n");
  }

 private:
  ComputeCeiling ceiling_;
  int world_ = 1;
  double flops_per_s_ = 0, mfu_ = -1, mfu_vs_gemm_ = -1;
};

}  // namespace

int BenchCommand::run_compute(const std::string& command_line) {
  const Options& o = *options_;
  ComputeCeilingRun measurement;
  return run_with_extension(o.config, measurement_job_overrides("bench compute", o.overrides),
                            o.out.empty() ? "trainbench-compute.json" : o.out, command_line, measurement);
}

int BenchCommand::run_instrument(const std::string& command_line) {
  const Options& o = *options_;
  // Bad counts end here, on every rank alike, before any rank starts the job.
  if (o.pairs < 2) throw CommandError{kExitUserError, "--pairs must be at least 2, got " + std::to_string(o.pairs)};
  if (o.block_steps < 1)
    throw CommandError{kExitUserError, "--block-steps must be at least 1, got " + std::to_string(o.block_steps)};
  InstrumentCostRun measurement(o.pairs, o.block_steps);
  return run_with_extension(o.config, measurement_job_overrides("bench instrument", o.overrides),
                            o.out.empty() ? "trainbench-instrument.json" : o.out, command_line, measurement);
}

// bench io is two benches behind one word: the read bench (the loader and a
// plain read of the config's shards) and --write (a checkpoint persisted
// alone; no config, no shards). An option of the one given to the other was
// ignored without a word (`--write --readers 2`, `--bytes 4M` without
// --write): refused here, before anything is read, made or written.
void BenchCommand::check_io_options() const {
  // The read bench's options; the positional CONFIG too (--write uses none).
  const char* read_only[] = {"config", "--set", "--readers", "--seconds", "--small-files", "--small-files-dir",
                             "--against"};
  const char* write_only[] = {"--dir", "--bytes", "--files", "--buffered", "--block-bytes", "--repeats"};
  const auto given = [this](const char* name) { return io_->get_option(name)->count() > 0; };
  if (options_->write) {
    for (const char* name : read_only) {
      if (!given(name)) continue;
      const std::string what =
          std::string(name) == "config" ? "CONFIG '" + options_->config + "'" : std::string(name);
      throw CommandError{kExitUserError,
                         "bench io --write: " + what +
                             " belongs to the read bench (bench io without --write); --write persists a "
                             "checkpoint of --bytes and reads no config or shards: drop it"};
    }
    return;
  }
  for (const char* name : write_only)
    if (given(name))
      throw CommandError{kExitUserError, std::string("bench io: ") + name +
                                             " applies to --write only (the checkpoint write bench); the read "
                                             "bench does not use it: add --write or drop " + name};
  if (given("--small-files-dir") && !options_->small_files)
    throw CommandError{kExitUserError, "bench io: --small-files-dir is where --small-files unpacks, and "
                                       "--small-files is not given: add --small-files or drop --small-files-dir"};
}

int BenchCommand::run(const std::string& command_line) {
  if (instrument_->parsed()) return run_instrument(command_line);
  if (compute_->parsed()) return run_compute(command_line);
  if (comm_->parsed()) return run_comm(command_line);
  // Started as several tasks (mpirun -np N, srun -n N), every task ran the
  // whole bench: N reports, and every task wrote the same --out. It
  // measures what one process's loader can feed, or one rank's checkpoint
  // write (no figure is combined over ranks), so rank 0 runs it and the
  // others end at once, as `shards` does. Every rank writing at once is
  // `run --ceilings`' storage-write ceiling.
  if (const int tasks = launcher_task_count(); tasks > 1) {
    if (launcher_rank() > 0) return kExitOk;
    if (options_->write)
      std::fprintf(stderr,
                   "trainbench: note: started as %d tasks; bench io --write writes in one process, rank 0's "
                   "(one rank's checkpoint; the other tasks ended at once: every rank writing at once is "
                   "run --ceilings' storage write)\n",
                   tasks);
    else
      std::fprintf(stderr,
                   "trainbench: note: started as %d tasks; bench io reads in one process, rank 0's "
                   "(it measures one rank's loader; the other tasks ended at once)\n",
                   tasks);
  }
  check_io_options();
  return options_->write ? run_io_write(command_line) : run_io(command_line);
}

namespace {

// --- bench io's read phases ---

// The shards bench io reads and what it found of them before the first read.
struct ShardsToRead {
  std::vector<std::string> paths;
  int64_t total_bytes = 0;
  std::string filesystem;         // the type of the one they are on
  int64_t memory_bytes = 0;       // this machine's (<= 0: unknown)
  double resident_at_start = -1;  // the page cache's share of them (< 0: unknown)
};

// data.shards, or the temporary shards `data_config` makes (removed with `setup`).
std::vector<std::string> shards_to_read(const Config& data_config, DataSetup& setup) {
  try {
    return shards_for_run(data_config, 1, &setup, 1, /*show_progress=*/true);
  } catch (const DataError&) {
    throw;  // the shard list: exit 2
  } catch (const std::exception& e) {
    // Making the temporary shards failed (no space, no temporary folder).
    throw CommandError{kExitEnvironmentError, std::string("data: ") + e.what()};
  }
}

int64_t total_shard_bytes(const std::vector<std::string>& shards) {
  int64_t total_bytes = 0;
  for (const std::string& path : shards) {
    // resolve_shard_list took regular files only; one replaced since is named, not an internal error.
    std::error_code error;
    const uintmax_t size = fs::file_size(path, error);
    if (error) throw DataError(CorruptScope::kShard, path + ": cannot get its size: " + error.message());
    total_bytes += static_cast<int64_t>(size);
  }
  return total_bytes;
}

// A reader reads whole shards: a count above theirs is skipped below, and
// with every count skipped the bench measured no loader and passed.
void check_a_reader_count_fits(const std::vector<int64_t>& asked_readers, const std::string& readers_option,
                               size_t shards) {
  const int64_t min_readers = *std::min_element(asked_readers.begin(), asked_readers.end());
  if (min_readers > static_cast<int64_t>(shards))
    throw CommandError{kExitUserError, "--readers " + readers_option + ": only " + std::to_string(shards) +
                                           " shard(s), and a reader reads whole shards: no reader count here can "
                                           "be measured; give --readers up to " + std::to_string(shards) +
                                           ", or more shards"};
}

// One measurement: its rate, and what the page cache held before it.
struct MeasuredRead {
  ReadRate rate;
  double cached = -1;  // resident fraction before it (< 0: unknown)
};

// One reader count's measurements, in the order taken.
struct ReaderCountRow {
  int64_t readers;
  MeasuredRead first, second;
  std::optional<MeasuredRead> loader;
  const MeasuredRead& faster() const { return second.rate.gbs() > first.rate.gbs() ? second : first; }
};

// A plain pass reads the files in list order: the share cached of those
// it opened. `survey`: the page cache as surveyed just before (null: surveyed here).
MeasuredRead plain_pass(const Config& config, const std::vector<std::string>& shards, int64_t threads, double seconds,
                        const std::vector<FileResidency>* survey) {
  const std::vector<FileResidency> own = survey ? std::vector<FileResidency>() : survey_page_cache(shards, seconds);
  const std::vector<FileResidency>& residency = survey ? *survey : own;
  MeasuredRead m;
  m.rate = measure_sequential_read(shards, kRawReadBlock, threads, seconds, delay_s(config));
  m.cached = resident_fraction(residency, static_cast<size_t>(m.rate.files));
  return m;
}

MeasuredRead loader_pass(const Config& config, const std::vector<std::string>& shards, int64_t readers,
                         double seconds) {
  LoaderOptions options = loader_options(config, shards, 0, 1);
  options.readers = readers;
  MeasuredRead loader;
  // The loader reads the shards in its shuffled order: the share of all of them.
  loader.cached = resident_fraction(survey_page_cache(shards, seconds), shards.size());
  loader.rate = measure_loader(options, seconds);
  // A whole epoch without a token: a run of these shards stops with exit
  // 2, and so does the benchmark of its loader (a rate of nothing is no figure).
  if (loader.rate.complete && loader.rate.tokens == 0)
    throw DataError(CorruptScope::kConfig,
                    "data.shards: the loader read all " + std::to_string(shards.size()) +
                        " shard(s) and found no readable sample with tokens (a ." + config.data.field +
                        " member of at least one token): a run of them has nothing to train on");
  return loader;
}

// One row per reader count, ascending; the counts asked that the loader
// could not be measured at go in `skipped_readers`, a line each.
std::vector<ReaderCountRow> measure_reader_counts(const Config& config, const std::vector<std::string>& shards,
                                                  const std::vector<int64_t>& asked_readers, double seconds,
                                                  const std::vector<FileResidency>& before_any,
                                                  std::vector<std::string>& skipped_readers) {
  // For each reader count: a plain read of every shard with that many
  // threads (1st pass), the loader, and the plain read again (2nd pass).
  // Both passes are reported, each with what the page cache held of the
  // files it read before it read them: the first is the cold read when the
  // cache did not hold the files, the second is warm whenever they fit in
  // memory. The faster of the two stays the loader's yardstick ("% same
  // thr.", plain_read in the JSON). One thread is always measured: the
  // single-stream `dd bs=4M` figure. The counts are measured in ascending
  // order, whatever the order typed: the first row is the one-thread row
  // and the last the widest, which "% 1-stream" and the small files'
  // "% same thr." are taken against (`--readers 2,1` took them against the
  // two-thread pass).
  std::vector<int64_t> counts = asked_readers;
  counts.push_back(1);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<ReaderCountRow> rows;
  for (int64_t readers : counts) {
    ReaderCountRow row{readers, plain_pass(config, shards, readers, seconds, rows.empty() ? &before_any : nullptr),
                       {}, std::nullopt};
    const bool asked = std::find(asked_readers.begin(), asked_readers.end(), readers) != asked_readers.end();
    if (asked && static_cast<int64_t>(shards.size()) < readers) {
      skipped_readers.push_back("the loader was not measured with " + std::to_string(readers) + " readers: only " +
                                std::to_string(shards.size()) + " shards (a reader reads whole shards)");
      std::printf("  (skipping %ld readers: only %zu shards)\n", readers, shards.size());
    } else if (asked) {
      row.loader = loader_pass(config, shards, readers, seconds);
    }
    row.second = plain_pass(config, shards, readers, seconds, nullptr);
    rows.push_back(row);
  }
  return rows;
}

// What the loader's epoch met that `run` warns of.
void add_loader_warnings(const std::vector<ReaderCountRow>& rows, std::vector<std::string>& warnings) {
  // data.on_corrupt=skip: what the loader left out is said, as `run` says it
  // (its rate is of the rest). Every reader count reads the same epoch: the first is told.
  for (const ReaderCountRow& row : rows) {
    if (!row.loader || !row.loader->rate.left_out()) continue;
    warnings.push_back(skip_warning(row.loader->rate, "in the loader's epoch with " + std::to_string(row.readers) +
                                                          " reader(s); its figures are the rest's"));
    break;
  }
  // Shards the loader read as whole that hold less than was written, as
  // `run` warns of them (the first reader count that met them is told).
  for (const ReaderCountRow& row : rows) {
    if (!row.loader || row.loader->rate.shards_cut_short + row.loader->rate.shards_without_samples == 0) continue;
    const ReadRate& r = row.loader->rate;
    warnings.push_back("the loader's epoch with " + std::to_string(row.readers) + " reader(s) read as whole: " +
                       odd_shards_text(r.shards_cut_short, r.shards_without_samples) + " (first: " +
                       r.first_odd_shard + "); `trainbench shards verify` names every such shard");
    break;
  }
}

// Figures from the page cache are not the storage's: say so, and how to
// get the storage's.
void add_page_cache_warning(const std::vector<ReaderCountRow>& rows, const ShardsToRead& shards,
                            std::vector<std::string>& warnings) {
  const MeasuredRead& first_read = rows.front().first;
  const int64_t total_bytes = shards.total_bytes, memory_bytes = shards.memory_bytes;
  const std::string storage_figures =
      "for storage figures read a data set larger than memory (trainbench shards synth --size ...), or drop the "
      "page cache as root before bench io (sync; echo 3 > /proc/sys/vm/drop_caches)";
  const bool fits = memory_bytes > 0 && total_bytes <= memory_bytes;
  const bool first_cached = first_read.cached >= 0.5;
  const std::string fit_text = "the shards (" + human_bytes(static_cast<double>(total_bytes)) +
                               ") fit in this machine's memory (" + human_bytes(static_cast<double>(memory_bytes)) +
                               ")";
  if (fits && first_cached) {
    warnings.push_back(fit_text + " and the page cache already held " + percent_text(first_read.cached) +
                       " of what the first pass read: every figure here is a page-cache figure, not the "
                       "storage's; " + storage_figures);
  } else if (fits) {
    warnings.push_back(fit_text + ": once read they come from the page cache, so only the first pass (cached " +
                       (first_read.cached < 0 ? std::string("unknown") : percent_text(first_read.cached)) +
                       ") is a storage figure; the others are page-cache figures; " + storage_figures);
  } else if (first_cached) {
    warnings.push_back("the page cache already held " + percent_text(first_read.cached) +
                       " of what the first pass read: it is not a cold read; " + storage_figures);
  } else {
    // Larger than memory, but a pass stopped at --seconds leaves a part in
    // the cache that the next one reads again.
    int warm = 0, all = 0;
    for (const ReaderCountRow& row : rows)
      for (const MeasuredRead* m : {&row.first, &row.second, row.loader ? &*row.loader : nullptr})
        if (m != nullptr) {
          ++all;
          warm += m->cached >= 0.5 ? 1 : 0;
        }
    if (warm > 0)
      warnings.push_back(std::to_string(warm) + " of the " + std::to_string(all) +
                         " measurements read mostly from the page cache (cached >= 50%): those are page-cache "
                         "figures, not the storage's");
  }
}

// The samples as one file per member, read back.
struct SmallFilesRead {
  ReadRate rate;
  int64_t written = 0;  // the files unpacked
  double files_per_s() const {
    return rate.seconds > 0 && written > 0
               ? static_cast<double>(rate.files) / static_cast<double>(written) / rate.seconds
               : 0.0;
  }
};

// The shards unpacked into `dir` and read with `threads` threads.
SmallFilesRead read_small_files(const Config& config, const ShardsToRead& shards, const std::string& dir,
                                int64_t threads, double seconds) {
  // data.on_corrupt=skip: the corrupt data is left out as the loader
  // leaves it (the first corrupt sample ended the whole bench, exit 2,
  // after the loader's rows had been measured without it).
  const bool skip = config.data.on_corrupt == "skip";
  ReadRate extract_skips;
  SmallFilesRead small;
  try {
    small.written =
        extract_to_small_files(shards.paths, dir, config.data.max_sample_bytes, skip ? &extract_skips : nullptr);
  } catch (const std::system_error& e) {
    throw CommandError{kExitEnvironmentError,
                       std::string("--small-files: ") + e.what() + " (unpacking " +
                           human_bytes(static_cast<double>(shards.total_bytes)) + " of shards, into " + dir +
                           "); free space there or give --small-files-dir a disk with room"};
  }
  small.rate =
      measure_small_files(dir, config.data.field, config.model.vocab, threads, seconds, delay_s(config), skip);
  small.rate.samples_skipped += extract_skips.samples_skipped;
  small.rate.shards_skipped = extract_skips.shards_skipped;
  if (!extract_skips.first_skip.empty()) small.rate.first_skip = extract_skips.first_skip;
  return small;
}

// The percentages compare the share of the data a measurement read per
// second: of the shards' bytes, and for the small files of the files
// written, which hold the members alone, without the tar headers and
// padding (their GB/s against the shards' compared 245 KB of payload
// with 566 KB of tar, and read 9% as 4%).
double shards_read_per_s(const ReadRate& r, int64_t total_bytes) {
  return r.seconds > 0 && total_bytes > 0 ? static_cast<double>(r.bytes) / static_cast<double>(total_bytes) / r.seconds
                                          : 0.0;
}

// The console's table of reads, a line per measurement; `stopped` notes
// whether --seconds ended any of them.
struct ReadTable {
  int64_t total_bytes;
  const ReadRate& single_stream;
  double consumed;  // --against's tokens/s per rank (0: none)
  bool stopped = false;

  void print_row(const std::string& name, const ReadRate& r, double cached, double share_per_s, const ReadRate& same,
                 const std::string& extent) {
    stopped = stopped || !r.complete;
    std::printf("  %-36s %7s %10s %8.2f %11s %10.0f%% %11.0f%%  %-16s", name.c_str(),
                cached < 0 ? "?" : percent_text(cached).c_str(),
                r.tokens > 0 ? human_count(r.tokens_per_s()).c_str() : "-", r.gbs(),
                r.samples > 0 ? human_count(r.samples_per_s()).c_str() : "-",
                100.0 * share_per_s / shards_read_per_s(single_stream, total_bytes),
                100.0 * share_per_s / shards_read_per_s(same, total_bytes), extent.c_str());
    if (consumed > 0 && r.tokens > 0) std::printf("  %10.1fx", r.tokens_per_s() / consumed);
    std::printf("\n");
  }
  void print_shards_row(const std::string& name, const MeasuredRead& m, const ReadRate& same, const char* suffix) {
    print_row(name, m.rate, m.cached, shards_read_per_s(m.rate, total_bytes), same,
              read_extent(m.rate.complete, m.rate.bytes, total_bytes) + suffix);
  }
};

// Returns whether --seconds stopped any measurement.
bool print_read_table(const std::vector<ReaderCountRow>& rows, const std::optional<SmallFilesRead>& small,
                      int64_t max_readers, int64_t total_bytes, double consumed) {
  std::printf("\n  %-36s %7s %10s %8s %11s %11s %12s  %-16s%s\n", "", "cached", "tokens/s", "GB/s", "samples/s",
              "% 1-stream", "% same thr.", "read", consumed > 0 ? "  x consumed" : "");
  ReadTable table{total_bytes, rows.front().faster().rate, consumed};
  for (const ReaderCountRow& row : rows) {
    const std::string plain = "plain read, " + std::to_string(row.readers) + " thread(s), ";
    const ReadRate& same = row.faster().rate;
    table.print_shards_row(plain + "1st pass", row.first, same, "");
    if (row.loader)
      table.print_shards_row("loader, " + std::to_string(row.readers) + " reader(s)", *row.loader, same,
                             row.loader->rate.left_out() ? " but skipped" : "");
    table.print_shards_row(plain + "2nd pass", row.second, same, "");
  }
  // The counts are ascending: the last row is max_readers', the small files' thread count.
  if (small)  // just written: cached as far as memory holds it
    table.print_row("small files, " + std::to_string(max_readers) + " thread(s)", small->rate, -1,
                    small->files_per_s(), rows.back().faster().rate,
                    read_extent(small->rate.complete, small->rate.files, small->written) +
                        (small->rate.left_out() ? " but skipped" : ""));
  return table.stopped;
}

// What the table's columns mean, the warnings, and what the comparisons are of.
void print_read_notes(const std::vector<ReaderCountRow>& rows, const std::optional<SmallFilesRead>& small,
                      bool stopped, const std::vector<std::string>& warnings, double consumed,
                      const std::string& against) {
  bool any_left_out = small && small->rate.left_out();
  for (const ReaderCountRow& row : rows) any_left_out = any_left_out || (row.loader && row.loader->rate.left_out());
  std::printf("  cached: share of the bytes a measurement read that the page cache held before it (mincore): "
              "0%% = read from storage (cold), 100%% = from memory (warm)\n");
  std::printf("  %% 1-stream, %% same thr.: the share of the data read per second, of the faster plain pass's "
              "with 1 thread, with as many threads\n");
  std::printf("  read: all = every shard whole (the loader: one epoch, every shard exactly once)%s%s\n",
              stopped ? "; N% (stopped) = --seconds ended it with N% of the shards' bytes (small files: of "
                        "the files) read, and the figures are that part's"
                      : "",
              any_left_out ? "; but skipped = data.on_corrupt=skip left corrupt data out (warning below)" : "");
  for (const std::string& warning : warnings) std::printf("  warning: %s\n", warning.c_str());
  if (consumed > 0)
    std::printf("\n  training consumed %s tokens/s per rank (%s)\n", human_count(consumed).c_str(), against.c_str());
  if (small)
    std::printf("  small files: %ld files for the shards' samples (%ld files, %ld samples read): the members' "
                "bytes without the tar headers and padding, one open+read+close per file; its %% columns compare "
                "files of the files per second with bytes of the shards' bytes\n",
                small->written, small->rate.files, small->rate.samples);
}

nlohmann::json measured_read_json(const MeasuredRead& m) {
  nlohmann::json j = rate_json(m.rate);
  j["cached_fraction_before"] = m.cached < 0 ? nlohmann::json(nullptr) : nlohmann::json(m.cached);
  return j;
}

// The result JSON; `data_config`: the config as the shards were made.
nlohmann::json io_result_json(const Config& data_config, const ShardsToRead& shards,
                              const std::vector<ReaderCountRow>& rows, const std::optional<SmallFilesRead>& small,
                              double consumed, const std::vector<std::string>& warnings) {
  const ReadRate& single_stream = rows.front().faster().rate;
  nlohmann::json measured = nlohmann::json::array();
  for (const ReaderCountRow& row : rows) {
    const MeasuredRead& faster = row.faster();
    nlohmann::json entry = {{"threads", row.readers},
                            {"plain_read", measured_read_json(faster)},
                            {"plain_read_first_pass", measured_read_json(row.first)},
                            {"plain_read_second_pass", measured_read_json(row.second)}};
    if (row.loader) {
      entry["loader"] = measured_read_json(*row.loader);
      entry["loader_fraction_of_plain_read"] = row.loader->rate.gbs() / faster.rate.gbs();
      entry["loader_fraction_of_single_stream"] = row.loader->rate.gbs() / single_stream.gbs();
    }
    measured.push_back(entry);
  }
  const int64_t total_bytes = shards.total_bytes, memory_bytes = shards.memory_bytes;
  const ReadRate& widest = rows.back().faster().rate;
  return {
      {"schema", "trainbench.bench_io/v1"},
      {"version", trainbench_version()},
      {"config", config_to_json(data_config)},  // as the shards were made
      {"shards", static_cast<int64_t>(shards.paths.size())},
      {"shard_bytes", total_bytes},
      {"filesystem", shards.filesystem},
      {"memory_total_bytes", memory_bytes > 0 ? nlohmann::json(memory_bytes) : nlohmann::json(nullptr)},
      {"shards_fit_in_memory",
       memory_bytes > 0 ? nlohmann::json(total_bytes <= memory_bytes) : nlohmann::json(nullptr)},
      {"cached_fraction_at_start",
       shards.resident_at_start < 0 ? nlohmann::json(nullptr) : nlohmann::json(shards.resident_at_start)},
      {"first_read", measured_read_json(rows.front().first)},
      {"single_stream_read", measured_read_json(rows.front().faster())},
      {"by_threads", measured},
      {"small_files", small ? rate_json(small->rate) : nlohmann::json(nullptr)},
      // The share of the data read per second against the widest plain read's (see shards_read_per_s).
      {"small_files_fraction_of_plain_read",
       small ? nlohmann::json(small->files_per_s() / shards_read_per_s(widest, total_bytes)) : nlohmann::json(nullptr)},
      {"consumed_tokens_per_s_per_rank", consumed > 0 ? nlohmann::json(consumed) : nlohmann::json(nullptr)},
      {"warnings", warnings},
  };
}

}  // namespace

int BenchCommand::run_io(const std::string& command_line) {
  const Options& o = *options_;
  refuse_report_out_override("bench io", o.overrides);
  const Config config = load_config(o.config, o.overrides);
  const double consumed = o.against.empty() ? 0.0 : consumed_tokens_per_s_per_rank(o.against);
  if (!o.out.empty()) check_result_path(o.out);
  check_result_is_not_input(o.out, "--out", o.against, "--against");

  const std::vector<int64_t> asked_readers = integer_list_values(o.readers);
  const int64_t max_readers = *std::max_element(asked_readers.begin(), asked_readers.end());
  // The temporary shards are made for the widest reader count asked (a
  // reader reads whole shards): `bench io --readers 16` on the default data
  // measures 16 readers, not 8 shards' worth.
  Config data_config = config;
  if (data_config.data.shards.empty())
    data_config.data.synth_shards = std::max(data_config.data.synth_shards, max_readers);
  // bench io reads shards whatever data.source says (the run's own where
  // data.shards is empty): checked as a shards run's config, so that shards
  // its own reader would refuse (data.max_sample_bytes) are never written;
  // loaded again for that, so that a refusal names where its keys were set.
  if (config.data.source != "shards") {
    std::vector<std::string> as_shards = o.overrides;
    as_shards.push_back("data.source=shards");
    (void)load_config(o.config, as_shards);
  }
  DataSetup setup;
  ShardsToRead shards;
  shards.paths = shards_to_read(data_config, setup);
  shards.total_bytes = total_shard_bytes(shards.paths);
  shards.filesystem = describe_filesystem("data", setup.data_path).type;
  check_a_reader_count_fits(asked_readers, o.readers, shards.paths.size());
  std::printf("bench io: %s\n", setup.description.c_str());
  std::printf("  %s on %s (%s); field .%s, micro-batch %ld x %ld tokens, shuffle buffer %ld\n",
              human_bytes(static_cast<double>(shards.total_bytes)).c_str(), setup.data_path.c_str(),
              shards.filesystem.c_str(), config.data.field.c_str(), config.train.micro_batch,
              config.model.seq_len, config.data.shuffle_buffer);
  std::fflush(stdout);

  // What the page cache holds decides what a read measures: storage, or
  // memory. Surveyed (mincore) before each measurement, and said beside it.
  shards.memory_bytes = total_memory_bytes();
  const std::vector<FileResidency> before_any = survey_page_cache(shards.paths, o.seconds);
  shards.resident_at_start = resident_fraction(before_any, shards.paths.size());
  std::printf("  page cache: %s of the shards' bytes resident before the first read (mincore); "
              "memory %s; each measurement at most %gs (--seconds)\n",
              shards.resident_at_start < 0 ? "unknown share" : percent_text(shards.resident_at_start).c_str(),
              shards.memory_bytes > 0 ? human_bytes(static_cast<double>(shards.memory_bytes)).c_str() : "unknown",
              o.seconds);
  std::fflush(stdout);

  // The small files' folder, made before the measurements: a
  // --small-files-dir that could not take it was found after them all
  // (minutes of them), and not one row was kept. It goes however this ends.
  std::string small_dir;
  std::optional<FolderRemovedAtScopeEnd> remove_small_dir;
  if (o.small_files) {
    try {
      small_dir = make_temporary_directory("trainbench-small-files", o.small_files_dir);
    } catch (const std::runtime_error& e) {
      throw CommandError{kExitUserError, std::string("--small-files-dir: ") + e.what()};
    }
    remove_small_dir.emplace(small_dir);
  }
  // Reader counts the loader could not be measured at: said in the result
  // JSON's warnings too, where a sweep over --readers looks for its rows.
  std::vector<std::string> skipped_readers;
  const std::vector<ReaderCountRow> rows =
      measure_reader_counts(config, shards.paths, asked_readers, o.seconds, before_any, skipped_readers);

  std::vector<std::string> warnings = setup.warnings;
  warnings.insert(warnings.end(), skipped_readers.begin(), skipped_readers.end());
  add_loader_warnings(rows, warnings);
  add_page_cache_warning(rows, shards, warnings);
  std::optional<SmallFilesRead> small;
  if (o.small_files) {
    small = read_small_files(config, shards, small_dir, max_readers, o.seconds);
    if (small->rate.left_out())
      warnings.push_back(skip_warning(small->rate, "of the small files; their figures are the rest's"));
  }

  const bool stopped = print_read_table(rows, small, max_readers, shards.total_bytes, consumed);
  print_read_notes(rows, small, stopped, warnings, consumed, o.against);
  if (!o.out.empty()) {
    nlohmann::json result = io_result_json(data_config, shards, rows, small, consumed, warnings);
    result["command"] = utf8_escaped(command_line);  // argv is bytes
    write_result_json(o.out, result, config, false);
    std::printf("  result: %s\n", o.out.c_str());
  }
  return kExitOk;
}

namespace {

// --- bench io --write's phases ---

std::string make_write_bench_folder(const std::string& write_dir) {
  try {
    return make_temporary_directory("trainbench-bench-write", write_dir);
  } catch (const std::runtime_error& e) {
    throw CommandError{kExitUserError, "--dir: " + std::string(e.what())};
  }
}

// The folder refused as a checkpoint.dir would be, before anything is
// measured: exit 2 for a --dir that cannot be written, 3 for a full disk or
// the system's temporary directory (named as the user mends it: TMPDIR). A
// full TMPDIR was "--dir: checkpoint.dir ... is not writable", exit 2,
// where no --dir was given.
void check_write_bench_folder(const std::string& folder, const std::string& write_dir) {
  const bool temporary = write_dir.empty();
  try {
    check_checkpoint_dir(folder, temporary ? temporary_directory_name() + ": the bench's folder" : "--dir");
  } catch (const CheckpointWriteError& e) {
    throw CommandError{e.disk_full || temporary ? kExitEnvironmentError : kExitUserError,
                       std::string(e.what()) + (temporary ? "; set TMPDIR to a folder with room, or give --dir" : "")};
  }
}

// Before a byte is allocated or written: an image beyond the host's memory
// ends in the OOM killer (its pages are filled), and a disk filled by a
// benchmark is full for everyone else on it.
void refuse_beyond_memory_or_disk(const WriteBenchOptions& options, const FilesystemInfo& fs_info) {
  const WriteBenchFootprint footprint = write_bench_footprint(options);
  const int64_t memory_available = available_memory_bytes();
  const std::string needs = "bench io --write: --bytes " + human_bytes(static_cast<double>(options.bytes)) + " needs ";
  if (memory_available > 0 && footprint.memory_bytes > memory_available)
    throw CommandError{kExitEnvironmentError,
                       needs + human_bytes(static_cast<double>(footprint.memory_bytes)) +
                           " of host memory for the checkpoint's image but " +
                           human_bytes(static_cast<double>(memory_available)) +
                           " is available: give a smaller --bytes"};
  if (fs_info.free_bytes >= 0 && footprint.disk_bytes > fs_info.free_bytes)
    throw CommandError{kExitEnvironmentError,
                       needs + human_bytes(static_cast<double>(footprint.disk_bytes)) + " free in " +
                           fs::path(options.folder).parent_path().string() + " (one write's files at a time) but " +
                           human_bytes(static_cast<double>(fs_info.free_bytes)) +
                           " is free: give a smaller --bytes or another --dir"};
}

// What the bench writes and where, said before it writes.
void print_write_bench_plan(const WriteBenchOptions& options, int64_t files_asked, const FilesystemInfo& fs_info) {
  const std::vector<SectionSpec> sections = write_bench_sections(options.bytes);
  // A file holds whole sections: past their number, the writers asked for
  // have nothing to write (--files 1024 wrote 4 files, and said 1024).
  const size_t files_written = assign_sections_to_files(sections, options.files).size();
  const std::string of_files_asked =
      files_written < static_cast<size_t>(files_asked)
          ? " (of the " + std::to_string(files_asked) + " asked: a file holds whole sections)"
          : "";
  std::printf("bench io --write: a %s checkpoint (%zu sections in %zu file(s)%s, one writer each, %s writes%s) "
              "vs a plain sequential write of the same size\n",
              human_bytes(static_cast<double>(options.bytes)).c_str(), sections.size(), files_written,
              of_files_asked.c_str(), human_bytes(static_cast<double>(options.block_bytes)).c_str(),
              options.direct_io ? ", O_DIRECT" : ", buffered");
  std::printf("  in %s (%s, %s free); %d repeat(s), the three rotating\n", options.folder.c_str(),
              fs_info.type.c_str(),
              fs_info.free_bytes >= 0 ? human_bytes(static_cast<double>(fs_info.free_bytes)).c_str() : "unknown",
              options.repeats);
  std::fflush(stdout);
}

void print_write_bench_table(const WriteBenchResult& r) {
  const double gb = static_cast<double>(r.bytes) / 1e9;
  std::printf("\n  %-8s %22s %22s %22s\n", "repeat", "checkpoint GB/s (s)", "plain write GB/s (s)",
              "from state GB/s (s)");
  for (size_t i = 0; i < r.persist_seconds.size(); ++i)
    // Seconds to 3 significant digits: a 1 MiB write's 0.3 ms read "(0.00)".
    std::printf("  %-8zu %13.2f (%#6.3g) %13.2f (%#6.3g) %13.2f (%#6.3g)\n", i + 1, gb / r.persist_seconds[i],
                r.persist_seconds[i], gb / r.plain_seconds[i], r.plain_seconds[i], gb / r.plain_from_state_seconds[i],
                r.plain_from_state_seconds[i]);
  std::printf("  %-8s %13.2f %8s %13.2f %8s %13.2f\n", "median", r.persist_gbs, "", r.plain_gbs, "",
              r.plain_from_state_gbs);
  // r.bytes is what the checkpoint's files hold, their headers and padding
  // included: the plain write writes as many. A 1M --bytes read "1.01 MiB
  // each" with nothing to say why.
  std::printf("\n  checkpoint persist = %.0f%% of a plain sequential write (%s each, the checkpoint's files with "
              "their headers; checkpoint %s, plain write %s)\n",
              100.0 * r.ratio, human_bytes(static_cast<double>(r.bytes)).c_str(),
              r.persist_direct_io ? "O_DIRECT" : "buffered", r.plain_direct_io ? "O_DIRECT" : "buffered");
  std::printf("  plain write: one 64 MiB buffer written again and again, as dd bs=64M; from state: the same\n"
              "  single stream from the checkpoint's memory (%.0f%% of dd's way; the checkpoint %.0f%% of it)\n",
              100.0 * r.plain_from_state_gbs / r.plain_gbs, 100.0 * r.persist_gbs / r.plain_from_state_gbs);
  for (const std::string& warning : r.warnings) std::printf("  warning: %s\n", warning.c_str());
}

nlohmann::json write_bench_json(const WriteBenchResult& r, const WriteBenchOptions& options,
                                const FilesystemInfo& fs_info, int64_t files_asked) {
  const double gb = static_cast<double>(r.bytes) / 1e9;
  nlohmann::json files = nlohmann::json::array();
  for (const std::vector<SectionPlacement>& file : r.files) {
    nlohmann::json sections_json = nlohmann::json::array();
    for (const SectionPlacement& s : file)
      sections_json.push_back({{"name", s.name}, {"offset", s.offset}, {"bytes", s.bytes}});
    files.push_back({{"sections", sections_json}});
  }
  auto side = [&](const std::vector<double>& seconds, double median_gbs, bool direct) {
    std::vector<double> gbs;
    for (double s : seconds) gbs.push_back(gb / s);
    return nlohmann::json{{"gbs", median_gbs}, {"gbs_each", gbs}, {"seconds_each", seconds}, {"direct_io", direct}};
  };
  return {
      {"schema", "trainbench.bench_io_write/v1"},
      {"version", trainbench_version()},
      {"folder", options.folder},
      {"filesystem", fs_info.type},
      {"bytes", r.bytes},
      {"files", files},
      {"files_asked", files_asked},
      {"block_bytes", options.block_bytes},
      {"repeats", options.repeats},
      {"checkpoint_persist", side(r.persist_seconds, r.persist_gbs, r.persist_direct_io)},
      {"plain_write", side(r.plain_seconds, r.plain_gbs, r.plain_direct_io)},
      {"plain_write_from_state", side(r.plain_from_state_seconds, r.plain_from_state_gbs, r.plain_direct_io)},
      {"ratio", r.ratio},
      {"ratio_to_plain_write_from_state", r.plain_from_state_gbs > 0 ? r.persist_gbs / r.plain_from_state_gbs : 0.0},
      {"warnings", r.warnings},
  };
}

void save_write_bench_result(const std::string& out, const nlohmann::json& result) {
  // Bounded as every result is (write_result_json): --write reads no
  // config, so by checkpoint.timeout_s's default.
  const double bound_s = Config().checkpoint.timeout_s;
  char bound_named[64];
  std::snprintf(bound_named, sizeof bound_named, "%g s (checkpoint.timeout_s's default)", bound_s);
  write_file_within(out, json_text(result, 2) + "\n", bound_s, bound_named);
}

}  // namespace

int BenchCommand::run_io_write(const std::string& command_line) {
  const Options& o = *options_;
  if (o.block_bytes % kImageAlignment != 0)
    throw CommandError{kExitUserError, "--block-bytes " + std::to_string(o.block_bytes) + " is not a multiple of " +
                                           std::to_string(kImageAlignment)};
  if (!o.out.empty()) check_result_path(o.out);
  const std::string folder = make_write_bench_folder(o.write_dir);
  // The folder goes whatever happens; the bench itself leaves nothing in it.
  const FolderRemovedAtScopeEnd remove_folder(folder);
  check_write_bench_folder(folder, o.write_dir);

  WriteBenchOptions options;
  options.folder = folder;
  options.bytes = o.write_bytes;
  options.files = static_cast<int>(o.write_files);
  options.direct_io = !o.buffered;
  options.block_bytes = o.block_bytes;
  options.repeats = static_cast<int>(o.repeats);
  const FilesystemInfo fs_info = describe_filesystem("checkpoint", folder);
  refuse_beyond_memory_or_disk(options, fs_info);
  print_write_bench_plan(options, o.write_files, fs_info);

  const WriteBenchResult r = run_write_bench(options);
  print_write_bench_table(r);
  if (!o.out.empty()) {
    nlohmann::json result = write_bench_json(r, options, fs_info, o.write_files);
    result["command"] = utf8_escaped(command_line);  // argv is bytes
    save_write_bench_result(o.out, result);
    std::printf("  result: %s\n", o.out.c_str());
  }
  return kExitOk;
}

namespace {

// --- bench comm's phases ---

// What bench comm measures and on which ranks: said before it measures,
// and in the result JSON.
struct CommBenchSetup {
  int64_t gradient_elements = 0;
  std::vector<int64_t> bucket_bytes;  // the trainer's buckets of them, or ZeRO-1's padded buffer
  bool zero_step = false;             // comm.zero 1 on 2 ranks or more: no all-reduce
  int world = 0, hosts = 0;
  int host_ranks = 0;  // the ranks on this host
  bool mpi = false;    // the MPI backend: a raw path, and MPI's scratch
  int64_t bytes_per_rank = 0;
  int64_t iters = 0, warmup_iters = 0, average = 0;  // as typed
  AcrossRanks across_ranks = AcrossRanks::kMax;
  std::vector<std::string> warnings;  // printed under the setup, and in the JSON
};

// The elements of the gradient one training step of this model all-reduces.
int64_t gradient_elements_of(const Config& config) {
  EngineOptions engine_options;
  engine_options.shape = config.model;
  engine_options.lora = lora_spec(config);
  return make_layout(engine_options).trainable_params();
}

// The communicator measured: `bootstrap`, or NCCL over it on the rank's GPU
// where comm_bench_gpu picks one.
std::unique_ptr<Communicator> measured_communicator(std::unique_ptr<Communicator> bootstrap, const Config& config) {
  const int gpu = comm_bench_gpu(config, *bootstrap);
  if (gpu < 0) return bootstrap;
  std::unique_ptr<Communicator> comm = make_nccl_communicator(std::move(bootstrap), gpu, config.comm.timeout_s);
  if (comm == nullptr) throw CommandError{kExitEnvironmentError, "comm.backend=nccl: this build has no NCCL backend"};
  comm->set_context("bench comm");
  return comm;
}

// The raw path makes one MPI call per size, and MPI counts are int: a
// larger size ended the job (exit 3) once the buffers were allocated and
// the communicator's path measured. Same options on every rank (checked
// before this, check_ranks_run_the_same_job): every rank refuses alike.
void refuse_sizes_beyond_one_mpi_call(const CommBenchSweep& sweep, const Config& config, int64_t gradient_elements) {
  constexpr int64_t kMpiMaxBytes = int64_t{std::numeric_limits<int>::max()} * 4;
  const int64_t largest_bucket = *std::max_element(sweep.bucket_bytes.begin(), sweep.bucket_bytes.end());
  if (sweep.mpi && size_sweep(sweep.min_bytes, sweep.max_bytes, sweep.factor).back() > kMpiMaxBytes)
    throw CommandError{kExitUserError,
                       "bench comm: --max-bytes " + human_bytes(static_cast<double>(sweep.max_bytes)) +
                           " is more than one MPI call carries (counts are int: at most 2147483647 floats, " +
                           std::to_string(kMpiMaxBytes) + " bytes), and the raw path measures each size in one "
                           "call: give --max-bytes " + std::to_string(kMpiMaxBytes) + " or less (e.g. 4G)"};
  if (sweep.mpi && sweep.zero_step) {
    const std::string past = zero_block_past_mpi_count(gradient_elements, sweep.world);
    if (!past.empty()) throw CommandError{kExitUserError, "bench comm: " + past};
  } else if (sweep.mpi && largest_bucket > kMpiMaxBytes)
    throw CommandError{kExitUserError,
                       "bench comm: a gradient bucket of " + human_bytes(static_cast<double>(largest_bucket)) +
                           " is more than one MPI call carries (counts are int: at most " +
                           std::to_string(kMpiMaxBytes) + " bytes of floats): " +
                           (config.comm.overlap ? "set comm.bucket_mb lower"
                                                : "set comm.overlap=true (off makes the gradient one bucket)")};
}

// Before a byte is allocated: the buffers of the largest size (and MPI's
// scratch) on every rank of a host come out of that host's memory; 16G on
// two ranks ran a minute and ended in the system's OOM killer, and under
// ulimit -v said only "out of memory".
void check_room_for_buffers(const CommBenchSweep& sweep, int host_ranks, Communicator& comm) {
  // One rank's shortfall alone (MemAvailable read at slightly different
  // moments, a limit on one node) stops every rank.
  // A GPU whose free memory cannot be read is every rank's reason to stop
  // too: alone, that rank left the others waiting in the agreement below.
  std::string why_no_gpu_figure;
  const int64_t gpu_free = free_bench_buffer_bytes(comm, &why_no_gpu_figure);
  const std::string mine =
      comm.device_buffers() && gpu_free < 0
          ? "bench comm: the free memory of rank " + std::to_string(comm.rank()) + "'s GPU: " + why_no_gpu_figure
          : comm_bench_memory_shortfall(sweep, host_ranks, comm.host_name(), gpu_free, comm.rank());
  const std::string shortfall = first_reason_over_ranks(comm, mine).reason;
  if (!shortfall.empty()) throw CommandError{kExitEnvironmentError, shortfall};
}

void print_comm_bench_setup(const CommBenchSetup& s, const Config& config, Communicator& comm) {
  const char* whose = s.across_ranks == AcrossRanks::kRankZero ? "rank 0's"
                      : s.across_ranks == AcrossRanks::kMean   ? "the mean over ranks of each rank's"
                      : s.across_ranks == AcrossRanks::kMin    ? "the fastest rank's"
                                                               : "the slowest rank's";
  std::printf("bench comm: %d rank(s) on %d host(s), backend %s%s; each figure %s median of "
              "%ld iterations after %ld warm-up (--average %ld)\n",
              s.world, s.hosts, comm.backend_name(),
              comm.device_buffers() ? (" (NCCL " + nccl_version() + ") on each rank's GPU").c_str() : "", whose,
              s.iters, s.warmup_iters, s.average);
  if (s.zero_step)
    std::printf("  model %s: %s of fp32 gradients, padded to %s for ZeRO-1 (comm.zero 1: reduce-scattered, then "
                "the parameters all-gathered; comm.bucket_mb and comm.overlap do not apply)\n",
                config.origin.c_str(), human_bytes(static_cast<double>(s.gradient_elements) * 4).c_str(),
                human_bytes(static_cast<double>(s.bucket_bytes.front())).c_str());
  else
    std::printf("  model %s: %s of fp32 gradients in %zu bucket(s), the first %s (comm.bucket_mb %g, "
                "comm.overlap %s)\n",
                config.origin.c_str(), human_bytes(static_cast<double>(s.gradient_elements) * 4).c_str(),
                s.bucket_bytes.size(), human_bytes(static_cast<double>(s.bucket_bytes.front())).c_str(),
                config.comm.bucket_mb, config.comm.overlap ? "on" : "off: one bucket");
  std::printf("  memory: at most %s per rank at once (the largest size's buffers%s), %d rank(s) on this host\n",
              human_bytes(static_cast<double>(s.bytes_per_rank)).c_str(),
              s.mpi                    ? " and MPI's scratch"
              : comm.device_buffers() ? ", on each rank's GPU and as much on the host for the data check"
                                       : "",
              s.host_ranks);
  if (s.world == 1)
    std::printf("  one rank: nothing crosses a link, so busbw is 0 by definition; the data check still runs\n");
  for (const std::string& warning : s.warnings) std::printf("  warning: %s\n", warning.c_str());
  std::fflush(stdout);
}

// The gradient step's time on each path, in the order measured: its one
// row's (the buckets' all-reduces), or ZeRO-1's reduce-scatter and
// all-gather summed.
std::vector<std::pair<std::string, double>> step_seconds_by_path(const std::vector<CollectiveBenchResult>& step) {
  std::vector<std::pair<std::string, double>> paths;
  for (const CollectiveBenchResult& r : step) {
    auto found = std::find_if(paths.begin(), paths.end(), [&](const auto& p) { return p.first == r.path; });
    if (found == paths.end()) paths.emplace_back(r.path, r.time_s);
    else found->second += r.time_s;
  }
  return paths;
}

// ZeRO-1's step: each path's reduce-scatter and all-gather, then their sum
// (the gradient norm's all-gather of one float per rank, which the step
// makes too, aside).
void print_zero_step(const CommBenchSetup& s, const std::vector<CollectiveBenchResult>& step) {
  std::printf("\n  gradient step: ZeRO-1, %s reduce-scattered, then the parameters all-gathered, one blocking "
              "call each\n", human_bytes(static_cast<double>(s.bucket_bytes.front())).c_str());
  std::printf("  %-9s %-15s %12s %10s %10s %7s\n", "path", "collective", "time (us)", "algbw GB/s", "busbw GB/s",
              "check");
  for (const CollectiveBenchResult& r : step)
    std::printf("  %-9s %-15s %12.2f %10.3f %10.3f %7s\n", r.path.c_str(), r.collective.c_str(), r.time_s * 1e6,
                r.algbw_gbs, r.busbw_gbs, check_word(r.check_ok).c_str());
  for (const auto& [path, seconds] : step_seconds_by_path(step))
    std::printf("  %-9s %-15s %12.2f\n", path.c_str(), "step (sum)", seconds * 1e6);
}

void print_comm_bench_results(const CommBenchSetup& s, const std::vector<CollectiveBenchResult>& step,
                              const std::vector<CollectiveBenchResult>& collectives, bool all_ok) {
  if (s.zero_step) {
    print_zero_step(s, step);
  } else {
    std::printf("\n  gradient step: %zu bucket(s), %s, all-reduced back to back\n", s.bucket_bytes.size(),
                human_bytes(static_cast<double>(s.gradient_elements) * 4).c_str());
    std::printf("  %-9s %12s %10s %10s %7s\n", "path", "time (us)", "algbw GB/s", "busbw GB/s", "check");
    for (const CollectiveBenchResult& r : step)
      std::printf("  %-9s %12.2f %10.3f %10.3f %7s\n", r.path.c_str(), r.time_s * 1e6, r.algbw_gbs, r.busbw_gbs,
                  check_word(r.check_ok).c_str());
  }
  print_collective_table(collectives);
  if (!all_ok) std::printf("\n  data check FAILED: a collective returned wrong values on some rank\n");
  std::fflush(stdout);
}

nlohmann::json comm_result_json(const CommBenchSetup& s, const Config& config, Communicator& comm,
                                const std::vector<CollectiveBenchResult>& step,
                                const std::vector<CollectiveBenchResult>& collectives, bool all_ok) {
  nlohmann::json step_json = nlohmann::json::array();
  for (const CollectiveBenchResult& r : step) step_json.push_back(collective_json(r));
  nlohmann::json collectives_json = nlohmann::json::array();
  for (const CollectiveBenchResult& r : collectives) collectives_json.push_back(collective_json(r));
  // The step as a whole on each path, whichever collectives make it: its
  // bytes (the buckets, or ZeRO-1's padded buffer, which moves an
  // all-reduce's bus bytes in its two halves) at nccl-tests' all-reduce factor.
  int64_t step_bytes = 0;
  for (const int64_t b : s.bucket_bytes) step_bytes += b;
  nlohmann::json step_seconds = nlohmann::json::object(), step_busbw = nlohmann::json::object();
  for (const auto& [path, seconds] : step_seconds_by_path(step)) {
    step_seconds[path] = seconds;
    step_busbw[path] =
        seconds > 0 ? static_cast<double>(step_bytes) * bus_bandwidth_factor("all_reduce", s.world) / seconds * 1e-9
                    : 0.0;
  }
  return {
      {"schema", "trainbench.bench_comm/v2"},
      {"version", trainbench_version()},
      {"config", config_to_json(config)},
      {"backend", comm.backend_name()},
      // What the figures are of: the library under the backend.
      {"library", std::string(comm.backend_name()) == "mpi"    ? nlohmann::json(mpi_library_version())
                  : std::string(comm.backend_name()) == "nccl" ? nlohmann::json(nccl_version())
                                                                : nlohmann::json(nullptr)},
      // Where the collectives' buffers were: "gpu" (nccl, each rank's) or "host".
      {"buffers", comm.device_buffers() ? "gpu" : "host"},
      {"ranks", s.world},
      {"hosts", s.hosts},
      {"iters", s.iters},
      {"warmup_iters", s.warmup_iters},
      {"average", across_ranks_name(s.across_ranks)},
      {"gradient_bytes", s.gradient_elements * static_cast<int64_t>(sizeof(float))},
      {"bucket_bytes", s.bucket_bytes},
      // What gradient_step times: the buckets' all-reduces, or (comm.zero 1)
      // ZeRO-1's reduce-scatter and all-gather of the padded buffer.
      {"gradient_step_collectives", s.zero_step ? nlohmann::json{"reduce_scatter", "all_gather"}
                                                : nlohmann::json{"all_reduce"}},
      {"gradient_step_s", step_seconds},
      {"gradient_step_busbw_gbs", step_busbw},
      {"memory_per_rank_bytes", s.bytes_per_rank},
      {"ranks_on_host", s.host_ranks},
      {"gradient_step", step_json},
      {"collectives", collectives_json},
      {"check", check_word(all_ok)},
      {"warnings", s.warnings},
  };
}

}  // namespace

int BenchCommand::run_comm(const std::string& command_line) {
  const Options& o = *options_;
  refuse_report_out_override("bench comm", o.overrides);
  const Config config = load_config(o.config, o.overrides);
  if (o.max_bytes < o.min_bytes)
    throw CommandError{kExitUserError, "--max-bytes " + std::to_string(o.max_bytes) +
                                           " is smaller than --min-bytes " + std::to_string(o.min_bytes)};
  // The sweep's sizes are whole floats, rounded down (size_sweep): a range
  // holding none measured 4 B, outside it, without a word.
  if (o.max_bytes / 4 * 4 < o.min_bytes)
    throw CommandError{kExitUserError, "bench comm: --min-bytes " + std::to_string(o.min_bytes) + " --max-bytes " +
                                           std::to_string(o.max_bytes) +
                                           ": no whole float (a multiple of 4 bytes) lies between them, and the "
                                           "sweep measures whole floats"};
  if (!o.out.empty()) check_result_path(o.out);

  CommBenchSetup s;
  // The buckets one training step of this model all-reduces: the trainer's
  // own cut of its fp32 gradient buffer.
  s.gradient_elements = gradient_elements_of(config);
  s.bucket_bytes = gradient_bucket_bytes(s.gradient_elements, config.comm.bucket_mb, config.comm.overlap);

  // nccl: its bootstrap first (mpi or local), on which the ranks compare
  // their jobs before NCCL is initialised on each rank's GPU.
  std::unique_ptr<Communicator> comm = make_communicator(config.comm.backend, config.comm.timeout_s);
  comm->set_timeout(config.comm.timeout_s);
  comm->set_context("bench comm");
  // Each rank sizes its buffers from its own options: one given others
  // corrupted the heap in the first collective. (--factor exactly:
  // std::to_string's six decimals made 1.01 and 1.0100004 one job.)
  check_ranks_run_the_same_job(config,
                               "--min-bytes " + std::to_string(o.min_bytes) + " --max-bytes " +
                                   std::to_string(o.max_bytes) + " --factor " + format_double(o.factor) +
                                   " --iters " + std::to_string(o.iters) + " --warmup-iters " +
                                   std::to_string(o.warmup_iters) + " --average " + std::to_string(o.average) +
                                   // Rank 0 writes it: given to another rank alone, it was not written.
                                   (o.out.empty() ? "" : " --out " + o.out),
                               *comm);
  comm = measured_communicator(std::move(comm), config);
  s.world = comm->world_size();
  // ZeRO-1's step, as the trainer takes it from 2 ranks on: timing the
  // buckets' all-reduces instead described a step the job does not take.
  s.zero_step = config.comm.zero == 1 && s.world > 1;
  if (s.zero_step) s.bucket_bytes = {zero_padded_elements(s.gradient_elements, s.world) * 4};
  s.hosts = hosts_of_job(*comm);
  const bool printer = comm->rank() == 0;
  s.mpi = std::string(comm->backend_name()) == "mpi";
  const CommBenchSweep sweep{o.min_bytes, o.max_bytes, o.factor, s.bucket_bytes, s.world, s.mpi, s.zero_step};
  const std::vector<int64_t> sizes = sweep.sizes();
  refuse_sizes_beyond_one_mpi_call(sweep, config, s.gradient_elements);
  s.bytes_per_rank = sweep.bytes_per_rank();
  // The slow network as a run has it: the communicator's collectives held
  // (not the raw path's plain MPI calls). It was taken and did nothing, and
  // the JSON's config said the fault was on beside figures measured without.
  check_inject_delay_has_a_target(config, std::string(comm->backend_name()) == "nccl", s.world);
  comm->set_injected_delay(config.comm.inject_delay_ms * 1e-3);
  if (config.comm.inject_delay_ms > 0)
    s.warnings.push_back("fault injected (comm.inject_delay_ms=" + format_double(config.comm.inject_delay_ms) +
                         "): the communicator's collectives are held that long each (the raw path's plain MPI "
                         "calls are not): their figures are not the link's");
  s.host_ranks = ranks_on_this_host(*comm);
  check_room_for_buffers(sweep, s.host_ranks, *comm);
  s.iters = o.iters;
  s.warmup_iters = o.warmup_iters;
  s.average = o.average;
  s.across_ranks = static_cast<AcrossRanks>(o.average);
  if (printer) print_comm_bench_setup(s, config, *comm);

  const CollectiveBenchOptions options{.warmup_iters = o.warmup_iters,
                                       .iters = o.iters,
                                       .timeout_s = config.comm.timeout_s,
                                       .across_ranks = s.across_ranks};
  const std::vector<CollectiveBenchResult> step = s.zero_step
                                                      ? bench_zero_one_step(*comm, s.bucket_bytes.front(), options)
                                                      : bench_gradient_step(*comm, s.bucket_bytes, options);
  const std::vector<CollectiveBenchResult> collectives = bench_collectives(*comm, sizes, options);
  const bool all_ok = failed_data_check(step).empty() && failed_data_check(collectives).empty();
  if (printer) print_comm_bench_results(s, step, collectives, all_ok);

  if (printer && !o.out.empty()) {
    nlohmann::json result = comm_result_json(s, config, *comm, step, collectives, all_ok);
    result["command"] = utf8_escaped(command_line);  // argv is bytes
    write_result_json(o.out, result, config, false);
    std::printf("  result: %s\n", o.out.c_str());
  }
  if (!all_ok) throw CommandError{kExitCheckFailed, "bench comm: data check failed (see the table)"};
  return kExitOk;
}

}  // namespace trainbench
