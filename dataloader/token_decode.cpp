#include "dataloader/token_decode.h"

#include <algorithm>  // std::min, std::max
#include <bit>        // std::endian
#include <charconv>   // std::from_chars for the npy shape
#include <cstring>    // std::memcmp
#include <limits>     // std::numeric_limits
#include <string_view>

#include "dataloader/data_error.h"
#include "dataloader/webdataset.h"  // ascii_lowercase: the format as extensions compare

namespace trainbench {

TokenFormat token_format_of_field(const std::string& field) {
  const size_t dot = field.rfind('.');
  // Lower-cased, as the members' extensions are compared (tokens.U16 is a .u16 member).
  const std::string format = ascii_lowercase(field.substr(dot == std::string::npos ? 0 : dot + 1));
  if (format == "u16") return TokenFormat::kU16;
  if (format == "u32") return TokenFormat::kU32;
  if (format == "npy") return TokenFormat::kNpy;
  if (format == "txt") return TokenFormat::kTxt;
  throw DataError(CorruptScope::kConfig, "data.field '" + field + "': unknown token format '" +
                                             format +
                                             "' (the last extension must be u16, u32, npy or txt)");
}

bool field_is_an_extension(const std::string& field) {
  return !field.empty() && field.front() != '.' && field.back() != '.' && field.find("..") == std::string::npos;
}

namespace {

// The element type of the ids in a payload, as the npy header or the format names it.
struct TokenType {
  int bytes = 0;
  bool is_signed = false;
  bool big_endian = false;
};

// Reads one id; bytes are assembled explicitly, so alignment and host byte
// order do not matter.
int64_t load_id(const uint8_t* p, const TokenType& type) {
  uint64_t value = 0;
  for (int i = 0; i < type.bytes; ++i) {
    const int byte = type.big_endian ? i : type.bytes - 1 - i;
    value = (value << 8) | p[byte];
  }
  if (type.is_signed && type.bytes < 8 && (value >> (8 * type.bytes - 1)) != 0) {
    value |= ~uint64_t{0} << (8 * type.bytes);  // sign-extend
  }
  return static_cast<int64_t>(value);
}

// The common case, unsigned little-endian ids on a little-endian host, in a
// loop the compiler vectorises: widen every id, track the largest, check the
// bound once. False when some id is out of range (the caller then finds which).
template <typename T>
bool widen_unsigned(const uint8_t* data, size_t count, int64_t limit, int32_t* out) {
  T largest = 0;
  for (size_t i = 0; i < count; ++i) {
    T id;
    std::memcpy(&id, data + i * sizeof(T), sizeof(T));
    largest = std::max(largest, id);
    out[i] = static_cast<int32_t>(id);
  }
  return static_cast<int64_t>(largest) < limit;
}

bool widen_fast(const uint8_t* data, size_t count, const TokenType& type, int64_t limit,
                int32_t* out) {
  if (std::endian::native != std::endian::little || type.is_signed || type.big_endian) return false;
  switch (type.bytes) {
    case 1: return widen_unsigned<uint8_t>(data, count, limit, out);
    case 2: return widen_unsigned<uint16_t>(data, count, limit, out);
    case 4: return widen_unsigned<uint32_t>(data, count, limit, out);
    default: return false;
  }
}

bool fail(std::string* error, std::string message) {
  *error = std::move(message);
  return false;
}

bool decode_ids(const uint8_t* data, size_t size, const TokenType& type, int64_t vocab,
                std::vector<int32_t>* tokens, std::string* error) {
  if (size % static_cast<size_t>(type.bytes) != 0) {
    return fail(error, "payload of " + std::to_string(size) + " bytes is not a whole number of " +
                           std::to_string(type.bytes) + "-byte tokens");
  }
  // ids must also fit the int32 the model's embedding lookup takes.
  const int64_t limit = std::min<int64_t>(vocab, int64_t{std::numeric_limits<int32_t>::max()} + 1);
  const size_t count = size / static_cast<size_t>(type.bytes);
  const size_t first = tokens->size();
  tokens->resize(first + count);
  int32_t* out = tokens->data() + first;
  if (widen_fast(data, count, type, limit, out)) return true;
  // The general path: other types and byte orders, and finding the bad id.
  for (size_t index = 0; index < count; ++index) {
    const int64_t id = load_id(data + index * static_cast<size_t>(type.bytes), type);
    if (id < 0 || id >= limit) {
      tokens->resize(first);
      const std::string at = " at index " + std::to_string(index);
      if (id < 0) return fail(error, "token " + std::to_string(id) + " < 0" + at);
      if (id >= vocab) {
        return fail(error,
                    "token " + std::to_string(id) + " >= vocab " + std::to_string(vocab) + at);
      }
      return fail(error, "token " + std::to_string(id) + at + " does not fit in a 32-bit token id");
    }
    out[index] = static_cast<int32_t>(id);
  }
  return true;
}

// Just past `key` written as a dict key ('key' or "key") in the npy header.
size_t end_of_quoted_key(std::string_view header, std::string_view key) {
  for (size_t at = header.find(key); at != std::string_view::npos; at = header.find(key, at + 1)) {
    const size_t close = at + key.size();
    const bool quoted = at > 0 && close < header.size() &&
                        (header[at - 1] == '\'' || header[at - 1] == '"') &&
                        header[close] == header[at - 1];
    if (quoted) return close + 1;
  }
  return std::string_view::npos;
}

// The value of `key` in the header's Python dict literal, up to the next
// ',' or '}' (the shape tuple contains commas: it ends at its parenthesis).
bool find_header_value(std::string_view header, std::string_view key, std::string_view* value) {
  const size_t after_key = end_of_quoted_key(header, key);
  if (after_key == std::string_view::npos) return false;
  size_t pos = header.find_first_not_of(" \t", after_key);
  if (pos == std::string_view::npos || header[pos] != ':') return false;
  pos = header.find_first_not_of(" \t", pos + 1);
  if (pos == std::string_view::npos) return false;
  size_t end = pos;
  if (header[pos] == '(') {
    end = header.find(')', pos);
    if (end == std::string_view::npos) return false;
    ++end;
  } else {
    end = header.find_first_of(",}", pos);
    if (end == std::string_view::npos) return false;
  }
  *value = header.substr(pos, end - pos);
  while (!value->empty() && (value->back() == ' ' || value->back() == '\t'))
    value->remove_suffix(1);
  return true;
}

std::string_view unquote(std::string_view text) {
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') &&
      text.back() == text.front()) {
    return text.substr(1, text.size() - 2);
  }
  return {};
}

// A 1-D shape "(N,)": the only shape a token array may have.
bool parse_length(std::string_view shape, uint64_t* length) {
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return false;
  std::string_view inside = shape.substr(1, shape.size() - 2);
  const size_t begin = inside.find_first_not_of(' ');
  if (begin == std::string_view::npos) return false;
  inside.remove_prefix(begin);
  const auto [end, status] = std::from_chars(inside.data(), inside.data() + inside.size(), *length);
  if (status != std::errc()) return false;
  std::string_view rest(end, static_cast<size_t>(inside.data() + inside.size() - end));
  const size_t comma = rest.find_first_not_of(' ');
  if (comma == std::string_view::npos || rest[comma] != ',') return false;
  return rest.find_first_not_of(' ', comma + 1) == std::string_view::npos;
}

bool decode_npy(const uint8_t* data, size_t size, int64_t vocab, std::vector<int32_t>* tokens,
                std::string* error) {
  static constexpr uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(data, kMagic, sizeof kMagic) != 0) {
    return fail(error, "not an npy file (no \\x93NUMPY magic)");
  }
  const int major = data[6];
  // Version 1 stores the header length in 2 bytes, versions 2 and 3 in 4.
  size_t header_begin = 10;
  size_t header_size = data[8] | size_t{data[9]} << 8;
  if (major == 2 || major == 3) {
    if (size < 12) return fail(error, "npy header is cut short");
    header_begin = 12;
    header_size = data[8] | size_t{data[9]} << 8 | size_t{data[10]} << 16 | size_t{data[11]} << 24;
  } else if (major != 1) {
    return fail(error, "npy version " + std::to_string(major) + "." + std::to_string(data[7]) +
                           " is not supported (1.0, 2.0, 3.0)");
  }
  if (header_size > size - header_begin) {
    return fail(error, "npy header of " + std::to_string(header_size) + " bytes runs past the " +
                           std::to_string(size) + "-byte payload");
  }
  const std::string_view header(reinterpret_cast<const char*>(data + header_begin), header_size);

  std::string_view descr_value, order_value, shape_value;
  if (!find_header_value(header, "descr", &descr_value) ||
      !find_header_value(header, "fortran_order", &order_value) ||
      !find_header_value(header, "shape", &shape_value)) {
    return fail(error, "npy header lacks descr, fortran_order or shape");
  }
  const std::string_view descr = unquote(descr_value);
  TokenType type;
  if (descr.size() == 3 && (descr[0] == '<' || descr[0] == '>' || descr[0] == '|')) {
    type.big_endian = descr[0] == '>';
    const std::string_view kind = descr.substr(1);
    if (kind == "u2") type = {2, false, type.big_endian};
    if (kind == "u4") type = {4, false, type.big_endian};
    if (kind == "i4") type = {4, true, type.big_endian};
    if (kind == "i8") type = {8, true, type.big_endian};
  }
  if (type.bytes == 0) {
    return fail(error, "npy dtype " + printable(descr_value) +
                           " is not a token type (uint16, uint32, int32 or int64)");
  }
  if (order_value != "False") {
    return fail(error, "npy fortran_order is " + printable(order_value) + ", not False");
  }
  uint64_t length = 0;
  if (!parse_length(shape_value, &length)) {
    return fail(error, "npy shape " + printable(shape_value) + " is not 1-D");
  }
  const size_t payload = size - header_begin - header_size;
  if (length > payload / static_cast<size_t>(type.bytes) ||
      length * static_cast<size_t>(type.bytes) != payload) {
    return fail(error, "npy shape (" + std::to_string(length) + ",) of " + printable(descr) +
                           " does not match the " + std::to_string(payload) + " data bytes");
  }
  return decode_ids(data + header_begin + header_size, payload, type, vocab, tokens, error);
}

}  // namespace

bool decode_tokens(TokenFormat format, const uint8_t* data, size_t size, int64_t vocab,
                   std::vector<int32_t>* tokens, std::string* error) {
  if (vocab <= 0) return fail(error, "vocab " + std::to_string(vocab) + " is not positive");
  switch (format) {
    case TokenFormat::kU16:
      return decode_ids(data, size, {2, false, false}, vocab, tokens, error);
    case TokenFormat::kU32:
      return decode_ids(data, size, {4, false, false}, vocab, tokens, error);
    case TokenFormat::kTxt:
      return decode_ids(data, size, {1, false, false}, vocab, tokens, error);
    case TokenFormat::kNpy:
      return decode_npy(data, size, vocab, tokens, error);
  }
  return fail(error, "unknown token format");
}

}  // namespace trainbench
