// NETWORK. What in the environment keeps NCCL from running as trainbench
// drives it. Built with or without the NCCL backend: `comm.backend=nccl` is
// checked before the build is asked whether it has one.
#include <cstdlib>  // std::getenv, std::strtoll
#include <fstream>  // NCCL's configuration files
#include <optional>
#include <string>

#include "comm/communicator.h"

namespace trainbench {

namespace {

// NCCL_COMM_BLOCKING as NCCL will read it: the environment first, else the
// files NCCL loads at its first call into the environment without
// overriding it ($NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf, one
// NAME=VALUE a line, '#' comments). nullopt where none sets it.
std::optional<std::string> comm_blocking_setting(std::string* from) {
  constexpr const char* kName = "NCCL_COMM_BLOCKING";
  if (const char* value = std::getenv(kName)) {
    *from = "the environment";
    return std::string(value);
  }
  std::string user_file;
  if (const char* conf = std::getenv("NCCL_CONF_FILE")) user_file = conf;
  else if (const char* home = std::getenv("HOME")) user_file = std::string(home) + "/.nccl.conf";
  for (const std::string& path : {user_file, std::string("/etc/nccl.conf")}) {
    if (path.empty()) continue;
    std::ifstream file(path);
    std::string line;
    while (std::getline(file, line)) {
      const size_t start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line[start] == '#') continue;
      if (line.compare(start, std::string(kName).size() + 1, std::string(kName) + "=") != 0) continue;
      *from = path;
      return line.substr(start + std::string(kName).size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

std::string nccl_environment_problem() {
  // ncclCommInitRankConfig takes NCCL_COMM_BLOCKING over the config's
  // blocking = 0: every NCCL call then waits inside NCCL, where no deadline
  // of ours reaches it, and a dead peer hangs the job. NCCL parses it as an
  // integer (strtoll, base 0): "01" and " 1" are 1 as much as "1".
  std::string from;
  const std::optional<std::string> value = comm_blocking_setting(&from);
  if (!value || std::strtoll(value->c_str(), nullptr, 0) == 0) return "";
  return "NCCL_COMM_BLOCKING=" + *value + " (" + from + ") makes every NCCL call block inside NCCL, where "
         "comm.timeout_s cannot end a collective a dead or stalled rank never finishes: unset it (trainbench "
         "waits on NCCL's non-blocking calls itself, each within comm.timeout_s)";
}

}  // namespace trainbench
