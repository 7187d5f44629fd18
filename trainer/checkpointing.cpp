#include "trainer/checkpointing.h"

#include <sys/stat.h>  // stat: the checkpoint folder is still the run's
#include <unistd.h>    // unlink: the sharing probe

#include <algorithm>   // std::max_element, std::max, std::min
#include <array>       // the config keys a resume compares
#include <chrono>      // steady seconds
#include <cerrno>      // ENOENT: a sharing probe not found
#include <cstring>     // std::memcpy, std::strerror
#include <filesystem>  // the folder of a checkpoint
#include <functional>  // the remedy of a refusal
#include <optional>    // a listing's error, kept past the collective
#include <stdexcept>   // std::logic_error: a state tensor staged nowhere
#include <thread>      // sleep_for: checkpoint.inject_delay_ms
#include <utility>

#include "checkpoint/checkpoint_files.h"  // write, commit, read, crash points
#include "checkpoint/checkpoint_io.h"     // printable: a manifest value in a message; step_of_folder
#include "comm/deadline_clock.h"          // format_seconds
#include "dataloader/shard_loader.h"      // parse_position, check_resume_position
#include "dataloader/shard_tools.h"       // kMaxSynthSamplesPerShard: a manifest's adopted value checked
#include "trainer/data_source.h"          // loader_options, synth_shard_count
#include "trainer/interrupt_cleanup.h"    // make_removed_on_interrupt: the step being written
#include "trainer/json_text.h"            // json_text: never throws on bytes that are not UTF-8
#include "trainer/hung_storage.h"     // the folder's calls on the main thread, bounded
#include "trainer/temporary_folder.h"     // temporary_directory_name

namespace trainbench {

namespace {

namespace fs = std::filesystem;

// A rank's checkpoint writer, as the ranks compare notes (local_state).
constexpr int kBusy = 0, kDone = 1, kDiskFull = 2, kFailed = 3, kTimedOut = 4;

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string rank_list(const std::vector<double>& codes, double at_least) {
  std::string ranks;
  for (size_t r = 0; r < codes.size(); ++r)
    if (codes[r] >= at_least) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return ranks;
}

// A folder's (st_dev, st_ino), {0, 0} when it cannot be stat'ed: the folder
// this run locked and checks into. One removed and made again at the same
// path is not it (nor holds its lock).
std::pair<uint64_t, uint64_t> folder_identity(const std::string& dir) {
  struct stat status {};
  if (::stat(dir.c_str(), &status) != 0 || !S_ISDIR(status.st_mode)) return {0, 0};
  return {static_cast<uint64_t>(status.st_dev), static_cast<uint64_t>(status.st_ino)};
}
enum class FolderState { kOurs, kGone, kOther };
FolderState folder_state(const std::string& dir, std::pair<uint64_t, uint64_t> identity_at_start) {
  const std::pair<uint64_t, uint64_t> now = folder_identity(dir);
  if (now == std::pair<uint64_t, uint64_t>{0, 0}) return FolderState::kGone;
  // Not known at the start (it could not be stat'ed then): nothing to compare.
  if (identity_at_start == std::pair<uint64_t, uint64_t>{0, 0}) return FolderState::kOurs;
  return now == identity_at_start ? FolderState::kOurs : FolderState::kOther;
}

constexpr const char* kTrainerStateSection = "trainer_state";
constexpr const char* kDataPositionSection = "data_position";

// What committed checkpoints `dir` holds, for a message ("latest: step_4",
// "step_2, step_4"; empty when none), and what --resume continues from:
// "latest" when that pointer leads to a checkpoint, else the newest
// committed one's folder (latest names a step deleted by hand), else "".
struct CheckpointsFound {
  std::string names;
  std::string resume;
};
CheckpointsFound committed_checkpoints_in(const std::string& dir) {
  CheckpointsFound found;
  std::error_code ignored;
  const bool has_latest = std::filesystem::exists(dir + "/latest", ignored);
  if (has_latest) {
    // Read as --resume latest reads it (bounded, validated); a damaged one is
    // named, its bytes not echoed.
    try {
      const std::string folder = resolve_checkpoint("latest", dir);
      (void)read_manifest(folder);  // a damaged manifest: --resume latest would fail
      found.names = "latest: " + std::filesystem::path(folder).filename().string();
      found.resume = "latest";
      return found;
    } catch (const CheckpointError& e) {
      // The machine's limit (out of file descriptors) is not a damaged
      // pointer: said as what it is, exit 3.
      if (e.environment()) throw;
    }
  }
  for (const CommittedCheckpoint& c : list_committed(dir))
    found.names += (found.names.empty() ? "" : ", ") + std::filesystem::path(c.folder).filename().string();
  found.resume = newest_readable_checkpoint(dir);
  if (has_latest)
    found.names +=
        std::string(found.names.empty() ? "" : ", and ") + "a latest pointer that names no usable checkpoint";
  return found;
}

// A run that did not resume must not write where another run's committed
// checkpoints are: its commits would replace `latest`, overwrite the
// checkpoints of the steps both runs share and let retention delete the
// rest. Collective: every rank looks (the folder may be per host), and all
// refuse when any one finds checkpoints. `remedy` says what to do, given
// what --resume would continue from there (CheckpointsFound::resume).
// A rank that cannot list the folder refuses too (it must not write into
// it blind), with its own reason: 2 for the folder's (permissions), 3 for the
// machine's (out of file descriptors).
void refuse_other_runs_checkpoints(const std::string& dir, Communicator& comm,
                                   const std::function<std::string(const std::string&)>& remedy) {
  constexpr double kFound = 1, kUnlistable = 2, kUnlistableByLimit = 3;
  CheckpointsFound found;
  std::optional<CheckpointError> unlistable;
  try {
    found = committed_checkpoints_in(dir);
  } catch (const CheckpointError& e) {
    unlistable = e;
  } catch (const std::exception& e) {  // a listing that fails part way (std::filesystem)
    unlistable = CheckpointError("checkpoint.dir " + dir + ": cannot list it: " + e.what());
  }
  const double code = unlistable ? (unlistable->environment() ? kUnlistableByLimit : kUnlistable)
                                 : (found.names.empty() ? 0.0 : kFound);
  const std::vector<double> codes = gather_from_ranks(comm, code);
  if (unlistable) throw *unlistable;
  const std::string cannot_list = rank_list(codes, kUnlistable);
  if (!cannot_list.empty())
    throw CheckpointError("checkpoint.dir " + dir + ": rank(s) " + cannot_list + " cannot list it",
                          *std::max_element(codes.begin(), codes.end()) == kUnlistableByLimit);
  const std::string ranks = rank_list(codes, kFound);
  if (ranks.empty()) return;
  throw CheckpointError("checkpoint.dir " + dir + " already holds checkpoints (" +
                        (found.names.empty() ? "found by rank(s) " + ranks : found.names) +
                        "): " + remedy(found.names.empty() ? "latest" : found.resume));
}

// Whether `checkpoint` (a step_N folder) lies directly in `dir`: a resume
// that continues the run whose checkpoints `dir` holds.
bool checkpoint_is_in(const std::string& checkpoint, const std::string& dir) {
  std::error_code error;
  const fs::path parent = fs::weakly_canonical(fs::path(checkpoint), error).parent_path();
  if (error) return false;
  const fs::path folder = fs::weakly_canonical(fs::path(dir), error);
  return !error && parent == folder;
}

}  // namespace

Checkpointer::Checkpointer(const Config& config, std::string dir, TrainingEngine& engine,
                           BatchSource& source, Communicator& comm, nlohmann::json versions,
                           const std::string& resumed_from, bool offers_resume)
    : config_(config),
      dir_(std::move(dir)),
      engine_(engine),
      source_(source),
      comm_(comm),
      versions_(std::move(versions)),
      tensors_(engine.state_tensors()),
      writer_(std::make_unique<BackgroundWriter>()) {
  {
    // One run per folder: its commits replace `latest`, overwrite the steps
    // another run shares and let retention delete the rest. A resume from a
    // checkpoint of this folder continues its run; one from elsewhere is a
    // new run here.
    const StorageWatchdog watchdog(comm_, config_.checkpoint.timeout_s,
                                   "looking for other runs' checkpoints in checkpoint.dir " + dir_);
    if (resumed_from.empty()) {
      refuse_other_runs_checkpoints(dir_, comm_, [offers_resume](const std::string& resume) {
        if (!offers_resume) return std::string("this command starts afresh: choose an empty checkpoint.dir");
        return resume.empty() ? std::string("none can be resumed from: choose an empty checkpoint.dir")
                              : "continue with --resume " + resume + ", or choose an empty checkpoint.dir";
      });
    } else if (checkpoint_is_in(resumed_from, dir_)) {
      // This folder's run continues from that step: what it holds above
      // it is the run a rewind leaves (CommitRequest::resumed_step).
      resumed_step_ = checkpoint_io::step_of_folder(resumed_from);
    } else {
      refuse_other_runs_checkpoints(dir_, comm_, [&resumed_from](const std::string& resume) {
        return "this run resumes from " + resumed_from +
               ", outside it, and would replace its latest and delete its older steps: choose an empty "
               "checkpoint.dir" +
               (resume.empty() ? std::string() : ", or resume from its own (--resume " + resume + ")");
      });
    }
    dir_identity_ = folder_identity(dir_);
  }
  allocate_staging();
}

Checkpointer::~Checkpointer() {
  // A run that ends by an exception still lets the writer finish what it
  // has (BackgroundWriter's destructor drains), and a copy into staging
  // must land before the staging is freed. A destructor must not throw:
  // after a sticky CUDA error the wait fails too, and the first error is
  // the one already on its way to the user.
  try {
    engine_.wait_state_copy();
  } catch (...) {
  }
  // A run that ends by another error while a write hangs: the writer
  // finishes what it has, but for no longer than its deadline.
  if (!writer_abandoned_) {
    if (!writer_->wait_idle_for(writer_deadline_ - steady_now())) abandon_writer();
  }
  if (writer_abandoned_) {
    // Its job may still return some day and go on reading the staging and
    // running the writer's loop: both stay allocated until the process
    // exits (the staging is never given back through an engine gone by then).
    (void)writer_.release();
    (void)new std::vector<StateImage>(std::move(images_));  // moved, the images stay where the job reads them
    return;
  }
  writer_.reset();
}

bool held_alike(const StateTensor& tensor, const Config& config, int world) {
  // TrainingEngine::state_tensors names the optimizer shard's moments.
  const bool optimizer_sharded = config.comm.zero == 1 && world > 1;
  return !optimizer_sharded || (tensor.name != "adam_m" && tensor.name != "adam_v");
}

StagingLayout staging_layout(const std::vector<StateTensor>& tensors, const Config& config, int world) {
  std::vector<SectionSpec> alike, own;
  for (const StateTensor& t : tensors) (held_alike(t, config, world) ? alike : own).push_back({t.name, t.bytes});
  const int writers = static_cast<int>(config.checkpoint.writers);
  return {assign_sections_to_files(alike, writers), assign_sections_to_files(own, writers)};
}

int64_t job_state_bytes(const TrainingEngine& engine, const Config& config, int world) {
  const StagingLayout layout = staging_layout(engine.state_tensors(), config, world);
  int64_t alike = 0, own = 0;
  for (const std::vector<SectionSpec>& file : layout.alike) alike += image_size(file);
  for (const std::vector<SectionSpec>& file : layout.own) own += image_size(file);
  return alike + own * world;
}

int64_t rank_staging_bytes(const std::vector<StateTensor>& tensors, const Config& config, int world, int rank) {
  const StagingLayout layout = staging_layout(tensors, config, world);
  int64_t bytes = 0;
  for (const std::vector<SectionSpec>& file : layout.alike) bytes += rank_slice(image_size(file), rank, world).bytes;
  for (const std::vector<SectionSpec>& file : layout.own) bytes += image_size(file);
  return bytes;
}

void Checkpointer::allocate_staging() {
  const StagingLayout layout = staging_layout(tensors_, config_, comm_.world_size());
  const StagingAllocator pinned{[this](size_t bytes) { return engine_.allocate_host(bytes); },
                                [this](void* memory) { engine_.release_host(memory); }};
  // The state held alike first, in images every rank lays out the same way
  // (the same tensors, the same sizes): rank r's slice of image i is the
  // file of index i on every rank, which a resume reads back together. A
  // rank stages only its slice of them: the host memory (page-locked under
  // CUDA) and the device-to-host copy of a snapshot are 1/N of the state
  // held alike, as what it writes is.
  for (const std::vector<SectionSpec>& file : layout.alike)
    images_.emplace_back(file, pinned, rank_slice(image_size(file), comm_.rank(), comm_.world_size()));
  alike_images_ = images_.size();
  for (const std::vector<SectionSpec>& file : layout.own) images_.emplace_back(file, pinned);
  // Touch every page now, before the first step: faulting in gigabytes of
  // fresh memory during the first snapshot would make it seconds slower and
  // show as checkpoint stall that no later checkpoint has.
  for (StateImage& image : images_)
    if (image.held_bytes() > 0) std::memset(image.data(), 0, static_cast<size_t>(image.held_bytes()));
  // Each tensor's bytes that fall among its image's held ones: all of them,
  // or the part of this rank's slice (a slice may start or end inside one).
  copy_parts_.assign(tensors_.size(), StateCopyPart{});
  for (size_t t = 0; t < tensors_.size(); ++t) {
    bool placed = false;
    for (StateImage& image : images_) {
      const int64_t index = image.find(tensors_[t].name);
      if (index < 0) continue;
      placed = true;
      const int64_t offset = image.sections()[static_cast<size_t>(index)].offset;
      const int64_t from = std::max(offset, image.held_from());
      const int64_t to = std::min(offset + tensors_[t].bytes, image.held_from() + image.held_bytes());
      if (to > from) copy_parts_[t] = StateCopyPart{image.at(from, to - from), from - offset, to - from};
    }
    // An empty part copies nothing without complaint: a tensor in no image
    // would be missing from every checkpoint, unnoticed until a resume.
    if (!placed) throw std::logic_error("checkpoint staging: state tensor " + tensors_[t].name + " is in no image");
  }
}

int64_t Checkpointer::staging_bytes() const {
  int64_t bytes = 0;
  for (const StateImage& image : images_) bytes += image.held_bytes();
  return bytes;
}

bool Checkpointer::start(int64_t step) {
  // One rank makes (or empties a crashed run's leftover) step_N.tmp before
  // any rank writes into it: on a shared folder a later rank would otherwise
  // empty an earlier rank's files. The broadcast of how that went orders it
  // before every rank's writes, and its failure (a full disk, checkpoint.dir
  // removed during the run) is every rank's, settled as a failed write is.
  // Rank 0 does it on its writer thread (idle: nothing is in flight), waited
  // for as a write is: on storage that stopped responding a stat or a mkdir
  // hangs as an fsync does.
  struct Preparation {
    int state = kDone;
    std::string why_not;
  };
  const auto preparation = std::make_shared<Preparation>();
  if (comm_.rank() == 0) {
    submit_to_writer([preparation, dir = dir_, identity = dir_identity_, step] {
      try {
        // Said, not made again: a checkpoint.dir removed while the run was
        // going would come back without the run's lock, as if nothing had
        // happened to the checkpoints it held.
        const FolderState folder = folder_state(dir, identity);
        if (folder == FolderState::kGone)
          throw CheckpointWriteError("checkpoint.dir " + dir + " no longer exists (removed during the run?)", false);
        if (folder == FolderState::kOther)
          throw CheckpointWriteError("checkpoint.dir " + dir + " is another folder than the one this run started "
                                         "with (removed and made again during the run?)",
                                     false);
        // Listed for a signal's cleanup as it is made: a run stopped by
        // Ctrl-C or scancel left a whole checkpoint's files (GBs) as step_N.tmp
        // in the user's folder, removed only by a later run's commit there.
        make_removed_on_interrupt([&]() {
          prepare_pending_folder(dir, step);
          return pending_folder(dir, step);
        });
      } catch (const CheckpointWriteError& e) {
        preparation->state = e.disk_full ? kDiskFull : kFailed;
        preparation->why_not = e.what();
      } catch (const std::exception& e) {
        preparation->state = kFailed;
        preparation->why_not = e.what();
      }
    });
  }
  const bool hung = wait_for_writers();
  double made = kDone;
  std::string why_not;
  if (comm_.rank() == 0) {
    made = hung ? kTimedOut : preparation->state;
    why_not = hung ? timeout_text("making " + pending_folder(dir_, step)) : preparation->why_not;
  }
  comm_.broadcast(&made, sizeof(made), 0);
  if (made != kDone) {
    const std::string reason = broadcast_string(comm_, why_not, 0);
    // A removal that did not finish: the storage stopped responding since,
    // and the listing would not finish either.
    const bool storage_hung = made == kTimedOut || !remove_pending_folder(step);
    CheckpointRecord record;
    record.step = step;
    settle_failure(record, "0", 0, reason, made == kDiskFull, storage_hung);
    return false;
  }
  InFlight flight;
  flight.step = step;
  flight.record.step = step;
  flight.copy_started = steady_now();
  engine_.begin_state_copy(copy_parts_);
  crash_point("copy", step);

  // What is not engine state is small and captured now, at the step it belongs to.
  const nlohmann::json trainer_state = {{"step", step},
                                        {"rank", comm_.rank()},
                                        {"world_size", comm_.world_size()},
                                        // No RNG draws in the step itself; the data
                                        // stream's shuffle state is in the position.
                                        {"data_seed", config_.data.seed},
                                        // The CPU engine splits its sums by thread:
                                        // another count gives other bytes (resume warns).
                                        {"cpu_threads", engine_.cpu_threads()}};
  const std::string state_text = json_text(trainer_state);
  const std::string position = source_.save_position();
  flight.trainer_image = std::make_unique<StateImage>(
      std::vector<SectionSpec>{{kTrainerStateSection, static_cast<int64_t>(state_text.size())},
                               {kDataPositionSection, static_cast<int64_t>(position.size())}});
  std::memcpy(flight.trainer_image->section_data(0), state_text.data(), state_text.size());
  std::memcpy(flight.trainer_image->section_data(1), position.data(), position.size());
  for (const ImagePart& part : written_parts()) flight.record.rank_bytes += part.bytes;
  flight.record.rank_bytes += flight.trainer_image->bytes();
  in_flight_ = std::make_shared<InFlight>(std::move(flight));
  return true;
}

void Checkpointer::submit_persist() {
  const std::shared_ptr<InFlight> flight = in_flight_;
  flight->phase = Phase::kWriting;
  // The job holds no reference into this object: abandoned on hung storage,
  // it may outlive it. It reads the staging (kept then, see the destructor)
  // and writes into `flight`, which it shares.
  std::vector<ImagePart> images = written_parts();
  images.push_back(ImagePart{flight->trainer_image.get()});
  WriteOptions options;
  options.direct_io = config_.checkpoint.direct_io;
  options.block_bytes = config_.checkpoint.block_bytes;
  const double delay_ms = config_.checkpoint.inject_delay_ms;
  submit_to_writer([flight, images, options, delay_ms, folder = pending_folder(dir_, flight->step),
                   rank = comm_.rank()] {
    const double begin = steady_now();
    if (delay_ms > 0)  // a slow checkpoint disk, for the attribution and timeout tests
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
    for (const FileRecord& file : write_rank_files(folder, rank, images, options))
      if (flight->io_warning.empty()) flight->io_warning = file.warning;
    flight->persist_s = steady_now() - begin;
  });
}

std::vector<ImagePart> Checkpointer::written_parts() const {
  std::vector<ImagePart> parts;
  for (size_t i = 0; i < images_.size(); ++i) {
    const ImagePart whole{&images_[i], 0, images_[i].bytes()};
    parts.push_back(i < alike_images_ ? slice_for_rank(images_[i], comm_.rank(), comm_.world_size()) : whole);
  }
  return parts;
}

void Checkpointer::submit_commit() {
  const std::shared_ptr<InFlight> flight = in_flight_;
  flight->phase = Phase::kCommitting;
  if (comm_.rank() != 0) return;  // rank 0 commits for everyone
  CommitRequest request;
  request.dir = dir_;
  request.step = flight->step;
  request.world_size = comm_.world_size();
  request.keep = config_.checkpoint.keep;
  request.config = config_to_json(config_);
  request.versions = versions_;
  request.resumed_step = resumed_step_;
  request.own_steps = own_steps_;
  own_steps_.push_back(flight->step);
  request.extra = {{"engine", engine_.backend_name()},
                   {"state_tensors", nlohmann::json::array()},
                   {"zero", config_.comm.zero}};
  for (const StateTensor& t : tensors_)
    request.extra["state_tensors"].push_back({{"name", t.name}, {"bytes", t.bytes}});
  if (!shard_identities_.empty()) request.extra["shards"] = shard_identities_;
  submit_to_writer([request, flight] {
    const double begin = steady_now();
    commit_checkpoint(request, &flight->commit_warnings);
    flight->commit_s = steady_now() - begin;
    crash_point("committed", request.step);  // tests: a rank dies after a commit
  });
}

std::string Checkpointer::timeout_text(const std::string& doing) const {
  return doing + " did not finish within checkpoint.timeout_s=" +
         comm_clock::format_seconds(config_.checkpoint.timeout_s) +
         " s: the storage stopped responding (the writer thread was left to it; raise checkpoint.timeout_s if it "
         "is only slow)";
}

std::chrono::milliseconds Checkpointer::best_effort_bound() const {
  // A quarter of comm.timeout_s at most: the other ranks wait for rank 0 in
  // their next collective meanwhile (the run's end, its result), and the
  // removal and the listing together stay well inside it.
  const double seconds = std::min(config_.checkpoint.timeout_s, 0.25 * config_.comm.timeout_s);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

int Checkpointer::local_state() {
  if (local_failure_ != 0) return local_failure_;
  const int progress = writer_progress();
  if (progress == kBusy) return kBusy;
  if (progress == kTimedOut) {
    local_failure_ = kTimedOut;
    local_error_ = timeout_text(in_flight_->phase == Phase::kCommitting
                                    ? "committing it in " + dir_
                                    : "writing this rank's files into " + pending_folder(dir_, in_flight_->step));
    return local_failure_;
  }
  const std::exception_ptr error = writer_->take_error();
  if (!error) return kDone;
  local_failure_ = kFailed;
  try {
    std::rethrow_exception(error);
  } catch (const CheckpointWriteError& e) {
    local_error_ = e.what();
    if (e.disk_full) local_failure_ = kDiskFull;
  } catch (const std::exception& e) {
    local_error_ = e.what();
  }
  return local_failure_;
}

bool Checkpointer::agree() {
  InFlight& flight = *in_flight_;
  const std::vector<double> states = gather_from_ranks(comm_, local_state());
  if (*std::min_element(states.begin(), states.end()) == kBusy) return false;  // someone still busy

  const double worst = *std::max_element(states.begin(), states.end());
  if (worst >= kDiskFull) {
    const std::string failed = rank_list(states, kDiskFull);
    // The first failing rank's own words, on every rank (rank 0 speaks): a
    // timed-out one's where there is one (the hang is what the user must
    // know; a full disk elsewhere cannot be acted on while it lasts).
    const double speaking = worst == kTimedOut ? kTimedOut : kDiskFull;
    const int first_failed =
        static_cast<int>(std::find_if(states.begin(), states.end(), [speaking](double s) { return s >= speaking; }) -
                         states.begin());
    const std::string reason = broadcast_string(comm_, local_error_, first_failed);
    local_failure_ = 0;
    local_error_.clear();
    // Every rank's writer is idle (no rank is busy): the folder is nobody's.
    // Unless one was abandoned: it may still write there, and removing it
    // would hang on the same storage.
    const bool storage_hung = worst == kTimedOut || !remove_pending_folder(flight.step);
    const CheckpointRecord record = flight.record;
    in_flight_.reset();
    settle_failure(record, failed, first_failed, reason, worst == kDiskFull, storage_hung);
    return true;
  }

  if (flight.phase == Phase::kWriting) {
    // Every rank's files are durable: the checkpoint's write figures, then the commit.
    const std::vector<double> persist = gather_from_ranks(comm_, flight.persist_s);
    const std::vector<double> bytes = gather_from_ranks(comm_, static_cast<double>(flight.record.rank_bytes));
    flight.record.persist_s = *std::max_element(persist.begin(), persist.end());
    // checkpoint.direct_io asked for, refused by the filesystem: the write
    // figures are buffered writes, which the run must say (bench io does).
    const std::vector<double> fell_back = gather_from_ranks(comm_, flight.io_warning.empty() ? 0.0 : 1.0);
    if (!direct_io_warned_ && *std::max_element(fell_back.begin(), fell_back.end()) > 0) {
      direct_io_warned_ = true;
      const int first = static_cast<int>(std::max_element(fell_back.begin(), fell_back.end()) - fell_back.begin());
      warnings_.push_back("checkpoint.direct_io=true was refused on rank(s) " + rank_list(fell_back, 1) + " (" +
                          broadcast_string(comm_, flight.io_warning, first) +
                          "): the checkpoint write figures are buffered writes");
    }
    for (double b : bytes) flight.record.bytes += static_cast<int64_t>(b);
    if (flight.record.persist_s > 0)
      flight.record.write_gbs = static_cast<double>(flight.record.bytes) / flight.record.persist_s * 1e-9;
    submit_commit();
    return false;
  }
  // kCommitting: rank 0's commit is done.
  flight.record.commit_s = gather_from_ranks(comm_, flight.commit_s)[0];
  flight.record.status = "committed";
  // Committed, but checkpoint.dir not fsynced after `latest` (the storage
  // refused): the run trains on, and says so once.
  const std::string durability_error = broadcast_string(comm_, flight.commit_warnings.durability, 0);
  if (!durability_error.empty() && !durability_warned_) {
    durability_warned_ = true;
    warnings_.push_back(durability_error + "; training went on");
  }
  // Committed, with an old checkpoint left behind (a folder that cannot be
  // removed): the run trains on, and says so once (each later commit tries again).
  const std::string retention_error = broadcast_string(comm_, flight.commit_warnings.retention, 0);
  if (!retention_error.empty() && !retention_warned_) {
    retention_warned_ = true;
    warnings_.push_back(retention_error + "; training went on (checkpoint.keep " +
                        std::to_string(config_.checkpoint.keep) + " not kept to: remove the folder by hand)");
  }
  add_record(flight.record);
  in_flight_.reset();
  return true;
}

void Checkpointer::add_record(const CheckpointRecord& record) {
  // A checkpoint skipped as busy is decided before the one in flight
  // resolves: in step order all the same, as the result lists them.
  const auto after = std::upper_bound(records_.begin(), records_.end(), record.step,
                                      [](int64_t step, const CheckpointRecord& r) { return step < r.step; });
  records_.insert(after, record);
}

CheckpointRecord& Checkpointer::record_of(int64_t step) {
  const auto found = std::find_if(records_.rbegin(), records_.rend(),
                                  [step](const CheckpointRecord& r) { return r.step == step; });
  if (found == records_.rend())
    throw std::logic_error("checkpoint of step " + std::to_string(step) + " has no record");
  return *found;
}

void Checkpointer::settle_failure(CheckpointRecord record, const std::string& failed_ranks, int first_failed,
                                  const std::string& reason, bool only_disk_full, bool storage_hung) {
  const std::string step = std::to_string(record.step);
  const std::string detail = comm_.world_size() > 1 ? "rank " + std::to_string(first_failed) + ": " + reason : reason;
  if (only_disk_full && config_.checkpoint.on_full == "skip") {
    record.status = "skipped_disk_full";
    warnings_.push_back("checkpoint of step " + step + " skipped: disk full on rank(s) " + failed_ranks + " (" +
                        detail + "); checkpoint.on_full=skip, training went on");
    add_record(record);
    return;
  }
  // What a resume can start from: said only when it is there (not of a
  // folder removed or replaced during the run, or one that cannot be listed).
  // The storage answered this failure, but may stop answering the listing:
  // a listing unfinished within best_effort_bound() is let go, and the
  // message goes without it (the run still writes its result). Rank 0's
  // alone: it speaks for the job, and every rank listing the shared folder
  // for a line only rank 0 prints was N ranks' load on failing storage.
  std::string previous;
  if (!storage_hung && comm_.rank() == 0) {
    auto listed = std::make_shared<std::string>();
    const bool finished = run_for_at_most(best_effort_bound(), [listed, dir = dir_, identity = dir_identity_] {
      try {
        if (folder_state(dir, identity) != FolderState::kOurs) return;
        const std::vector<CommittedCheckpoint> committed = list_committed(dir);
        *listed = committed.empty() ? "; no checkpoint was committed before it"
                                    : "; the previous committed checkpoint (step_" +
                                          std::to_string(committed.back().step) + ") is intact";
      } catch (const std::exception&) {  // CheckpointError, or a listing that failed part way
      }
    });
    if (finished) previous = *listed;
  }
  // Recorded: the run ends after this step and still writes its result,
  // this checkpoint's record among them.
  record.status = "failed";
  add_record(record);
  failed_ = true;
  throw CheckpointFailure("checkpoint of step " + step + " failed on rank(s) " + failed_ranks + ": " + detail +
                          (only_disk_full ? " (checkpoint.on_full=fail; set it to skip to train on without it)" : "") +
                          previous);
}

bool Checkpointer::remove_pending_folder(int64_t step) {
  if (comm_.rank() != 0) return true;
  // Best effort: the folder is .tmp, never loaded, and emptied by the next
  // checkpoint of that step; on storage that stops responding now, a removal
  // unfinished within best_effort_bound() is let go.
  return run_for_at_most(best_effort_bound(), [dir = dir_, step] {
    try {
      abandon_pending(dir, step);
    } catch (const std::exception&) {
    }
  });
}

double Checkpointer::before_optimizer_step() {
  const double blocked = finish_copy();
  if (in_flight_) in_flight_->record.stall_s += blocked;
  return blocked;
}

double Checkpointer::finish_copy() {
  if (!in_flight_ || in_flight_->phase != Phase::kCopying) return 0.0;
  // A device engine returns from backward once it is enqueued: waiting for
  // the copy from there would count the GPU's remaining backward both as
  // compute (its events) and as this stall. Backward's end first; what the
  // copy takes beyond it is the stall.
  engine_.synchronize();
  const double blocked = engine_.wait_state_copy();
  in_flight_->record.snapshot_s = steady_now() - in_flight_->copy_started;
  submit_persist();
  return blocked;
}

void Checkpointer::submit_to_writer(BackgroundWriter::Job job) {
  writer_deadline_ = steady_now() + config_.checkpoint.timeout_s;
  writer_->submit(std::move(job));
}

int Checkpointer::writer_progress() {
  if (writer_->idle()) return kDone;
  if (steady_now() < writer_deadline_) return kBusy;
  abandon_writer();
  return kTimedOut;
}

void Checkpointer::wait_writer_slice() {
  // A quarter of a second: under comm.timeout_s's 1 s minimum, so a rank
  // whose writer is idle never times out in the round waiting for one whose
  // writer is not.
  constexpr double kSlice = 0.25;
  (void)writer_->wait_idle_for(std::min(kSlice, writer_deadline_ - steady_now()));
}

Checkpointer::WriterWaitScope::WriterWaitScope(Checkpointer* owner) : owner_(owner) {
  if (owner_ != nullptr && owner_->writer_waits_++ == 0 && owner_->writer_wait_hook_) owner_->writer_wait_hook_(true);
}

Checkpointer::WriterWaitScope::~WriterWaitScope() {
  if (owner_ != nullptr && --owner_->writer_waits_ == 0 && owner_->writer_wait_hook_) owner_->writer_wait_hook_(false);
}

bool Checkpointer::wait_for_writers() {
  const WriterWaitScope waiting = writer_wait_scope(true);  // (a diverged step's give_up, a folder's making)
  for (;;) {
    wait_writer_slice();
    const std::vector<double> states = gather_from_ranks(comm_, writer_progress());
    if (*std::min_element(states.begin(), states.end()) != kBusy)
      return *std::max_element(states.begin(), states.end()) == kTimedOut;
  }
}

void Checkpointer::abandon_writer() {
  if (writer_abandoned_) return;
  writer_->abandon();
  writer_abandoned_ = true;
}

double Checkpointer::drain() {
  const double begin = steady_now();
  // Not the record's stall: after the last step (finish) or between steps
  // (wait_until_idle) no step waits for the copy; drain_s counts it. (It
  // was both: the last checkpoint's stall_s held a copy no step paid for.)
  finish_copy();  // the device's copy: a GPU that hangs in it is the hang watch's
  // The writers' wait, bounded by checkpoint.timeout_s (writer_progress).
  const WriterWaitScope waiting = writer_wait_scope(in_flight_ != nullptr);
  while (in_flight_) {
    wait_writer_slice();
    agree();
  }
  return steady_now() - begin;
}

double Checkpointer::after_step(int64_t step) {
  const double begin = steady_now();
  // give_up, or a failed checkpoint, left nothing in flight; nothing more is started.
  if (diverged_ || failed_) return 0.0;
  const CheckpointSection& ck = config_.checkpoint;
  // A wait that ends in the failure of the checkpoint of `flight_step`
  // (CheckpointFailure, its record added as failed): what it blocked is
  // still that checkpoint's stall, as it is the step's.
  const auto charging_failure = [this](int64_t flight_step, double since, const auto& wait) {
    try {
      return wait();
    } catch (const CheckpointFailure&) {
      record_of(flight_step).stall_s += steady_now() - since;
      throw;
    }
  };
  // A checkpoint in flight moves along: one agreement round per step. The
  // round blocks the loop (it waits for the slowest rank's writer state), so
  // it is this checkpoint's stall as the copy is: the records' stall_s then
  // add up to the steps' ckpt_stall_s, but for the loop's own bookkeeping of
  // a skipped checkpoint (microseconds, in the step and in no record).
  if (in_flight_ && in_flight_->phase != Phase::kCopying) {
    const int64_t flight_step = in_flight_->step;
    const double round_begin = steady_now();
    const bool resolved = charging_failure(flight_step, round_begin, [this] { return agree(); });
    const double round = steady_now() - round_begin;
    if (resolved) {
      record_of(flight_step).stall_s += round;
    } else {
      in_flight_->record.stall_s += round;
    }
  }

  if (!due(step)) return steady_now() - begin;
  double waited_for_previous = 0.0;
  if (in_flight_) {
    if (ck.when_busy == "skip") {
      CheckpointRecord skipped;
      skipped.step = step;
      skipped.status = "skipped_busy";
      add_record(skipped);
      warnings_.push_back("checkpoint of step " + std::to_string(step) +
                          " skipped: the previous one was still being written (checkpoint.when_busy=skip)");
      return steady_now() - begin;
    }
    // when_busy: wait (the wait is the new checkpoint's stall, or the
    // previous one's if that fails)
    waited_for_previous = charging_failure(in_flight_->step, steady_now(), [this] { return drain(); });
  }
  const double start_begin = steady_now();
  if (!start(step)) return steady_now() - begin;  // its folder could not be made: skipped (on_full=skip)
  in_flight_->record.stall_s += waited_for_previous;
  if (!ck.async) {
    // The whole checkpoint inside the step: copy, write, agree, commit.
    before_optimizer_step();
    in_flight_->record.stall_s = 0;  // set in full below, or on failure
    charging_failure(step, start_begin, [this] { return drain(); });
    record_of(step).stall_s = steady_now() - start_begin;
  } else {
    in_flight_->record.stall_s += steady_now() - start_begin;
  }
  return steady_now() - begin;
}

double Checkpointer::give_up(int64_t step) {
  const double begin = steady_now();
  if (diverged_) return 0.0;
  diverged_ = true;
  const std::string why = "the loss or gradient norm of step " + std::to_string(step) + " is not finite";
  if (in_flight_ && in_flight_->step == step - 1 && in_flight_->phase != Phase::kCommitting) {
    // Its weights are the ones this step diverged from. (Its commit cannot
    // have been asked for yet: the first agreement that could is this
    // step's after_step, which is not called.)
    InFlight& flight = *in_flight_;
    if (flight.phase == Phase::kCopying) engine_.wait_state_copy();
    // Every rank's writer done with the folder (or one abandoned on hung
    // storage, still writing there: the folder is left as step_N.tmp).
    const bool storage_hung = wait_for_writers();
    (void)writer_->take_error();  // a failed write of a checkpoint given up anyway
    if (!storage_hung) (void)remove_pending_folder(flight.step);
    flight.record.status = "skipped_diverged";
    add_record(flight.record);
    warnings_.push_back("checkpoint of step " + std::to_string(flight.step) + " given up: " + why +
                        " (its weights are the ones that step started from)" +
                        (storage_hung ? "; its files were still being written after checkpoint.timeout_s (the storage "
                                        "stopped responding): " + pending_folder(dir_, flight.step) + " is left"
                                      : ""));
    in_flight_.reset();
  }
  drain();  // an older checkpoint in flight holds weights that trained on finitely: it commits
  warnings_.push_back("no checkpoint from step " + std::to_string(step) + " on: " + why);
  return steady_now() - begin;
}

int64_t checkpoints_added_at_peak(const CheckpointSection& ck, int64_t first_step, int64_t last_step,
                                  int64_t committed_before) {
  if (ck.every_steps <= 0 || last_step < first_step) return 0;
  const int64_t count = last_step / ck.every_steps - (first_step - 1) / ck.every_steps;
  if (count <= 0) return 0;
  if (ck.keep == 0) return count;
  // The j-th one is written beside min(before + j - 1, K) committed ones
  // (the first beside every one there before: retention has not run yet).
  return std::max<int64_t>(1, std::min(committed_before + count - 1, ck.keep) + 1 - committed_before);
}

bool Checkpointer::due(int64_t step) const {
  const int64_t every = config_.checkpoint.every_steps;
  return !diverged_ && !failed_ && every > 0 && step % every == 0;
}

double Checkpointer::refuse_inconsistent(int64_t step, const std::string& why) {
  const double begin = steady_now();
  if (diverged_) return 0.0;
  diverged_ = true;
  CheckpointRecord refused;
  refused.step = step;
  refused.status = "skipped_diverged";
  drain();  // compared at its own step: it commits
  add_record(refused);
  warnings_.push_back("no checkpoint from step " + std::to_string(step) + " on: " + why);
  return steady_now() - begin;
}

double Checkpointer::finish() {
  const double seconds = drain();
  return seconds;
}

namespace {

// Rank 0 commits each checkpoint from every rank's record in the folder, so
// every rank must see the folder rank 0 writes. A path that is a disk of
// its own on each node (a local NVMe mounted at one path everywhere, a
// container's volume) passed every rank's writable check, and the first
// commit, a whole checkpoint interval in, failed with "no record from rank
// N". Rank 0 leaves a file of a name no other process has used; every rank
// looks for it.
void check_every_rank_sees_the_folder(const std::string& dir, Communicator& comm, const std::string& named) {
  if (comm.world_size() < 2) return;
  std::string probe;
  // Rank 0's failure to write it (the writable check just passed) ends the
  // job, its peers waiting in the broadcast.
  if (comm.rank() == 0) probe = write_sharing_probe(dir, comm.host_name(), named);
  probe = broadcast_string(comm, probe, 0);
  // Only "no such file" is a folder the rank does not see; another error
  // (ESTALE, EIO, EACCES) is the storage's, said in its words (exit 3).
  constexpr double kBlind = 1, kCannotLook = 2;
  double state = 0;
  std::string cannot_look;
  struct stat info {};
  if (comm.rank() != 0 && ::stat(probe.c_str(), &info) != 0) {
    state = errno == ENOENT || errno == ENOTDIR ? kBlind : kCannotLook;
    if (state == kCannotLook) cannot_look = "cannot look for " + probe + ": " + std::strerror(errno);
  }
  const std::vector<double> blind = gather_from_ranks(comm, state);
  if (comm.rank() == 0) (void)::unlink(probe.c_str());
  if (*std::max_element(blind.begin(), blind.end()) == kCannotLook) {
    const RankReason first = first_reason_over_ranks(comm, cannot_look);
    throw CheckpointError(named + " " + dir + ": rank " + std::to_string(first.rank) + " " + first.reason, true);
  }
  const std::string ranks = rank_list(blind, kBlind);
  if (ranks.empty()) return;
  const std::vector<std::string> hosts = host_names_of_ranks(comm);
  std::vector<std::string> blind_hosts;  // each once, in rank order
  for (size_t r = 0; r < blind.size(); ++r)
    if (blind[r] > 0 && std::find(blind_hosts.begin(), blind_hosts.end(), hosts[r]) == blind_hosts.end())
      blind_hosts.push_back(hosts[r]);
  std::string where;
  for (const std::string& host : blind_hosts) where += (where.empty() ? "" : ", ") + host;
  throw CheckpointError(named + " " + dir + " is not the folder rank 0 (on " + hosts[0] +
                            ") writes: rank(s) " + ranks + " (on " + where +
                            ") do not see the file rank 0 made in it, so rank 0 could commit no checkpoint; set "
                            "checkpoint.dir to a folder on storage every host shares",
                        false);
}

}  // namespace

void check_checkpoint_dir(const std::string& dir, Communicator& comm, bool temporary) {
  const std::string named = temporary ? temporary_directory_name() + ": the run's checkpoint folder" : "checkpoint.dir";
  const std::string mend = temporary ? "; set TMPDIR to a folder with room, or checkpoint.dir" : "";
  constexpr double kFailed = 1, kFailedByEnvironment = 2;
  std::string problem;
  double code = 0;
  try {
    check_checkpoint_dir(dir, named);
  } catch (const CheckpointWriteError& e) {
    problem = e.what();
    code = e.disk_full || temporary ? kFailedByEnvironment : kFailed;
  }
  const std::vector<double> codes = gather_from_ranks(comm, code);
  if (!problem.empty())
    throw CheckpointError(problem + " (rank " + std::to_string(comm.rank()) + ")" + mend, code == kFailedByEnvironment);
  const std::string ranks = rank_list(codes, kFailed);
  if (!ranks.empty())
    throw CheckpointError(named + " " + dir + " is not writable on rank(s) " + ranks + mend,
                          *std::max_element(codes.begin(), codes.end()) == kFailedByEnvironment);
  check_every_rank_sees_the_folder(dir, comm, named);
}

namespace {

// The config keys a checkpoint's state depends on: a resumed run must agree.
// (train.threads is not one: a resume may take other CPUs; it warns.)
const char* const kResumeMustMatch[][2] = {
    {"model", ""},           {"train", "micro_batch"}, {"train", "grad_accum"}, {"train", "mode"},
    {"comm", "zero"},        {"data", "source"},       {"data", "shards"},
    {"data", "seed"},        {"data", "readers"},      {"data", "field"},
    {"data", "shuffle_buffer"}, {"data", "synthetic_batches"}, {"data", "eos_token"},
    {"data", "synth_shards"}, {"data", "synth_tokens_per_sample"}, {"data", "synth_samples_per_shard"},
    {"data", "synth_payload_bytes"},
};
// Under LoRA also the adapters' shape, and the seed the frozen base is
// rebuilt from (a checkpoint without checkpoint.include_base does not hold it).
const char* const kLoraResumeMustMatch[][2] = {{"lora", ""}, {"train", "seed"}};

std::string check_compatible(const nlohmann::json& manifest, const Config& config, int world) {
  const int64_t written_by = manifest.value("world_size", int64_t{-1});
  if (written_by != world)
    return "it was written by " + std::to_string(written_by) + " rank(s) and this run has " +
           std::to_string(world) + ": resharding a checkpoint is not supported (run with " +
           std::to_string(written_by) + (written_by == 1 ? " rank)" : " ranks)");
  const nlohmann::json now = config_to_json(config);
  const nlohmann::json& then = manifest.at("config");
  // Given shards whose identities the checkpoint recorded (name, bytes, a
  // hash of the first 4 KiB) are compared file by file after listing
  // (resumed_shards_difference): the same files under another spelling
  // ("dir/", a relative path, a glob) or moved to another mount resume.
  const nlohmann::json shards_then = json_entry(then, "data", "shards");
  const bool shards_identified = json_entry(manifest, "extra", "shards").is_array() && !config.data.shards.empty() &&
                                 shards_then.is_string() && !shards_then.get<std::string>().empty();
  std::vector<std::array<const char*, 2>> keys;
  for (const auto& key : kResumeMustMatch)
    if (!(shards_identified && std::string_view(key[0]) == "data" && std::string_view(key[1]) == "shards"))
      keys.push_back({key[0], key[1]});
  if (config.train.mode == "lora")
    for (const auto& key : kLoraResumeMustMatch) keys.push_back({key[0], key[1]});
  const ConfigDifference differs = first_config_difference(then, now, keys);
  if (!differs.key.empty())
    return "it has " + differs.key + " = " + json_text(differs.first) + " but this run has " +
           json_text(differs.second) + " (a resumed run must keep the model, what it trains and how its optimizer state is laid out, the batch "
           "and the data stream)";
  // A LoRA checkpoint without the frozen base cannot give a run that asks
  // for it (the other way round, the base is there and goes unread).
  const bool base_written = then.value("checkpoint", nlohmann::json::object()).value("include_base", false);
  if (config.train.mode == "lora" && config.checkpoint.include_base && !base_written)
    return "it was written without the frozen base (checkpoint.include_base false), which this run's "
           "checkpoint.include_base true asks for: resume with checkpoint.include_base=false (the base is rebuilt "
           "from train.seed)";
  const int64_t step = manifest.at("step").get<int64_t>();
  if (step >= config.train.steps)
    return "it is at step " + std::to_string(step) + ", and train.steps is " + std::to_string(config.train.steps) +
           ": nothing is left to train (raise train.steps)";
  // Warm-up counts from the resumed step: steps left all within it measure
  // nothing, which a fresh run is refused for (train.warmup_steps < train.steps).
  if (config.train.steps - step <= config.train.warmup_steps)
    return "it is at step " + std::to_string(step) + ", and the " + std::to_string(config.train.steps - step) +
           " steps left to train.steps " + std::to_string(config.train.steps) + " are all within train.warmup_steps " +
           std::to_string(config.train.warmup_steps) +
           " (counted from the resumed step): no step would be measured (raise train.steps past " +
           std::to_string(step + config.train.warmup_steps) + ", or lower train.warmup_steps)";
  return "";
}

// Why a rank's resumed steps will not repeat the checkpointed run's bytes
// ("" when they will, or when the checkpoint does not say): the CPU engine's
// sums split by thread, and its thread count (train.threads, or by default
// the CPUs the rank may use) differs from the one that wrote it.
std::string resumed_threads_difference(const std::string& trainer_state, int threads_now) {
  const nlohmann::json state = nlohmann::json::parse(trainer_state, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("cpu_threads") || !state["cpu_threads"].is_number_integer()) return "";
  const int64_t then = state["cpu_threads"].get<int64_t>();
  if (then == threads_now || then == 0 || threads_now == 0) return "";
  return "the checkpoint was written with " + std::to_string(then) + " CPU engine thread(s) and this run has " +
         std::to_string(threads_now) +
         ": the engine's sums split by thread, so the resumed steps' bytes differ from an uninterrupted run's "
         "(set train.threads=" + std::to_string(then) + " to repeat them)";
}

// The trainer's own section, written by Checkpointer::start: a JSON object
// whose step, rank and world size are this checkpoint's and this rank's.
// Returns what is wrong, or "". Its checksum only says the bytes are those
// written; what they say is checked here.
std::string check_trainer_state(const std::string& text, int64_t step, Communicator& comm, const Config& config) {
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return "not JSON (" + std::to_string(text.size()) + " bytes)";
  }
  if (!state.is_object()) return "not a JSON object";
  const std::pair<const char*, int64_t> expected[] = {
      {"step", step}, {"rank", comm.rank()}, {"world_size", comm.world_size()}, {"data_seed", config.data.seed}};
  for (const auto& [key, value] : expected) {
    const auto found = state.find(key);
    if (found == state.end()) return std::string("field ") + key + " is missing";
    if (!found->is_number_integer()) return std::string("field ") + key + " is not an integer";
    if (found->get<int64_t>() != value)
      return std::string("field ") + key + " is " + std::to_string(found->get<int64_t>()) + ", expected " +
             std::to_string(value);
  }
  return "";
}

// The loader position a rank resumes from, checked before any source is
// built so that a damaged one is named with its checkpoint: all of it that
// the run's config decides. Only the count of data.shards, which the loader
// resolves later, is left to the ShardLoader's own check. Throws DataError
// or std::invalid_argument.
void check_data_position(const std::string& bytes, const Config& config, Communicator& comm, int64_t step) {
  if (config.data.source == "synthetic") {
    synthetic_position_index(bytes, config.data.synthetic_batches);
    return;
  }
  const LoaderPosition position = parse_position(bytes);
  // Each step takes grad_accum micro-batches: a count that is not the
  // step's (2^63-1, in a checkpoint whose checksums were made again,
  // overflowed and indexed reader -1) is damage.
  int64_t consumed = 0;
  if (__builtin_mul_overflow(step, config.train.grad_accum, &consumed) || position.batches_consumed != consumed)
    throw std::invalid_argument("batches_consumed is " + std::to_string(position.batches_consumed) + ", but " +
                                std::to_string(step) + " step(s) of train.grad_accum " +
                                std::to_string(config.train.grad_accum) + " took " + std::to_string(consumed));
  const int64_t shards = config.data.shards.empty() ? synth_shard_count(config, comm.world_size())
                                                    : position.shard_count;
  check_resume_position(loader_options(config, {}, comm.rank(), comm.world_size()), shards, position);
}

std::string previous_checkpoint_hint(const std::string& folder) {
  std::string previous;
  try {
    previous = newest_readable_checkpoint(std::filesystem::path(folder).parent_path().string(), folder);
  } catch (const std::exception&) {
  }
  return previous.empty() ? "; there is no earlier committed checkpoint"
                          : "; resume from the previous one instead: --resume " + previous;
}

// With pass_on, each rank read only its own slices of the state the ranks
// hold alike (SliceReading::kOwn): every slice is passed on from the rank that
// read and verified it, so the job reads the checkpoint from storage once, not
// once per rank. Either way only ranks that read the same checkpoint may go
// on: rank 0's list of slices (their ranks, places and checksums) must be
// every rank's, or the ranks would hold (or put together) the state of two
// runs' checkpoints of one step.
void put_slices_together(Communicator& comm, LoadedRank& loaded, const std::string& spec, int64_t step,
                         bool pass_on) {
  std::string listing;
  for (const LoadedSlice& s : loaded.slices)
    listing += std::to_string(s.image) + ":" + std::to_string(s.rank) + ":" + std::to_string(s.from) + "+" +
               std::to_string(s.bytes) + ":" + s.xxh64 + ";";
  const std::string rank_0s = broadcast_string(comm, listing, 0);
  const std::vector<double> differs = gather_from_ranks(comm, listing == rank_0s ? 0.0 : 1.0);
  const auto other = std::find_if(differs.begin(), differs.end(), [](double d) { return d > 0; });
  if (other != differs.end())
    throw CheckpointError("--resume " + spec + ": the ranks found different checkpoints of step " +
                          std::to_string(step) + ": rank " + std::to_string(other - differs.begin()) +
                          "'s files are not rank 0's: every rank must see the same folder (node-local disks, or a "
                          "stale cache of a network filesystem?); name one checkpoint, --resume DIR/step_N, that "
                          "every rank has");
  if (!pass_on) return;  // checkpoint.resume_read all: every rank read every slice itself
  comm.set_context("resuming: passing on the checkpoint's slices");
  for (const LoadedSlice& s : loaded.slices)
    comm.broadcast(loaded.images[s.image].at(s.from, s.bytes), s.bytes, s.rank);
  comm.set_context("");  // what follows (the data set-up) says nothing of where it is, as before
}

// --- resume_from_checkpoint's phases ---

// What this rank loaded, kept until every rank has said it could load its part.
struct RankLoad {
  LoadedRank loaded;
  double read_s = 0;                 // this rank's reading of its files
  std::string threads_differ;        // resumed_threads_difference
  std::vector<const void*> sources;  // the engine's state tensors in `loaded`
};

// Why this rank could not load its part ("" where it could).
struct LoadFailure {
  std::string problem;
  bool environment = false;  // the problem is the machine's (exit 3), not the checkpoint's
};

// The checkpoint `spec` names and its manifest: sets point's folder, step and shards.
nlohmann::json read_resume_manifest(const std::string& spec, const Config& config, ResumePoint& point) {
  point.folder = resolve_checkpoint(spec, config.checkpoint.dir);
  nlohmann::json manifest;
  try {
    manifest = read_manifest(point.folder);
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string(e.what()) + previous_checkpoint_hint(point.folder), e.environment());
  }
  // The checkpoint layer keeps the config as written; a resume compares its
  // keys: another type ("config": 5) ended it in the JSON library's words.
  if (const nlohmann::json& config_then = manifest.at("config"); !config_then.is_object())
    throw CheckpointError(point.folder + "/manifest.json: config is " + checkpoint_io::printable(config_then.dump()) +
                          ", not an object: the manifest is damaged" + previous_checkpoint_hint(point.folder));
  point.step = manifest.at("step").get<int64_t>();
  point.shards = json_entry(manifest, "extra", "shards");
  return manifest;
}

// Temporary shards sized for the run: a resumed run makes them as the
// checkpointed one did, whatever its own train.steps. Adopted, so checked
// as the key is (the caller's check_compatible compares it with itself): a
// damaged -5 made other shards, exit 0; 10^12 failed as exit 3 in the
// shard maker's words.
void adopt_synth_samples_per_shard(const nlohmann::json& manifest, const std::string& folder, Config& config) {
  if (config.data.synth_samples_per_shard != 0) return;
  const nlohmann::json data = json_entry(manifest, "config", "data");  // an object (read_resume_manifest)
  const nlohmann::json saved = data.is_object() ? data.value("synth_samples_per_shard", nlohmann::json(0))
                                                : nlohmann::json();
  if (!saved.is_number_integer() || saved.get<int64_t>() < 0 || saved.get<int64_t>() > kMaxSynthSamplesPerShard)
    throw CheckpointError(folder + "/manifest.json: config.data.synth_samples_per_shard is " +
                          checkpoint_io::printable(saved.dump()) + ", not an integer from 0 to " +
                          std::to_string(kMaxSynthSamplesPerShard) + ": the manifest is damaged");
  config.data.synth_samples_per_shard = saved.get<int64_t>();
}

void read_this_ranks_files(const std::string& folder, const nlohmann::json& manifest, int rank, SliceReading reading,
                           RankLoad& load) {
  try {
    // The ranks' slices of the state they hold alike: each reads its own
    // (the world size is the checkpoint's, checked by the caller), or every
    // one under checkpoint.resume_read all.
    const double read_began = steady_now();
    load.loaded = read_rank_files(folder, manifest, rank, StagingAllocator{}, reading);
    load.read_s = steady_now() - read_began;
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string(e.what()) + previous_checkpoint_hint(folder), e.environment());
  }
}

// Where in `loaded` each of the engine's state tensors is, each checked to be there at the engine's size.
std::vector<const void*> engine_state_sources(const LoadedRank& loaded, TrainingEngine& engine,
                                              const std::string& folder, int rank) {
  std::vector<const void*> sources;
  for (const StateTensor& t : engine.state_tensors()) {
    int64_t bytes = 0;
    const unsigned char* data = loaded.section(t.name, &bytes);
    if (data == nullptr || bytes != t.bytes)
      throw CheckpointError("--resume " + folder + ": rank " + std::to_string(rank) + "'s files " +
                            (data == nullptr ? "have no " + t.name
                                             : "hold " + std::to_string(bytes) + " bytes of " + t.name +
                                                   ", this engine needs " + std::to_string(t.bytes)) +
                            " (written by another engine or precision?)");
    sources.push_back(data);
  }
  return sources;
}

// The trainer state section's text, checked to be this checkpoint's and this rank's.
std::string checked_trainer_state(const LoadedRank& loaded, const std::string& rank_files, int64_t step,
                                  Communicator& comm, const Config& config) {
  int64_t state_bytes = 0;
  const unsigned char* state = loaded.section(kTrainerStateSection, &state_bytes);
  if (state == nullptr) throw CheckpointError(rank_files + "files have no " + kTrainerStateSection);
  const std::string text(reinterpret_cast<const char*>(state), static_cast<size_t>(state_bytes));
  const std::string state_problem = check_trainer_state(text, step, comm, config);
  if (!state_problem.empty()) throw CheckpointError(rank_files + kTrainerStateSection + ": " + state_problem);
  return text;
}

// The loader position section's bytes, checked against the run's config.
std::string checked_data_position(const LoadedRank& loaded, const std::string& rank_files, const Config& config,
                                  Communicator& comm, int64_t step) {
  int64_t position_bytes = 0;
  const unsigned char* position = loaded.section(kDataPositionSection, &position_bytes);
  if (position == nullptr)
    throw CheckpointError(rank_files + "files have no data position");
  std::string data_position(reinterpret_cast<const char*>(position), static_cast<size_t>(position_bytes));
  try {
    check_data_position(data_position, config, comm, step);
  } catch (const std::exception& e) {  // DataError, std::invalid_argument
    throw CheckpointError(rank_files + kDataPositionSection + ": " + e.what());
  }
  return data_position;
}

// This rank's part of the checkpoint, read and checked. No collective in
// here: a rank that fails stops partway, and must still meet the others at
// the gather that follows.
LoadFailure load_this_ranks_part(const std::string& spec, Config& config, TrainingEngine& engine, Communicator& comm,
                                 SliceReading reading, ResumePoint& point, RankLoad& load) {
  try {
    const nlohmann::json manifest = read_resume_manifest(spec, config, point);
    adopt_synth_samples_per_shard(manifest, point.folder, config);
    const std::string incompatible = check_compatible(manifest, config, comm.world_size());
    if (!incompatible.empty()) throw CheckpointError("--resume " + point.folder + ": " + incompatible);

    read_this_ranks_files(point.folder, manifest, comm.rank(), reading, load);
    load.sources = engine_state_sources(load.loaded, engine, point.folder, comm.rank());
    const std::string rank_files = "--resume " + point.folder + ": rank " + std::to_string(comm.rank()) + "'s ";
    const std::string state = checked_trainer_state(load.loaded, rank_files, point.step, comm, config);
    load.threads_differ = resumed_threads_difference(state, engine.cpu_threads());
    point.data_position = checked_data_position(load.loaded, rank_files, config, comm, point.step);
  } catch (const CheckpointError& e) {
    return {e.what(), e.environment()};
  } catch (const nlohmann::json::exception& e) {
    return {"--resume " + spec + ": malformed manifest: " + checkpoint_io::json_error_text(e)};
  }
  return {};
}

// Each rank resolved `latest` (or the folder) on its own: a node-local
// checkpoint.dir, or a stale network-filesystem cache of `latest`, gives
// ranks different steps, and a job whose ranks train from different
// steps only ends at comm.timeout_s, without a result.
void check_every_rank_has_step(Communicator& comm, const std::string& spec, const Config& config, int64_t step) {
  const std::vector<double> steps = gather_from_ranks(comm, static_cast<double>(step));
  const auto other = std::find_if(steps.begin(), steps.end(), [&](double s) { return s != steps.front(); });
  if (other == steps.end()) return;
  const int other_rank = static_cast<int>(other - steps.begin());
  throw CheckpointError("--resume " + spec + ": the ranks found different checkpoints: rank 0 step " +
                        std::to_string(static_cast<int64_t>(steps.front())) + ", rank " +
                        std::to_string(other_rank) + " step " + std::to_string(static_cast<int64_t>(*other)) +
                        (spec == "latest" ? " (checkpoint.dir " + config.checkpoint.dir + ")" : std::string()) +
                        ": every rank must see the same folder (node-local disks, or a stale cache of a "
                        "network filesystem?); name one checkpoint, --resume DIR/step_N, that every rank has");
}

// A rank that failed gives its own reason; the others give the first
// failing rank's (the file, the checksums, the checkpoint to resume from
// instead): rank 0's line is the one printed, and "rank(s) 1 could not load
// their part" told nothing.
[[noreturn]] void throw_load_failure(Communicator& comm, const LoadFailure& mine, const std::vector<double>& failed,
                                     int first_rank) {
  const std::string reason = broadcast_string(comm, mine.problem, first_rank);
  if (!mine.problem.empty()) throw CheckpointError(mine.problem, mine.environment);
  throw CheckpointError(reason + " (rank " + std::to_string(first_rank) + "'s part; rank(s) " + rank_list(failed, 1) +
                            " could not load theirs)",
                        failed[static_cast<size_t>(first_rank)] == 2.0);
}

}  // namespace

std::string resumed_shards_difference(const nlohmann::json& recorded, const std::vector<std::string>& paths,
                                      const std::vector<std::string>& identities) {
  if (!recorded.is_array()) return "";
  const std::string what_to_do =
      ": its saved position counts samples into the shards it read, so a resume needs the same files (restore them, "
      "or start a new run)";
  if (recorded.size() != identities.size())
    return "the checkpoint was taken over " + std::to_string(recorded.size()) + " shards, and data.shards now lists " +
           std::to_string(identities.size()) + what_to_do;
  for (size_t i = 0; i < identities.size(); ++i) {
    const std::string then = recorded[i].is_string() ? recorded[i].get<std::string>() : recorded[i].dump();
    if (then == identities[i]) continue;
    return "shard " + std::to_string(i + 1) + " of " + std::to_string(identities.size()) + ", " + paths[i] +
           ", is '" + identities[i] + "' and was '" + then +
           "' when the checkpoint was taken (file name, bytes, a hash of its first 4 KiB)" + what_to_do;
  }
  return "";
}

nlohmann::json resume_json(const ResumePoint& point) {
  return {{"checkpoint", point.folder},
          {"step", point.step},
          {"bytes_read", point.bytes_read},
          {"read_s", point.read_s},
          {"read_gbs", point.read_s > 0 ? nlohmann::json(static_cast<double>(point.bytes_read) / point.read_s * 1e-9)
                                        : nlohmann::json()},
          {"exchange_s", point.exchange_s},
          {"load_s", point.load_s}};
}

ResumePoint resume_from_checkpoint(const std::string& spec, Config& config, TrainingEngine& engine,
                                   Communicator& comm) {
  const double began = steady_now();
  ResumePoint point;
  RankLoad load;
  const SliceReading reading = config.checkpoint.resume_read == "all" ? SliceReading::kAll : SliceReading::kOwn;
  // Read on this thread: bounded, as the writes are, by checkpoint.timeout_s.
  std::optional<StorageWatchdog> watchdog;
  watchdog.emplace(comm, config.checkpoint.timeout_s, "reading the checkpoint to resume from (--resume " + spec + ")");
  const LoadFailure failure = load_this_ranks_part(spec, config, engine, comm, reading, point, load);
  // Every rank learns whether every rank could load: none trains alone.
  const std::vector<double> failed =
      gather_from_ranks(comm, failure.problem.empty() ? 0.0 : (failure.environment ? 2.0 : 1.0));
  const auto first = std::find_if(failed.begin(), failed.end(), [](double code) { return code > 0; });
  if (first != failed.end()) throw_load_failure(comm, failure, failed, static_cast<int>(first - failed.begin()));
  check_every_rank_has_step(comm, spec, config, point.step);

  watchdog.reset();  // the storage's part is done; the slices travel over the network, bounded by comm
  for (double s : gather_from_ranks(comm, load.read_s)) point.read_s = std::max(point.read_s, s);
  for (double b : gather_from_ranks(comm, static_cast<double>(load.loaded.bytes_read)))
    point.bytes_read += static_cast<int64_t>(b);
  const double exchange_began = steady_now();
  put_slices_together(comm, load.loaded, spec, point.step, reading == SliceReading::kOwn);
  point.exchange_s = steady_now() - exchange_began;
  engine.restore_state(load.sources);
  point.load_s = steady_now() - began;
  const RankReason threads = first_reason_over_ranks(comm, load.threads_differ);
  if (!threads.reason.empty())
    point.warning = "--resume " + point.folder + ": rank " + std::to_string(threads.rank) + ": " + threads.reason;
  return point;
}

}  // namespace trainbench
