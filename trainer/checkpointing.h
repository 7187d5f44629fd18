// The checkpoint policy of a run: when a checkpoint is taken, how the step
// loop overlaps it, how the ranks agree that it is complete, what a busy or
// full disk does, and how a run resumes. The mechanics (staging images,
// files, manifest, commit, verification) are checkpoint/'s.
//
// Asynchronous checkpoint of step N, per rank (checkpoint.async: true):
//   end of step N         the engine starts copying its state into staging
//                         (pinned under CUDA) and the loader position and
//                         trainer state are captured; the loop goes on
//   step N+1, before its  the loop waits for the copy to have landed (the
//   optimizer step        only stall a checkpoint must cause), then the
//                         rank's writer thread persists the staging images
//   each following step   the ranks compare notes (one small all-gather):
//                         once every rank's files are durable, rank 0's
//                         writer commits (manifest, rename, `latest`); once
//                         that is done too, the checkpoint is complete
// The all-gather runs at the same steps on every rank, so the ranks always
// take the same decisions: commit, give up (disk full with on_full: skip),
// fail (on_full: fail), or skip a checkpoint that is due while the previous
// one is still in flight (when_busy: skip).
#pragma once

#include <chrono>   // best_effort_bound
#include <cstdint>  // int64_t
#include <functional>  // the writer-wait hook
#include <limits>   // the deadline of no job
#include <memory>   // the writer thread
#include <optional>
#include <stdexcept>  // CheckpointFailure
#include <string>
#include <utility>    // std::pair
#include <vector>

#include <nlohmann/json.hpp>  // manifest contents

#include "checkpoint/background_writer.h"  // BackgroundWriter
#include "checkpoint/checkpoint_files.h"    // CommitWarnings
#include "checkpoint/state_image.h"        // StateImage
#include "comm/communicator.h"             // agreement between ranks
#include "dataloader/batch_source.h"       // BatchSource::save_position
#include "kernels/engine.h"                // TrainingEngine state copy
#include "trainer/config.h"

namespace trainbench {

// A checkpoint could not be written and checkpoint.on_full does not allow
// going on: the CLI prints what() and exits 3. Earlier checkpoints are intact.
class CheckpointFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One checkpoint of the run, as the results report it.
struct CheckpointRecord {
  int64_t step = 0;
  std::string status;       // committed | skipped_busy | skipped_disk_full | skipped_diverged | failed
  int64_t bytes = 0;        // every rank's files
  int64_t rank_bytes = 0;   // this rank's files
  double snapshot_s = 0;    // state copy, from its start until the loop saw it landed
  double persist_s = 0;     // slowest rank's write + fsync of its files
  double write_gbs = 0;     // bytes / persist_s (1e9 B/s): the checkpoint's aggregate write rate
  double commit_s = 0;      // rank 0's manifest + rename + latest + retention
  double stall_s = 0;       // loop time this checkpoint blocked on this rank (in ckpt_stall_s)
};

// Whether every rank holds this state tensor alike (data parallelism's
// replicas: the parameters, and AdamW's moments unless ZeRO-1 shards them
// over the ranks, comm.zero 1 on more than one rank): a checkpoint then holds
// it once, each rank writing a slice, as PyTorch DCP and Megatron's fully
// parallel save write replicated state once. Decided from the config, alike
// on every rank: a rank whose ZeRO-1 shard happens to be all of a tiny model
// still holds its own.
bool held_alike(const StateTensor& tensor, const Config& config, int world);
// The bytes one checkpoint of the job's engine state takes on disk: the
// state held alike once (its slices tile its 4096-aligned images), each
// rank's own (ZeRO-1's shard, as large as this rank's) `world` times.
int64_t job_state_bytes(const TrainingEngine& engine, const Config& config, int world);
// How a rank's checkpoint staging is laid out, as the Checkpointer lays it
// out: the images of the state held alike (the same on every rank; rank r
// stages and writes its slice of each, rank_slice) and of the rank's own,
// each spread over checkpoint.writers files.
struct StagingLayout {
  std::vector<std::vector<SectionSpec>> alike;
  std::vector<std::vector<SectionSpec>> own;
};
StagingLayout staging_layout(const std::vector<StateTensor>& tensors, const Config& config, int world);
// The host memory rank `rank` of `world` stages those tensors in
// (Checkpointer::staging_bytes, known before anything is allocated).
int64_t rank_staging_bytes(const std::vector<StateTensor>& tensors, const Config& config, int world, int rank);
// A rank's share of it: what each rank writes per checkpoint, rounded up.
inline int64_t state_bytes_per_rank(const TrainingEngine& engine, const Config& config, int world) {
  return (job_state_bytes(engine, config, world) + world - 1) / world;
}

class Checkpointer {
 public:
  // `dir` exists and is writable (check_checkpoint_dir). `versions` goes
  // into every manifest. The staging for the engine's state (one image per
  // writer, through the engine's host allocator) is allocated and touched
  // here, before training. resumed_from: the checkpoint folder the run
  // resumed from, "" for a fresh run; a `dir` holding another run's
  // checkpoints is refused (CheckpointError) unless it is this run's own,
  // the message offering --resume where the command has it (offers_resume).
  Checkpointer(const Config& config, std::string dir, TrainingEngine& engine, BatchSource& source,
               Communicator& comm, nlohmann::json versions, const std::string& resumed_from,
               bool offers_resume = true);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Called before every optimizer step: waits for a state copy in flight and
  // hands the files to the writer thread. Returns the seconds it blocked.
  double before_optimizer_step();
  // Called at the end of every step, once the optimizer has finished: moves
  // a checkpoint in flight along and starts one when due. Returns the
  // seconds it blocked. Throws CheckpointFailure, after which the failed
  // checkpoint is in records() and nothing is in flight.
  double after_step(int64_t step);
  // Called instead of after_step when the step's loss or gradient norm is
  // not finite: the weights it made, and those it started from (a
  // checkpoint of the step before, still in flight), are never committed,
  // so `latest` and retention keep the last good checkpoint. An older
  // checkpoint in flight is finished; none is started from now on.
  // Collective (the gradient norm, reduced over the ranks, is the same on
  // every rank). Returns the seconds it blocked.
  double give_up(int64_t step);
  // Whether after_step(step) would start a checkpoint (none is once the run
  // gave up or failed).
  bool due(int64_t step) const;
  // Called instead of after_step when the ranks' parameters differ at
  // `step` (compared just before, as at every step due a checkpoint): its
  // checkpoint is not taken and none is from now on; one in flight was
  // compared at its own step, so it commits. Collective (the comparison's
  // verdict is every rank's). Returns the seconds it blocked.
  double refuse_inconsistent(int64_t step, const std::string& why);
  // After the last step: persists and commits what is in flight. Returns
  // the seconds it took. Throws CheckpointFailure.
  double finish();
  // Between steps: the same, so that nothing is being written (the
  // burn-in's storage measurement must not share the disk with a
  // checkpoint). Collective: every rank calls it after the same step.
  double wait_until_idle() { return drain(); }
  // Called with true when a wait for the writers begins (a checkpoint drained
  // by finish, wait_until_idle, a synchronous checkpoint or when_busy=wait,
  // one given up at a non-finite step, a checkpoint folder being made) and
  // with false when it ends. Such a wait is bounded by
  // checkpoint.timeout_s: a hang watch that allows less (burn-in's) pauses
  // for it, or a slow write that moves was called a hung rank.
  void set_writer_wait_hook(std::function<void(bool waiting)> hook) { writer_wait_hook_ = std::move(hook); }
  // The shards the data position counts into (shard_identities), recorded
  // in every manifest this run commits: rank 0's, which commits.
  void record_shards(std::vector<std::string> identities) { shard_identities_ = std::move(identities); }

  const std::vector<CheckpointRecord>& records() const { return records_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::string& dir() const { return dir_; }
  // The host memory this rank holds for staging its engine state (page-
  // locked under CUDA): its slice of the state held alike and its own whole.
  int64_t staging_bytes() const;

 private:
  enum class Phase { kCopying, kWriting, kCommitting };
  // Shared with the writer's jobs: one abandoned on hung storage (see
  // checkpoint.timeout_s) keeps what it writes to and reads from alive.
  struct InFlight {
    int64_t step = 0;
    Phase phase = Phase::kCopying;
    CheckpointRecord record;
    double copy_started = 0;  // steady seconds
    double persist_s = 0;     // written by the writer thread, read after it is idle
    double commit_s = 0;
    CommitWarnings commit_warnings;  // rank 0's: committed, but not durable yet or an old one left behind
    std::string io_warning;   // the writer's: O_DIRECT refused, written through the page cache
    std::unique_ptr<StateImage> trainer_image;  // step, loader position: small, per checkpoint
  };

  void allocate_staging();
  // What this rank writes of images_: its slice of those held alike, the
  // rest whole.
  std::vector<ImagePart> written_parts() const;
  // False when rank 0 could not make step_N.tmp and the checkpoint was
  // skipped (a full disk under on_full=skip); throws CheckpointFailure when
  // that ends the run.
  bool start(int64_t step);
  void submit_persist();
  void submit_commit();
  // Records are kept in step order; record_of finds a resolved one.
  void add_record(const CheckpointRecord& record);
  CheckpointRecord& record_of(int64_t step);
  // One agreement round (a collective): true when the checkpoint in flight
  // is resolved (complete, or given up).
  bool agree();
  // Blocks until nothing is in flight; returns the seconds it took.
  double drain();
  // Waits for a state copy in flight and hands its files to the writer;
  // returns the seconds it blocked (0 when no copy was in flight).
  double finish_copy();
  // 0 busy, 1 done, 2 failed: disk full, 3 failed: other, 4 failed: the
  // writer passed its deadline and was abandoned. A failure is kept
  // (local_failure_) until the ranks have agreed on it: taken from the writer
  // in a round where another rank was still busy, it was lost, and that rank
  // then committed without this one's files.
  int local_state();
  // Hands `job` to the writer, due checkpoint.timeout_s from now.
  void submit_to_writer(BackgroundWriter::Job job);
  // kDone when the writer is idle, kBusy before its deadline, else
  // kTimedOut, the writer abandoned.
  int writer_progress();
  // Blocks for at most one agreement slice, less when the writer's deadline
  // is sooner: the ranks then compare notes, so none waits in a collective
  // for another longer than a slice, whatever checkpoint.timeout_s is.
  void wait_writer_slice();
  // Collective: waits until no rank's writer is busy, or a busy one passed
  // its deadline (true; that rank's writer is abandoned). Every rank
  // returns the same.
  bool wait_for_writers();
  // "<doing> did not finish within checkpoint.timeout_s=...": a writer's job
  // past its deadline, in the words the failure reports.
  std::string timeout_text(const std::string& doing) const;
  // How long rank 0's best-effort calls after a failure (removing
  // step_N.tmp, listing the folder) may take before they are let go.
  std::chrono::milliseconds best_effort_bound() const;
  // The writer's job passed its deadline: the writer is left to it (it
  // cannot be cancelled), and the staging it reads is kept with it.
  void abandon_writer();
  // A checkpoint that every rank agreed has failed (`failed_ranks`, the
  // first one's `reason`): recorded as skipped_disk_full where on_full=skip
  // allows it, else recorded as failed and CheckpointFailure thrown.
  // storage_hung: a writer was abandoned, and the folder is not listed for
  // the previous checkpoint (a listing would hang as the writer did).
  void settle_failure(CheckpointRecord record, const std::string& failed_ranks, int first_failed,
                      const std::string& reason, bool only_disk_full, bool storage_hung = false);
  // Rank 0 removes step_N.tmp once every rank's writer is idle: a
  // checkpoint given up leaves no half-written folder (on a full disk, its
  // bytes are what the next one needs). False when the removal did not
  // finish within best_effort_bound() (let go: the storage stopped
  // responding since the failure).
  bool remove_pending_folder(int64_t step);

  const Config& config_;
  std::string dir_;
  TrainingEngine& engine_;
  BatchSource& source_;
  Communicator& comm_;
  nlohmann::json versions_;
  std::vector<StateTensor> tensors_;
  std::vector<StateImage> images_;          // the engine's state, one per file
  // images_[0, alike_images_) hold state every rank holds alike: with
  // several ranks each stages and writes one slice of them (the job writes
  // it once); the rest are held whole.
  size_t alike_images_ = 0;
  std::vector<StateCopyPart> copy_parts_;   // what of tensors_[i] this rank stages, where in images_
  std::shared_ptr<InFlight> in_flight_;      // null when none is
  bool diverged_ = false;                   // give_up was called: no more checkpoints
  std::pair<uint64_t, uint64_t> dir_identity_{0, 0};  // dir_'s (st_dev, st_ino) at the start
  bool failed_ = false;                     // a checkpoint failed (CheckpointFailure): none more either
  std::string local_error_;                 // this rank's failure, for the message
  int local_failure_ = 0;                   // kFailed, kDiskFull or kTimedOut once taken from the writer, until agreed on
  bool direct_io_warned_ = false;           // the O_DIRECT fallback is told once per run
  bool retention_warned_ = false;           // an old checkpoint left behind is told once per run
  bool durability_warned_ = false;          // checkpoint.dir not fsynced after `latest`: told once per run
  std::vector<CheckpointRecord> records_;
  int64_t resumed_step_ = -1;        // the step resumed from in dir_, -1 otherwise (CommitRequest::resumed_step)
  std::vector<int64_t> own_steps_;   // the steps this run committed (or tried to) in dir_
  std::vector<std::string> shard_identities_;  // rank 0's, for the manifest (record_shards)
  std::vector<std::string> warnings_;
  bool writer_abandoned_ = false;            // abandon_writer: kept, never joined
  std::function<void(bool)> writer_wait_hook_;  // set_writer_wait_hook
  int writer_waits_ = 0;                         // writer waits in progress (nested: the outermost calls the hook)
  // A writers' wait for its scope: the hook is told at the outermost one's
  // start and end. Nothing when `waiting` is false.
  class WriterWaitScope {
   public:
    explicit WriterWaitScope(Checkpointer* owner);
    ~WriterWaitScope();
    WriterWaitScope(const WriterWaitScope&) = delete;
    WriterWaitScope& operator=(const WriterWaitScope&) = delete;

   private:
    Checkpointer* owner_;
  };
  WriterWaitScope writer_wait_scope(bool waiting) { return WriterWaitScope(waiting ? this : nullptr); }
  // Steady seconds by which the writer's current job (rank 0 making
  // step_N.tmp, this rank's files, rank 0's commit) must have finished:
  // checkpoint.timeout_s after submit_to_writer. Read only while it is busy.
  double writer_deadline_ = std::numeric_limits<double>::infinity();
  std::unique_ptr<BackgroundWriter> writer_;  // last: joined first, while the rest is alive
};

// Creates `dir` if needed and checks that every rank can create, fsync and
// remove a file in it. Collective. Throws CheckpointError on every rank,
// naming the directory and the reason, when any rank cannot: exit 2 for the
// user's checkpoint.dir, 3 for a full disk or for `temporary`, the run's own
// folder in the temporary directory (named as TMPDIR, which the user can
// mend).
void check_checkpoint_dir(const std::string& dir, Communicator& comm, bool temporary = false);

// How many more checkpoints than the `committed_before` already in the
// folder a run from `first_step` to `last_step` holds on disk at once, at
// the most: one is written in full before retention (checkpoint.keep K)
// removes the oldest, so the folder holds K + 1 while one is written.
int64_t checkpoints_added_at_peak(const CheckpointSection& ck, int64_t first_step, int64_t last_step,
                                  int64_t committed_before);

// Where a resumed run continues.
struct ResumePoint {
  std::string folder;        // the checkpoint loaded
  int64_t step = 0;          // the step it was taken after; the run continues at step + 1
  std::string data_position; // BatchSource::save_position bytes
  // The manifest's extra.shards (shard_identities of the run that wrote it);
  // null where it recorded none (in-memory or temporary data, or a
  // checkpoint older than the record).
  nlohmann::json shards;
  // What loading it took (the result's `resume`), as MLPerf Storage's
  // checkpoint load is measured: the bytes every rank read from its files,
  // summed (the checkpoint once: each slice is read by its own rank), the
  // slowest rank's reading, the passing on of the slices between the ranks
  // (this rank's), and the whole resume on this rank (checks and the
  // restore into the engine included).
  int64_t bytes_read = 0;
  double read_s = 0;
  double exchange_s = 0;
  double load_s = 0;
  // What the resumed run will not repeat ("" when nothing): a thread count
  // other than the checkpointed run's on the CPU engine. A setup warning.
  std::string warning;
};

// The result JSON's `resume`: the checkpoint, its step and what loading it
// took (read_gbs: the bytes read over the slowest rank's reading, null when
// that took no measurable time).
nlohmann::json resume_json(const ResumePoint& point);

// The first shard whose record (name, size, head hash: shard_identities) is
// not the one the checkpoint recorded (ResumePoint::shards), in words; ""
// when every one is, or the checkpoint recorded none. `paths` are this run's resolved shards, `identities` their
// shard_identities.
std::string resumed_shards_difference(const nlohmann::json& recorded, const std::vector<std::string>& paths,
                                      const std::vector<std::string>& identities);

// `--resume latest|PATH`: finds the checkpoint (`latest` under
// checkpoint.dir), checks the manifest against this run (same model shape,
// world size, ZeRO setting, micro-batch and data stream: resharding is not
// supported), reads and verifies this rank's files, and restores the engine.
// An automatic data.synth_samples_per_shard (0) takes the checkpoint's value.
// Collective. Throws CheckpointError on every rank when any rank cannot
// (exit 2; 3 where it is the machine's: CheckpointError::environment()); a rank whose file is corrupt names the file and the previous
// committed checkpoint to resume from instead.
ResumePoint resume_from_checkpoint(const std::string& spec, Config& config,
                                   TrainingEngine& engine, Communicator& comm);

}  // namespace trainbench
