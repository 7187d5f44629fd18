#include "trainer/json_text.h"

#include <algorithm>  // std::min
#include <cstdint>

namespace trainbench {

namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 when the byte there
// does not start one (RFC 3629: no overlong forms, no surrogates, nothing
// above U+10FFFF).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint8_t low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return length;
}

}  // namespace

std::string utf8_escaped(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_sequence_length(text, i);
    if (length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      const auto b = static_cast<uint8_t>(text[i++]);
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xf];
    }
  }
  return out;
}

std::string error_line(std::string_view message) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string line;
  line.reserve(std::min(message.size(), kMaxErrorLineBytes));
  for (size_t i = 0; i < message.size();) {
    const size_t length = utf8_sequence_length(message, i);
    const auto b = static_cast<uint8_t>(message[i]);
    if (length > 1 || (length == 1 && b >= 0x20 && b != 0x7f)) {
      line.append(message.substr(i, length));
      i += length;
      continue;
    }
    ++i;
    if (b == '\n') {
      line += "\\n";
    } else if (b == '\r') {
      line += "\\r";
    } else if (b == '\t') {
      line += "\\t";
    } else {
      line += "\\x";
      line += kHex[b >> 4];
      line += kHex[b & 0xf];
    }
  }
  if (line.size() <= kMaxErrorLineBytes) return line;
  // The cuts move back to the start of a UTF-8 character.
  const auto start_of_character = [&](size_t at) {
    while (at > 0 && (static_cast<uint8_t>(line[at]) & 0xC0) == 0x80) --at;
    return at;
  };
  const size_t head = start_of_character(kMaxErrorLineBytes * 5 / 8);
  const size_t tail = start_of_character(line.size() - kMaxErrorLineBytes / 4);
  return line.substr(0, head) + " … (" + std::to_string(tail - head) + " bytes left out) … " + line.substr(tail);
}

std::string json_text(const nlohmann::json& json, int indent) {
  return json.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace trainbench
