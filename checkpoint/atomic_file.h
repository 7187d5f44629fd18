// STORAGE WRITE. Crash-safe replacement of a file: write a temporary file next
// to it, fsync it, rename it over the target, fsync the directory. A crash at
// any moment leaves either the old complete file or the new complete file.
// The checkpoint manifest and `latest` pointer use this; so do the result JSONs.
#pragma once

#include <stdexcept>  // AtomicWriteError
#include <string>

namespace trainbench {

class AtomicWriteError : public std::runtime_error {
 public:
  explicit AtomicWriteError(const std::string& what, bool replaced = false)
      : std::runtime_error(what), replaced(replaced) {}
  // The rename had happened: the target holds the new contents, only the
  // directory entry could not be made durable (its folder would not open or
  // fsync). A caller must not treat the old contents as still in place.
  bool replaced;
};

// The directory whose entry a write to `path` creates or replaces: "." for a
// bare file name, "/" for a file in the root.
std::string parent_directory(const std::string& path);

// The file a write to `path` replaces: a symbolic link's final target (a
// chain followed; a relative target is relative to its link's folder), else
// `path` itself. A result path that is a link (latest.json -> run-7.json) is
// written through, as a shell's `>` would, instead of the rename replacing
// the link with a file and leaving its target as it was. A dangling link
// names the file to create. Throws AtomicWriteError on a link that cannot
// be read or a chain of more than 40 links (a loop).
std::string replaced_file(const std::string& path);

// PATH.tmp.XXXXXX: the temporary file write_file_atomically writes before
// renaming it over `path` (already resolved by replaced_file) is this, its
// XXXXXX six random characters, made O_EXCL: a name of its own. It was
// PATH.tmp.PID, opened with O_TRUNC: two writers of one PID (two
// containers' PID 1 on a shared folder, two hosts, two threads) wrote into
// one file, and a short result renamed over a long one's tail left a broken
// JSON. A caller that checks a path up front (the CLI's --out) probes with
// this template (mkstemp's), as long as the name written.
std::string atomic_write_temporary_template(const std::string& path);

// Replaces replaced_file(path). Throws AtomicWriteError naming the path and
// the failing call (errno text). On a failure up to the rename the target is
// untouched and the temporary file is removed; after it, the error says
// `replaced` (the new contents are in place, not yet durable).
void write_file_atomically(const std::string& path, const std::string& contents);

// For a signal's cleanup, first (before the partial result is written): the
// writes under way are not renamed into place; each writer waits at its
// rename for the process to end by the signal.
void cancel_unfinished_atomic_writes();

// For a signal's cleanup (trainer/interrupt_cleanup.h's run_on_interrupt):
// removes the temporaries of the writes under way, and from then on holds
// every writer at its next listing or unlisting of one (after its creation,
// after its rename), the process being about to end by the signal.
void remove_unfinished_atomic_writes();

}  // namespace trainbench
