// The prefetching shard loader: the split of shards over ranks and readers,
// packing, determinism, exact resume from a saved position, bad data, and
// stalls showing up as wait time.
#include <gtest/gtest.h>
#include <sys/stat.h>  // mkfifo

#include <algorithm>
#include <chrono>
#include <thread>  // sleep_for: polling batch_ready
#include <cstring>  // std::memcpy
#include <limits>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/io_bench.h"  // measure_sequential_read
#include "dataloader/shard_assignment.h"
#include "dataloader/shard_loader.h"
#include "dataloader/shard_writer.h"  // TarShardWriter
#include "dataloader/shard_tools.h"
#include "dataloader/tar_reader.h"
#include "dataloader/token_decode.h"
#include "dataloader/token_packer.h"
#include "dataloader/webdataset.h"
#include "tests/dataloader/read_test_tars.h"  // copy_without_end_marker
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

SynthResult make_shards(const std::string& dir, int64_t count, int64_t samples, int64_t tokens_mean,
                        int64_t vocab = 1000, uint64_t seed = 7) {
  SynthOptions synth;
  synth.out_dir = dir;
  synth.count = count;
  synth.samples_per_shard = samples;
  synth.vocab = vocab;
  synth.field = "u16";
  synth.tokens_mean = tokens_mean;
  synth.tokens_spread = tokens_mean / 2;
  synth.seed = seed;
  return synthesize_shards(synth);
}

LoaderOptions options_for(const std::vector<std::string>& shards) {
  LoaderOptions o;
  o.shards = shards;
  o.micro_batch = 3;
  o.seq_len = 16;
  o.vocab = 1000;
  o.field = "u16";
  o.eos_token = 999;
  o.readers = 2;
  o.prefetch = 2;
  o.shuffle_buffer = 8;
  o.seed = 11;
  o.timeout_s = 30;
  return o;
}

// inputs then targets of each batch, flattened.
std::vector<std::vector<int32_t>> take_batches(ShardLoader& loader, int count);

// The DataError's message taking `count` batches throws; a failure when
// they come.
std::string data_error_taking(ShardLoader& loader, int count) {
  try {
    take_batches(loader, count);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError in " << count << " batch(es)";
  return "";
}

std::vector<std::vector<int32_t>> take_batches(ShardLoader& loader, int count) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    const HostBatch& b = loader.next(nullptr);
    const int64_t n = b.batch * b.seq_len;
    std::vector<int32_t> tokens(b.inputs, b.inputs + n);
    tokens.insert(tokens.end(), b.targets, b.targets + n);
    out.push_back(std::move(tokens));
  }
  return out;
}

// Every sample's tokens of one shard, in file order, read independently of the loader.
std::vector<std::vector<int32_t>> shard_samples(const std::string& path) {
  TarReader tar;
  tar.open(path);
  SampleReader reader(tar, 1 << 30);
  Sample sample;
  std::vector<std::vector<int32_t>> out;
  while (reader.next(&sample)) {
    const SampleMember* member = sample.find("u16");
    EXPECT_NE(member, nullptr);
    std::vector<int32_t> tokens;
    std::string error;
    EXPECT_TRUE(decode_tokens(TokenFormat::kU16, member->data.data(), member->data.size(), 1 << 16,
                              &tokens, &error))
        << error;
    out.push_back(tokens);
  }
  return out;
}

TEST(ShardAssignment, EveryShardGoesToExactlyOneReaderPerEpoch) {
  for (int64_t world : {1, 2, 3}) {
    for (int64_t readers : {1, 2, 4}) {
      for (int64_t epoch : {0, 1}) {
        std::multiset<int64_t> seen;
        for (int64_t rank = 0; rank < world; ++rank)
          for (int64_t reader = 0; reader < readers; ++reader)
            for (int64_t shard : shards_for_reader(37, 5, epoch, rank, world, reader, readers))
              seen.insert(shard);
        ASSERT_EQ(seen.size(), 37u) << world << "x" << readers;
        for (int64_t shard = 0; shard < 37; ++shard) EXPECT_EQ(seen.count(shard), 1u);
      }
    }
  }
}

TEST(ShardAssignment, SplitsLikeWebdatasetSplitByNodeThenByWorker) {
  const std::vector<int64_t> order = epoch_shard_order(20, 3, 2);
  // urls[rank::world] then [worker::workers], written out as Python would.
  const int64_t world = 3, readers = 2, rank = 1, reader = 1;
  std::vector<int64_t> by_node, expected;
  for (size_t i = rank; i < order.size(); i += world) by_node.push_back(order[i]);
  for (size_t i = reader; i < by_node.size(); i += readers) expected.push_back(by_node[i]);
  EXPECT_EQ(shards_for_reader(20, 3, 2, rank, world, reader, readers), expected);
}

TEST(ShardAssignment, OrderIsSeededAndChangesEachEpoch) {
  EXPECT_EQ(epoch_shard_order(50, 9, 0), epoch_shard_order(50, 9, 0));
  EXPECT_NE(epoch_shard_order(50, 9, 0), epoch_shard_order(50, 9, 1));
  EXPECT_NE(epoch_shard_order(50, 9, 0), epoch_shard_order(50, 10, 0));
  std::vector<int64_t> sorted = epoch_shard_order(50, 9, 3);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(TokenPacker, PacksAcrossSamplesWithSeparatorsAndSharesOneTokenBetweenWindows) {
  TokenPacker packer(/*seq_len=*/4, /*eos_token=*/99);
  std::vector<int32_t> stream;  // what the windows should tile
  int32_t next_token = 1;
  std::vector<std::vector<int32_t>> windows;
  for (int64_t length : {3, 1, 7, 0, 5}) {
    auto sample = std::make_shared<std::vector<int32_t>>();
    for (int64_t i = 0; i < length; ++i) sample->push_back(next_token++);
    stream.insert(stream.end(), sample->begin(), sample->end());
    stream.push_back(99);
    ASSERT_TRUE(packer.needs_sample());
    packer.feed(sample);
    std::vector<int32_t> window(5);
    while (packer.fill_window(window.data())) windows.push_back(window);
  }
  // 16 + 5 separators = 21 tokens; windows of 5 advancing by 4: 5 windows.
  ASSERT_EQ(windows.size(), 5u);
  for (size_t w = 0; w < windows.size(); ++w)
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(windows[w][i], stream[w * 4 + i]) << w << "," << i;
}

TEST(ShardLoader, OneReaderInReadOrderPacksTheShardsExactly) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 6, 10);
  LoaderOptions o = options_for(made.paths);
  o.readers = 1;
  o.shuffle_buffer = 0;
  ShardLoader loader(o);
  // Expected stream: the epoch-0 order of the shards, every sample then EOS.
  std::vector<int32_t> stream;
  for (int64_t shard : shards_for_reader(2, o.seed, 0, 0, 1, 0, 1))
    for (const auto& sample : shard_samples(made.paths[static_cast<size_t>(shard)])) {
      stream.insert(stream.end(), sample.begin(), sample.end());
      stream.push_back(o.eos_token);
    }
  const int64_t T = o.seq_len;
  const int batches = static_cast<int>((static_cast<int64_t>(stream.size()) - 1) / (T * o.micro_batch));
  ASSERT_GE(batches, 2);
  const auto got = take_batches(loader, batches);
  for (int b = 0; b < batches; ++b) {
    for (int64_t row = 0; row < o.micro_batch; ++row) {
      const size_t start = static_cast<size_t>((b * o.micro_batch + row) * T);
      for (int64_t i = 0; i < T; ++i) {
        ASSERT_EQ(got[b][row * T + i], stream[start + i]) << "batch " << b << " row " << row;
        ASSERT_EQ(got[b][o.micro_batch * T + row * T + i], stream[start + i + 1]);
      }
    }
  }
  const SourceStats stats = loader.stats();
  EXPECT_GT(stats.storage_bytes, 0);
  EXPECT_GT(stats.samples, 0);
  EXPECT_EQ(stats.samples_skipped, 0);
}

// batch_ready says whether next() would wait: false while the readers are
// still reading (each sample held 0.2 s here), true once the ring holds the
// next batch, which next() then returns without waiting for another sample.
// (A ready said too early waits 0.2 s; a bound of 50 ms on an unslowed
// loader caught nothing and read a loaded machine's scheduling.)
TEST(ShardLoader, BatchReadySaysWhetherNextWouldWait) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 6, 10);
  LoaderOptions o = options_for(made.paths);
  o.readers = 1;
  o.inject_delay_s = 0.2;
  ShardLoader loader(o);
  EXPECT_FALSE(loader.batch_ready()) << "no reader has read a batch's samples yet";
  loader.next(nullptr);  // the first call lets the reader build batches
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!loader.batch_ready() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(loader.batch_ready());
  double wait_s = -1;
  loader.next(&wait_s);
  EXPECT_GE(wait_s, 0);
  EXPECT_LT(wait_s, 0.15) << "a ready batch is taken without waiting for a sample";
}

// Readers filled every prefetch slot while a run set up (GEMM calibration,
// --ceilings): a loader-bound run's measured steps took that backlog and
// showed no data stall. Before the consumer's first call a reader fills its
// shuffle buffer and holds its first sample, and that wait is not reading.
TEST(ShardLoader, NoBatchIsBuiltBeforeTheFirstCallAndTheWaitIsNotReading) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 4, 20, 10);
  LoaderOptions o = options_for(made.paths);
  o.prefetch = 4;
  const auto begin = std::chrono::steady_clock::now();
  ShardLoader loader(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_FALSE(loader.batch_ready());
  // Each reader: its shuffle buffer and the sample it holds, no batch's more.
  EXPECT_LE(loader.stats().samples, o.readers * (o.shuffle_buffer + 1));
  loader.next(nullptr);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_LT(loader.stats().reading_seconds, elapsed - 0.75) << "the readers' 1.5 s of waiting counted as reading";
  EXPECT_GT(loader.stats().reading_seconds, 0);
  // Then they read ahead into every slot as before.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (loader.stats().samples < o.readers * (o.shuffle_buffer + 1) + 4 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GT(loader.stats().samples, o.readers * (o.shuffle_buffer + 1));
}

TEST(ShardLoader, SameSeedSameBatchesWhateverTheScheduling) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 6, 10, 12);
  LoaderOptions o = options_for(made.paths);
  o.readers = 3;
  ShardLoader first(o);
  const auto a = take_batches(first, 40);  // several epochs
  LoaderOptions slow = o;
  slow.prefetch = 1;  // different timing, same stream
  ShardLoader second(slow);
  EXPECT_EQ(a, take_batches(second, 40));
  LoaderOptions other = o;
  other.seed = 12;
  ShardLoader third(other);
  EXPECT_NE(a, take_batches(third, 40));
}

TEST(ShardLoader, RanksReadDisjointShards) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 4, 5, 12);
  LoaderOptions o = options_for(made.paths);
  o.world = 2;
  o.readers = 1;
  o.shuffle_buffer = 0;
  o.rank = 0;
  ShardLoader rank0(o);
  o.rank = 1;
  ShardLoader rank1(o);
  EXPECT_NE(take_batches(rank0, 3), take_batches(rank1, 3));
  // One epoch each: every shard read once, by one rank. (Batches that
  // differ alone passed a loader that gave every rank every shard.)
  o.epochs = 1;
  o.micro_batch = 1;
  int64_t samples = 0, tokens = 0;
  for (int rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    ShardLoader epoch(o);
    while (epoch.next_or_end(nullptr) != nullptr) {
    }
    const SourceStats stats = epoch.stats();
    EXPECT_EQ(stats.shards_opened, 2) << "rank " << rank;
    EXPECT_EQ(stats.samples, 10) << "rank " << rank;
    samples += stats.samples;
    tokens += stats.tokens;
  }
  EXPECT_EQ(samples, made.samples);
  EXPECT_EQ(tokens, made.tokens) << "the two ranks' shards are all of them, each once";
}

TEST(ShardLoader, ResumesExactlyFromASavedPosition) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 4, 7, 20);
  LoaderOptions o = options_for(made.paths);
  o.readers = 2;
  o.shuffle_buffer = 5;
  ShardLoader reference(o);
  const auto all = take_batches(reference, 60);  // crosses epoch boundaries
  for (int stop_at : {0, 1, 7, 25}) {
    std::string saved;
    {
      ShardLoader interrupted(o);
      take_batches(interrupted, stop_at);
      saved = serialize_position(interrupted.position());
    }  // the interrupted loader had read ahead; none of that may leak into the resume
    const LoaderPosition position = parse_position(saved);
    ShardLoader resumed(o, &position);
    const auto rest = take_batches(resumed, 60 - stop_at);
    for (int i = 0; i < 60 - stop_at; ++i)
      ASSERT_EQ(rest[i], all[stop_at + i]) << "stopped at " << stop_at << ", batch " << i;
  }
}

// bench io's loader reads exactly one epoch (options.epochs = 1): every
// shard once, every sample once, then the data ends — a reader that is done
// early is passed over, none starts the next epoch. Read past it, bytes and
// samples exceeded the shards' and a reader count's figure was off.
// bench io's loader measurement with one prefetch slot per reader: polled
// for while it held the batch it had taken, the reader had no slot to fill
// and stood still until --seconds ran out (47.7% read, exit 0). Given back
// at once, the epoch is read through, as with more slots.
TEST(ShardLoader, TheLoaderBenchReadsItsEpochWithOnePrefetchSlot) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 4, 7, 20);
  for (const int64_t prefetch : {1, 8}) {
    LoaderOptions o = options_for(made.paths);
    o.readers = 1;
    o.prefetch = prefetch;
    const ReadRate rate = measure_loader(o, 20);
    EXPECT_TRUE(rate.complete) << "prefetch " << prefetch << ": stopped at " << rate.seconds << " s";
    EXPECT_LT(rate.seconds, 10) << "prefetch " << prefetch;
    EXPECT_EQ(rate.files, 4) << "prefetch " << prefetch;
  }
  // Held between polls (as the bench did), the one slot is the reader's
  // last: wait_until_ready sees no batch until the slot is returned.
  LoaderOptions o = options_for(made.paths);
  o.readers = 1;
  o.prefetch = 1;
  ShardLoader loader(o);
  ASSERT_NE(loader.next_or_end(nullptr), nullptr);
  const auto soon = [] { return std::chrono::steady_clock::now() + std::chrono::milliseconds(300); };
  EXPECT_FALSE(loader.wait_until_ready(soon()));
  loader.return_batch();
  EXPECT_TRUE(loader.wait_until_ready(soon() + std::chrono::seconds(5)));
}

TEST(ShardLoader, WithEpochsEveryShardIsReadExactlyOnceAndTheDataEnds) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 5, 7, 20);  // 5 shards: uneven over 2 and 3 readers
  int64_t samples = 0, tokens = 0, bytes = 0;
  for (const std::string& path : made.paths) {
    bytes += static_cast<int64_t>(fs::file_size(path));
    for (const auto& sample : shard_samples(path)) {
      ++samples;
      tokens += static_cast<int64_t>(sample.size());
    }
  }
  for (const int64_t readers : {1, 2, 3}) {
    for (const int64_t shuffle : {0, 8}) {
      LoaderOptions o = options_for(made.paths);
      o.readers = readers;
      o.shuffle_buffer = shuffle;
      o.epochs = 1;
      ShardLoader loader(o);
      int64_t rows = 0;
      int guard = 0;
      for (const HostBatch* b = loader.next_or_end(nullptr); b != nullptr; b = loader.next_or_end(nullptr)) {
        ASSERT_GT(b->batch, 0);
        ASSERT_LE(b->batch, o.micro_batch);
        rows += b->batch;
        ASSERT_LT(++guard, 100000) << "the data never ended";
      }
      EXPECT_EQ(loader.next_or_end(nullptr), nullptr) << "the end stays the end";
      const SourceStats stats = loader.stats();
      const std::string where = std::to_string(readers) + " reader(s), shuffle " + std::to_string(shuffle);
      EXPECT_EQ(stats.samples, samples) << where;
      EXPECT_EQ(stats.tokens, tokens) << where;
      EXPECT_EQ(stats.shards_opened, 5) << where;
      EXPECT_LE(stats.storage_bytes, bytes) << where;
      EXPECT_GT(stats.storage_bytes, bytes - 5 * 10240) << where << ": at most the tar's end padding unread";
      // Every reader packs its own stream of tokens + one EOS per sample;
      // windows of T + 1 share a token, so each reader leaves less than a
      // window unsent.
      const int64_t stream = tokens + samples, T = o.seq_len;
      EXPECT_LE(rows * T, stream - readers) << where;
      EXPECT_GT(rows * T, stream - readers - readers * T) << where;
    }
  }
  // One reader in read order: the batches are the endless loader's, up to
  // the end of the epoch, the last one short.
  LoaderOptions o = options_for(made.paths);
  o.readers = 1;
  o.shuffle_buffer = 0;
  ShardLoader endless(o);
  o.epochs = 1;
  ShardLoader bounded(o);
  for (const HostBatch* b = bounded.next_or_end(nullptr); b != nullptr; b = bounded.next_or_end(nullptr)) {
    const HostBatch& e = endless.next(nullptr);
    const int64_t n = b->batch * o.seq_len;
    ASSERT_EQ(std::vector<int32_t>(b->inputs, b->inputs + n), std::vector<int32_t>(e.inputs, e.inputs + n));
    ASSERT_EQ(std::vector<int32_t>(b->targets, b->targets + n), std::vector<int32_t>(e.targets, e.targets + n));
  }
}

TEST(ShardLoader, PositionFromOtherDataOrLayoutIsRefused) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 4, 3, 10);
  LoaderOptions o = options_for(made.paths);
  ShardLoader loader(o);
  take_batches(loader, 2);
  const LoaderPosition position = loader.position();
  LoaderOptions other = o;
  other.readers = 1;
  try {
    ShardLoader resumed(other, &position);
    FAIL() << "a position from 2 readers was accepted by 1";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("same data and layout"), std::string::npos) << e.what();
  }
  // A shard added since (all else alike): said as such, with the remedy
  // (it was the line above, which named no shard and no way on).
  LoaderOptions more = o;
  more.shards.push_back(more.shards.back());
  try {
    ShardLoader resumed(more, &position);
    FAIL() << "a position over 4 shards was accepted over 5";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the saved loader position was taken over 4 shards, and this run reads 5: the position counts samples "
              "into the shards it read, so a resume needs the same files (restore them, or start a new run)");
  }
  std::string damaged = serialize_position(position);
  damaged.resize(damaged.size() - 3);
  EXPECT_THROW(parse_position(damaged), DataError);
  EXPECT_THROW(parse_position("not a position at all"), DataError);
}

// A damaged position (checkpoint bytes whose checksum was fixed up) is a
// DataError naming the field, never an index or read out of bounds: each
// field at values that used to crash the loader (SIGSEGV, SIGBUS, reading a
// wild pointer as a path).
TEST(ShardLoader, DamagedPositionFieldsAreRefusedNeverUsed) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 4, 7, 20);
  LoaderOptions o = options_for(made.paths);
  o.shuffle_buffer = 5;
  LoaderPosition good;
  {
    ShardLoader loader(o);
    take_batches(loader, 5);
    good = loader.position();
  }
  ASSERT_EQ(good.reader_positions.size(), 2u);
  ASSERT_FALSE(good.reader_positions[0].shuffle_buffer.empty());
  // What restore says about `damaged`: "" when it is accepted.
  auto refused = [&](const LoaderPosition& damaged) -> std::string {
    try {
      const LoaderPosition parsed = parse_position(serialize_position(damaged));
      ShardLoader resumed(o, &parsed);
      take_batches(resumed, 2);
    } catch (const DataError& e) {
      EXPECT_EQ(e.scope(), CorruptScope::kConfig) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refused(good), "");
  const int64_t wild[] = {-1, 2, 8, 9, int64_t{1} << 32, static_cast<int64_t>(0xffffffff80000000ULL),
                          std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  // 4 shards over 1 rank x 2 readers: each reader has 2, so cursor 2 is past them.
  for (const int64_t value : wild) {
    SCOPED_TRACE(value);
    LoaderPosition p = good;
    p.reader_positions[0].shard_cursor = value;
    EXPECT_NE(refused(p).find("shard_cursor"), std::string::npos);
    p = good;
    p.reader_positions[1].epoch = value < 0 ? value : -value;
    EXPECT_NE(refused(p).find("epoch"), std::string::npos);
    p = good;
    p.rank = value;
    EXPECT_NE(refused(p), "");
    p = good;
    p.world = value;
    EXPECT_NE(refused(p), "");
    if (value != 2) {  // 2 is this position's own reader count
      p = good;
      p.readers = value;
      EXPECT_NE(refused(p), "");
    }
    p = good;
    p.shard_count = value;
    EXPECT_NE(refused(p), "");
    if (value < 0) {
      p = good;
      p.batches_consumed = value;
      EXPECT_NE(refused(p).find("batches_consumed"), std::string::npos);
      p = good;
      p.reader_positions[0].samples_into_shard = value;
      EXPECT_NE(refused(p).find("samples_into_shard"), std::string::npos);
    }
  }
  // Token ids beyond the vocabulary would index the embedding out of bounds.
  for (const int32_t token : {-1, 1000, std::numeric_limits<int32_t>::max()}) {
    LoaderPosition p = good;
    p.reader_positions[0].shuffle_buffer[0].push_back(token);
    EXPECT_NE(refused(p).find("token id " + std::to_string(token)), std::string::npos);
    p = good;
    p.reader_positions[1].partial_window = {token};
    EXPECT_NE(refused(p).find("partial window"), std::string::npos);
    p = good;
    p.reader_positions[1].current_rest = {1, token};
    EXPECT_NE(refused(p).find("current sample"), std::string::npos);
  }
  // Counts no run reaches: the loader's next increment would overflow.
  for (const int64_t value : {(int64_t{1} << 62) + 1, std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(value);
    LoaderPosition p = good;
    p.batches_consumed = value;
    EXPECT_NE(refused(p).find("batches_consumed"), std::string::npos);
    p = good;
    p.reader_positions[1].epoch = value;
    EXPECT_NE(refused(p).find("epoch"), std::string::npos);
  }
  LoaderPosition p = good;
  p.reader_positions[0].shuffle_buffer.resize(6, {1, 2});
  EXPECT_NE(refused(p).find("shuffle buffer"), std::string::npos);
  p = good;
  p.reader_positions[0].partial_window.assign(17, 3);
  EXPECT_NE(refused(p).find("partial window of 17 tokens"), std::string::npos);
  p = good;
  p.reader_positions.pop_back();
  EXPECT_NE(refused(p).find("1 reader positions for readers = 2"), std::string::npos);
  // Past the samples its shard holds: found when the shard is opened.
  p = good;
  p.reader_positions[0].samples_into_shard = 1000;
  EXPECT_NE(refused(p).find("says 1000 samples of this shard were read, but it has 7"), std::string::npos);
  // Every 8-byte field of the header and the first reader, at every wild
  // value, straight in the bytes: refused or used as a valid position
  // (a changed shuffle RNG is one), never a crash.
  const std::string bytes = serialize_position(good);
  for (size_t at = 8; at < 8 + 8 * 12; at += 8) {
    for (const int64_t value : wild) {
      std::string damaged = bytes;
      std::memcpy(damaged.data() + at, &value, sizeof value);
      try {
        const LoaderPosition parsed = parse_position(damaged);
        ShardLoader resumed(o, &parsed);
        take_batches(resumed, 2);
      } catch (const DataError&) {
      }
    }
  }
}

// The bound parse_position puts on a shard cursor is the number of shards
// shards_for_reader deals that reader, for every layout.
TEST(ShardLoader, PositionCursorBoundIsTheReadersShareOfShards) {
  for (int64_t world = 1; world <= 3; ++world)
    for (int64_t readers = 1; readers <= 3; ++readers)
      for (int64_t shards = world * readers; shards <= 11; ++shards)
        for (int64_t rank = 0; rank < world; ++rank) {
          LoaderPosition p;
          p.shard_count = shards;
          p.rank = rank;
          p.world = world;
          p.readers = readers;
          p.reader_positions.resize(static_cast<size_t>(readers));
          for (int64_t r = 0; r < readers; ++r) {
            const auto dealt = static_cast<int64_t>(shards_for_reader(shards, 5, 0, rank, world, r, readers).size());
            SCOPED_TRACE(std::to_string(shards) + " shards, rank " + std::to_string(rank) + " of " +
                         std::to_string(world) + ", reader " + std::to_string(r) + " of " + std::to_string(readers));
            ASSERT_GE(dealt, 1);
            p.reader_positions[static_cast<size_t>(r)].shard_cursor = dealt - 1;
            EXPECT_NO_THROW(parse_position(serialize_position(p)));
            p.reader_positions[static_cast<size_t>(r)].shard_cursor = dealt;
            EXPECT_THROW(parse_position(serialize_position(p)), DataError);
            p.reader_positions[static_cast<size_t>(r)].shard_cursor = 0;
          }
        }
}

// The synthetic source's position: only what save_position writes.
TEST(SyntheticSource, DamagedPositionIsRefusedOnOneLine) {
  auto source = make_synthetic_source(2, 8, 100, 4, 1);
  source->next(nullptr);
  const std::string saved = source->save_position();
  EXPECT_EQ(synthetic_position_index(saved, 4), 1);
  auto resumed = make_synthetic_source(2, 8, 100, 4, 1, saved);
  EXPECT_TRUE(resumed->resumed());
  EXPECT_FALSE(source->resumed());
  for (const std::string& bad : std::vector<std::string>{"synthetic-next:4/4", "synthetic-next:-1/4", "synthetic-next:1/5",
                                "synthetic-next:abc/4", "synthetic-next:/4", "synthetic-next:1/4x",
                                "synthetic-next:99999999999999999999999/4", "synthetic-next:1\n/4", "",
                                std::string("\x00\xff\n", 3)}) {
    SCOPED_TRACE(bad);
    try {
      synthetic_position_index(bad, 4);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    EXPECT_THROW(make_synthetic_source(2, 8, 100, 4, 1, bad.empty() ? "x" : bad), std::invalid_argument);
  }
}

TEST(ShardLoader, FewerShardsThanReadersIsAnErrorThatSaysWhatToChange) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 3, 2, 10);
  LoaderOptions o = options_for(made.paths);
  o.world = 2;
  o.readers = 2;
  try {
    ShardLoader loader(o);
    FAIL() << "3 shards for 4 readers was accepted";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("3 shard(s) for 2 rank(s) x 2 reader(s)"), std::string::npos) << message;
    EXPECT_NE(message.find("data.readers"), std::string::npos) << message;
  }
}

// A shard whose every token is out of range for a smaller vocabulary.
TEST(ShardLoader, BadTokensFailWithShardAndKeyOrAreSkippedAndCounted) {
  TempDir dir;
  const SynthResult good = make_shards(dir.path() + "/good", 2, 4, 10, /*vocab=*/100);
  const SynthResult bad = make_shards(dir.path() + "/bad", 1, 4, 10, /*vocab=*/60000, 99);
  std::vector<std::string> shards = good.paths;
  shards.push_back(bad.paths.front());
  LoaderOptions o = options_for(shards);
  o.vocab = 100;
  o.eos_token = 99;
  o.readers = 1;
  {
    ShardLoader loader(o);
    const std::string message = data_error_taking(loader, 50);  // tokens >= vocab
    EXPECT_NE(message.find(bad.paths.front()), std::string::npos) << message;
    EXPECT_NE(message.find(">= vocab"), std::string::npos) << message;
    EXPECT_NE(message.find("byte "), std::string::npos) << message;
  }
  o.skip_corrupt = true;
  ShardLoader skipping(o);
  take_batches(skipping, 50);
  const SourceStats stats = skipping.stats();
  EXPECT_GE(stats.samples_skipped, 4);
  ASSERT_FALSE(stats.skip_messages.empty());
  EXPECT_NE(stats.skip_messages.front().find(bad.paths.front()), std::string::npos);
}

// Shards every tar reader reads as whole but that hold less than was
// written — one cut at a member boundary, one archive with no sample, one
// whose samples' token members are all empty (`shards verify`: "no data") —
// are trained on as they are and counted once each however often they are
// read (two epochs here), with the first one's line; whole shards count
// nothing.
TEST(ShardLoader, ShardsCutShortOrWithoutSamplesAreCountedOnceEach) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 3, 6, 20);
  for (const bool odd : {false, true}) {
    std::vector<std::string> shards = made.paths;
    if (odd) {
      shards.push_back(testing::copy_without_end_marker(made.paths.front(), dir.path() + "/cut.tar"));
      shards.push_back(dir.path() + "/empty.tar");
      std::ofstream(shards.back(), std::ios::binary) << std::string(1024, '\0');  // the end marker alone
      shards.push_back(dir.path() + "/tokenless.tar");
      std::ofstream(shards.back(), std::ios::binary)
          << testing::make_tar({{"a.u16", ""}, {"b.u16", ""}, {"c.u16", ""}});
    }
    LoaderOptions o = options_for(shards);
    o.epochs = 2;
    ShardLoader loader(o);
    int guard = 0;
    while (loader.next_or_end(nullptr) != nullptr) ASSERT_LT(++guard, 100000) << "the data never ended";
    const SourceStats stats = loader.stats();
    EXPECT_EQ(stats.shards_opened, 2 * static_cast<int64_t>(shards.size()));
    EXPECT_EQ(stats.shards_cut_short, odd ? std::vector<int64_t>{3} : std::vector<int64_t>{});
    EXPECT_EQ(stats.shards_without_samples, (odd ? std::vector<int64_t>{4, 5} : std::vector<int64_t>{}));
    if (!odd) {
      EXPECT_EQ(stats.first_odd_shard, "");
      continue;
    }
    const bool named = stats.first_odd_shard == dir.path() + "/empty.tar holds no sample" ||
                       stats.first_odd_shard ==
                           dir.path() + "/tokenless.tar holds no sample with tokens (3 without)" ||
                       stats.first_odd_shard ==
                           dir.path() + "/cut.tar ends without the end-of-archive marker after 6 samples";
    EXPECT_TRUE(named) << stats.first_odd_shard;
    // The cut shard's samples are read, as every tar reader reads them, and the tokenless ones too.
    EXPECT_EQ(stats.samples, 2 * (4 * 6 + 3));
  }
}

// Two archives joined by cat read as the first alone, to every tar reader:
// the second's samples were dropped without a word. Counted with the shards
// cut short, and said.
TEST(ShardLoader, AShardWithDataAfterItsEndMarkerIsCountedAndSaid) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 6, 20);
  const std::string joined = dir.path() + "/joined.tar";
  {
    std::ofstream out(joined, std::ios::binary);
    for (const std::string& path : made.paths) out << std::ifstream(path, std::ios::binary).rdbuf();
  }
  LoaderOptions o = options_for({joined});
  o.readers = 1;
  o.epochs = 1;
  ShardLoader loader(o);
  int guard = 0;
  while (loader.next_or_end(nullptr) != nullptr) ASSERT_LT(++guard, 100000);
  const SourceStats stats = loader.stats();
  EXPECT_EQ(stats.shards_cut_short, std::vector<int64_t>{0});
  EXPECT_EQ(stats.samples, 6) << "the first archive's";
  EXPECT_EQ(stats.first_odd_shard, joined + " holds data after its end-of-archive marker (byte " +
                                       std::to_string(std::filesystem::file_size(made.paths[0])) +
                                       "), read up to it: 6 samples");
}

// A file cut inside the header of a sample's second member (its tokens): the
// sample read before the cut has only its first member, and the run said
// "sample 'a1' has no .u16 member" where the shard is truncated at byte 2048.
// The truncation is what ends the run.
TEST(ShardLoader, AHeaderCutAfterASampleIsReportedAsTheCutNotAMissingMember) {
  TempDir dir;
  const std::string tokens("\x01\x00\x02\x00\x03\x00", 6);
  const std::string whole = testing::make_tar({{"a0.u16", tokens}, {"a1.json", "{}"}, {"a1.u16", tokens}},
                                              testing::TarFormat::kUstar);
  const std::string cut = dir.path() + "/cut.tar";
  std::ofstream(cut, std::ios::binary) << whole.substr(0, 2048 + 100);  // inside a1.u16's header
  LoaderOptions o = options_for({cut});
  o.readers = 1;
  ShardLoader loader(o);
  const std::string message = data_error_taking(loader, 4);
  EXPECT_NE(message.find(cut + ": byte 2048: truncated tar archive"), std::string::npos) << message;
  EXPECT_EQ(message.find("has no"), std::string::npos) << message;
}

TEST(ShardLoader, AllShardsUnreadableWithSkipIsAnErrorNotASpin) {
  TempDir dir;
  std::vector<std::string> shards;
  for (int i = 0; i < 2; ++i) {
    shards.push_back(dir.path() + "/junk" + std::to_string(i) + ".tar");
    std::ofstream(shards.back()) << "this is not a tar archive, not even close";
  }
  LoaderOptions o = options_for(shards);
  o.skip_corrupt = true;
  ShardLoader loader(o);
  const std::string message = data_error_taking(loader, 1);
  EXPECT_NE(message.find("no readable sample"), std::string::npos) << message;
  EXPECT_GE(loader.stats().shards_skipped, 1);
}

// A rank's readers together name a hopeless data set once the list is
// opened through without a sample with tokens: each epoch deals the readers
// a partition of the list, so about one epoch's opens where the readers
// progress together. Each reader on its own needed to meet every shard of
// the list in its own shares, ~N*H(N) opens (here ~70 each against ~24), and
// with a long list the consumer's data.timeout_s could fire first with the
// wrong words. Each shard holds one sample with no tokens, read with a delay
// (storage's latency) so that the four readers run side by side.
TEST(ShardLoader, AHopelessDataSetIsNamedAfterAboutOneEpochOfOpens) {
  TempDir dir;
  std::vector<std::string> shards;
  for (int i = 0; i < 24; ++i) {
    shards.push_back(dir.path() + "/tokenless" + std::to_string(i) + ".tar");
    TarShardWriter writer;
    writer.open(shards.back());
    writer.write_sample("s", {{"u16", nullptr, 0}});
    writer.close();
  }
  LoaderOptions o = options_for(shards);
  o.readers = 4;
  o.micro_batch = 8;  // more windows than a reader's opens give EOS separators for
  o.inject_delay_s = 0.005;
  ShardLoader loader(o);
  const std::string message = data_error_taking(loader, 1);  // no sample with tokens
  ASSERT_NE(message.find("opened every shard of the list of 24 ("), std::string::npos) << message;
  const int64_t opens = std::stoll(message.substr(message.find("list of 24 (") + 12));
  EXPECT_LE(opens, 2 * 24) << message;
  // The other readers stop at their next open: the shared count names the
  // data set hopeless for them too.
  EXPECT_LE(loader.stats().shards_opened, opens + 4);
}

// Batch i is reader i % readers': a reader that meets a bad sample while
// reading ahead fails the run at the batch it cannot make, at the same step
// every time. The readers stopped on any one's failure, so the run failed at
// whichever reader's queue ran dry first: 7 0 0 7 7 7 7 2 1 7 steps in ten
// runs of one command, and runs whose steps never reached the bad sample
// failed too.
TEST(ShardLoader, AReadersBadSampleFailsTheRunAtTheSameBatchEveryTime) {
  TempDir dir;
  const SynthResult good = make_shards(dir.path(), 4, 30, 20);
  const std::string bad = dir.path() + "/odd.tar";
  {
    TarShardWriter writer;
    writer.open(bad);
    const std::vector<uint16_t> tokens(20, 5);
    for (char key = 'a'; key < 'i'; ++key)  // sample 'f': 21 bytes, not whole 2-byte tokens
      writer.write_sample(std::string(1, key), {{"u16", tokens.data(), key == 'f' ? 21 : tokens.size() * 2}});
    writer.close();
  }
  std::vector<std::string> shards = good.paths;
  shards.insert(shards.begin() + 3, bad);
  LoaderOptions o = options_for(shards);
  o.readers = 4;
  o.prefetch = 4;
  o.shuffle_buffer = 0;
  int64_t first_failure = -1;
  for (int run = 0; run < 8; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    ShardLoader loader(o);
    int64_t batches = 0;
    std::string message;
    try {
      for (; batches < 100000; ++batches) loader.next(nullptr);
    } catch (const DataError& e) {
      message = e.what();
    }
    ASSERT_NE(message.find(bad + ": "), std::string::npos) << message;
    if (first_failure < 0) first_failure = batches;
    EXPECT_EQ(batches, first_failure);
  }
  // The reader that holds the bad shard reads it early, the others' batches
  // go on for a while: the failure is not at the first batches.
  EXPECT_GT(first_failure, 4);
  // A run that stops short of that batch does not fail.
  for (int run = 0; run < 4; ++run) {
    ShardLoader loader(o);
    for (int64_t i = 0; i < first_failure; ++i) ASSERT_NO_THROW(loader.next(nullptr)) << "batch " << i;
  }
}

// A shard without a sample beside a good one is trained on, with a count.
// Each epoch deals a reader a new share of the list, so a reader can be
// dealt the empty one many times in a row: "twice the list" in a row (4
// opens here) failed the run as if no shard had a sample, for most seeds
// (a 2-shard list, 2 readers: each reader holds one shard an epoch).
TEST(ShardLoader, AReaderDealtTheEmptyShardOverAndOverGoesOn) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 1, 50, 20);
  const std::string empty = dir.path() + "/empty.tar";
  std::ofstream(empty, std::ios::binary) << std::string(1024, '\0');  // the end marker alone
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    LoaderOptions o = options_for({made.paths.front(), empty});
    o.seed = seed;
    ShardLoader loader(o);
    EXPECT_NO_THROW(take_batches(loader, 60));
    EXPECT_FALSE(loader.stats().shards_without_samples.empty());
  }
}

// Member extensions are compared lower-cased, as webdataset does: a field
// asked for with capitals (data.field TOK.u16, members *.Tok.u16) read as
// "no .TOK.u16 member (it has .tok.u16)" in every sample, where `shards
// verify` read them whole.
TEST(ShardLoader, AFieldWithCapitalsFindsItsMembers) {
  TempDir dir;
  const std::string path = dir.path() + "/caps.tar";
  TarShardWriter writer;
  writer.open(path);
  const std::vector<uint16_t> tokens(40, 7);
  for (int i = 0; i < 6; ++i)
    writer.write_sample(std::string("s") + std::to_string(i), {{"Tok.u16", tokens.data(), tokens.size() * sizeof(uint16_t)}});
  writer.close();
  LoaderOptions o = options_for({path});
  o.readers = 1;
  o.field = "TOK.u16";
  ShardLoader loader(o);
  std::vector<std::vector<int32_t>> batches;
  ASSERT_NO_THROW(batches = take_batches(loader, 3));
  for (const std::vector<int32_t>& batch : batches)
    for (const int32_t token : batch) ASSERT_TRUE(token == 7 || token == 999) << token;  // the samples' and EOS
}

TEST(ShardLoader, AStalledReaderTimesOutWithAMessageAndDoesNotHangTheExit) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 50, 10);
  LoaderOptions o = options_for(made.paths);
  o.inject_delay_s = 120;  // per sample: storage that hangs
  o.timeout_s = 0.2;
  const auto begin = std::chrono::steady_clock::now();
  {
    ShardLoader loader(o);
    try {
      loader.next(nullptr);
      FAIL() << "no timeout";
    } catch (const LoaderTimeout& e) {
      EXPECT_NE(std::string(e.what()).find("data.timeout_s"), std::string::npos) << e.what();
      // Not a sample read: the storage's alone, whatever the buffer.
      EXPECT_NE(std::string(e.what()).find("): storage is stalled or far too slow"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("shuffle buffer"), std::string::npos) << e.what();
    }
  }  // the destructor must not wait for the stuck readers
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(), 30.0);
}

// A shuffle buffer the storage cannot fill within the timeout: every one
// of its samples is read before the first batch. The timeout blamed healthy
// storage alone ("stalled or far too slow"); it now says the buffer was
// filling, how far, and what to change.
TEST(ShardLoader, AShuffleBufferStillFillingAtTheTimeoutIsNamed) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 50, 10);
  LoaderOptions o = options_for(made.paths);
  o.readers = 1;
  o.shuffle_buffer = 10'000;
  o.inject_delay_s = 0.001;  // per sample: the fill would take 10 s
  o.timeout_s = 0.3;
  ShardLoader loader(o);
  try {
    loader.next(nullptr);
    FAIL() << "no timeout";
  } catch (const LoaderTimeout& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("data: no batch from reader 0 of rank 0 within data.timeout_s = 0.3 s (reading ", 0), 0u)
        << message;
    EXPECT_NE(message.find("; it was filling its shuffle buffer, "), std::string::npos) << message;
    EXPECT_NE(message.find(" of data.shuffle_buffer = 10000 samples, which are all read before its first batch: "
                           "lower data.shuffle_buffer or raise data.timeout_s, or else storage is stalled or far "
                           "too slow"),
              std::string::npos)
        << message;
  }
}

// The loader goes (before the run's result is written) while a reader is in
// a read on storage that stopped responding (here a 20 s delay per sample):
// it waited for the read for ever; now each reader is given data.timeout_s,
// then let go with a warning.
TEST(ShardLoader, ItsEndDoesNotWaitForAReaderStuckInARead) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 50, 10);
  LoaderOptions o = options_for(made.paths);
  o.inject_delay_s = 20;
  o.timeout_s = 0.3;
  const auto begin = std::chrono::steady_clock::now();
  {
    ShardLoader loader(o);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the readers are in their first sample's read
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(), 10.0);
}

TEST(ShardLoader, ASlowReaderShowsUpAsWaitTime) {
  TempDir dir;
  const SynthResult made = make_shards(dir.path(), 2, 200, 8);
  LoaderOptions o = options_for(made.paths);
  o.shuffle_buffer = 0;
  o.readers = 1;
  o.prefetch = 1;
  o.inject_delay_s = 0.005;  // per sample; a batch of 3 x 16 tokens needs ~5 samples
  ShardLoader slow(o);
  double waited = 0;
  for (int i = 0; i < 10; ++i) {
    double wait = 0;
    slow.next(&wait);
    waited += wait;
  }
  // 10 batches x ~5 samples x 5 ms, with nothing else for the consumer to do.
  EXPECT_GT(waited, 0.1);
}

// bench io's plain read takes the list resolved before it: a shard removed
// or replaced since is named as the loader names it (exit 2), and a FIFO in
// its place is refused rather than waited on (open() blocked for good).
TEST(IoBench, APlainReadNamesAFileReplacedSinceTheList) {
  testing::TempDir dir("test_io_bench");
  const std::string shard = dir.file("a.tar");
  std::ofstream(shard) << std::string(10000, 'x');
  EXPECT_EQ(measure_sequential_read({shard}, 4096, 1, 30).bytes, 10000);
  const auto error_of = [](const std::vector<std::string>& paths) {
    try {
      measure_sequential_read(paths, 4096, 1, 30);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  fs::remove(shard);
  EXPECT_EQ(error_of({shard}), shard + ": cannot open: No such file or directory");
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  EXPECT_EQ(error_of({shard}), shard + ": not a regular file");
  // The page-cache survey before a read neither waits on it nor counts it.
  const std::vector<FileResidency> survey = survey_page_cache({shard}, 30);
  ASSERT_EQ(survey.size(), 1u);
  EXPECT_FALSE(survey[0].known);
  fs::remove(shard);
  fs::create_directory(shard);
  EXPECT_EQ(error_of({shard}), shard + ": not a regular file");
}

// A time limit that has passed before a measurement's thread starts
// (--seconds 0.001 on a loaded host) still reads the first file: a read of
// nothing divided the table's "% 1-stream" columns by zero.
TEST(IoBench, AnExpiredTimeLimitStillReadsTheFirstFile) {
  testing::TempDir dir("test_io_bench");
  std::vector<std::string> shards;
  for (int i = 0; i < 3; ++i) {
    shards.push_back(dir.file("s" + std::to_string(i) + ".tar"));
    std::ofstream(shards.back()) << std::string(10000, 'x');
  }
  const ReadRate plain = measure_sequential_read(shards, 4096, 1, 0.0);
  EXPECT_GT(plain.bytes, 0);
  EXPECT_EQ(plain.files, 1);
  EXPECT_FALSE(plain.complete);

  for (int s = 0; s < 2; ++s) {  // the small-file tree: a folder a shard, a file a member
    const std::string shard_dir = dir.file("tree/shard" + std::to_string(s));
    fs::create_directories(shard_dir);
    for (int k = 0; k < 2; ++k)
      std::ofstream(shard_dir + "/sample" + std::to_string(k) + ".u16") << std::string(64, 'a');
  }
  const ReadRate small = measure_small_files(dir.file("tree"), "u16", 65536, 1, 0.0, 0.0, false);
  EXPECT_EQ(small.files, 1);
  EXPECT_GT(small.bytes, 0);
  EXPECT_FALSE(small.complete);
}

}  // namespace
}  // namespace trainbench
