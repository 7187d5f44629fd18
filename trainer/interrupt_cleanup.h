// SIGINT, SIGTERM and SIGHUP (Ctrl-C, Slurm's scancel, mpirun passing on a
// kill, a dropped ssh session) end
// the process without unwinding, so the temporary folders a command made
// (the default run's synthetic shards and checkpoint folder, bench's scratch
// folders) stayed in the temporary directory: hundreds of them, hundreds of
// MB, on a machine whose test runs get killed by timeouts. These two calls
// remove them first, then let the signal end the process as it would have.
#pragma once

#include <cstddef>     // size_t
#include <functional>  // make_removed_on_interrupt, run_on_interrupt
#include <string>

namespace trainbench {

// Handles SIGINT, SIGTERM and SIGHUP (call it first in main): a thread of its own
// removes every folder make_removed_on_interrupt listed, then ends the process by
// the same signal (the parent sees it, as before).
void install_interrupt_cleanup();

// Returns at once unless an interrupt is being handled; then never (the
// cleanup thread ends the process by the signal). main calls it before it
// returns: removing the folders can make the run fail on its own, and that
// failure's exit code must not win over the signal.
void wait_if_interrupted();
// main's last call, with its exit code ready: from here a signal ends the
// process by itself, with no cleanup (the folders went with their owners);
// when an interrupt is already being handled, as wait_if_interrupted.
void end_interrupt_cleanup();

// Runs `make`, which creates a folder and returns its path ("" when it made
// none), and lists that folder to be removed (with what is in it) if the
// process is interrupted, in one hold of the cleanup's lock: made first and
// listed after, a signal in between left the folder behind. After an
// interrupt's cleanup it waits for the process's end instead. Returns what
// `make` returned. Folders removed since are skipped; nothing else is kept
// track of.
std::string make_removed_on_interrupt(const std::function<std::string()>& make);
// How many folders a signal's cleanup would look at now (for tests).
size_t folders_listed_for_interrupt();

// For a communicator's abort (set_before_abort), which ends the process
// without unwinding: removes the folders and runs the actions as a signal
// would, and from then on holds every thread that fails on their removal in
// wait_if_interrupted until the abort ends the process (its error line would
// follow the abort's). Skipped when a signal's cleanup has them, or main has
// returned.
void remove_temporary_files_before_abort();

// `report` runs first on a signal, before the folders go and outside their
// bound, with the signal's number, on the cleanup thread: it must bound its
// own time and not throw (rank 0's partial result). Set once, in main,
// before install_interrupt_cleanup.
void set_interrupt_report(std::function<void(int signal_number)> report);

// `action` runs on interrupt, after the folders are removed, on the cleanup
// thread while the others go on: it must be safe against them (it takes
// their locks) and must not throw.
void run_on_interrupt(std::function<void()> action);

}  // namespace trainbench
