// The loader position as bytes, for checkpoints: a tag and version, then
// fixed-width little-endian fields. Read back with bounds checks on every
// length and index (the layout, each reader's shard cursor against the
// shards the layout gives it), so a damaged file is an error, never a wild
// allocation or read. What needs the run's options (token ids below vocab,
// buffer sizes) is checked by check_resume_position (shard_loader.cpp).
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
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
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
    // An empty list's data() may be null, and memcpy from or to null is
    // undefined even for 0 bytes (UBSan, fuzz_loader_position's first input).
    if (n == 0) return;
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

// How many shards shards_for_reader deals reader `reader` in every epoch:
// rank `rank` takes every world-th shard of the epoch's order, its readers
// every readers-th of those. Counted, not dealt: a damaged shard_count must
// not make a huge list. Needs 0 <= rank < world and readers >= 1.
int64_t reader_shard_count(int64_t shard_count, int64_t rank, int64_t world, int64_t reader, int64_t readers) {
  const int64_t on_rank = shard_count > rank ? (shard_count - rank - 1) / world + 1 : 0;
  return on_rank > reader ? (on_rank - reader - 1) / readers + 1 : 0;
}

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

// batches_consumed and an epoch grow by one per batch or per epoch, so no
// run writes one anywhere near int64's top; a damaged one there would make
// the loader's next increment overflow (and the reader index it picks by
// batches_consumed % readers negative).
constexpr int64_t kCountBound = int64_t{1} << 62;

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
  // The layout first: every reader's fields are checked against it below.
  if (p.world < 1 || p.rank < 0 || p.rank >= p.world)
    Reader::bad("rank " + std::to_string(p.rank) + " of a world of " + std::to_string(p.world));
  if (p.readers < 1) Reader::bad("readers is " + std::to_string(p.readers));
  if (p.shard_count < p.world || p.readers > p.shard_count / p.world)
    Reader::bad("shard_count " + std::to_string(p.shard_count) + " for " + std::to_string(p.world) +
                " rank(s) x " + std::to_string(p.readers) + " reader(s)");
  if (p.batches_consumed < 0 || p.batches_consumed > kCountBound)
    Reader::bad("batches_consumed is " + std::to_string(p.batches_consumed));
  const int64_t readers = r.count(8);
  if (readers != p.readers)
    Reader::bad(std::to_string(readers) + " reader positions for readers = " + std::to_string(p.readers));
  for (int64_t i = 0; i < readers; ++i) {
    const std::string where = "reader " + std::to_string(i) + ": ";
    ReaderPosition reader;
    reader.epoch = r.i64();
    reader.shard_cursor = r.i64();
    reader.samples_into_shard = r.i64();
    reader.shuffle_rng = r.u64();
    if (reader.epoch < 0 || reader.epoch > kCountBound) Reader::bad(where + "epoch is " + std::to_string(reader.epoch));
    // The cursor indexes the reader's shards of its epoch: a wild one read
    // a path out of bounds.
    const int64_t shards = reader_shard_count(p.shard_count, p.rank, p.world, i, p.readers);
    if (reader.shard_cursor < 0 || reader.shard_cursor >= shards)
      Reader::bad(where + "shard_cursor " + std::to_string(reader.shard_cursor) + " is not an index into its " +
                  std::to_string(shards) + " shard(s)");
    if (reader.samples_into_shard < 0)
      Reader::bad(where + "samples_into_shard is " + std::to_string(reader.samples_into_shard));
    const int64_t buffered = r.count(8);
    for (int64_t s = 0; s < buffered; ++s) reader.shuffle_buffer.push_back(r.tokens());
    reader.partial_window = r.tokens();
    reader.current_rest = r.tokens();
    const uint64_t eos_pending = r.u64();
    if (eos_pending > 1) Reader::bad(where + "eos_pending is " + std::to_string(eos_pending));
    reader.eos_pending = eos_pending != 0;
    p.reader_positions.push_back(std::move(reader));
  }
  if (!r.at_end()) Reader::bad("trailing bytes");
  return p;
}

}  // namespace trainbench
