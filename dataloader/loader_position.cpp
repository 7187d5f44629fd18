// The loader position as bytes, for checkpoints: a tag and version, then
// fixed-width little-endian fields. Read back with bounds checks on every
// length, so a damaged file is an error, never a wild allocation.
#include <bit>      // std::endian
#include <cstring>  // std::memcpy
#include <string>

#include "dataloader/data_error.h"
#include "dataloader/shard_loader.h"

namespace trainbench {

namespace {

constexpr char kTag[8] = {'T', 'B', 'L', 'O', 'A', 'D', 'P', '1'};

static_assert(std::endian::native == std::endian::little,
              "the position format is little-endian; add byte swapping for this host");

class Writer {
 public:
  void u64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void tokens(const std::vector<int32_t>& v) {
    i64(static_cast<int64_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  uint64_t u64() {
    uint64_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  int64_t count(size_t element_bytes) {
    const int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > (in_.size() - at_) / element_bytes) bad("length");
    return n;
  }
  std::vector<int32_t> tokens() {
    std::vector<int32_t> v(static_cast<size_t>(count(sizeof(int32_t))));
    take(v.data(), v.size() * sizeof(int32_t));
    return v;
  }
  void take(void* to, size_t n) {
    if (in_.size() - at_ < n) bad("truncated");
    std::memcpy(to, in_.data() + at_, n);
    at_ += n;
  }
  bool at_end() const { return at_ == in_.size(); }
  [[noreturn]] static void bad(const std::string& what) {
    throw DataError(CorruptScope::kConfig, "loader position: " + what + " (not a position this version wrote)");
  }

 private:
  const std::string& in_;
  size_t at_ = 0;
};

}  // namespace

std::string serialize_position(const LoaderPosition& p) {
  Writer w;
  w.bytes().append(kTag, sizeof kTag);
  w.i64(p.shard_count);
  w.i64(p.rank);
  w.i64(p.world);
  w.i64(p.readers);
  w.u64(p.seed);
  w.i64(p.batches_consumed);
  w.i64(static_cast<int64_t>(p.reader_positions.size()));
  for (const ReaderPosition& r : p.reader_positions) {
    w.i64(r.epoch);
    w.i64(r.shard_cursor);
    w.i64(r.samples_into_shard);
    w.u64(r.shuffle_rng);
    w.i64(static_cast<int64_t>(r.shuffle_buffer.size()));
    for (const std::vector<int32_t>& sample : r.shuffle_buffer) w.tokens(sample);
    w.tokens(r.partial_window);
    w.tokens(r.current_rest);
    w.u64(r.eos_pending ? 1 : 0);
  }
  return std::move(w.bytes());
}

LoaderPosition parse_position(const std::string& bytes) {
  Reader r(bytes);
  char tag[sizeof kTag];
  r.take(tag, sizeof tag);
  if (std::memcmp(tag, kTag, sizeof kTag) != 0) Reader::bad("wrong tag");
  LoaderPosition p;
  p.shard_count = r.i64();
  p.rank = r.i64();
  p.world = r.i64();
  p.readers = r.i64();
  p.seed = r.u64();
  p.batches_consumed = r.i64();
  const int64_t readers = r.count(8);
  for (int64_t i = 0; i < readers; ++i) {
    ReaderPosition reader;
    reader.epoch = r.i64();
    reader.shard_cursor = r.i64();
    reader.samples_into_shard = r.i64();
    reader.shuffle_rng = r.u64();
    const int64_t buffered = r.count(8);
    for (int64_t s = 0; s < buffered; ++s) reader.shuffle_buffer.push_back(r.tokens());
    reader.partial_window = r.tokens();
    reader.current_rest = r.tokens();
    reader.eos_pending = r.u64() != 0;
    p.reader_positions.push_back(std::move(reader));
  }
  if (!r.at_end()) Reader::bad("trailing bytes");
  return p;
}

}  // namespace trainbench
