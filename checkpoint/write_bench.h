// STORAGE WRITE. The storage-write ceiling (`trainbench bench io --write`):
// a checkpoint persisted alone, exactly as a run persists it (StateImages of
// a real checkpoint's sections split over `files` writers, write_rank_files:
// parallel writers, XXH64, fsyncs, the rank record), set beside a plain
// sequential write of the same bytes to the same folder — one file, 64 MiB
// O_DIRECT writes, fsync: what `dd bs=64M oflag=direct conv=fsync` does.
// A third figure writes the same single stream from the checkpoint's own
// memory instead of dd's one reused buffer: where persist falls short of
// dd, it says whether the write path or the source memory is the cause.
// The three rotate, repeat after repeat, so all see the same disk state.
#pragma once

#include <cstdint>  // int64_t
#include <functional>  // before_persist
#include <string>
#include <vector>

#include "checkpoint/state_image.h"  // SectionPlacement

namespace trainbench {

struct WriteBenchOptions {
  std::string folder;               // an existing, writable folder; the bench leaves nothing in it
  int64_t bytes = 2LL << 30;        // one checkpoint's size (padded up to whole 4 KiB blocks)
  int files = 2;                    // writer threads, one file each
  bool direct_io = true;            // O_DIRECT for both, falling back where the filesystem refuses it
  int64_t block_bytes = 64LL << 20;  // bytes per write call of the persist
  int repeats = 3;                  // persist + plain write pairs; medians are reported
  // The storage-write ceiling's and burn-in's measurement, every rank's
  // persist at once as a checkpoint writes: the persist alone (the plain
  // writes after it overlapped slower ranks' persists and read as their
  // storage), and `before_persist` run once the images are built and
  // filled, just before the first, for the ranks to start together.
  bool persist_only = false;
  std::function<void()> before_persist;
};

struct WriteBenchResult {
  int64_t bytes = 0;  // written per measurement, by each side
  std::vector<std::vector<SectionPlacement>> files;  // the persist's files and their sections
  bool persist_direct_io = false;  // what was really used
  bool plain_direct_io = false;
  std::vector<double> persist_seconds;  // one per repeat, in order
  std::vector<double> plain_seconds;             // dd's way: one 64 MiB buffer again and again
  std::vector<double> plain_from_state_seconds;  // one stream from the images' memory
  double persist_gbs = 0;  // 1e9 bytes/s, median over repeats
  double plain_gbs = 0;
  double plain_from_state_gbs = 0;
  double ratio = 0;  // persist_gbs / plain_gbs: the figure the target is about
  std::vector<std::string> warnings;  // e.g. O_DIRECT refused
};

// The sections of a bench checkpoint of `bytes`: a model's state as a run
// checkpoints it, per parameter 2 bytes of bf16 weights and 4 each of fp32
// master weights, AdamW m and v.
std::vector<SectionSpec> write_bench_sections(int64_t bytes);

// What the bench holds at its peak, for a check before it starts: host
// memory (the checkpoint's images, its sections padded to kImageAlignment,
// and dd's 64 MiB buffer) and disk (one write's files at a time: each is
// removed before the next starts, whatever --repeats; twice the bytes were
// asked for from the second repeat on, and a folder with room was refused).
struct WriteBenchFootprint {
  int64_t memory_bytes = 0;
  int64_t disk_bytes = 0;
};
WriteBenchFootprint write_bench_footprint(const WriteBenchOptions& options);

// Throws CheckpointWriteError naming the file when a write fails (disk
// full: disk_full set), std::invalid_argument for options out of range
// (bytes < 1 MiB, files < 1, repeats < 1, block_bytes not a positive
// multiple of kImageAlignment), std::bad_alloc when the images do not fit
// in memory.
WriteBenchResult run_write_bench(const WriteBenchOptions& options);

}  // namespace trainbench
