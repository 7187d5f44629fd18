// JSON text that cannot fail on the strings a run carries. Paths on Linux
// are bytes, not UTF-8, and nlohmann::json's dump() throws on a string that
// is not valid UTF-8: a result file named `\xff.json` lost a finished run's
// result at the end, and a checkpoint.dir so named failed every checkpoint.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainbench {

// `text` with each byte that is not part of valid UTF-8 written as the four
// characters \xNN (lower-case hex), as io::printable writes them; valid
// UTF-8, multi-byte characters included, is unchanged. The config's strings
// go into JSON this way, so a name stays readable and two names stay
// distinct.
std::string utf8_escaped(std::string_view text);

// An error message as one line that a terminal shows as it is: control
// characters (a newline in a path or an argument, a terminal escape) as
// \n, \r, \t or \xNN, bytes that are not UTF-8 as \xNN, and a message
// longer than kMaxErrorLineBytes cut in its middle, where a long value it
// quotes is, keeping its start and its remedy (a 100 KB argument was
// echoed whole, twice). What trainbench prints after "trainbench: ".
inline constexpr size_t kMaxErrorLineBytes = 4096;
std::string error_line(std::string_view message);

// json.dump(indent) that never throws: a string that is still not UTF-8
// (an error message quoting a path) has its bad bytes replaced by U+FFFD.
std::string json_text(const nlohmann::json& json, int indent = -1);

}  // namespace trainbench
