// CLI11 validators for numbers typed on the command line, checked as text by
// config.h's integer_in_range and number_in_range: CLI11's own checks take a
// value already converted, so 99999999999999999999 arrived saturated to
// INT64_MAX, nan and inf passed, and a failure printed a 309-digit bound.
// Every command's numeric options use these.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/config.h"  // integer_in_range, number_in_range, expand_home

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

// The items of a comma-separated list, empty ones kept ("1,,2" is three).
inline std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  for (size_t begin = 0;;) {
    const size_t end = std::min(text.find(',', begin), text.size());
    items.push_back(text.substr(begin, end - begin));
    if (end == text.size()) return items;
    begin = end + 1;
  }
}

// A comma-separated list of integers, each in [low, high] and written back
// as a decimal: CLI11's own ->delimiter(',') dropped an empty item ("1,,2"
// measured 1 and 2) and named the next option for a list of none. Give it
// with ->transform; integer_list_values reads the list it let through.
inline CLI::Validator integer_list(int64_t low, int64_t high) {
  return CLI::Validator(
      [=](std::string& text) {
        const std::vector<std::string> items = comma_items(text);
        std::string checked;
        for (size_t i = 0; i < items.size(); ++i) {
          const std::string error = integer_in_range(items[i], low, high);
          if (!error.empty() && items.size() == 1) return error;  // a list of one
          if (!error.empty()) return std::string("item ") + std::to_string(i + 1) + " of '" + text + "' " + error;
          if (!checked.empty()) checked += ',';
          checked += decimal_integer_text(items[i]);
        }
        text = checked;
        return std::string();
      },
      "N[,N...]");
}
inline std::vector<int64_t> integer_list_values(const std::string& checked) {
  std::vector<int64_t> values;
  for (const std::string& item : comma_items(checked)) values.push_back(std::stoll(item));
  return values;
}

// A size in bytes (byte_size_in_range: K = 1024, KB = 1000, as `shards`
// reads its sizes), handed on as its decimal. Give it with ->transform.
inline CLI::Validator byte_size_range(int64_t low, int64_t high) {
  return CLI::Validator(
      [=](std::string& text) {
        int64_t bytes = 0;
        std::string error = byte_size_in_range(text, low, high, &bytes);
        if (error.empty()) text = std::to_string(bytes);
        return error;
      },
      "BYTES");
}

// A path option given as "": refused as `run --out ""` is (burnin and bench
// wrote their default file instead, exit 0).
inline CLI::Validator non_empty_path() {
  return CLI::Validator([](std::string& text) { return text.empty() ? std::string("the path is empty") : ""; }, "");
}

// A path option's leading ~/ as the home folder (config.h's expand_home):
// `--out=~/r.json` is one word that no shell expands, and a result went to
// a folder named "~" in the working folder. Give it with ->transform.
inline CLI::Validator home_path() {
  return CLI::Validator([](std::string& text) { return expand_home(&text); }, "");
}

}  // namespace trainbench
