// Seeded synthetic token batches, all built before training so the source
// never stalls: a pure compute workload, storage left out.
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument for a bad resume position

#include "dataloader/batch_source.h"
#include "dataloader/data_error.h"  // printable: position bytes in a message

namespace trainbench {

namespace {
constexpr const char* kSyntheticPositionTag = "synthetic-next:";

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(int64_t batch, int64_t seq_len, int64_t vocab, int64_t distinct, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
    batches_.resize(static_cast<size_t>(distinct));
    tokens_.resize(static_cast<size_t>(distinct));
    std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
    const int64_t n = batch * seq_len;
    for (size_t index = 0; index < batches_.size(); ++index) {
      std::vector<int32_t>& tokens = tokens_[index];  // inputs, then targets
      tokens.resize(static_cast<size_t>(2 * n));
      for (int64_t row = 0; row < batch; ++row) {
        for (int32_t& t : window) t = token(rng);
        for (int64_t i = 0; i < seq_len; ++i) {
          tokens[row * seq_len + i] = window[i];
          tokens[n + row * seq_len + i] = window[i + 1];
        }
      }
      batches_[index] = HostBatch{tokens.data(), tokens.data() + n, batch, seq_len};
    }
  }
  const HostBatch& next(double* wait_seconds) override {
    if (wait_seconds != nullptr) *wait_seconds = 0.0;
    const HostBatch& b = batches_[next_];
    next_ = (next_ + 1) % batches_.size();
    return b;
  }
  SourceStats stats() const override { return {}; }  // nothing is read from storage
  std::string save_position() const override {
    return std::string(kSyntheticPositionTag) + std::to_string(next_) + "/" + std::to_string(batches_.size());
  }
  void resume(const std::string& position) {
    next_ = static_cast<size_t>(synthetic_position_index(position, static_cast<int64_t>(batches_.size())));
    resumed_ = true;
  }
  bool resumed() const override { return resumed_; }

 private:
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<HostBatch> batches_;
  size_t next_ = 0;
  bool resumed_ = false;
};
}  // namespace

int64_t synthetic_position_index(const std::string& position, int64_t distinct_batches) {
  // "synthetic-next:<next>/<batches>", decimal digits only and next below
  // batches: what save_position wrote, nothing a damaged checkpoint made.
  const std::string tag = kSyntheticPositionTag;
  const auto number = [](const std::string& text, int64_t* value) {
    if (text.empty() || text.size() > 18) return false;
    *value = 0;
    for (const char c : text) {
      if (c < '0' || c > '9') return false;
      *value = *value * 10 + (c - '0');
    }
    return true;
  };
  const size_t slash = position.find('/');
  int64_t next = 0, batches = 0;
  if (position.rfind(tag, 0) != 0 || slash == std::string::npos ||
      !number(position.substr(tag.size(), slash - tag.size()), &next) ||
      !number(position.substr(slash + 1), &batches) || batches != distinct_batches || next >= batches) {
    // Bytes from a checkpoint: shown escaped and cut short, on one line.
    const std::string shown = position.size() > 64 ? position.substr(0, 64) + "..." : position;
    throw std::invalid_argument("not a position of this synthetic source (" + std::to_string(distinct_batches) +
                                " batches): '" + printable(shown) + "' (" + std::to_string(position.size()) +
                                " bytes)");
  }
  return next;
}

std::unique_ptr<BatchSource> make_synthetic_source(int64_t batch, int64_t seq_len, int64_t vocab,
                                                   int64_t distinct_batches, uint64_t seed,
                                                   const std::string& resume_position) {
  auto source = std::make_unique<SyntheticSource>(batch, seq_len, vocab, distinct_batches, seed);
  if (!resume_position.empty()) source->resume(resume_position);
  return source;
}

}  // namespace trainbench
