// Seeded synthetic token batches, all built before training so the source
// never stalls: a pure compute workload, storage left out.
#include <random>     // std::mt19937_64
#include <stdexcept>  // std::invalid_argument for a bad resume position

#include "dataloader/batch_source.h"

namespace trainbench {

namespace {
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
    return std::string(kPositionTag) + std::to_string(next_) + "/" + std::to_string(batches_.size());
  }
  void resume(const std::string& position) {
    const std::string expected_cycle = "/" + std::to_string(batches_.size());
    const size_t slash = position.find('/');
    if (position.rfind(kPositionTag, 0) != 0 || slash == std::string::npos ||
        position.substr(slash) != expected_cycle)
      throw std::invalid_argument("not a position of this synthetic source (" +
                                  std::to_string(batches_.size()) + " batches): '" + position + "'");
    const std::string index = position.substr(std::string(kPositionTag).size(),
                                              slash - std::string(kPositionTag).size());
    next_ = static_cast<size_t>(std::stoull(index)) % batches_.size();
  }

 private:
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<HostBatch> batches_;
  size_t next_ = 0;
  static constexpr const char* kPositionTag = "synthetic-next:";
};
}  // namespace

std::unique_ptr<BatchSource> make_synthetic_source(int64_t batch, int64_t seq_len, int64_t vocab,
                                                   int64_t distinct_batches, uint64_t seed,
                                                   const std::string& resume_position) {
  auto source = std::make_unique<SyntheticSource>(batch, seq_len, vocab, distinct_batches, seed);
  if (!resume_position.empty()) source->resume(resume_position);
  return source;
}

}  // namespace trainbench
