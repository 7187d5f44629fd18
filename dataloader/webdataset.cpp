#include "dataloader/webdataset.h"

#include <optional>  // the first error of a corrupt sample
#include <utility>   // std::move

#include "dataloader/data_error.h"

namespace trainbench {

namespace {

// webdataset's skip_meta, re.match(r"__[^/]*__($|/)", name): a "__x__" first
// component hides the whole tree under it.
bool is_meta_tree(std::string_view path) {
  if (!path.starts_with("__")) return false;
  const size_t slash = path.find('/');
  const std::string_view first = path.substr(0, slash);
  return first.size() >= 4 && first.ends_with("__");
}

}  // namespace

// webdataset's base_plus_ext is re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$"): the
// split is at the first dot of the last component, and the regex needs a
// non-empty dot-free run right before that dot which starts at the beginning
// of the path or just after a '/' (with no newline before that '/': '.' in a
// regex does not match one). So "dir/.x" gives key "dir/" and extension "x",
// while ".x" and "a.b/.x" match nothing.
bool split_key_extension(std::string_view path, std::string* key, std::string* extension) {
  const size_t last_slash = path.rfind('/');
  const size_t last_component = last_slash == std::string_view::npos ? 0 : last_slash + 1;
  if (path.substr(last_component).starts_with("__") || is_meta_tree(path)) return false;
  const size_t dot = path.find('.', last_component);
  if (dot == std::string_view::npos || dot == 0) return false;

  const size_t previous_dot = path.rfind('.', dot - 1);
  const size_t run_begin_min = previous_dot == std::string_view::npos ? 0 : previous_dot + 1;
  const size_t first_newline = path.find('\n');
  bool run_found = false;
  for (size_t begin = run_begin_min; begin < dot && !run_found; ++begin) {
    run_found = begin == 0 || (path[begin - 1] == '/' && first_newline >= begin - 1);
  }
  if (!run_found) return false;

  key->assign(path.substr(0, dot));
  extension->assign(path.substr(dot + 1));
  for (char& c : *extension) c = ascii_lower(c);
  return true;
}

const SampleMember* Sample::find(std::string_view extension) const {
  // The members' extensions are lower-cased; the one asked for may not be
  // (data.field: TOK.u16 found no member in shards that `shards verify`
  // read whole with the same field).
  const auto same = [&](const std::string& lower) {
    if (lower.size() != extension.size()) return false;
    for (size_t i = 0; i < lower.size(); ++i)
      if (lower[i] != ascii_lower(extension[i])) return false;
    return true;
  };
  for (size_t i = 0; i < member_count; ++i) {
    if (same(members[i].extension)) return &members[i];
  }
  return nullptr;
}

SampleReader::SampleReader(TarReader& tar, int64_t max_member_bytes, std::string keep_extension)
    : tar_(tar),
      max_member_bytes_(max_member_bytes),
      keep_extension_(ascii_lowercase(std::move(keep_extension))) {}  // as the members' are

bool SampleReader::next_named_member() {
  while (tar_.next_member(&pending_)) {
    if (pending_.regular &&
        split_key_extension(pending_.name, &pending_key_, &pending_extension_)) {
      return true;
    }
  }
  return false;
}

bool SampleReader::advance() {
  try {
    has_pending_ = next_named_member();
  } catch (const DataError& error) {
    if (error.scope() != CorruptScope::kShard) throw;
    deferred_ = error;
    has_pending_ = false;
  }
  return has_pending_;
}

bool SampleReader::next(Sample* sample) {
  if (deferred_) {
    const DataError error = *deferred_;
    deferred_.reset();
    throw error;
  }
  if (!has_pending_ && !next_named_member()) return false;
  has_pending_ = false;

  sample->key.swap(pending_key_);
  sample->offset = pending_.offset;
  sample->bytes = 0;
  sample->member_count = 0;
  std::optional<DataError> corrupt;
  do {
    if (sample->find(pending_extension_) != nullptr && !corrupt) {
      corrupt.emplace(CorruptScope::kSample,
                      at_offset(tar_.path(), pending_.offset,
                                "sample " + printable(sample->key) + " has a second ." +
                                    printable(pending_extension_) + " member (" +
                                    printable(pending_.name) + ")"));
    }
    if (sample->member_count == sample->members.size()) sample->members.emplace_back();
    SampleMember& member = sample->members[sample->member_count];
    try {
      if (keep_extension_.empty() || keep_extension_ == pending_extension_) {
        tar_.read_data(&member.data, max_member_bytes_);
        member.size = static_cast<int64_t>(member.data.size());
      } else {
        member.data.clear();
        member.size = tar_.read_through_data(max_member_bytes_);
      }
    } catch (const DataError& error) {
      if (error.scope() != CorruptScope::kSample) throw;
      if (!corrupt) corrupt = error;
      continue;
    }
    member.extension.swap(pending_extension_);
    sample->bytes += member.size;
    ++sample->member_count;
  } while (advance() && pending_key_ == sample->key);

  if (corrupt) throw *corrupt;
  return true;
}

}  // namespace trainbench
