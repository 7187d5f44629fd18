// The measured steps' wait for a CPU (trainer/cpu_wait.h): the schedstat
// line read, threads made to share one CPU read as waiting, and a run beside
// busy processes on its CPU warned of. SERIAL: another test's processes on
// the same CPUs are exactly what this measures.
#include <gtest/gtest.h>
#include <pthread.h>  // pthread_setaffinity_np
#include <sched.h>    // sched_getaffinity

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "trainer/cpu_wait.h"

namespace trainbench {
namespace {

// Whether this kernel keeps the per-thread run-queue figures at all
// (CONFIG_SCHED_INFO): read here without the code under test, so that a
// meter that reads nothing on a kernel that keeps them fails, not skips.
bool kernel_keeps_schedstat() {
  ThreadCpuTimes times;
  return parse_schedstat(testing::read_whole_file("/proc/thread-self/schedstat"), &times);
}

#define SKIP_WITHOUT_SCHEDSTAT() \
  if (!kernel_keeps_schedstat()) GTEST_SKIP() << "this kernel keeps no /proc/thread-self/schedstat (CONFIG_SCHED_INFO)"

TEST(CpuWait, TheSchedstatLineIsRead) {
  ThreadCpuTimes times;
  ASSERT_TRUE(parse_schedstat("1206602 82491 2\n", &times));
  EXPECT_EQ(times.running_ns, 1206602);
  EXPECT_EQ(times.waiting_ns, 82491);
  for (const char* text : {"", "12\n", "a b c", "-5 3 1"}) EXPECT_FALSE(parse_schedstat(text, &times)) << text;
}

// The first CPU this process may run on.
int first_allowed_cpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) return cpu;
  return 0;
}

// `count` threads bound to one CPU, each busy for `busy`; the share the
// meter reads over them, while they are still alive (asleep, done).
double share_of_threads_on_one_cpu(int count, std::chrono::milliseconds busy) {
  CpuWaitMeter meter;
  meter.start();
  const int cpu = first_allowed_cpu();
  std::atomic<bool> bound_failed{false}, read{false};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i)
    threads.emplace_back([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (::pthread_setaffinity_np(::pthread_self(), sizeof(one), &one) != 0) bound_failed = true;
      const auto end = std::chrono::steady_clock::now() + busy;
      while (std::chrono::steady_clock::now() < end) {
      }
      ++done;
      while (!read) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  while (done < count) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double share = meter.waiting_share();
  read = true;
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(bound_failed) << "a thread could not be bound to CPU " << cpu;
  return share;
}

TEST(CpuWait, ThreadsSharingOneCpuWaitAndOneAloneDoesNot) {
  SKIP_WITHOUT_SCHEDSTAT();
  const double alone = share_of_threads_on_one_cpu(1, std::chrono::milliseconds(300));
  const double four = share_of_threads_on_one_cpu(4, std::chrono::milliseconds(300));
  ASSERT_GE(alone, 0);
  // Four on one CPU: each runs a quarter of the time, and is ready all of it.
  EXPECT_GT(four, 0.6);
  // Alone (the main thread sleeps between its looks, not ready to run): far
  // less, whatever else the host runs on that CPU.
  EXPECT_LT(alone, four / 2);
  EXPECT_LE(four, 1.0);
}

// A run bound to one CPU beside two busy processes bound to it: the warning
// names the wait, and the result holds the share for the run and its rank.
// The same run alone on that CPU reads less, by far.
TEST(CpuWait, ARunBesideBusyProcessesOnItsCpuIsWarnedOf) {
  SKIP_WITHOUT_SCHEDSTAT();
  testing::TempDir dir("test_cpu_wait");
  const std::string cpu = std::to_string(first_allowed_cpu());
  const std::string run = "taskset -c " + cpu + " " + std::string(TRAINBENCH_BINARY) +
                          " run tiny --steps 16 --set train.warmup_steps=2 --set data.source=synthetic"
                          " --set checkpoint.every_steps=0 --out ";
  const auto result = [&](const std::string& name) {
    return nlohmann::json::parse(testing::read_whole_file(dir.file(name)));
  };
  ASSERT_EQ(testing::run_command(run + dir.file("alone.json")).exit_code, 0);
  const std::string spin = "taskset -c " + cpu + " timeout 120 sh -c 'while :; do :; done' >/dev/null 2>&1 & ";
  const auto busy = testing::run_command("{ " + spin + "p1=$!; " + spin + "p2=$!; " + run + dir.file("busy.json") +
                                         "; code=$?; kill $p1 $p2; exit $code; }");
  ASSERT_EQ(busy.exit_code, 0) << busy.err;
  const nlohmann::json alone = result("alone.json"), beside = result("busy.json");
  ASSERT_TRUE(alone["summary"]["cpu_wait_share"].is_number()) << alone["summary"];
  const double alone_share = alone["summary"]["cpu_wait_share"].get<double>();
  const double busy_share = beside["summary"]["cpu_wait_share"].get<double>();
  // Three processes on one CPU: the run's threads get a third of it.
  EXPECT_GT(busy_share, 0.5);
  EXPECT_LT(alone_share, busy_share / 2);
  EXPECT_EQ(beside["ranks"][0]["cpu_wait_share"].get<double>(), busy_share);
  bool warned = false;
  for (const auto& w : beside["warnings"])
    warned = warned || w.get<std::string>().rfind("this run's threads waited for a CPU ", 0) == 0;
  EXPECT_TRUE(warned) << beside["warnings"];
  EXPECT_NE(busy.out.find("warning: this run's threads waited for a CPU "), std::string::npos) << busy.out;
  for (const auto& w : alone["warnings"])
    EXPECT_EQ(w.get<std::string>().find("waited for a CPU"), std::string::npos) << w;
}

// The same beside a burn-in: its rank's row notes the wait and holds the
// share, so a straggler slowed by a neighbour is not taken for a bad part.
TEST(CpuWait, ABurninRankBesideBusyProcessesSaysItsHostWasContended) {
  SKIP_WITHOUT_SCHEDSTAT();
  testing::TempDir dir("test_cpu_wait_burnin");
  const std::string cpu = std::to_string(first_allowed_cpu());
  const std::string spin = "taskset -c " + cpu + " timeout 120 sh -c 'while :; do :; done' >/dev/null 2>&1 & ";
  const auto r = testing::run_command(
      "{ " + spin + "p1=$!; " + spin + "p2=$!; TRAINBENCH_TEST_HEALTH_GBS=5 taskset -c " + cpu + " " +
      TRAINBENCH_BINARY +
      " burnin tiny --duration 3s --set train.warmup_steps=2 --set report.progress_every=0 --set burnin.golden_every=5"
      " --set burnin.degrade_pct=99 --set checkpoint.every_steps=0 --out " + dir.file("b.json") +
      "; code=$?; kill $p1 $p2; exit $code; }");
  const nlohmann::json result = nlohmann::json::parse(testing::read_whole_file(dir.file("b.json")));
  const nlohmann::json& row = result.at("burnin").at("gpus").at(0);
  ASSERT_TRUE(row["figures"]["cpu_wait_share"].is_number()) << row.dump() << r.out << r.err;
  EXPECT_GT(row["figures"]["cpu_wait_share"].get<double>(), 0.5) << row.dump();
  bool noted = false;
  for (const auto& note : row["notes"]) noted = noted || note.get<std::string>().rfind("host: its threads waited for a CPU ", 0) == 0;
  EXPECT_TRUE(noted) << row.dump() << r.out << r.err;
}

}  // namespace
}  // namespace trainbench
