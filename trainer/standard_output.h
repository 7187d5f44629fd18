// The console report's own failures: a reader that went away, a full disk.
#pragma once

namespace trainbench {

// A reader that closes the pipe early (`trainbench run | head -1`) no longer
// kills the process by SIGPIPE, which lost the result and left the
// temporary folders: the writes to it fail with EPIPE and are dropped, and
// the run goes on to its result. Set before any output; a handler, not
// SIG_IGN, so that a command this process starts keeps the default.
void keep_running_when_the_output_reader_goes();

// `code` as the process's exit code once its standard output is flushed:
// output that could not be written (a full disk or quota under `> file`,
// `plan --json > plan.json` left empty) is said on stderr and turns success
// into exit 3; a reader that went away is not a failure.
int exit_code_after_standard_output(int code);

}  // namespace trainbench
