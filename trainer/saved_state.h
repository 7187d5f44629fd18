// The engine's state (parameters, optimizer state), copied out when made and
// put back when it goes: a measurement that trains on the job's engine
// (the compute ceiling, bench instrument) leaves the job where it was.
#pragma once

#include <vector>

#include "kernels/engine.h"  // TrainingEngine, StateTensor

namespace trainbench {

class SavedState {
 public:
  explicit SavedState(TrainingEngine& engine) : engine_(engine) {
    std::vector<void*> destinations;
    for (const StateTensor& t : engine.state_tensors()) {
      buffers_.emplace_back(static_cast<size_t>(t.bytes));
      destinations.push_back(buffers_.back().data());
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
