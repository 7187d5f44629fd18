// Runs a command line through /bin/sh and captures its exit code, stdout and
// stderr: how tests drive the real `trainbench` binary.
#pragma once

#include <sys/wait.h>  // WEXITSTATUS

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>  // getpid

namespace trainbench::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline CommandResult run_command(const std::string& command) {
  static int counter = 0;
  const std::string base = "/tmp/trainbench_test_" + std::to_string(getpid()) + "_" +
                           std::to_string(counter++);
  const std::string full = command + " >" + base + ".out 2>" + base + ".err";
  const int status = std::system(full.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_whole_file(base + ".out");
  result.err = read_whole_file(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return result;
}

}  // namespace trainbench::testing
