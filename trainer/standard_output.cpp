#include "trainer/standard_output.h"

#include <signal.h>  // sigaction

#include <cerrno>
#include <cstdio>
#include <cstring>  // std::strerror

#include "trainer/cli.h"  // kExitOk, kExitEnvironmentError

namespace trainbench {
namespace {

volatile sig_atomic_t reader_went = 0;

void note_that_the_reader_went(int) { reader_went = 1; }

}  // namespace

void keep_running_when_the_output_reader_goes() {
  struct sigaction action {};
  action.sa_handler = note_that_the_reader_went;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGPIPE, &action, nullptr);
}

int exit_code_after_standard_output(int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int flush_error = errno;
  if ((flushed && !std::ferror(stdout)) || reader_went || flush_error == EPIPE) return code;
  // The error flag stays set from the write that failed; errno is that
  // write's only when the last flush failed too.
  if (code == kExitOk) {
    std::fprintf(stderr, "trainbench: cannot write the standard output%s%s\n", flush_error != 0 ? ": " : "",
                 flush_error != 0 ? std::strerror(flush_error) : "");
    return kExitEnvironmentError;
  }
  return code;
}

}  // namespace trainbench
