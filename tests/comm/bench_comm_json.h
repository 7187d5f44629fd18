// Reading the result of `trainbench bench comm --out FILE` in the tests.
#pragma once

#include <cmath>  // std::isfinite
#include <cstdint>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace trainbench::testing {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

// The sizes (bytes) of the collectives' rows: the sweep's and the buckets'.
inline std::set<int64_t> collective_sizes(const nlohmann::json& result) {
  std::set<int64_t> sizes;
  for (const nlohmann::json& r : result.at("collectives")) sizes.insert(r.at("bytes").get<int64_t>());
  return sizes;
}

// Every measurement passed its data check and has a finite, positive time;
// busbw is positive with more than one rank and 0 on one.
inline void expect_measured_and_checked(const nlohmann::json& result) {
  const int ranks = result.at("ranks").get<int>();
  EXPECT_EQ(result.at("check"), "ok");
  for (const char* section : {"gradient_step", "collectives"}) {
    ASSERT_FALSE(result.at(section).empty()) << section;
    for (const nlohmann::json& r : result.at(section)) {
      const std::string what = r.dump();
      EXPECT_EQ(r.at("check"), "ok") << what;
      const double time_s = r.at("time_s").get<double>();
      const double busbw = r.at("busbw_gbs").get<double>();
      EXPECT_TRUE(std::isfinite(time_s) && time_s > 0) << what;
      EXPECT_TRUE(std::isfinite(busbw)) << what;
      if (ranks > 1) EXPECT_GT(busbw, 0.0) << what;
      else EXPECT_EQ(busbw, 0.0) << what;
      // nccl-tests' bus factors, written out here: 2(n-1)/n for all-reduce,
      // (n-1)/n for reduce-scatter and all-gather. Only busbw > 0 was
      // checked: one factor for every collective, or another rank count,
      // passed.
      const std::string collective = r.at("collective").get<std::string>();
      const double n = ranks;
      const double factor = collective == "all_reduce" ? 2 * (n - 1) / n : (n - 1) / n;
      ASSERT_TRUE(collective == "all_reduce" || collective == "reduce_scatter" || collective == "all_gather") << what;
      EXPECT_NEAR(busbw, r.at("algbw_gbs").get<double>() * factor, 1e-9 * busbw + 1e-15) << what;
    }
  }
}

}  // namespace trainbench::testing
