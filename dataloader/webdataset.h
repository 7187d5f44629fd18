// STORAGE READ. webdataset's sample semantics over a tar stream, exactly:
//   - key = member path up to the first dot of its last component, extension
//     = the rest: "a.b/c.d.u16" -> key "a.b/c", ext "d.u16";
//   - consecutive members with the same key form one sample;
//   - names whose last component has no dot, non-regular entries (directories,
//     links), names whose last component starts with "__" (e.g. __meta__.json)
//     and, as webdataset's skip_meta, everything under a "__x__/" directory
//     are skipped; skipped members do not end a sample;
//   - extensions are compared lower-cased (ASCII letters only, where Python's
//     str.lower() would also fold non-ASCII ones);
//   - a sample never spans two shards (the reader works on one shard);
//   - a repeated extension inside one sample makes the sample corrupt.
#pragma once

#include <cstdint>  // int64_t
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dataloader/data_error.h"  // DataError: a deferred broken-archive error
#include "dataloader/tar_reader.h"

namespace trainbench {

// ASCII letters lower-cased: how extensions compare (above). The members'
// are stored so; a name asked for (data.field) goes through it too.
inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
inline std::string ascii_lowercase(std::string text) {
  for (char& c : text) c = ascii_lower(c);
  return text;
}

// Splits a member path; false when webdataset would skip the name (no dot in
// the last component, or a "__" name). `extension` comes back lower-cased.
bool split_key_extension(std::string_view path, std::string* key, std::string* extension);

struct SampleMember {
  std::string extension;      // lower-cased
  std::vector<uint8_t> data;  // capacity reused across samples; empty when read through
  int64_t size = 0;           // data bytes read from the shard
};

struct Sample {
  std::string key;
  int64_t offset = 0;  // header offset of its first member in the shard
  int64_t bytes = 0;   // data bytes of all members
  // Only the first `member_count` entries are this sample's; the rest are
  // spare buffers kept for reuse.
  std::vector<SampleMember> members;
  size_t member_count = 0;

  // The member with this extension, compared lower-cased, or nullptr.
  const SampleMember* find(std::string_view extension) const;
};

// Groups a TarReader's members into samples. Every member's data is read
// (whole samples, the customer's real I/O), each at most max_member_bytes.
class SampleReader {
 public:
  // With `keep_extension`, only that member's bytes are kept in `data`; the
  // others are still read from storage, whole, but not copied (the loader
  // decodes the token member only). Empty = keep every member.
  SampleReader(TarReader& tar, int64_t max_member_bytes, std::string keep_extension = "");
  // The next sample into *sample (buffers reused). False at the end of the
  // shard. Throws DataError(kSample) for a corrupt sample (repeated
  // extension, oversized member) after consuming all of its members, so the
  // next call continues with the following sample; DataError(kShard) when the
  // archive itself is broken (after the samples before the break that were
  // read whole).
  bool next(Sample* sample);
  // The archive broke right after the sample next() gave (the next header
  // cut short or damaged; the next call throws it): that sample may have
  // had members in what is lost. A member it lacks is the break's doing,
  // not a sample written without it.
  bool broken_after() const { return deferred_.has_value(); }

 private:
  // Reads headers up to the next member webdataset would keep, into pending_*.
  bool next_named_member();
  // next_named_member after a sample's member. A broken archive found there
  // (a header cut short) is the next sample's: kept in deferred_ and thrown
  // by the next call, so the sample already read whole is not lost with it
  // (webdataset yields it too).
  bool advance();

  TarReader& tar_;
  int64_t max_member_bytes_;
  std::string keep_extension_;
  TarMember pending_;  // first member of the next sample, already read
  bool has_pending_ = false;
  std::string pending_key_;
  std::string pending_extension_;
  std::optional<DataError> deferred_;
};

}  // namespace trainbench
