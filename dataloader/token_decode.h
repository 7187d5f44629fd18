// STORAGE READ. Turns the token member of a sample into token ids.
//   u16 / u32: raw little-endian token ids;
//   npy:       a 1-D .npy array of uint16, uint32, int32 or int64 (either byte order);
//   txt:       UTF-8 bytes, each byte one token (byte-level tokens, ids 0..255).
// data.field names the member's extension; its last dot component picks the
// format ("u16", "tokens.u16", "input_ids.npy").
#pragma once

#include <cstdint>  // int32_t, int64_t, uint8_t
#include <string>
#include <vector>

namespace trainbench {

enum class TokenFormat { kU16, kU32, kNpy, kTxt };

// Throws DataError(kConfig) naming data.field when the format is unknown.
TokenFormat token_format_of_field(const std::string& field);

// Whether `field` is written as member extensions are named, after their
// key's dot: not empty, no leading, trailing or doubled dot (".u16" matches
// no member). The message for one that is not, for "OPTION 'FIELD': ...".
bool field_is_an_extension(const std::string& field);
inline constexpr const char* kFieldExtensionRule =
    "an extension as members are named after their key's dot, without a leading, trailing or doubled dot (u16, "
    "tokens.u16)";

// Appends the decoded ids to *tokens. On bad input (a length that is not a
// whole number of tokens, a malformed npy header, an id >= vocab or < 0)
// returns false with *error set to one line (e.g. "token 70000 >= vocab
// 50257 at index 12"); the caller adds shard and key.
bool decode_tokens(TokenFormat format, const uint8_t* data, size_t size, int64_t vocab,
                   std::vector<int32_t>* tokens, std::string* error);

}  // namespace trainbench
