#include "trainer/data_source.h"

#include <algorithm>   // std::max, std::mismatch
#include <cmath>       // std::floor
#include <filesystem>  // path: the shards' folder
#include <optional>    // the uneven readers' warning
#include <stdexcept>

#include "comm/communicator.h"        // gather_from_ranks: the ranks' shard lists compared
#include "dataloader/data_error.h"    // DataError: a checkpoint's position from another setup
#include "dataloader/shard_assignment.h"  // splitmix64_next: each rank's synthetic batches
#include "dataloader/shard_list.h"    // resolve_shard_list, repeated_shards(_text)
#include "dataloader/shard_loader.h"  // ShardLoader
#include "dataloader/shard_tools.h"   // synthesize_shards, kMaxSynthShards
#include "dataloader/token_decode.h"  // token_format_of_field
#include "trainer/progress_display.h"  // ProgressDisplay: the temporary shards' writing
#include "trainer/temporary_folder.h"  // make_temporary_directory, remove_temporary_folder, temporary_directory_name

namespace trainbench {

namespace {

SynthResult write_run_shards(const Config& config, const std::string& dir, int64_t world, int64_t host_ranks,
                             bool show_progress) {
  const DataSection& d = config.data;
  SynthOptions synth = run_shard_samples(config);
  synth.out_dir = dir;
  synth.count = synth_shard_count(config, world);
  synth.samples_per_shard = d.synth_samples_per_shard > 0 ? d.synth_samples_per_shard
                                                          : synth_samples_per_shard_for_run(config, world);
  synth.copies_on_this_disk = host_ranks;
  if (!show_progress) return synthesize_shards(synth);
  // Many or large shards take minutes to write (a million: tens of minutes),
  // all of it before the run's header: said every 10 s in a log.
  ProgressDisplay display("data: making " + std::to_string(synth.count) + " synthetic shards in " + dir);
  return synthesize_shards(synth, display.callback());
}

}  // namespace

int64_t synth_shard_count(const Config& config, int64_t world) {
  // A multiple of the job's readers, so that each has as many: 8 shards for
  // 3 readers dealt them 3, 3 and 2, which given shards are warned of
  // (uneven_readers_warning) and the run's own were not. Not past the
  // limit, where the readers are that many already.
  const int64_t readers = config.data.readers * world;
  const int64_t at_least = std::max(config.data.synth_shards, readers);
  const int64_t rounded = (at_least + readers - 1) / readers * readers;
  return rounded <= kMaxSynthShards ? rounded : at_least;
}

int64_t data_position_bytes_bound(const Config& config) {
  const DataSection& d = config.data;
  if (d.source != "shards") return 1024;  // in-memory tokens: an index
  // The temporary shards' samples are at most mean + spread tokens; the
  // samples of given shards are taken as a window's length (an estimate).
  const int64_t window_tokens = config.model.seq_len + 1;
  const SynthOptions made = run_shard_samples(config);
  const int64_t sample_tokens = d.shards.empty() ? made.tokens_mean + made.tokens_spread : window_tokens;
  // Per reader (ReaderPosition): its shuffle buffer full, a partial window,
  // the rest of the current sample, and the fixed fields.
  const int64_t per_reader = (std::max<int64_t>(d.shuffle_buffer, 1) * sample_tokens + window_tokens + sample_tokens) *
                                 static_cast<int64_t>(sizeof(int32_t)) +
                             256;
  return d.readers * per_reader + 256;
}

int64_t data_source_host_bytes(const Config& config) {
  const DataSection& d = config.data;
  // In double: the keys' products can pass int64.
  const double batch_bytes = 2.0 * static_cast<double>(config.train.micro_batch) *
                             static_cast<double>(config.model.seq_len) * sizeof(int32_t);
  // Per reader besides: its read block (data.block_bytes: 256 MiB blocks
  // failed a run the check had let in, mid-run, as "cannot open: No
  // memory"), and each buffered sample's own allocations (its vector and
  // shared owner: some 256 bytes beside its tokens, measured with 2-token
  // samples, 20 times what the tokens take).
  constexpr double kSampleOverheadBytes = 256;
  const double per_reader =
      static_cast<double>(d.block_bytes) + static_cast<double>(d.shuffle_buffer) * kSampleOverheadBytes;
  const double bytes = d.source == "synthetic"
                           ? static_cast<double>(d.synthetic_batches) * batch_bytes
                           : static_cast<double>(d.readers) * (static_cast<double>(d.prefetch) * batch_bytes +
                                                               per_reader) +
                                 static_cast<double>(data_position_bytes_bound(config));
  return static_cast<int64_t>(std::min(bytes, 0x1p62));
}

// About one run's worth of tokens (every rank's steps plus the shuffle
// buffers' fill), so the default run reads storage the way a real one does
// rather than cycling a few cached samples.
int64_t synth_samples_per_shard_for_run(const Config& config, int64_t world) {
  const DataSection& d = config.data;
  // In double: the products of the bounded keys (steps unbounded) can pass
  // int64, and the total is capped at 2^30 tokens anyway.
  const double step_tokens = static_cast<double>(config.train.micro_batch) *
                             static_cast<double>(config.train.grad_accum) * static_cast<double>(config.model.seq_len);
  const double run_tokens = step_tokens * static_cast<double>(config.train.steps) * static_cast<double>(world);
  const double buffer_tokens = static_cast<double>(d.shuffle_buffer) * static_cast<double>(d.synth_tokens_per_sample) *
                               static_cast<double>(d.readers) * static_cast<double>(world);
  const int64_t total_tokens =
      static_cast<int64_t>(std::min(run_tokens + std::floor(run_tokens / 10) + buffer_tokens,
                                    static_cast<double>(int64_t{1} << 30)));
  const int64_t count = synth_shard_count(config, world);
  return std::max<int64_t>(1, (total_tokens / d.synth_tokens_per_sample + count - 1) / count);
}

namespace {
// Every rank takes one batch a step, from its readers in turn, so every
// reader is read at one pace (data.readers 1: the ranks' one reader each),
// and a reader dealt fewer shards per epoch runs through its epochs sooner: over any span of training its
// shards are read more often than the others'. (Fewer shards than readers in
// all is refused by the loader.) A run's alone: bench io reads each shard once.
std::optional<std::string> uneven_readers_warning(const Config& config, int64_t world, int64_t count) {
  const int64_t readers = world * config.data.readers;
  if (count < readers || count % readers == 0) return std::nullopt;
  return std::to_string(count) + " shards over " + std::to_string(world) + " rank(s) x " +
         std::to_string(config.data.readers) + " data.readers: " + std::to_string(count % readers) +
         " reader(s) get " + std::to_string(count / readers + 1) + " shards an epoch and the rest " +
         std::to_string(count / readers) +
         ", and as every reader's batches are taken at one pace (each rank one a step, from its readers in turn), "
         "the shards of the readers with fewer are read " +
         "more often (up to " + std::to_string(count / readers + 1) + ":" + std::to_string(count / readers) +
         "); a multiple of " + std::to_string(readers) + " shards samples them evenly";
}
}  // namespace

DataSetup::~DataSetup() {
  source.reset();  // the readers stop before their files go
  // Best effort (remove_temporary_folder never throws): a leftover temp
  // folder is not worth failing a run.
  if (!temporary_dir.empty()) remove_temporary_folder(temporary_dir);
}

std::vector<std::string> shards_for_run(const Config& config, int64_t world, DataSetup* setup, int64_t host_ranks,
                                        bool show_progress) {
  const DataSection& d = config.data;
  if (!d.shards.empty()) {
    std::vector<std::string> shards = resolve_shard_list(d.shards);
    // The folder the first shard's bytes are in, its links resolved: a
    // folder of links into Lustre or tmpfs read as the links' own
    // filesystem. (Under the listing's storage bound, as the listing is.)
    std::error_code unresolved;
    const std::filesystem::path real = std::filesystem::canonical(shards.front(), unresolved);
    setup->data_path = (unresolved ? std::filesystem::path(shards.front()) : real).parent_path().string();
    if (setup->data_path.empty()) setup->data_path = ".";  // shards named without a folder
    setup->description = std::to_string(shards.size()) + " shards from " + d.shards;
    const std::vector<RepeatedShard> repeated = repeated_shards(shards);
    if (!repeated.empty()) {
      int64_t extra = 0;
      for (const RepeatedShard& shard : repeated) extra += shard.listings - 1;
      setup->warnings.push_back("data.shards lists " + repeated_shards_text(repeated) + ": every listing is read each epoch, so " + std::to_string(extra) + " of the " +
                                std::to_string(shards.size()) + " shards read are repeats");
    }
    return shards;
  }
  setup->temporary_dir = make_temporary_directory("trainbench-shards");
  SynthResult made;
  try {
    made = write_run_shards(config, setup->temporary_dir, world, host_ranks, show_progress);
  } catch (const DataError&) {
    throw;
  } catch (const std::runtime_error& e) {
    // A full disk (or a failed write) in a folder the user never chose: say
    // where it is and how to move it, not only "make fewer or smaller shards".
    throw std::runtime_error(std::string(e.what()) + " (the run makes its shards in " + temporary_directory_name() +
                             "; set TMPDIR to a folder with room, or data.shards to shards of your own)");
  }
  setup->data_path = setup->temporary_dir;
  setup->description = std::to_string(made.paths.size()) + " synthetic shards (" +
                       std::to_string(made.samples) + " samples, " + std::to_string(made.tokens) +
                       " tokens) made for this run in " + setup->temporary_dir +
                       " (set data.shards to read your own)";
  return made.paths;
}

LoaderOptions loader_options(const Config& config, std::vector<std::string> shards, int64_t rank,
                             int64_t world) {
  const DataSection& d = config.data;
  LoaderOptions options;
  options.shards = std::move(shards);
  options.micro_batch = config.train.micro_batch;
  options.seq_len = config.model.seq_len;
  options.vocab = config.model.vocab;
  options.field = d.field;
  options.eos_token = eos_token_of(config);
  options.readers = d.readers;
  options.prefetch = d.prefetch;
  options.shuffle_buffer = d.shuffle_buffer;
  options.seed = static_cast<uint64_t>(d.seed);
  options.rank = rank;
  options.world = world;
  options.max_member_bytes = d.max_sample_bytes;
  options.block_bytes = d.block_bytes;
  options.skip_corrupt = d.on_corrupt == "skip";
  options.timeout_s = d.timeout_s;
  options.inject_delay_s = d.inject_delay_ms * 1e-3;
  return options;
}

int32_t eos_token_of(const Config& config) {
  return static_cast<int32_t>(config.data.eos_token >= 0 ? config.data.eos_token
                                                          : config.model.vocab - 1);
}

DataSetup make_data_source(const Config& config, TrainingEngine& engine, int64_t rank,
                           int64_t world, const std::string& resume_position, int64_t host_ranks,
                           Communicator* ranks) {
  const DataSection& d = config.data;
  DataSetup setup;
  if (d.source == "synthetic") {
    // Each rank its own batches, as data parallelism has: with one seed for
    // all, the global batch was world copies of one micro-batch, and the
    // loss and gradient norm those of one rank. Rank 0's are the one-rank
    // run's.
    uint64_t seed = static_cast<uint64_t>(d.seed);
    if (rank > 0) {
      uint64_t mix = seed ^ static_cast<uint64_t>(rank);
      seed = splitmix64_next(&mix);
    }
    try {
      setup.source = make_synthetic_source(config.train.micro_batch, config.model.seq_len,
                                           config.model.vocab, d.synthetic_batches, seed, resume_position);
    } catch (const std::invalid_argument& e) {
      throw DataError(CorruptScope::kConfig, std::string("data position of the checkpoint: ") + e.what());
    }
    setup.description = std::to_string(d.synthetic_batches) +
                        " batches of random tokens held in memory (no storage read)";
    return setup;
  }

  setup.shards = shards_for_run(config, world, &setup, host_ranks, /*show_progress=*/rank == 0);
  if (!d.shards.empty())
    if (std::optional<std::string> uneven = uneven_readers_warning(config, world, std::ssize(setup.shards)))
      setup.warnings.push_back(std::move(*uneven));
  if (ranks != nullptr) check_ranks_resolved_the_same_shards(setup, config, *ranks);
  LoaderOptions options = loader_options(config, setup.shards, rank, world);
  options.allocator = HostAllocator{[&engine](size_t bytes) { return engine.allocate_host(bytes); },
                                    [&engine](void* memory) { engine.release_host(memory); }};
  setup.description += ", field ." + d.field + ", " + std::to_string(d.readers) + " reader(s)";
  if (resume_position.empty()) {
    setup.source = std::make_unique<ShardLoader>(std::move(options));
  } else {
    const LoaderPosition position = parse_position(resume_position);
    setup.source = std::make_unique<ShardLoader>(std::move(options), &position);
    setup.description += ", resumed after batch " + std::to_string(position.batches_consumed);
  }
  return setup;
}

void check_ranks_resolved_the_same_shards(const DataSetup& setup, const Config& config, Communicator& comm) {
  // The temporary shards are each rank's own, in its own folder.
  if (comm.world_size() < 2 || config.data.source != "shards" || config.data.shards.empty()) return;
  // Rank 0's list, every name ended by a NUL (no path holds one), compared
  // whole on every rank: the first name that differs is named.
  std::string mine;
  for (const std::string& path : setup.shards) mine += path + '\0';
  const std::string root_list = broadcast_string(comm, comm.rank() == 0 ? mine : std::string(), 0);
  std::vector<std::string> root_shards;
  for (size_t begin = 0, end; (end = root_list.find('\0', begin)) != std::string::npos; begin = end + 1)
    root_shards.push_back(root_list.substr(begin, end - begin));
  std::string difference;
  if (root_shards.size() != setup.shards.size()) {
    difference = "resolved " + std::to_string(setup.shards.size()) + " shards from '" + config.data.shards +
                 "' and rank 0 " + std::to_string(root_shards.size());
  } else {
    const auto [theirs, ours] = std::mismatch(root_shards.begin(), root_shards.end(), setup.shards.begin());
    if (theirs != root_shards.end())
      difference = "resolved '" + config.data.shards + "' to " + std::to_string(setup.shards.size()) +
                   " shards as rank 0 did, but its shard " + std::to_string(theirs - root_shards.begin()) + " is " +
                   *ours + " where rank 0's is " + *theirs;
  }
  const RankReason first = first_reason_over_ranks(comm, difference);
  if (first.rank < 0) return;
  throw DataError(CorruptScope::kConfig,
                  "data.shards: rank " + std::to_string(first.rank) + " " + first.reason +
                      ": every rank must see the same data set (an incomplete node-local copy?), or the ranks split "
                      "it differently and read some shards twice and others never");
}

}  // namespace trainbench
