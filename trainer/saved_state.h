// The engine's state (parameters, optimizer state), copied out when made and
// put back when it goes: a measurement that trains on the job's engine
// (the compute ceiling, bench instrument) leaves the job where it was.
#pragma once

#include <cstdint>
#include <new>     // std::bad_alloc
#include <string>
#include <vector>

#include "kernels/engine.h"        // TrainingEngine, StateTensor
#include "trainer/cli.h"           // CommandError: a copy that does not fit is the environment's (exit 3)
#include "trainer/environment.h"   // available_memory_bytes
#include "trainer/report.h"        // human_bytes

namespace trainbench {

// The refusal of a state copy of `bytes` per rank, `why` it cannot be had.
inline CommandError state_copy_too_large(int64_t bytes, const std::string& why) {
  return CommandError{kExitEnvironmentError,
                      "a measurement on the job's engine (run --ceilings, bench compute, bench instrument) keeps a "
                      "host copy of its state to put back, " + human_bytes(static_cast<double>(bytes)) +
                          " per rank, and " + why + ": run without it, or on a smaller model or fewer ranks per host"};
}

// Throws state_copy_too_large where `bytes` exceed the memory available
// (available_memory_bytes: MemAvailable, or the cgroup's room when less).
inline void check_state_copy_fits(int64_t bytes) {
  const int64_t available = available_memory_bytes();
  if (available > 0 && bytes > available)
    throw state_copy_too_large(bytes, human_bytes(static_cast<double>(available)) + " is available");
}

class SavedState {
 public:
  // The copy is host memory beside the run's own, which the host-memory
  // checks before the run do not count: past what is available it was a
  // bare "out of memory" (or the OOM killer, as the copy is filled), where
  // a run without the measurement fit. Refused, sized, before allocating.
  explicit SavedState(TrainingEngine& engine) : engine_(engine) {
    int64_t bytes = 0;
    for (const StateTensor& t : engine.state_tensors()) bytes += t.bytes;
    check_state_copy_fits(bytes);
    std::vector<void*> destinations;
    try {
      for (const StateTensor& t : engine.state_tensors()) {
        buffers_.emplace_back(static_cast<size_t>(t.bytes));
        destinations.push_back(buffers_.back().data());
      }
    } catch (const std::bad_alloc&) {
      throw state_copy_too_large(bytes, "the allocation failed (ulimit -v, or the host's memory)");
    }
    engine.begin_state_copy(destinations);
    engine.wait_state_copy();
  }
  ~SavedState() {
    std::vector<const void*> sources;
    for (const std::vector<unsigned char>& b : buffers_) sources.push_back(b.data());
    engine_.restore_state(sources);
  }
  SavedState(const SavedState&) = delete;
  SavedState& operator=(const SavedState&) = delete;

 private:
  TrainingEngine& engine_;
  std::vector<std::vector<unsigned char>> buffers_;
};

}  // namespace trainbench
