// Builds the run's BatchSource from the `data` section: the webdataset shard
// loader over data.shards (or over synthetic shards made for this run in a
// temporary folder when none are given), or tokens held in memory.
#pragma once

#include <cstdint>  // int64_t
#include <memory>   // std::unique_ptr
#include <string>
#include <vector>

#include "comm/communicator.h"        // Communicator
#include "dataloader/batch_source.h"  // BatchSource
#include "dataloader/shard_loader.h"  // LoaderOptions
#include "kernels/engine.h"           // TrainingEngine: the host allocator
#include "trainer/config.h"

namespace trainbench {

struct DataSetup {
  std::unique_ptr<BatchSource> source;
  std::string description;  // one line for the console header
  std::string data_path;    // where the shards are (for the filesystem report); "" in memory
  std::string temporary_dir;  // made for this run and removed with the DataSetup; "" if none
  std::vector<std::string> shards;  // the resolved shards; empty for source synthetic
  std::vector<std::string> warnings;  // about the data as given, said before step 1 (a shard listed twice)
  ~DataSetup();
  DataSetup() = default;
  DataSetup(DataSetup&&) = default;
  DataSetup& operator=(DataSetup&&) = default;
};

// The shards of a run: data.shards resolved, or synthetic shards made for it
// in a temporary folder (recorded in *setup, which removes it). Fills
// setup->data_path, setup->description and setup->warnings. host_ranks:
// the ranks on this host, each making its own copy of the temporary shards
// at once (their free-space check counts every copy). show_progress: the
// temporary shards' writing on stderr (ProgressDisplay), by one rank.
std::vector<std::string> shards_for_run(const Config& config, int64_t world, DataSetup* setup,
                                        int64_t host_ranks = 1, bool show_progress = false);

// The temporary shards of an empty data.shards: how many, and how many
// samples each holds when data.synth_samples_per_shard is 0 (about the run's
// tokens). The CLI fixes the latter in the config before the data is made,
// so a checkpoint records it and a resumed run, whatever its train.steps,
// makes the same shards.
int64_t synth_shard_count(const Config& config, int64_t world);
int64_t synth_samples_per_shard_for_run(const Config& config, int64_t world);

// At most how many bytes a checkpoint's data position (one rank's loader
// position) takes over the run: every reader's shuffle buffer full. Exact
// for the temporary shards; for given shards each sample is counted as one
// window of tokens (their lengths are not known before they are read).
int64_t data_position_bytes_bound(const Config& config);

// The host memory one rank's data source holds at once: the synthetic
// batches (inputs and targets each), or the loader's batch ring (every
// reader's data.prefetch slots of inputs and targets), each reader's read
// block and its shuffle buffer as data_position_bytes_bound counts it (the
// samples of given shards taken as a window long: longer documents take
// more), with each sample's own allocations. Capped at 2^62.
int64_t data_source_host_bytes(const Config& config);

// The loader settings of the `data` section for one rank.
LoaderOptions loader_options(const Config& config, std::vector<std::string> shards, int64_t rank,
                             int64_t world);

// Throws DataError (exit 2) for a bad shard list or data options, and
// std::runtime_error when the temporary shards cannot be written (exit 3).
// `resume_position` (BatchSource::save_position of a checkpoint) continues
// that stream; DataError(kConfig) when it belongs to another data setup.
// With `ranks` (every rank calls it then), the ranks' shard lists are
// compared (check_ranks_resolved_the_same_shards) before the loader is
// built: a host short of shards failed the loader's own checks first ("7
// shards for 8 readers: lower data.readers") where rank 0 had every one.
DataSetup make_data_source(const Config& config, TrainingEngine& engine, int64_t rank,
                           int64_t world, const std::string& resume_position = "", int64_t host_ranks = 1,
                           Communicator* ranks = nullptr);

// Every rank resolves data.shards itself, and splits the list it found by
// rank: ranks that found other lists (a node-local copy missing shards, a
// glob on a folder still being filled) would read some shards twice and
// others never, silently. A collective over the ranks: DataError(kConfig)
// on every rank, naming the first rank whose list is not rank 0's. Nothing
// to compare for one rank, in-memory tokens or the run's own temporary shards.
void check_ranks_resolved_the_same_shards(const DataSetup& setup, const Config& config, Communicator& comm);

// The token id that separates packed samples: data.eos_token, or vocab - 1.
int32_t eos_token_of(const Config& config);

}  // namespace trainbench
