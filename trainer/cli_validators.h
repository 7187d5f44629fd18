// CLI11 validators for numbers typed on the command line, checked as text by
// config.h's integer_in_range and number_in_range: CLI11's own checks take a
// value already converted, so 99999999999999999999 arrived saturated to
// INT64_MAX, nan and inf passed, and a failure printed a 309-digit bound.
// Every command's numeric options use these.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "trainer/config.h"  // integer_in_range, number_in_range

namespace trainbench {

// Checked as decimal, and handed on as the decimal it was checked as: CLI11
// converts with base 0, which read "010" as 8 and refused "08" after the
// check had passed both. Give it with ->transform (->check keeps the text),
// or with ->check after a transform that writes decimals (AsSizeValue):
// CLI11 runs transforms in the reverse order of their adding.
inline CLI::Validator integer_range(int64_t low, int64_t high) {
  return CLI::Validator(
      [=](std::string& text) {
        std::string error = integer_in_range(text, low, high);
        if (error.empty()) text = decimal_integer_text(text);
        return error;
      },
      std::to_string(low) + ".." + std::to_string(high));
}

inline CLI::Validator number_range(double low, double high) {
  return CLI::Validator([=](std::string& text) { return number_in_range(text, low, high); }, "");
}

// A path option given as "": refused as `run --out ""` is (burnin and bench
// wrote their default file instead, exit 0).
inline CLI::Validator non_empty_path() {
  return CLI::Validator([](std::string& text) { return text.empty() ? std::string("the path is empty") : ""; }, "");
}

}  // namespace trainbench
