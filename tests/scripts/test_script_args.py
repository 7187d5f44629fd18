#!/usr/bin/env python3
"""Tests of the shell scripts under scripts/: what they do with bad input, with
paths relative to the caller's folder, with a rerun into an earlier run's
folder and with Ctrl-C.

Bad input is one line on stderr and exit 2 before any slow work (a build, a
dd, a namespace); --help is exit 0. Launchers and tools are stand-ins that
record how they were called (mpirun, sbatch, cmake, dd, ip, tc, and a
trainbench that writes the figures each bench script reads), so nothing here
needs MPI, root or a fabric. The scale.sh and compare_finetune.sh runs that
fail on purpose are real one-process runs of `tiny` of the built binary
($TRAINBENCH_BINARY, else build/trainbench) through an mpirun stand-in that
runs the command as one process; they skip, saying so, where it is not built.

    python3 tests/scripts/test_script_args.py                  # all
    python3 tests/scripts/test_script_args.py FuzzArgumentTests

Run as a script, it exits 77 (CTest: skipped) when every test it ran skipped.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
SCALE = SCRIPTS / "scale.sh"
COMPARE = SCRIPTS / "compare_finetune.sh"
BINARY = Path(os.environ.get("TRAINBENCH_BINARY") or REPO / "build" / "trainbench").resolve()


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs a command in a process group of its own; past `timeout` the whole
    group is killed (a script that builds or trains instead of refusing its
    input leaves nothing running) and the test fails."""
    command = [str(a) for a in args]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"{shlex.join(command)}: still running after {timeout} s\n{out}\n{err}") from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def write_tool(folder: Path, name: str, body: str, shell: str = "/bin/sh") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{shell}\n{body}")
    path.chmod(0o755)
    return path


def digests(folder: Path, names: list[str]) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in names}


def require_binary() -> None:
    if not os.access(BINARY, os.X_OK):
        raise unittest.SkipTest(f"{BINARY} is not built")


# A trainbench stand-in: records its arguments and folder, makes the shards
# `shards synth` is asked for, and writes at --out every figure the bench
# scripts read from a result.
FAKE_TRAINBENCH = r'''
import json, os, sys
args = sys.argv[1:]
if os.environ.get("FAKE_LOG"):
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({"argv": args, "cwd": os.getcwd()}) + "\n")
def value(flag):
    return args[args.index(flag) + 1] if flag in args else None
if args[:2] == ["shards", "synth"]:
    os.makedirs(value("--out"), exist_ok=True)
    for i in range(int(value("--count"))):
        with open(os.path.join(value("--out"), f"train-{i:06d}.tar"), "wb") as f:
            f.write(b"\0" * 1024)
    sys.exit(0)
result = {
    "summary": {"wall_tokens_per_s": 1000.0, "tokens_per_s": 1000.0, "loss_last": 5.0,
                "storage_write": {"drain_s": 0.0}},
    "checkpoints": [{"status": "committed", "stall_s": 0.01, "persist_s": 0.1, "snapshot_s": 0.01,
                     "bytes": 1000}],
    "steps": [{"ckpt_stall_s": 0.0, "step_s": 0.1}],
    "checkpoint_persist": {"gbs": 1.0, "direct_io": True}, "plain_write": {"gbs": 1.0},
    "plain_write_from_state": {"gbs": 1.0}, "bytes": 1,
    "shard_bytes": 8192, "shards": 8, "small_files": None,
    "by_threads": [{"threads": 1, "plain_read": {"gbs": 1.0}, "loader_fraction_of_plain_read": 0.9,
                    "loader": {"gbs": 0.9, "tokens_per_s": 1e6}}],
}
if value("--out"):
    with open(value("--out"), "w") as f:
        json.dump(result, f)
print("  tokens/s 1000")
'''


class Sandbox(unittest.TestCase):
    """A temporary folder per test, a fake build folder in it, and cleanup of
    what a script that resolves a relative path against the source tree
    would leave there."""

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="test_script_args_"))
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.log = self.dir / "calls.jsonl"
        self.build = self.dir / "fakebuild"
        write_tool(self.build, "trainbench", FAKE_TRAINBENCH, shell=sys.executable)
        self.tools = self.dir / "bin"
        self.tools.mkdir()
        self.env = {**os.environ, "FAKE_LOG": str(self.log), "BUILD_DIR": str(self.build),
                    "PATH": f"{self.tools}:{os.environ['PATH']}"}
        for name in ("CKPT_DIR", "TRAINBENCH_BINARY", "TRAINBENCH_BUILD_DIR", "OUT", "CONFIG", "TRAINBENCH",
                     "TRAINBENCH_FUZZ_BUILD_DIR", "TRAINBENCH_SANITIZE_BUILD_DIR", "TRAINBENCH_COVERAGE_BUILD_DIR",
                     "TRAINBENCH_BUILD_JOBS", "TRAINBENCH_TEST_JOBS", "SLURM_JOB_ID", "MPIRUN"):
            self.env.pop(name, None)

    def in_repo(self, name: str) -> Path:
        """REPO/name, removed after the test: where a relative path went
        before the scripts took it from the caller's folder."""
        path = REPO / name
        self.addCleanup(shutil.rmtree, path, ignore_errors=True)
        return path

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def assert_refused(self, done: subprocess.CompletedProcess[str], *words: str, code: int = 2) -> None:
        """Exit `code` (2: bad input) with one line on stderr that names what is wrong."""
        self.assertEqual(done.returncode, code, done.stderr)
        self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
        self.assertNotIn("Traceback", done.stderr)
        for word in words:
            self.assertIn(word, done.stderr)


class FuzzArgumentTests(Sandbox):
    """scripts/fuzz.sh passed SECONDS as it was to -max_total_time: 0, -5,
    abc and --help fuzzed without end, 2m for 2 s."""

    def fake_build(self, build: Path) -> None:
        # cmake does nothing; the fuzz target records its arguments.
        write_tool(self.tools, "cmake", 'echo "cmake $*" >> "$FAKE_LOG"; exit 0\n')
        for target in ("shard_tokens", "loader_position", "config"):
            write_tool(build / "tests" / "fuzz", f"fuzz_{target}",
                       f'printf "%s\\n" "$@" > "$FUZZ_ARGS"; echo {target} >> "$FUZZ_ARGS.ran"; '
                       'echo "Done 3 runs in 1 second(s)" >&2\n')

    def test_bad_durations_exit_2_before_building(self) -> None:
        build = self.dir / "never-built"
        write_tool(self.tools, "cmake", 'echo cmake ran >> "$FAKE_LOG"; exit 1\n')
        for args in (["0"], ["0m"], ["-5"], ["abc"], ["2x"], ["1.5"], [""], ["--bogus"], ["3000000000"],
                     ["99999999999"], ["1", "2"], ["1", "--target"], ["1", "--target", "tar"],
                     ["--target", "config", "5"], ["--target", ""]):
            with self.subTest(args=args):
                done = run("bash", SCRIPTS / "fuzz.sh", *args, env={**self.env, "TRAINBENCH_FUZZ_BUILD_DIR": str(build)},
                           timeout=20)
                self.assert_refused(done, "fuzz.sh: ")
                self.assertFalse(build.exists())
                self.assertFalse(self.log.exists(), "cmake ran")

    def test_help_prints_the_usage(self) -> None:
        build = self.dir / "never-built"
        for flag in ("-h", "--help"):
            with self.subTest(flag=flag):
                done = run("bash", SCRIPTS / "fuzz.sh", flag,
                           env={**self.env, "TRAINBENCH_FUZZ_BUILD_DIR": str(build)}, timeout=20)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn("scripts/fuzz.sh [SECONDS]", done.stdout)
                self.assertFalse(build.exists())

    def test_minutes_and_hours_are_given_to_libfuzzer_in_seconds(self) -> None:
        if subprocess.run([sys.executable, "-c", "import numpy"], capture_output=True).returncode != 0:
            self.skipTest("numpy is not installed: fuzz.sh seeds its corpus with it")
        build = self.dir / "fuzzbuild"
        self.fake_build(build)
        args_file = self.dir / "fuzz-args"
        env = {**self.env, "TRAINBENCH_FUZZ_BUILD_DIR": str(build), "FUZZ_ARGS": str(args_file)}
        for given, seconds in (("2m", 120), ("90s", 90), ("1h", 3600), ("045", 45), (None, 60)):
            with self.subTest(given=given):
                done = run("bash", SCRIPTS / "fuzz.sh", *([given] if given else []), env=env, timeout=60)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn(f"-max_total_time={seconds}", args_file.read_text().splitlines())
                self.assertIn(f"crashes found: 0 in {seconds}s", done.stdout)
        # Every target in turn, or the one --target names, each for SECONDS.
        ran = Path(str(args_file) + ".ran")
        self.assertEqual(ran.read_text().split()[-3:], ["shard_tokens", "loader_position", "config"])
        ran.unlink()
        done = run("bash", SCRIPTS / "fuzz.sh", "7", "--target", "loader_position", env=env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(ran.read_text().split(), ["loader_position"])
        self.assertIn("fuzz_loader_position: crashes found: 0 in 7s", done.stdout)
        self.assertIn("-max_total_time=7", args_file.read_text().splitlines())
        # The corpus stays in the build folder for the next run.
        self.assertTrue((build / "corpus" / "loader_position").is_dir())
        # A relative TRAINBENCH_FUZZ_BUILD_DIR is the caller's.
        name = f"test-fuzzbuild-{os.getpid()}"
        in_repo = self.in_repo(name)
        self.fake_build(self.dir / name)
        done = run("bash", SCRIPTS / "fuzz.sh", "1", cwd=self.dir, env={**env, "TRAINBENCH_FUZZ_BUILD_DIR": name},
                   timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("-max_total_time=1", args_file.read_text().splitlines())
        self.assertFalse(in_repo.exists())


class InstrumentedBuildChecks:
    """What scripts/sanitize.sh and scripts/coverage.sh share: their settings
    are checked before anything is built, and neither turns another build
    folder into an instrumented one. A subclass names its script, the folder
    variable, the cache entry its configure writes and the refusal's words;
    cmake and ctest are stand-ins (fake_tools)."""

    script = ""
    folder_variable = ""
    cache_entry = ""
    refusal = ""

    def fake_tools(self) -> None:
        # cmake writes the cache a configure would; ctest records its folder,
        # arguments and environment (the subclass's ctest_body).
        write_tool(self.tools, "cmake",
                   'echo "cmake $*" >> "$FAKE_LOG"\n'
                   f'if [ "$1" = -S ]; then echo "{self.cache_entry}" > "$4/CMakeCache.txt"; fi\n')
        write_tool(self.tools, "ctest", self.ctest_body())

    def ctest_body(self) -> str:
        raise NotImplementedError

    def test_bad_job_counts_exit_2_before_building(self) -> None:
        self.fake_tools()
        build = self.dir / "never-built"
        for name in ("TRAINBENCH_BUILD_JOBS", "TRAINBENCH_TEST_JOBS"):
            for value in ("0", "-1", "two", "1.5", "99999"):
                with self.subTest(name=name, value=value):
                    done = run("bash", SCRIPTS / self.script,
                               env={**self.env, self.folder_variable: str(build), name: value}, timeout=20)
                    self.assert_refused(done, f"{self.script}: ", name)
                    self.assertFalse(build.exists())
                    self.assertFalse(self.log.exists(), "cmake ran")

    def test_a_folder_holding_another_build_is_refused_untouched(self) -> None:
        self.fake_tools()
        build = self.dir / "build"
        build.mkdir()
        cache = "CMAKE_BUILD_TYPE:STRING=Release\nTRAINBENCH_SANITIZE:STRING=\nTRAINBENCH_COVERAGE:BOOL=OFF\n"
        (build / "CMakeCache.txt").write_text(cache)
        done = run("bash", SCRIPTS / self.script, env={**self.env, self.folder_variable: str(build)}, timeout=20)
        self.assert_refused(done, f"{self.script}: ", str(build), self.refusal, self.folder_variable)
        self.assertEqual((build / "CMakeCache.txt").read_text(), cache)
        self.assertFalse(self.log.exists(), "cmake ran")


class SanitizeTests(InstrumentedBuildChecks, Sandbox):
    """scripts/sanitize.sh hands CTest the sanitizers' options, over two
    passes. The real build and suite take half an hour on CI's two cores
    (docs/perf.md)."""

    script = "sanitize.sh"
    folder_variable = "TRAINBENCH_SANITIZE_BUILD_DIR"
    cache_entry = "TRAINBENCH_SANITIZE:STRING=address"
    refusal = "without sanitizers"

    def ctest_body(self) -> str:
        # Exits $FAKE_EXIT_MPI for the pass over label mpi, $FAKE_EXIT_REST
        # for the other.
        return ('echo "ctest $PWD $* ASAN_OPTIONS=$ASAN_OPTIONS LSAN_OPTIONS=$LSAN_OPTIONS '
                'UBSAN_OPTIONS=$UBSAN_OPTIONS" >> "$FAKE_LOG"\n'
                'case " $* " in *" -L mpi "*) exit "${FAKE_EXIT_MPI:-0}" ;; *) exit "${FAKE_EXIT_REST:-0}" ;; esac\n')

    def test_the_suite_runs_in_the_sanitized_folder_with_the_options_and_its_exit(self) -> None:
        self.fake_tools()
        build = self.dir / "asan"
        # Both passes run whichever fails; the script fails if either did.
        for rest, mpi, expected in ((0, 0, 0), (8, 0, 8), (0, 8, 8)):
            with self.subTest(rest=rest, mpi=mpi):
                self.log.unlink(missing_ok=True)
                done = run("bash", SCRIPTS / "sanitize.sh", "-R", "ShardLoader",
                           env={**self.env, "TRAINBENCH_SANITIZE_BUILD_DIR": str(build), "TRAINBENCH_TEST_JOBS": "3",
                                "FAKE_EXIT_REST": str(rest), "FAKE_EXIT_MPI": str(mpi)}, timeout=20)
                self.assertEqual(done.returncode, expected, done.stderr)
                calls = self.log.read_text().splitlines()
                self.assertEqual(len(calls), 4, calls)
                configure, build_call, without_mpi, with_mpi = calls
                for flag in ("-DTRAINBENCH_SANITIZE=address", "-DTRAINBENCH_CUDA=OFF", f"-B {build}"):
                    self.assertIn(flag, configure)
                self.assertTrue(build_call.startswith(f"cmake --build {build} -j "), build_call)
                self.assertTrue(without_mpi.startswith(f"ctest {build} "), without_mpi)
                self.assertIn("--parallel 3 -LE mpi -R ShardLoader", without_mpi)
                self.assertIn("--parallel 3 -L mpi -R ShardLoader", with_mpi)
                for ctest in (without_mpi, with_mpi):
                    self.assertIn("detect_leaks=1", ctest)
                    self.assertIn("verify_asan_link_order=0", ctest)
                    self.assertIn(f"suppressions={SCRIPTS / 'sanitizers' / 'lsan.supp'}", ctest)
                    self.assertIn("halt_on_error=1", ctest.split("UBSAN_OPTIONS=")[1])
                # The slow unwinder OpenMPI's suppressions need, for the MPI tests alone.
                self.assertIn("fast_unwind_on_malloc=0", with_mpi)
                self.assertNotIn("fast_unwind_on_malloc", without_mpi)

    def test_every_kept_allocation_suppressed_is_still_in_the_sources(self) -> None:
        # A suppression names where trainbench leaves memory to the process
        # on purpose; one whose function was renamed would let the report
        # through, and one for a function gone would hide nothing, silently.
        sources = {path: path.read_text(errors="replace")
                   for folder in ("trainer", "dataloader", "checkpoint", "comm", "kernels", "tests")
                   for path in (REPO / folder).rglob("*.cpp")}
        patterns = [line[len("leak:"):] for line in (SCRIPTS / "sanitizers" / "lsan.supp").read_text().splitlines()
                    if line.startswith("leak:")]
        own = [p for p in patterns if not p.startswith(("lib", "mca_"))]
        self.assertTrue(own, patterns)
        for pattern in own:
            with self.subTest(pattern=pattern):
                # Class::function is defined as "Class::function(" in a .cpp.
                wanted = "::".join(pattern.split("::")[-2:]) + "(" if "::" in pattern else pattern
                found = [p for p, text in sources.items() if wanted in text]
                self.assertTrue(found, f"{pattern}: no source defines it (renamed? then rename it in lsan.supp)")


class CoverageTests(InstrumentedBuildChecks, Sandbox):
    """scripts/coverage.sh counts from zero at each run, runs the suite once
    with the caller's CTest arguments, and writes gcovr's report even when a
    test failed. cmake, ctest and gcovr are stand-ins; the real build and
    suite take about half an hour on CI's two cores (docs/perf.md)."""

    script = "coverage.sh"
    folder_variable = "TRAINBENCH_COVERAGE_BUILD_DIR"
    cache_entry = "TRAINBENCH_COVERAGE:BOOL=ON"
    refusal = "without coverage counters"

    def ctest_body(self) -> str:
        # Records whether an earlier run's counts were still there, then
        # leaves this run's, as the test binaries would; exits $FAKE_EXIT_CTEST.
        return ('stale=$(find . -name "*.gcda" | wc -l)\n'
                'echo "ctest $PWD $* stale=$stale" >> "$FAKE_LOG"\n'
                'mkdir -p trainer && : > trainer/cli.cpp.gcda\n'
                'exit "${FAKE_EXIT_CTEST:-0}"\n')

    def fake_gcovr(self) -> None:
        # Writes the summary JSON where --json-summary says, with two files.
        write_tool(self.tools, "gcovr", 'import json, os, sys\n'
                   'args = sys.argv[1:]\n'
                   'open(os.environ["FAKE_LOG"], "a").write("gcovr " + " ".join(args) + "\\n")\n'
                   'summary = {"line_covered": 30, "line_total": 40, "branch_covered": 5, "branch_total": 10,\n'
                   '           "files": [{"filename": "trainer/cli.cpp", "line_covered": 20, "line_total": 22},\n'
                   '                     {"filename": "comm/mpi_communicator.cpp", "line_covered": 10,\n'
                   '                      "line_total": 18}]}\n'
                   'json.dump(summary, open(args[args.index("--json-summary") + 1], "w"))\n'
                   'sys.exit(int(os.environ.get("FAKE_EXIT_GCOVR", "0")))\n',
                   shell=sys.executable)

    def test_counts_start_from_zero_and_the_report_follows_the_suite(self) -> None:
        self.fake_tools()
        self.fake_gcovr()
        build = self.dir / "coverage"
        # A failed test still gets its report; the exit is CTest's, or
        # gcovr's where only gcovr failed.
        for ctest_exit, gcovr_exit, expected in ((0, 0, 0), (8, 0, 8), (0, 3, 3), (8, 3, 8)):
            with self.subTest(ctest_exit=ctest_exit, gcovr_exit=gcovr_exit):
                self.log.unlink(missing_ok=True)
                done = run("bash", SCRIPTS / "coverage.sh", "-R", "ShardLoader",
                           env={**self.env, self.folder_variable: str(build), "TRAINBENCH_TEST_JOBS": "3",
                                "FAKE_EXIT_CTEST": str(ctest_exit), "FAKE_EXIT_GCOVR": str(gcovr_exit)},
                           timeout=30)
                self.assertEqual(done.returncode, expected, done.stderr)
                calls = self.log.read_text().splitlines()
                self.assertEqual(len(calls), 4, calls)
                configure, build_call, ctest, gcovr = calls
                for flag in ("-DTRAINBENCH_COVERAGE=ON", "-DTRAINBENCH_CUDA=OFF", f"-B {build}"):
                    self.assertIn(flag, configure)
                self.assertTrue(build_call.startswith(f"cmake --build {build} -j "), build_call)
                self.assertTrue(ctest.startswith(f"ctest {build} "), ctest)
                self.assertIn("--parallel 3 -R ShardLoader", ctest)
                # The previous subtest's counts were removed before this run.
                self.assertTrue(ctest.endswith(" stale=0"), ctest)
                self.assertIn(f"--object-directory {build}", gcovr)
                self.assertIn(f"--html-details {build}/coverage/index.html", gcovr)
                self.assertIn("kernels|comm|dataloader|checkpoint|trainer", gcovr)
                self.assertIn(f"--exclude {REPO}/kernels/cuda/", gcovr)
                if gcovr_exit == 0:
                    self.assertIn("lines run:    30 of 40 (75.0 %)", done.stdout)
                    # The file with most lines not run comes first.
                    listed = done.stdout.split("files with most lines not run:")[1].split()
                    self.assertEqual(listed[:5], ["8", "of", "18", "comm/mpi_communicator.cpp", "2"], done.stdout)
                else:
                    self.assertIn("gcovr failed (exit 3)", done.stderr)


class BenchInstrumentationTests(Sandbox):
    def test_bad_repeats_and_steps_exit_2_before_any_run(self) -> None:
        # --repeats 0 ran nothing and ended in a Python traceback (exit 1).
        for args, words in ((["--repeats", "0"], "--repeats '0'"), (["--repeats", "abc"], "--repeats 'abc'"),
                            (["--repeats", "-1"], "--repeats"), (["--steps", "0"], "--steps '0'"),
                            (["--steps", "x"], "--steps 'x'"), (["--steps", ""], "--steps")):
            with self.subTest(args=args):
                done = run("bash", SCRIPTS / "bench_instrumentation.sh", *args, env=self.env, timeout=20)
                self.assert_refused(done, words)
                self.assertEqual(self.calls(), [])

    def test_paths_are_the_callers(self) -> None:
        # From another folder, --config "my cfg.yaml" was looked for in the
        # source tree ("config not found"), BUILD_DIR too.
        config = self.dir / "my cfg.yaml"
        config.write_text("model: {}\n")
        done = run("bash", SCRIPTS / "bench_instrumentation.sh", "--config", "my cfg.yaml", "--steps", "20",
                   "--repeats", "1", cwd=self.dir, env={**self.env, "BUILD_DIR": "fakebuild"}, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("instrumentation overhead", done.stdout)
        runs = self.calls()
        self.assertEqual(len(runs), 2, runs)
        for call in runs:
            self.assertEqual(call["argv"][:2], ["run", str(config)])

    def test_a_set_of_report_instrument_is_refused(self) -> None:
        # Given after the script's own, it made both sides timed (or both
        # untimed): "timed", "untimed" and an overhead were printed, exit 0.
        for value in ("false", "true"):
            with self.subTest(value=value):
                done = run("bash", SCRIPTS / "bench_instrumentation.sh", "--steps", "20", "--repeats", "1",
                           "--set", f"report.instrument={value}", env=self.env, timeout=20)
                self.assert_refused(done, f"--set report.instrument={value}", "bench_instrumentation: ")
                self.assertEqual(self.calls(), [])

    def test_the_warm_up_said_is_the_runs(self) -> None:
        # A --set train.warmup_steps=2 ran 2 warm-up steps; the table said 10.
        require_binary()
        write_tool(self.dir / "build", "trainbench", f'exec {shlex.quote(str(BINARY))} "$@"\n')
        done = run("bash", SCRIPTS / "bench_instrumentation.sh", "--config", "tiny", "--steps", "4", "--repeats", "1",
                   "--set", "train.warmup_steps=2", "--set", "train.threads=1",
                   env={**self.env, "BUILD_DIR": str(self.dir / "build")}, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("tiny, 4 steps (2 warm-up), 1 alternating repeats", done.stdout)


class BenchHelpTests(Sandbox):
    """--help printed the usage on stderr, exit 2, as bad usage does: the
    bench scripts' usage() exits 2."""

    SCRIPTS = ("bench_ckpt_stall.sh", "bench_ckpt_write.sh", "bench_cpu_vs_libtorch.sh", "bench_instrumentation.sh",
               "bench_io.sh")

    def test_help_prints_the_usage_and_bad_usage_stays_exit_2(self) -> None:
        write_tool(self.tools, "cmake", 'echo "cmake $*" >> "$FAKE_LOG"; exit 1\n')
        for script in self.SCRIPTS:
            for flag in ("-h", "--help"):
                with self.subTest(script=script, flag=flag):
                    done = run("bash", SCRIPTS / script, flag, env=self.env, timeout=20)
                    self.assertEqual(done.returncode, 0, done.stderr)
                    self.assertIn(f"scripts/{script} [", done.stdout)
                    self.assertEqual(done.stderr, "")
                    self.assertFalse(self.log.exists(), "something ran")
            with self.subTest(script=script, flag="--bogus"):
                done = run("bash", SCRIPTS / script, "--bogus", env=self.env, timeout=20)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn("--bogus", done.stderr)
                self.assertEqual(done.stdout, "")


class WebdatasetReadBenchTests(Sandbox):
    """scripts/webdataset_read_bench.py met a missing shard, a file that is
    no tar, a folder, a --field the samples lack and a --json in a folder that
    does not exist with a traceback (the last after the figures); --workers 0
    and -1 ran one process in silence."""

    def setUp(self) -> None:
        super().setUp()
        if subprocess.run([sys.executable, "-c", "import numpy, webdataset"], capture_output=True).returncode != 0:
            self.skipTest("numpy or webdataset is not installed (scripts/requirements.txt)")

    def shard(self, name: str, samples: int = 4) -> Path:
        """A webdataset shard of `samples` samples, each a .u16 member of 8 tokens."""
        path = self.dir / name
        with tarfile.open(path, "w") as tar:
            for i in range(samples):
                data = bytes(range(16))
                info = tarfile.TarInfo(f"{i:06d}.u16")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    def bench(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return run(sys.executable, SCRIPTS / "webdataset_read_bench.py", *args, env=self.env, timeout=60)

    def test_bad_input_is_one_line_exit_2_before_reading(self) -> None:
        good = self.shard("good.tar")
        (self.dir / "notatar.tar").write_text("not a tar\n" * 100)
        (self.dir / "folder").mkdir()
        missing_json = self.dir / "no-such-folder" / "out.json"
        # Any file there was replaced by the figures.
        notes = self.dir / "notes.json"
        notes.write_text("my notes\n")
        for args, words in (([self.dir / "nosuch.tar"], [f"{self.dir}/nosuch.tar"]),
                            ([good, self.dir / "notatar.tar"], [f"{self.dir}/notatar.tar", "not a tar file"]),
                            ([self.dir / "folder"], [f"{self.dir}/folder", "folder"]),
                            ([good, "--field", "u32"], ["--field u32", f"{good}", "u16"]),
                            ([good, "--workers", "0"], ["--workers", "'0'"]),
                            ([good, "--workers", "-1"], ["--workers", "'-1'"]),
                            ([good, "--json", missing_json], [f"--json {missing_json}"]),
                            ([good, "--json", notes], [f"--json {notes}: holds something other than"])):
            with self.subTest(args=[str(a) for a in args]):
                done = self.bench(*args)
                self.assert_refused(done, "webdataset_read_bench.py: ", *words)
                self.assertEqual(done.stdout, "", "figures before the refusal")
                self.assertFalse(missing_json.parent.exists())
                self.assertEqual(notes.read_text(), "my notes\n")

    def test_more_workers_than_shards(self) -> None:
        # The worker with no shard met wds.WebDataset([]): an IndexError.
        out = self.dir / "figures.json"
        done = self.bench(self.shard("a.tar"), self.shard("b.tar"), "--workers", "3", "--json", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        runs = json.loads(out.read_text())["runs"]
        self.assertEqual([(r["workers"], r["samples"], r["tokens"]) for r in runs], [(1, 8, 64), (3, 8, 64)])
        # Its own earlier figures are replaced.
        again = self.bench(self.dir / "a.tar", "--workers", "1", "--json", out)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual([r["workers"] for r in json.loads(out.read_text())["runs"]], [1])


class BenchStorageTests(Sandbox):
    """bench_io.sh, bench_ckpt_write.sh, bench_ckpt_stall.sh: options checked
    before anything is made, --dir taken from the caller's folder."""

    def fake_dd(self) -> None:
        write_tool(self.tools, "dd", 'echo "dd $*" >> "$DD_LOG"\n'
                   'echo "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 1.0 s, 1.1 GB/s" >&2\n')
        self.env["DD_LOG"] = str(self.dir / "dd.log")

    def test_bench_io_checks_kind_before_making_the_folder(self) -> None:
        target = self.dir / "io"
        for args, words in ((["--kind", "video"], "--kind video"), (["--kind", "text", "--kind", "x"], "--kind x"),
                            (["--dir", ""], "--dir")):
            with self.subTest(args=args):
                done = run("bash", SCRIPTS / "bench_io.sh", "--dir", target, *args, env=self.env, timeout=20)
                self.assert_refused(done, words)
                self.assertFalse(target.exists())
                self.assertEqual(self.calls(), [])

    def test_bench_io_dir_is_the_callers(self) -> None:
        name = f"test-io-{os.getpid()}"
        in_repo = self.in_repo(name)
        # webdataset may be missing here: what matters is where the shards and results went.
        run("bash", SCRIPTS / "bench_io.sh", "--dir", name, "--gib", "1", "--readers", "1", "--kind", "text",
            cwd=self.dir, env=self.env, timeout=60)
        self.assertTrue((self.dir / name / "results" / "bench-io-text.json").is_file())
        self.assertTrue((self.dir / name / "text" / "train-000007.tar").is_file())
        self.assertFalse(in_repo.exists())

    def test_bench_io_remakes_a_larger_sets_shards(self) -> None:
        # After --gib 2, --gib 1 read the 16 shards there and labelled them 1 GiB.
        calls = []
        for gib in ("2", "1"):
            run("bash", SCRIPTS / "bench_io.sh", "--dir", self.dir / "io", "--gib", gib, "--readers", "1",
                "--kind", "text", env=self.env, timeout=60)
            calls.append([json.loads(line)["argv"] for line in self.log.read_text().splitlines()])
        synths = [argv for argv in calls[-1] if argv[:2] == ["shards", "synth"]]
        self.assertEqual([argv[argv.index("--count") + 1] for argv in synths], ["16", "8"])
        self.assertEqual(len(list((self.dir / "io" / "text").glob("train-*.tar"))), 8)

    def test_bench_ckpt_write_checks_files_before_writing(self) -> None:
        # --files 0 was refused by `bench io --write` after dd had written N GiB.
        self.fake_dd()
        target = self.dir / "w"
        for args, words in ((["--files", "0"], "--files 0"), (["--files", "2000"], "--files 2000"),
                            (["--files", "x"], "--files x"), (["--gib", "0"], "--gib 0"),
                            (["--gib", "99999999999999"], "--gib"), (["--dir", ""], "--dir")):
            with self.subTest(args=args):
                done = run("bash", SCRIPTS / "bench_ckpt_write.sh", "--dir", target, *args, env=self.env, timeout=20)
                self.assert_refused(done, words)
                self.assertFalse(target.exists())
                self.assertFalse((self.dir / "dd.log").exists())
                self.assertEqual(self.calls(), [])

    def test_an_option_without_its_value_is_named(self) -> None:
        # Each printed its usage alone, leaving the reader to guess the option.
        cases = {"bench_ckpt_write.sh": ("--dir", "--gib", "--files", "--reps"),
                 "bench_ckpt_stall.sh": ("--dir", "--repeats"), "bench_io.sh": ("--dir", "--gib"),
                 "bench_cpu_vs_libtorch.sh": ("--reps", "--threads"),
                 "bench_instrumentation.sh": ("--config", "--steps"),
                 "scale.sh": ("--config", "--ranks"), "compare_finetune.sh": ("--config", "--set", "--binary")}
        for script, options in cases.items():
            for option in options:
                with self.subTest(script=script, option=option):
                    done = run("bash", SCRIPTS / script, option, env=self.env, timeout=20)
                    self.assert_refused(done, f"{option} needs a value")
                    self.assertTrue(done.stderr.startswith(script.removesuffix(".sh")), done.stderr)

    def test_bench_ckpt_write_a_failed_dd_is_exit_3_in_its_own_words(self) -> None:
        # A failed dd was read as a figure: Python's TypeError, exit 1.
        write_tool(self.tools, "dd", 'echo "dd: error writing \'x\': No space left on device" >&2\n'
                   'echo "3+0 records in" >&2\necho "2+0 records out" >&2\n'
                   'echo "134217728 bytes (134 MB, 128 MiB) copied, 0.1 s, 1.3 GB/s" >&2\nexit 1\n')
        done = run("bash", SCRIPTS / "bench_ckpt_write.sh", "--dir", self.dir / "w", "--gib", "1", "--reps", "1",
                   env=self.env, timeout=60)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertNotIn("Traceback", done.stderr)
        self.assertIn("bench_ckpt_write: dd to " + str(self.dir / "w") + "/dd-sequential-write.bin failed: "
                      "dd: error writing 'x': No space left on device", done.stderr)

    def test_bench_ckpt_write_dir_is_the_callers(self) -> None:
        # --dir relw wrote to <repo>/relw.
        self.fake_dd()
        name = f"test-relw-{os.getpid()}"
        in_repo = self.in_repo(name)
        done = run("bash", SCRIPTS / "bench_ckpt_write.sh", "--dir", name, "--gib", "1", "--reps", "1",
                   cwd=self.dir, env={**self.env, "BUILD_DIR": "fakebuild"}, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("checkpoint persist / dd", done.stdout)
        self.assertTrue((self.dir / name / "results" / "bench-io-write-1.json").is_file())
        self.assertIn(f"of={self.dir / name}/dd-sequential-write.bin", (self.dir / "dd.log").read_text())
        self.assertEqual([c["argv"][c["argv"].index("--dir") + 1] for c in self.calls()], [str(self.dir / name)])
        self.assertFalse(in_repo.exists())

    def test_bench_ckpt_stall_dir_is_the_callers(self) -> None:
        name = f"test-stall-{os.getpid()}"
        in_repo = self.in_repo(name)
        done = run("bash", SCRIPTS / "bench_ckpt_stall.sh", "--dir", name, "--repeats", "1", cwd=self.dir,
                   env=self.env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("async stall per checkpoint / sync", done.stdout)
        self.assertTrue((self.dir / name / "results" / "async-true-1.json").is_file())
        self.assertFalse(in_repo.exists())


    def test_bench_ckpt_stall_a_file_as_its_dir_is_one_line_exit_2(self) -> None:
        # mkdir's own line, exit 1.
        a_file = self.dir / "a-file"
        a_file.write_text("x\n")
        done = run("bash", SCRIPTS / "bench_ckpt_stall.sh", "--dir", a_file, "--repeats", "1", env=self.env,
                   timeout=20)
        self.assert_refused(done, f"--dir {a_file}: cannot make {a_file}/results there")
        self.assertEqual(a_file.read_text(), "x\n")


class BenchLibtorchTests(Sandbox):
    def test_config_and_build_dir_are_the_callers(self) -> None:
        write_tool(self.tools, "cmake", 'case "$*" in *"--target help"*) echo "... torch_train_bench" ;; esac\n')
        (self.build / "CMakeCache.txt").write_text("")
        write_tool(self.build / "tests" / "reference", "torch_train_bench",
                   'echo "torch $*" >> "$TORCH_LOG"; echo \'{"tokens_per_s": 900.0, "loss_last": 5.0}\'\n')
        config = self.dir / "my cfg.yaml"
        config.write_text("model: {}\n")
        env = {**self.env, "BUILD_DIR": "fakebuild", "TORCH_LOG": str(self.dir / "torch.log")}
        done = run("bash", SCRIPTS / "bench_cpu_vs_libtorch.sh", "--reps", "1", "--threads", "1", "my cfg.yaml",
                   cwd=self.dir, env=env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([c["argv"][:2] for c in self.calls()], [["run", str(config)]])
        self.assertIn(f"torch {config} --threads 1", (self.dir / "torch.log").read_text())
        # The table names the config as it was given.
        self.assertIn("my cfg.yaml  1", done.stdout)


class FabricArgumentTests(Sandbox):
    """validate_fabric_projection.sh took any argument (--help too) as a rate
    and failed in tc after a minute of setup. ip, tc and mpirun are stand-ins
    here that record a call, and the binary is missing: no namespace is made
    whatever the script does."""

    def setUp(self) -> None:
        super().setUp()
        for tool in ("ip", "tc", "mpirun"):
            write_tool(self.tools, tool, f'echo "{tool} $*" >> "$FAKE_LOG"; exit 1\n')
        self.out = self.dir / "never-made"
        self.env.update(TRAINBENCH=str(self.dir / "no-trainbench"), OUT=str(self.out))

    def test_bad_rates_exit_2_before_any_setup(self) -> None:
        for args, words in ((["--bogus"], "rate '--bogus'"), (["0"], "rate '0'"), (["-5"], "rate '-5'"),
                            (["abc"], "rate 'abc'"), (["200", "1e3"], "rate '1e3'"), (["200mbit"], "rate '200mbit'"),
                            ([""], "rate ''"), (["0.0"], "rate '0.0'"), (["2000000"], "rate '2000000'")):
            with self.subTest(args=args):
                done = run("bash", SCRIPTS / "validate_fabric_projection.sh", *args, env=self.env, timeout=20)
                self.assert_refused(done, words)
                self.assertFalse(self.out.exists())
                self.assertFalse(self.log.exists(), self.log.read_text() if self.log.exists() else "")

    def test_bad_layers_or_steps_exit_2(self) -> None:
        for name, value in (("LAYERS", "0"), ("STEPS", "x")):
            with self.subTest(name=name):
                done = run("bash", SCRIPTS / "validate_fabric_projection.sh", "200",
                           env={**self.env, name: value}, timeout=20)
                self.assert_refused(done, f"{name}='{value}'")
                self.assertFalse(self.out.exists())

    def test_a_bad_config_exits_2_before_any_setup(self) -> None:
        # CONFIG=nosuch was met by the first 2-rank run, once the namespaces
        # were up and the latency measured. ip, tc and mpirun record a call.
        require_binary()
        (self.dir / "folder").mkdir()
        for config, words in (("nosuch", ["CONFIG=nosuch", "config file not found"]),
                              (str(self.dir / "folder"), [f"CONFIG={self.dir}/folder", "directory"])):
            with self.subTest(config=config):
                done = run("bash", SCRIPTS / "validate_fabric_projection.sh", "200",
                           env={**self.env, "TRAINBENCH_BINARY": str(BINARY), "CONFIG": config}, timeout=30)
                self.assert_refused(done, "validate_fabric_projection: ", *words)
                self.assertFalse(self.out.exists())
                self.assertFalse(self.log.exists(), self.log.read_text() if self.log.exists() else "")

    def test_help_prints_the_usage(self) -> None:
        for flag in ("-h", "--help"):
            with self.subTest(flag=flag):
                done = run("bash", SCRIPTS / "validate_fabric_projection.sh", flag, env=self.env, timeout=20)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn("Usage: scripts/validate_fabric_projection.sh [RATE_MBIT ...]", done.stdout)
                self.assertIn("Mbit/s", done.stdout)
                self.assertFalse(self.out.exists())
                self.assertFalse(self.log.exists())

    def test_a_relative_binary_is_the_callers(self) -> None:
        # The binary is checked before anything needs root or ip: as anyone,
        # the script names the caller's path. (The check was made as root
        # with ip alone, on the belief that it stopped at root first.)
        done = run("bash", SCRIPTS / "validate_fabric_projection.sh", "200", cwd=self.dir,
                   env={**self.env, "TRAINBENCH": "no-trainbench"}, timeout=20)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertIn(f"{self.dir}/no-trainbench not built", done.stderr)
        self.assertFalse(self.out.exists())


class FabricStepTests(Sandbox):
    """A failed step of validate_fabric_projection.sh ended it through set -e
    without a word, its output in a log under a folder it had not named."""

    def test_a_failed_step_is_named_with_its_log(self) -> None:
        if os.getuid() != 0:
            self.skipTest("validate_fabric_projection.sh runs as root only (ip netns, tc)")
        # ip and tc succeed (netns exec runs the command here); mpirun fails.
        write_tool(self.tools, "ip", 'echo "ip $*" >> "$FAKE_LOG"\n'
                                     'if [ "$1 $2" = "netns exec" ]; then shift 3; exec "$@"; fi\n')
        write_tool(self.tools, "tc", "exit 0\n")
        write_tool(self.tools, "mpirun", 'echo "mpirun: could not reach the second node" >&2; exit 7\n')
        binary = write_tool(self.dir / "bin2", "trainbench", "exit 0\n")
        out = self.dir / "fabric out"
        done = run("bash", SCRIPTS / "validate_fabric_projection.sh", "200",
                   env={**self.env, "TRAINBENCH_BINARY": str(binary), "OUT": str(out)}, timeout=30)
        self.assertEqual(done.returncode, 7, done.stderr)
        self.assertIn(f"files in {out}", done.stdout)
        self.assertIn(f"the latency measurement failed (exit 7); the last lines of {out}/latency.log:", done.stderr)
        self.assertIn("  mpirun: could not reach the second node", done.stderr)
        # Named after the run's pid; removed at the end.
        made = [line for line in self.log.read_text().splitlines() if line.startswith("ip netns add")]
        self.assertEqual(len(made), 2, made)
        pid = made[0].rsplit("-", 1)[1]
        self.assertTrue(pid.isdigit(), made)
        self.assertEqual(made, [f"ip netns add tbfab-a-{pid}", f"ip netns add tbfab-b-{pid}"])
        self.assertIn(f"ip netns del tbfab-a-{pid}", self.log.read_text())


class GpuCheckArgumentTests(Sandbox):
    """scripts/gpu_check.sh runs once per GPU session: a setting it cannot use
    is refused before anything runs. GPU_CHECK_SKIP_TORCH=0 skipped PyTorch
    (any value counted as set); a deadline of 5m was a bash error mid-run."""

    def test_bad_settings_exit_2_before_anything_runs(self) -> None:
        out = self.dir / "out"
        for name, value in (("GPU_CHECK_DEADLINE_S", "5m"), ("GPU_CHECK_DEADLINE_S", "0"),
                            ("GPU_CHECK_RUN_TIMEOUT", "-1"), ("GPU_CHECK_SKIP_TORCH", "yes"),
                            ("GPU_CHECK_EXTRAS_ONLY", "true")):
            with self.subTest(name=name, value=value):
                done = run("bash", SCRIPTS / "gpu_check.sh", env={**self.env, "OUT": str(out), name: value},
                           timeout=20)
                self.assert_refused(done, f"{name}='{value}'")
                self.assertFalse(out.exists())

    def test_logs_too_large_to_come_back_are_cut_to_their_ends(self) -> None:
        # The device tool drops a file over 16 MiB without a word: a run whose
        # logs packed to more than that brought back no logs at all. A
        # deadline of 1 s ends the run at its first row, which packs them.
        logs, out = self.dir / "logs", self.dir / "out"
        logs.mkdir()
        (logs / "spew.log").write_bytes(os.urandom(20 << 20) + b"the last line\n")  # does not compress
        (logs / "small.log").write_text("kept whole\n")
        done = run("bash", SCRIPTS / "gpu_check.sh",
                   env={**self.env, "OUT": str(out), "GPU_CHECK_LOGS": str(logs), "GPU_CHECK_DEADLINE_S": "1",
                        "GPU_CHECK_BUILD_DIR": str(self.dir / "build")}, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)  # the build row did not pass
        packed = out / "logs.tgz"
        self.assertLess(packed.stat().st_size, 12 << 20)
        with tarfile.open(packed) as tar:
            spew = tar.extractfile("./spew.log").read()
            small = tar.extractfile("./small.log").read()
        self.assertLessEqual(len(spew), (1 << 20) + 100)
        self.assertTrue(spew.startswith(b"[gpu_check: cut to its last 1 MiB of 20971534 bytes]"), spew[:80])
        self.assertTrue(spew.endswith(b"the last line\n"))
        self.assertEqual(small, b"kept whole\n")
        self.assertEqual(os.path.getsize(logs / "spew.log"), (20 << 20) + 14)  # the log itself is left whole


class SetupTests(Sandbox):
    """scripts/setup.sh on a node of a real cluster, whose Slurm is the
    site's (sbatch on PATH, not Debian's package): Debian's one-node Slurm
    and munge, wanted for one test, are left out (their daemons beside the
    site's), said in a line; everything else is checked as ever."""

    def test_a_site_slurm_is_left_alone(self) -> None:
        repo = self.dir / "repo"
        (repo / "scripts").mkdir(parents=True)
        shutil.copy(SCRIPTS / "setup.sh", repo / "scripts")
        shutil.copy(SCRIPTS / "cudnn_frontend.sh", repo / "scripts")  # where nvcc is; present after a setup
        (repo / "scripts/requirements.txt").write_text("")  # nothing to pip-install
        write_tool(self.tools, "sbatch", "exit 0\n")
        # Every package installed but Debian's Slurm and munge; apt-get
        # records that it was asked.
        write_tool(self.tools, "dpkg-query", """case "$*" in
  *slurm-client*) [ -n "${DEBIAN_SLURM:-}" ] && printf 'install ok installed' || exit 1 ;;
  *slurmctld* | *slurmd* | *munge*) exit 1 ;;
  *) printf 'install ok installed' ;;
esac
""")
        write_tool(self.tools, "apt-get", f"echo \"$*\" >> {self.dir}/apt.log\n")
        env = {**self.env, "PATH": f"{self.tools}:/usr/bin:/bin"}
        done = run("bash", repo / "scripts/setup.sh", env=env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"setup: a site Slurm is here ({self.tools}/sbatch, not Debian's)", done.stdout)
        self.assertIn("setup: Debian packages present", done.stdout)
        self.assertFalse((self.dir / "apt.log").exists(), (self.dir / "apt.log").read_text()
                         if (self.dir / "apt.log").exists() else "")
        # Where the sbatch is Debian's own (CI's), the rest is installed.
        done = run("bash", repo / "scripts/setup.sh", env={**env, "DEBIAN_SLURM": "1"}, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("site Slurm", done.stdout)
        self.assertIn("slurmctld slurmd munge", (self.dir / "apt.log").read_text())


class DeviceDepsTests(Sandbox):
    """scripts/device_deps.sh install on the GPU machine. zlib1g-dev's libz.so
    links to Debian 12's runtime, which the device lacks; the script links the
    device's own libz.so.1 from `ldconfig -p`. Its awk left at the first match,
    and ldconfig, with ~75 kB still to write, died of SIGPIPE: under pipefail
    the install ended there (exit 141, no env.sh) and the GPU check with it."""

    def test_a_dangling_libz_link_is_pointed_at_the_systems(self) -> None:
        if shutil.which("dpkg-deb") is None:
            self.skipTest("dpkg-deb is not installed: device_deps.sh unpacks Debian packages")
        if os.uname().machine != "x86_64" or tuple(map(int, os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])) < (2, 36):
            self.skipTest("device_deps.sh carries Debian 12's x86-64 packages: glibc 2.36 or newer on x86-64 only")
        repo = self.dir / "repo"
        (repo / "scripts").mkdir(parents=True)
        shutil.copy(SCRIPTS / "device_deps.sh", repo / "scripts")
        package = self.dir / "pkg"
        lib = package / "usr/lib/x86_64-linux-gnu"
        (lib / "pkgconfig").mkdir(parents=True)
        (lib / "libz.so").symlink_to("/lib/x86_64-linux-gnu/libz.so.0.0.0-not-here")
        (lib / "pkgconfig/zlib.pc").write_text("prefix=/usr\nincludedir=/usr/include\n")
        (package / "DEBIAN").mkdir()
        (package / "DEBIAN/control").write_text(
            "Package: zlib1g-dev\nVersion: 1:1.2.13\nArchitecture: amd64\nMaintainer: test <t@t>\n"
            "Description: stand-in\n")
        (repo / ".device/debs").mkdir(parents=True)
        done = run("dpkg-deb", "--build", "--root-owner-group", package, repo / ".device/debs/zlib1g-dev.deb")
        self.assertEqual(done.returncode, 0, done.stderr)
        # The loader cache as large as a real one, libz.so.1 near its top.
        system_libz = "/lib/x86_64-linux-gnu/libz.so.1"
        write_tool(self.tools, "ldconfig", f"""echo '3000 libs found in cache'
printf '\\tlibz.so.1 (libc6,x86-64) => {system_libz}\\n'
i=0; while [ $i -lt 3000 ]; do printf '\\tlibpadding%05d.so.1 (libc6,x86-64) => /usr/lib/libpadding.so\\n' $i; i=$((i+1)); done
""")
        done = run("bash", repo / "scripts/device_deps.sh", "install", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue((repo / ".device/env.sh").is_file())
        self.assertEqual(os.readlink(repo / ".device-prefix/usr/lib/x86_64-linux-gnu/libz.so"), system_libz)
        self.assertIn(f"includedir={repo}/.device-prefix/usr/include",
                      (repo / ".device-prefix/usr/lib/x86_64-linux-gnu/pkgconfig/zlib.pc").read_text())


class BuildFolderTests(Sandbox):
    """Every script finds the build as scripts/build.sh makes it:
    $TRAINBENCH_BUILD_DIR (relative to the source tree), else $BUILD_DIR
    (relative to the caller's folder). scale.sh and compare_finetune.sh put an
    absolute TRAINBENCH_BUILD_DIR under the source tree; the bench scripts
    ignored it."""

    def test_trainbench_build_dir_is_used_as_given(self) -> None:
        missing = self.dir / "elsewhere"
        env = {**self.env, "TRAINBENCH_BUILD_DIR": str(missing)}
        cases = (("scale.sh", ["--ranks", "1", "--no-report", "--out", str(self.dir / "o")]),
                 ("compare_finetune.sh", ["--out", str(self.dir / "o")]),
                 ("bench_io.sh", ["--dir", str(self.dir / "o")]),
                 ("bench_ckpt_write.sh", ["--dir", str(self.dir / "o")]))
        write_tool(self.tools, "mpirun", "exit 0\n")
        for script, args in cases:
            with self.subTest(script=script):
                done = run("bash", SCRIPTS / script, *args, env=env, timeout=20)
                self.assertEqual(done.returncode, 3, done.stderr)
                self.assertIn(f"{missing}/trainbench", done.stderr)
                self.assertNotIn(f"{REPO}/{missing}", done.stderr)
        # Relative: under the source tree, as build.sh takes it.
        done = run("bash", SCRIPTS / "bench_io.sh", "--dir", self.dir / "o",
                   env={**self.env, "TRAINBENCH_BUILD_DIR": "no-such-build"}, cwd=self.dir, timeout=20)
        self.assertIn(f"{REPO}/no-such-build/trainbench", done.stderr)


class RunScriptTests(Sandbox):
    def test_paths_are_the_callers(self) -> None:
        # run.sh changed to the source tree before the run: a config file in
        # the caller's folder was not found, and --out landed in the source tree.
        repo = self.dir / "repo"
        (repo / "scripts").mkdir(parents=True)
        shutil.copy(SCRIPTS / "run.sh", repo / "scripts" / "run.sh")
        for stub in ("setup.sh", "build.sh"):
            (repo / "scripts" / stub).write_text('echo "$0 in $PWD" >> "$FAKE_LOG.stubs"\n')
        write_tool(repo / "build", "trainbench", FAKE_TRAINBENCH, shell=sys.executable)
        caller = self.dir / "caller"
        caller.mkdir()
        (caller / "mine.yaml").write_text("train:\n  steps: 3\n")
        env = {k: v for k, v in self.env.items() if k != "BUILD_DIR"}
        done = run("bash", repo / "scripts" / "run.sh", "mine.yaml", "--out", "r.json", env=env, cwd=caller,
                   timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        call = json.loads(self.log.read_text().splitlines()[-1])
        self.assertEqual(call, {"argv": ["run", "mine.yaml", "--out", "r.json"], "cwd": str(caller)})
        self.assertTrue((caller / "r.json").is_file())
        self.assertEqual(Path(str(self.log) + ".stubs").read_text().count(f"in {repo}"), 2,
                         "setup and build run in the source tree")
        # Without arguments: the default result in the source tree's out/.
        done = run("bash", repo / "scripts" / "run.sh", env=env, cwd=caller, timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue((repo / "out" / "trainbench-result.json").is_file())


class LocalClusterTests(Sandbox):
    def test_stop_kills_only_the_daemon_its_pid_file_names(self) -> None:
        # A PID file a dead daemon left named whatever process had the PID
        # since, and `stop` (as root) killed it.
        other = subprocess.Popen(["sleep", "60"])
        self.addCleanup(other.kill)
        (self.dir / "slurmd.pid").write_text(f"{other.pid}\n")
        (self.dir / "munged.pid").write_text("not a pid\n")
        done = run("bash", SCRIPTS / "slurm" / "local_cluster.sh", "stop", self.dir, env=self.env, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIsNone(other.poll(), "the other process was killed")
        self.assertFalse((self.dir / "slurmd.pid").exists())
        self.assertFalse((self.dir / "munged.pid").exists())

    def test_a_daemon_that_does_not_start_is_exit_3_with_its_log_and_the_others_stopped(self) -> None:
        # A daemon that refused to start (slurmctld: a port in use; munged: an
        # insecure key) ended `start` under set -e: exit 1, no log, and the
        # daemons started before it left running. Stand-ins: a munged that
        # serves (a process named munged, as the real one's PID file names)
        # and a slurmctld that logs its error and exits 1.
        cluster = self.dir / "cluster"
        started = self.dir / "munged.started"
        write_tool(self.tools, "id", "echo 0\n")
        write_tool(self.tools, "munged", 'if [ "$1" = serve ]; then while :; do sleep 1; done; fi\n'
                   'for a; do case "$a" in --pid-file=*) pid_file=${a#--pid-file=} ;; esac; done\n'
                   f'"$0" serve < /dev/null > /dev/null 2>&1 &\necho $! > "$pid_file"; echo $! > "{started}"\n')
        write_tool(self.tools, "slurmctld", f'echo "error: Unable to bind listen port: Address already in use"'
                   f' >> "{cluster}/log/slurmctld.log"\nexit 1\n')
        write_tool(self.tools, "slurmd", "exit 0\n")
        write_tool(self.tools, "sinfo", "exit 0\n")

        def serving(pid: int) -> bool:
            try:
                return Path(f"/proc/{pid}/comm").read_text().strip() == "munged" and \
                    "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
            except OSError:
                return False

        def kill_left_over() -> None:
            if started.exists() and serving(int(started.read_text())):
                os.kill(int(started.read_text()), signal.SIGKILL)
        self.addCleanup(kill_left_over)
        done = run("bash", SCRIPTS / "slurm" / "local_cluster.sh", "start", cluster, env=self.env, timeout=60)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertIn("local_cluster: slurmctld did not start (exit 1)", done.stderr)
        self.assertIn("Address already in use", done.stderr)
        self.assertTrue(started.exists(), done.stderr)
        self.assertFalse(serving(int(started.read_text())), "munged was left running")
        self.assertFalse((cluster / "munged.pid").exists())


class SbatchTests(Sandbox):
    def test_run_without_sbatch_is_one_line_exit_2(self) -> None:
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--steps", "5", env=self.env, timeout=20)
        self.assert_refused(done, "run this with sbatch")

    def test_a_multi_node_job_without_checkpoints_needs_no_checkpoint_folder(self) -> None:
        # It was refused for want of CKPT_DIR even with checkpoint.every_steps=0
        # (in the arguments or the config): trainbench itself refuses a
        # multi-node job that checkpoints to its temporary folder.
        srun_log = self.dir / "srun.log"
        write_tool(self.tools, "srun", f'printf "%s\\n" "$@" > "{srun_log}"\n')
        env = {**self.env, "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "TRAINBENCH_BINARY": "/bin/true",
               "OUT": str(self.dir / "out")}
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--set", "checkpoint.every_steps=0",
                   env=env, timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        args = srun_log.read_text().splitlines()
        self.assertEqual(args[args.index("/bin/true"):],
                         ["/bin/true", "run", "--set", "checkpoint.every_steps=0", "--out",
                          str(self.dir / "out" / "nodes-2.json")])
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", env={**env, "CKPT_DIR": "/shared/ckpt"},
                   timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("checkpoint.dir=/shared/ckpt/nodes-2-7", srun_log.read_text().splitlines())


    def test_a_failed_job_sets_its_result_aside_and_the_mpi_plugin_can_be_chosen(self) -> None:
        # A run that wrote its result and then failed (a failed check) left
        # nodes-N.json, which report.py DIR read as a sweep point.
        srun_log = self.dir / "srun.log"
        out = self.dir / "out"
        write_tool(self.tools, "srun", f'printf "%s\\n" "$@" > "{srun_log}"\n'
                   'while [ "$1" != --out ]; do shift; done; echo "{{}}" > "$2"; exit 4\n')
        env = {**self.env, "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "TRAINBENCH_BINARY": "/bin/true",
               "OUT": str(out), "TRAINBENCH_SRUN_MPI": "pmi2"}
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--steps", "5", env=env, timeout=20)
        self.assertEqual(done.returncode, 4, done.stderr)
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["nodes-1.failed.json"])
        self.assertIn(f"srun exited 4: the result it wrote is {out}/nodes-1.failed.json", done.stderr)
        self.assertEqual(srun_log.read_text().splitlines()[0], "--mpi=pmi2")

    def test_a_job_exits_with_the_code_of_the_rank_that_failed_first(self) -> None:
        # With --kill-on-bad-exit Slurm ends the other ranks with SIGTERM once
        # one fails and srun exits 143: a bad --set (exit 2 on every rank) read
        # as a cancelled job. The srun stand-in runs the command as 3 ranks,
        # one after the other, then exits 143 as srun does.
        write_tool(self.tools, "srun", 'while [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
                   'for rank in 0 1 2; do SLURM_PROCID=$rank "$@"; done\nexit 143\n')
        # Rank 0 ended by Slurm; rank 1 fails first (a failed check), rank 2
        # after it (its peer gone: environment); cancelled, every rank ends by SIGTERM.
        binary = write_tool(self.dir, "trainbench", 'if [ -n "$FAKE_CANCELLED" ]; then kill -TERM $$; fi\n'
                            'case "$SLURM_PROCID" in\n'
                            '  0) kill -TERM $$ ;;\n'
                            '  1) while [ "$1" != --out ]; do shift; done; echo "{}" > "$2"\n'
                            '     echo "check failed: loss is NaN" >&2; exit 4 ;;\n'
                            '  2) exit 3 ;;\n'
                            'esac\n')
        out = self.dir / "out"
        env = {**self.env, "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "TRAINBENCH_BINARY": str(binary),
               "OUT": str(out)}
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--steps", "5", env=env, timeout=20)
        self.assertEqual(done.returncode, 4, done.stderr)
        self.assertIn("trainbench.sbatch: rank 1 exited 4 (srun 143: Slurm ended the other ranks)", done.stderr)
        # The failed result is still set aside, and the ranks' records go.
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["nodes-1.failed.json"])
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--steps", "5",
                   env={**env, "FAKE_CANCELLED": "1"}, timeout=20)
        self.assertEqual(done.returncode, 143, done.stderr)
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["nodes-1.failed.json"])


    def test_a_rank_killed_first_names_its_signal(self) -> None:
        # The OOM killer's SIGKILL on rank 0 (137), then its peer's exit 3 (its
        # peer gone): the job said "rank 1 exited 3", hiding the cause.
        write_tool(self.tools, "srun", 'while [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
                   'for rank in 0 1 2; do SLURM_PROCID=$rank "$@"; done\nexit 143\n')
        binary = write_tool(self.dir, "trainbench", 'case "$SLURM_PROCID" in\n'
                            '  0) kill -KILL $$ ;;\n  1) exit 3 ;;\n  2) kill -TERM $$ ;;\nesac\n')
        env = {**self.env, "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "TRAINBENCH_BINARY": str(binary),
               "OUT": str(self.dir / "out")}
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--steps", "5", env=env, timeout=20)
        self.assertEqual(done.returncode, 137, done.stderr)
        self.assertIn("trainbench.sbatch: rank 0 exited 137 (srun 143: Slurm ended the other ranks)", done.stderr)

    def test_slurms_sigterm_waits_for_the_ranks_own_end(self) -> None:
        # Slurm signals every process of the step; the bash that records a
        # rank's exit died at once at its default, the task's end, and
        # slurmstepd SIGKILLs what is left: trainbench writing its partial
        # result. The srun stand-in signals the rank's process group as
        # slurmstepd does and notes whether trainbench had finished by the
        # time the task ended.
        log = self.dir / "srun.log"
        write_tool(self.tools, "srun", 'while [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
                   'SLURM_PROCID=0 setsid "$@" & task=$!\n'
                   'for _ in $(seq 100); do [ -e "$STARTED" ] && break; sleep 0.05; done\n'
                   'kill -TERM -- -"$task"; wait "$task"; code=$?\n'
                   f'if [ -e "$FINISHED" ]; then echo finished > {shlex.quote(str(log))}; fi\n'
                   'exit "$code"\n', shell="/bin/bash")
        # The sleep is started before "started" is said, and away from the
        # output: a SIGTERM that came between the touch and the fork left a
        # sleep 30 no signal had reached, holding the job's stdout open past
        # the timeout (a CI run, loaded).
        binary = write_tool(self.dir, "trainbench", "trap 'sleep 1; touch \"$FINISHED\"; exit 143' TERM\n"
                            'sleep 30 > /dev/null 2>&1 & touch "$STARTED"; wait\n')
        env = {**self.env, "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "TRAINBENCH_BINARY": str(binary),
               "OUT": str(self.dir / "out"), "STARTED": str(self.dir / "started"),
               "FINISHED": str(self.dir / "finished")}
        done = run("bash", SCRIPTS / "slurm" / "trainbench.sbatch", "--steps", "5", env=env, timeout=20)
        self.assertEqual(done.returncode, 143, done.stderr)
        self.assertTrue(log.exists() and log.read_text() == "finished\n",
                        "the task ended before the rank had finished its own SIGTERM handling")


# An mpirun stand-in: "Open MPI" to --version, records its arguments (one a
# line, then ---), then runs the command after its own options as one process.
FAKE_MPIRUN = '''if [ "$1" = --version ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi
printf '%s\\n' "$@" >> "$MPI_LOG"; echo --- >> "$MPI_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    -np|--hostfile) shift 2 ;;
    --oversubscribe) shift ;;
    *) break ;;
  esac
done
exec "$@"
'''


# FAKE_MPIRUN (for bash) whose 2-rank launch trains long: its --steps becomes
# 100000 (tiny: minutes), and its pid, which the trainbench it execs keeps,
# goes to $LONG_RUN_PID.
LONG_2_RANK_MPIRUN = '''if [ "$1" = -np ] && [ "$2" = 2 ]; then
  args=(); previous=""
  for a in "$@"; do if [ "$previous" = --steps ]; then a=100000; fi; args+=("$a"); previous=$a; done
  set -- "${args[@]}"
  echo $$ > "$LONG_RUN_PID.part" && mv "$LONG_RUN_PID.part" "$LONG_RUN_PID"
fi
''' + FAKE_MPIRUN


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class LauncherSandbox(Sandbox):
    def setUp(self) -> None:
        super().setUp()
        self.mpi_log = self.dir / "mpirun.log"
        self.mpirun = write_tool(self.tools, "mpirun", FAKE_MPIRUN)
        self.env.update(MPI_LOG=str(self.mpi_log), MPIRUN=str(self.mpirun))

    def mpirun_calls(self) -> list[list[str]]:
        if not self.mpi_log.exists():
            return []
        return [c.splitlines() for c in self.mpi_log.read_text().split("---\n") if c.strip()]

    def signal_the_script_alone(self, command: list[str], log: Path) -> tuple[int, str, float, int]:
        """COMMAND (a script whose 2-rank launch is LONG_2_RANK_MPIRUN's) in a
        process group of its own, given SIGTERM to its own pid alone (`kill
        PID`, a job wrapper or supervisor that signals only the process it
        started) once the long run has trained a step (`log`, its console,
        shows one): the script's exit code, its stderr, the seconds from the
        signal to its end, and the long run's pid."""
        run_pid = self.dir / "long-run.pid"
        self.env["LONG_RUN_PID"] = str(run_pid)
        process = subprocess.Popen(command, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None and not (
                    run_pid.exists() and log.exists() and "\nstep " in log.read_text(errors="replace")):
                time.sleep(0.1)
            self.assertIsNone(process.poll(), "the script ended before its long run had trained a step")
            self.assertTrue(run_pid.exists(), "the long run did not start")
            os.kill(process.pid, signal.SIGTERM)
            signalled = time.monotonic()
            _, err = process.communicate(timeout=30)
            seconds = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
        return process.returncode, err, seconds, int(run_pid.read_text())


class ScaleTests(LauncherSandbox):
    def test_an_empty_rank_item_is_refused(self) -> None:
        out = self.dir / "never"
        for ranks in ("1,2,", ",1", "1,,2"):
            with self.subTest(ranks=ranks):
                done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", ranks, "--out", out, "--no-report",
                           env=self.env, timeout=20)
                self.assert_refused(done, f"--ranks '{ranks}'", "empty")
                self.assertFalse(out.exists())
                self.assertEqual(self.mpirun_calls(), [])

    def test_empty_values_line_breaks_and_folders_for_files_are_refused_before_any_run(self) -> None:
        # '--steps ""' ran the default step count and '--ranks $'1\n2'' the
        # first line's counts, exit 0; a folder as --binary or --hostfile
        # ended in bash's and sed's words (exit 126, 4), and a file as
        # --ckpt-dir after the first run had failed on it.
        folder = self.dir / "a-folder"
        folder.mkdir()
        a_file = self.dir / "a-file"
        a_file.write_text("x\n")
        out = self.dir / "never"
        for args, code, words in ((["--steps", ""], 2, "--steps '': an empty value"),
                                  (["--ranks", "1\n2"], 2, "--ranks: a value with a line break"),
                                  (["--binary", str(folder)], 3, f"{folder}: not built"),
                                  (["--hostfile", str(folder)], 2, f"--hostfile {folder}: not a file it can read"),
                                  (["--ckpt-dir", str(a_file)], 2, f"--ckpt-dir {a_file}: not a folder")):
            with self.subTest(args=args):
                binary = [] if "--binary" in args else ["--binary", "/bin/true"]
                ranks = [] if "--ranks" in args else ["--ranks", "1"]
                done = run("bash", SCALE, *binary, *ranks, *args, "--out", out, "--no-report", env=self.env,
                           timeout=20)
                self.assert_refused(done, words, code=code)
                self.assertFalse(out.exists())
                self.assertEqual(self.mpirun_calls(), [])

    def test_a_bad_config_is_said_before_the_folder_and_the_first_run(self) -> None:
        # Met at the first run, once the folder was made, as mpirun's 16 lines.
        require_binary()
        out = self.dir / "never"
        for args, words in ((["--steps", "3"], "--steps 3: train.warmup_steps: 5 must be < train.steps (3)"),
                            (["--set", "train.stpes=3"], "--set train.stpes=3: unknown key 'train.stpes'"),
                            (["--config", str(self.dir / "missing.yaml")], "config file not found")):
            with self.subTest(args=args):
                done = run("bash", SCALE, "--binary", BINARY, "--ranks", "1,2", *args, "--out", out, "--no-report",
                           env=self.env, timeout=30)
                self.assert_refused(done, words)
                self.assertFalse(out.exists())
                self.assertEqual(self.mpirun_calls(), [])

    def test_a_missing_matplotlib_is_said_before_the_sweep(self) -> None:
        # The report failed for want of it after every run had been made.
        write_tool(self.tools, "python3", 'case "$*" in *"import matplotlib"*) exit 1 ;; esac\n'
                   f'exec "{sys.executable}" "$@"\n')
        done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "1", "--out", self.dir / "out", env=self.env,
                   timeout=20)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertIn("matplotlib is not installed", done.stderr)
        self.assertEqual(self.mpirun_calls(), [])

    def test_a_huge_count_is_refused_in_one_line(self) -> None:
        # bash's arithmetic failed on it: two lines of bash errors, exit 2 by chance.
        for flag, extra in (("--ranks", []), ("--nodes", ["--slurm"])):
            for count in ("99999999999999999999", "1048577"):
                with self.subTest(flag=flag, count=count):
                    write_tool(self.tools, "sbatch", "echo 42\n")
                    done = run("bash", SCALE, "--binary", "/bin/true", *extra, flag, f"1,{count}", "--out",
                               self.dir / "never", "--no-report", env=self.env, timeout=20)
                    self.assert_refused(done, f"'{count}' is not an integer from 1 to 1048576")
                    self.assertFalse((self.dir / "never").exists())

    def test_a_hostfile_of_several_hosts_needs_a_shared_checkpoint_folder(self) -> None:
        # trainbench refuses its temporary checkpoint folder for ranks on
        # several hosts: the sweep met that at its first multi-host point.
        hostfile = self.dir / "hosts"
        hostfile.write_text("# the cluster\nnode1 slots=8\nnode2 slots=8  # second\nnode1 slots=8\n")
        out = self.dir / "never"
        done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "8,16", "--hostfile", hostfile, "--out", out,
                   "--no-report", env=self.env, timeout=20)
        self.assert_refused(done, "names 2 hosts", "--ckpt-dir")
        self.assertEqual(self.mpirun_calls(), [])
        # Each allowed sweep launches its one point (the log emptied between
        # them: the first's launch made the second's check pass).
        for allowed in (["--ckpt-dir", str(self.dir / "ckpt")], ["--set", "checkpoint.every_steps=0"]):
            with self.subTest(allowed=allowed):
                self.mpi_log.unlink(missing_ok=True)
                done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "8", "--hostfile", hostfile,
                           *allowed, "--out", self.dir / ("out" + allowed[0]), "--no-report", env=self.env,
                           timeout=20)
                self.assertNotIn("checkpoints need storage", done.stderr)
                self.assertEqual([c[:2] for c in self.mpirun_calls()], [["-np", "8"]], done.stderr)
        hostfile.write_text("node1 slots=8\nnode1 slots=8\n")
        self.mpi_log.unlink(missing_ok=True)
        done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "8", "--hostfile", hostfile,
                   "--out", self.dir / "one-host", "--no-report", env=self.env, timeout=20)
        self.assertNotIn("checkpoints need storage", done.stderr)
        self.assertEqual([c[:2] for c in self.mpirun_calls()], [["-np", "8"]], done.stderr)

    def test_the_mpirun_line_oversubscribes_past_the_cores_and_ends_with_the_extra_arguments(self) -> None:
        # The line scale.sh and compare_finetune.sh both build (scripts/lib/launch.sh).
        binary = write_tool(self.dir / "bin", "trainbench",
                            'while [ $# -gt 1 ]; do [ "$1" = --out ] && echo "{}" > "$2"; shift; done\n')
        # FAKE_MPIRUN, past any option of its own up to the binary.
        mpirun = FAKE_MPIRUN.replace("    --oversubscribe) shift ;;", "    --oversubscribe|--bind-to|none) shift ;;")
        write_tool(self.tools, "mpirun", mpirun)
        many = str((os.cpu_count() or 1) + 1)
        sweep = ["bash", SCALE, "--binary", binary, "--ranks", f"1,{many}", "--mpirun-args", "--bind-to none",
                 "--set", "checkpoint.every_steps=0", "--no-report"]
        done = run(*sweep, "--out", self.dir / "out", env=self.env, timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([c[:c.index(str(binary))] for c in self.mpirun_calls()],
                         [["-np", "1", "--bind-to", "none"],
                          ["-np", many, "--oversubscribe", "--bind-to", "none"]])
        # Another MPI's flag is not guessed: the extra arguments carry it, said so.
        self.mpi_log.unlink()
        write_tool(self.tools, "mpirun", mpirun.replace("mpirun (Open MPI) 4.1.4", "HYDRA build details:"))
        done = run(*sweep, "--out", self.dir / "mpich", env=self.env, timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([c[:c.index(str(binary))] for c in self.mpirun_calls()],
                         [["-np", "1", "--bind-to", "none"], ["-np", many, "--bind-to", "none"]])
        self.assertIn(f"note: {many} ranks on ", done.stderr)
        # A hostfile decides the slots: never oversubscribed.
        self.mpi_log.unlink()
        hostfile = self.dir / "hosts"
        hostfile.write_text("localhost slots=4096\n")
        done = run(*sweep, "--hostfile", hostfile, "--out", self.dir / "hosts-out", env=self.env, timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([c[:c.index(str(binary))] for c in self.mpirun_calls()],
                         [["-np", "1", "--hostfile", str(hostfile), "--bind-to", "none"],
                          ["-np", many, "--hostfile", str(hostfile), "--bind-to", "none"]])

    def test_the_slurm_follow_up_command_is_quoted(self) -> None:
        write_tool(self.tools, "sbatch", "echo 42\n")
        out = self.dir / "slurm out $x"
        done = run("bash", SCALE, "--slurm", "--binary", "/bin/true", "--nodes", "1", "--out", out, env=self.env,
                   timeout=20)
        self.assertEqual(done.returncode, 0, done.stderr)
        line = done.stdout.splitlines()[-1]
        command = line.split("when the jobs have finished: ", 1)[1]
        self.assertEqual(shlex.split(command), ["python3", str(SCRIPTS / "report.py"), str(out)])

    def resubmit(self, sbatch: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
        """A 1-node Slurm sweep into a folder that holds an earlier
        nodes-1.json, `sbatch` the given stand-in."""
        write_tool(self.tools, "sbatch", sbatch)
        out = self.dir / "slurm"
        out.mkdir()
        (out / "nodes-1.json").write_text('{"earlier": true}\n')
        return out, run("bash", SCALE, "--slurm", "--binary", "/bin/true", "--nodes", "1", "--out", out,
                        env=self.env, timeout=20)

    def test_a_slurm_resubmission_sets_the_earlier_result_aside(self) -> None:
        # The report read an earlier sweep's nodes-1.json as this job's
        # when this one failed before writing its own.
        out, done = self.resubmit("echo 42\n")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertFalse((out / "nodes-1.json").exists())
        self.assertEqual((out / "nodes-1.json.previous").read_text(), '{"earlier": true}\n')
        self.assertIn("nodes-1.json.previous", done.stderr)

    def test_a_failed_slurm_submission_puts_the_earlier_result_back(self) -> None:
        # It stayed nodes-1.json.previous: no job wrote nodes-1.json, and the
        # report no longer found the earlier one.
        out, done = self.resubmit('echo "sbatch: error: Batch job submission failed" >&2; exit 1\n')
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("sbatch failed (exit 1", done.stderr)
        self.assertEqual((out / "nodes-1.json").read_text(), '{"earlier": true}\n')
        self.assertFalse((out / "nodes-1.json.previous").exists())

    def test_slurm_jobs_are_checked_before_they_queue(self) -> None:
        # A bad key reached every job, once it had its nodes; a config that
        # checkpoints nowhere was refused a multi-node sweep for want of
        # --ckpt-dir.
        require_binary()
        sbatch_log = self.dir / "sbatch.log"
        write_tool(self.tools, "sbatch", f'echo "$*" >> "{sbatch_log}"; echo 42\n')
        sweep = ["bash", SCALE, "--slurm", "--binary", BINARY, "--config", "tiny", "--nodes", "1,2"]
        done = run(*sweep, "--set", "model.d_modle=1", "--out", self.dir / "never", env=self.env, timeout=30)
        self.assert_refused(done, "model.d_modle")
        done = run(*sweep, "--steps", "2", "--set", "train.warmup_steps=5", "--out", self.dir / "never", env=self.env,
                   timeout=30)
        self.assert_refused(done, "must be < train.steps (2)")
        done = run(*sweep, "--out", self.dir / "never", env=self.env, timeout=30)
        self.assert_refused(done, "--ckpt-dir", "checkpoint.every_steps=0")
        # A later --set wins, as in the runs.
        done = run(*sweep, "--set", "checkpoint.every_steps=0", "--set", "checkpoint.every_steps=10",
                   "--out", self.dir / "never", env=self.env, timeout=30)
        self.assert_refused(done, "--ckpt-dir")
        self.assertFalse(sbatch_log.exists(), sbatch_log.read_text() if sbatch_log.exists() else "")
        self.assertFalse((self.dir / "never").exists())
        no_checkpoints = self.dir / "none.yaml"
        no_checkpoints.write_text("checkpoint:\n  every_steps: 0\n")
        done = run("bash", SCALE, "--slurm", "--binary", BINARY, "--config", no_checkpoints, "--nodes", "1,2",
                   "--out", self.dir / "out", env=self.env, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(sbatch_log.read_text().splitlines()), 2)

    def earlier_sweep(self, out: Path) -> dict[str, str]:
        out.mkdir()
        (out / "ranks-1.json").write_text('{"earlier": true}\n')
        (out / "ranks-1.log").write_text("the earlier run's log\n")
        return digests(out, ["ranks-1.json", "ranks-1.log"])

    def test_a_failed_rerun_keeps_the_earlier_log(self) -> None:
        # The earlier ranks-1.json was kept, but its log was overwritten by
        # the failed run's.
        require_binary()
        out = self.dir / "sweep"
        earlier = self.earlier_sweep(out)
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "4",
                   "--set", "train.warmup_steps=1", "--set", "train.lr=1e38", "--set", "train.threads=1",
                   "--set", "report.progress_every=0", "--out", out, "--no-report", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 4, done.stderr)
        self.assertEqual(digests(out, ["ranks-1.json", "ranks-1.log"]), earlier)
        failed_log = (out / "ranks-1.failed.log").read_text()
        self.assertEqual(shlex.split(failed_log.splitlines()[0])[:3], [str(self.mpirun), "-np", "1"])
        self.assertIn("loss_finite", failed_log)
        self.assertTrue((out / "ranks-1.failed.json").is_file())
        self.assertEqual(sorted(p.name for p in out.iterdir()),
                         ["ranks-1.failed.json", "ranks-1.failed.log", "ranks-1.json", "ranks-1.log"])
        self.assertIn("FAILED (exit 4, ", done.stderr)
        self.assertIn(f"{out}/ranks-1.failed.log", done.stderr)
        self.assertIn(f"the earlier {out}/ranks-1.json is kept", done.stderr)

    def test_a_rerun_that_fails_part_way_puts_the_whole_earlier_sweep_back(self) -> None:
        # A rerun that failed at its second point kept the earlier figures of
        # that point only: its first point's new result stood beside the
        # earlier sweep's others, and report.py DIR read two sweeps as one.
        require_binary()
        out = self.dir / "sweep"
        out.mkdir()
        names = [f"ranks-{n}.{kind}" for n in (1, 2, 4) for kind in ("json", "log")]
        for name in names:
            (out / name).write_text(f"the earlier sweep's {name}\n")
        earlier = digests(out, names)
        # Two-rank launches fail, as on a node that cannot be reached.
        write_tool(self.tools, "mpirun", 'if [ "$1" = -np ] && [ "$2" = 2 ]; then\n'
                   '  echo "mpirun: node2 unreachable" >&2; exit 1\nfi\n' + FAKE_MPIRUN)
        sweep = ["bash", str(SCALE), "--binary", str(BINARY), "--config", "tiny", "--steps", "4", "--set",
                 "train.warmup_steps=1", "--set", "train.threads=1", "--set", "report.progress_every=0",
                 "--out", str(out), "--no-report"]
        done = run(*sweep, "--ranks", "1,2", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual(digests(out, names), earlier)
        unfinished = [p for p in out.iterdir() if p.name.startswith("unfinished-")]
        self.assertEqual(len(unfinished), 1, sorted(p.name for p in out.iterdir()))
        self.assertEqual(sorted(p.name for p in unfinished[0].iterdir()), ["ranks-1.json", "ranks-1.log"])
        self.assertEqual(json.loads((unfinished[0] / "ranks-1.json").read_text())["environment"]["ranks"], 1)
        self.assertIn("node2 unreachable", (out / "ranks-2.failed.log").read_text())
        self.assertFalse(list(out.glob("*.previous")))
        self.assertIn(f"this sweep's finished point(s) (1 ranks) are in {unfinished[0]}", done.stderr)
        # A rerun that runs whole replaces what it reran, and sets nothing apart.
        done = run(*sweep, "--ranks", "1", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads((out / "ranks-1.json").read_text())["environment"]["ranks"], 1)
        self.assertEqual(digests(out, names[2:]), {k: earlier[k] for k in names[2:]})
        self.assertFalse(list(out.glob("*.previous")))
        self.assertEqual(len([p for p in out.iterdir() if p.name.startswith("unfinished-")]), 1)

    def test_an_aborted_runs_partial_result_is_set_aside_with_the_unfinished_points(self) -> None:
        # A run an abort ended left ranks-2.aborted.json beside the earlier
        # sweep put back, unnamed (report.py DIR named it as a stray), and
        # wrote it over the earlier one there.
        require_binary()
        out = self.dir / "sweep"
        out.mkdir()
        names = [f"ranks-{n}.{kind}" for n in (1, 2) for kind in ("json", "log")] + ["ranks-2.aborted.json"]
        for name in names:
            (out / name).write_text(f"the earlier sweep's {name}\n")
        earlier = digests(out, names)
        # The 2-rank run aborts (a collective past comm.timeout_s) as rank 0 does: its steps in
        # ranks-2.aborted.json, exit 3.
        write_tool(self.tools, "mpirun", 'if [ "$1" = -np ] && [ "$2" = 2 ]; then\n'
                   '  while [ $# -gt 0 ]; do if [ "$1" = --out ]; then result=$2; fi; shift; done\n'
                   '  echo \'{"schema": "trainbench.aborted_run/v1", "this": "rerun"}\' > "${result%.json}.aborted.json"\n'
                   '  echo "trainbench: comm timeout" >&2; exit 3\nfi\n' + FAKE_MPIRUN)
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1,2", "--steps", "4", "--set",
                   "train.warmup_steps=1", "--set", "train.threads=1", "--set", "report.progress_every=0",
                   "--out", out, "--no-report", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertEqual(digests(out, names), earlier)
        [unfinished] = [p for p in out.iterdir() if p.name.startswith("unfinished-")]
        self.assertEqual(sorted(p.name for p in unfinished.iterdir()),
                         ["ranks-1.json", "ranks-1.log", "ranks-2.aborted.json"])
        self.assertEqual(json.loads((unfinished / "ranks-2.aborted.json").read_text())["this"], "rerun")
        self.assertIn(f"{unfinished}/ranks-2.aborted.json", done.stderr)
        self.assertFalse(list(out.glob("*.previous")))

    def test_a_sweep_killed_part_way_is_undone_before_the_next(self) -> None:
        # A sweep killed outright left the earlier one's files as .previous:
        # the next sweep set its own over them, and the folder held one
        # sweep's 1-rank figure beside another's 2-rank one.
        require_binary()
        out = self.dir / "sweep"
        out.mkdir()
        for name in ("ranks-1.json", "ranks-1.log", "ranks-2.json", "ranks-2.log"):
            (out / (name + ".previous")).write_text(f"the earlier sweep's {name}\n")
        (out / "ranks-1.json").write_text("the killed sweep's ranks-1.json\n")
        (out / "ranks-1.log").write_text("the killed sweep's ranks-1.log\n")
        (out / "ranks-2.log").write_text("the killed sweep's ranks-2.log, cut short\n")
        earlier = {name: f"the earlier sweep's {name}\n" for name in ("ranks-1.json", "ranks-1.log", "ranks-2.json",
                                                                      "ranks-2.log")}
        write_tool(self.tools, "mpirun", 'if [ "$1" = -np ] && [ "$2" = 4 ]; then\n'
                   '  echo "mpirun: node4 unreachable" >&2; exit 1\nfi\n' + FAKE_MPIRUN)
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "4", "--steps", "4", "--set",
                   "train.warmup_steps=1", "--set", "train.threads=1", "--set", "report.progress_every=0",
                   "--out", out, "--no-report", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertEqual({name: (out / name).read_text() for name in earlier}, earlier)
        self.assertFalse(list(out.glob("*.previous")))
        [killed] = [p for p in out.iterdir() if p.name.startswith("unfinished-killed-")]
        self.assertEqual(sorted(p.name for p in killed.iterdir()), ["ranks-1.json", "ranks-1.log", "ranks-2.log"])
        self.assertIn(f"a sweep in {out} was killed part-way: the earlier sweep's ", done.stderr)
        self.assertIn(f"what it made is in {killed}", done.stderr)
        self.assertFalse((out / ".scale.sweep").exists(), "the sweep's record goes with it")

    def test_a_killed_sweeps_new_points_are_set_aside_by_its_record(self) -> None:
        # The earlier sweep ran 1 and 2; the killed one finished 4 (no
        # earlier file there, so no .previous) and was killed during 8: its
        # ranks-4.json stayed beside the earlier 1 and 2, as one sweep.
        require_binary()
        out = self.dir / "sweep"
        out.mkdir()
        for name in ("ranks-1.json", "ranks-2.json"):
            (out / (name + ".previous")).write_text(f"the earlier sweep's {name}\n")
            (out / name).write_text(f"the killed sweep's {name}\n")
        (out / "ranks-4.json").write_text("the killed sweep's ranks-4.json\n")
        (out / "ranks-8.log").write_text("the killed sweep's ranks-8.log, cut short\n")
        (out / ".scale.sweep").write_text("1\n2\n4\n8\n")
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "4", "--set",
                   "train.warmup_steps=1", "--set", "train.threads=1", "--set", "report.progress_every=0",
                   "--out", out, "--no-report", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        [killed] = [p for p in out.iterdir() if p.name.startswith("unfinished-killed-")]
        self.assertEqual(sorted(p.name for p in killed.iterdir()),
                         ["ranks-1.json", "ranks-2.json", "ranks-4.json", "ranks-8.log"])
        self.assertEqual((out / "ranks-2.json").read_text(), "the earlier sweep's ranks-2.json\n")
        self.assertEqual(json.loads((out / "ranks-1.json").read_text())["environment"]["ranks"], 1, "this sweep's")
        self.assertFalse(list(out.glob("*.previous")))
        self.assertFalse((out / ".scale.sweep").exists())

    def test_one_sweep_at_a_time_in_a_folder(self) -> None:
        # A second sweep took the first's points for a killed sweep's.
        out = self.dir / "sweep"
        out.mkdir()
        held = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "1", "--out", out, "--no-report",
                       env=self.env, timeout=20)
        finally:
            os.close(held)
        self.assert_refused(done, f"another scale.sh sweep is writing to {out}")
        self.assertEqual(self.mpirun_calls(), [])

    def test_steps_win_over_a_set_train_steps_in_the_check_as_in_the_run(self) -> None:
        # The check put --steps before the --set's: the --set won there, and
        # --steps in the run (refused what would run, ran what it refused).
        require_binary()
        out = self.dir / "sweep"
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "8", "--set",
                   "train.steps=3", "--set", "train.threads=1", "--set", "report.progress_every=0",
                   "--out", out, "--no-report", env=self.env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(len(json.loads((out / "ranks-1.json").read_text())["steps"]), 8)
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "3", "--set",
                   "train.steps=8", "--out", self.dir / "never", "--no-report", env=self.env, timeout=60)
        self.assert_refused(done, "--steps 3: train.warmup_steps: 5 must be < train.steps (3)")
        self.assertFalse((self.dir / "never").exists())

    def test_the_report_of_a_partial_rerun_reads_every_point_the_folder_keeps(self) -> None:
        # A rerun of some points keeps the others, but report.md was made of
        # this sweep's alone: a rerun of 2 ranks was its own baseline
        # ("efficiency 1.000") beside the kept 1-rank point.
        require_binary()
        out = self.dir / "sweep"
        out.mkdir()
        for name in ("ranks-2.json", "ranks-2.failed.json", "notes.json"):
            (out / name).write_text("{}\n")
        args_log = self.dir / "report.args"
        write_tool(self.tools, "python3", f'case "$1" in *report.py) printf "%s\\n" "$@" > "{args_log}"; exit 0 ;; esac\n'
                   f'exec "{sys.executable}" "$@"\n')
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "4", "--set",
                   "train.warmup_steps=1", "--set", "train.threads=1", "--set", "report.progress_every=0",
                   "--out", out, env=self.env, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        args = args_log.read_text().splitlines()
        self.assertEqual(sorted(a for a in args if a.endswith(".json")), [f"{out}/ranks-1.json", f"{out}/ranks-2.json"])

    def ctrl_c_once_started(self, args: list[str], started: Path, wait_s: float,
                            to_script_alone: signal.Signals | None = None) -> tuple[int, str]:
        """scale.sh ARGS, given a terminal's Ctrl-C (SIGINT to the whole
        foreground group) once `started` exists, or `to_script_alone` sent to
        the script's own pid only: its exit code and stderr."""
        process = subprocess.Popen(["bash", str(SCALE), *args], env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + wait_s
            while not started.exists() and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.05)
            self.assertTrue(started.exists(), "the run to interrupt did not start")
            if to_script_alone is None:
                os.killpg(process.pid, signal.SIGINT)
            else:
                os.kill(process.pid, to_script_alone)
            _, err = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
        return process.returncode, err

    def test_ctrl_c_at_a_later_point_puts_the_earlier_sweep_back(self) -> None:
        require_binary()
        started = self.dir / "started"
        # One rank runs; the 2-rank launch hangs until Ctrl-C.
        write_tool(self.tools, "mpirun", 'if [ "$1" = -np ] && [ "$2" = 2 ]; then\n'
                   f'  trap "exit 1" INT; touch {shlex.quote(str(started))}\n'
                   '  i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; exit 1\nfi\n' + FAKE_MPIRUN)
        out = self.dir / "sweep"
        out.mkdir()
        names = [f"ranks-{n}.{kind}" for n in (1, 2) for kind in ("json", "log")]
        for name in names:
            (out / name).write_text(f"the earlier sweep's {name}\n")
        earlier = digests(out, names)
        code, err = self.ctrl_c_once_started(
            ["--binary", str(BINARY), "--config", "tiny", "--steps", "4", "--set", "train.warmup_steps=1", "--set",
             "train.threads=1", "--set", "report.progress_every=0", "--ranks", "1,2", "--out", str(out),
             "--no-report"], started, 60)
        self.assertEqual(code, 130, err)
        self.assertEqual(digests(out, names), earlier)
        self.assertFalse(list(out.glob("*.previous")))
        unfinished = [p for p in out.iterdir() if p.name.startswith("unfinished-")]
        self.assertEqual(len(unfinished), 1, sorted(p.name for p in out.iterdir()))
        self.assertEqual(json.loads((unfinished[0] / "ranks-1.json").read_text())["environment"]["ranks"], 1)
        self.assertIn("this sweep's finished point(s) (1 ranks)", err)

    def test_ctrl_c_is_said_to_be_an_interruption(self) -> None:
        # Open MPI's mpirun exits 1 on SIGINT: the sweep said "FAILED (exit 1)".
        started = self.dir / "started"
        write_tool(self.tools, "mpirun", 'if [ "$1" = --version ]; then exit 0; fi\n'
                   'printf "%s\\n" "$@" >> "$MPI_LOG"; trap "exit 1" INT\n'
                   f'touch {shlex.quote(str(started))}\n'
                   'i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done\n')
        out = self.dir / "sweep"
        earlier = self.earlier_sweep(out)
        code, err = self.ctrl_c_once_started(["--binary", "/bin/true", "--ranks", "1,2", "--out", str(out),
                                              "--no-report"], started, 20)
        self.assertEqual(code, 130, err)
        self.assertIn("1 rank(s) interrupted (SIGINT", err)
        self.assertNotIn("FAILED", err)
        self.assertEqual(digests(out, ["ranks-1.json", "ranks-1.log"]), earlier)
        self.assertTrue((out / "ranks-1.failed.log").is_file())
        self.assertFalse(list(out.glob("*.previous")))
        self.assertFalse((out / "ranks-2.log").exists())

    def test_a_signal_to_the_script_alone_stops_the_running_point(self) -> None:
        # SIGTERM to scale.sh's pid alone set a flag that bash read once the
        # point's mpirun had ended: the point trained to its end (hours on a
        # real sweep), then the sweep said "interrupted" and filed its
        # complete result as failed (ranks-2.failed.json). Passed on, it
        # stops the point as a group's Ctrl-C does.
        require_binary()
        write_tool(self.tools, "mpirun", LONG_2_RANK_MPIRUN, shell="/bin/bash")
        out = self.dir / "sweep"
        out.mkdir()
        names = [f"ranks-{n}.{kind}" for n in (1, 2) for kind in ("json", "log")]
        for name in names:
            (out / name).write_text(f"the earlier sweep's {name}\n")
        earlier = digests(out, names)
        code, err, seconds, run_pid = self.signal_the_script_alone(
            ["bash", str(SCALE), "--binary", str(BINARY), "--config", "tiny", "--steps", "4", "--set",
             "train.warmup_steps=1", "--set", "train.threads=1", "--set", "checkpoint.every_steps=0", "--set",
             "report.progress_every=10", "--ranks", "1,2", "--out", str(out), "--no-report"], out / "ranks-2.log")
        self.assertEqual(code, 143, err)
        self.assertLess(seconds, 20, err)
        self.assertFalse(running(run_pid), "the point was left running")
        self.assertIn("2 rank(s) interrupted (SIGTERM", err)
        self.assertNotIn("FAILED", err)
        # As after a group's Ctrl-C: the earlier sweep back, this one's
        # finished point and the stopped one's partial result set aside.
        self.assertEqual(digests(out, names), earlier)
        self.assertFalse(list(out.glob("*.previous")))
        [unfinished] = [p for p in out.iterdir() if p.name.startswith("unfinished-")]
        self.assertEqual(sorted(p.name for p in unfinished.iterdir()),
                         ["ranks-1.json", "ranks-1.log", "ranks-2.aborted.json"])
        partial = json.loads((unfinished / "ranks-2.aborted.json").read_text())
        self.assertEqual(partial["schema"], "trainbench.aborted_run/v1")
        self.assertEqual(partial["aborted"]["exit_code"], 143)
        self.assertGreater(partial["aborted"]["steps_completed"], 0)
        self.assertIn(f"{unfinished}/ranks-2.aborted.json", err)
        self.assertIn("this sweep's finished point(s) (1 ranks)", err)
        # No complete result filed as failed.
        self.assertFalse((out / "ranks-2.failed.json").exists())
        self.assertNotIn("the steps before it failed", err)
        self.assertIn("step(s) it trained are in", (out / "ranks-2.failed.log").read_text())

    def test_mpirun_gets_one_signal_from_the_group_or_from_the_script(self) -> None:
        # Open MPI's mpirun takes a second SIGINT or SIGTERM as "terminate
        # now": it kills its ranks before rank 0 has written the steps they
        # trained. A terminal's Ctrl-C reaches it with the script: the script
        # passes on only what was sent to it alone.
        signals = self.dir / "signals"
        started = self.dir / "started"
        write_tool(self.tools, "mpirun", 'if [ "$1" = --version ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi\n'
                   f'n=0; trap \'n=$((n + 1)); echo "$n" > {shlex.quote(str(signals))}\' INT TERM HUP\n'
                   f'touch {shlex.quote(str(started))}\n'
                   # Up to 60 s; 3 s after the first signal (a second would come in them), exit 1.
                   'i=0; until [ $i -ge 600 ] || [ $i -ge "${end:-600}" ]; do\n'
                   '  if [ $n -gt 0 ] && [ -z "${end:-}" ]; then end=$((i + 30)); fi\n'
                   '  sleep 0.1; i=$((i + 1))\ndone\nexit 1\n')
        args = ["--binary", "/bin/true", "--ranks", "1", "--out", str(self.dir / "sweep"), "--no-report"]
        code, err = self.ctrl_c_once_started(args, started, 20)
        self.assertEqual(code, 130, err)
        self.assertEqual(signals.read_text(), "1\n", "a group's Ctrl-C")
        signals.unlink()
        started.unlink()
        code, err = self.ctrl_c_once_started(args, started, 20, to_script_alone=signal.SIGTERM)
        self.assertEqual(code, 143, err)
        self.assertEqual(signals.read_text(), "1\n", "SIGTERM to the script alone")
        self.assertIn("1 rank(s) interrupted (SIGTERM", err)


class CompareTests(LauncherSandbox):
    """compare_finetune.sh with real one-process runs of `tiny` through the
    mpirun stand-in; each side gets more ranks than this machine has cores."""

    def test_without_python3_says_so(self) -> None:
        # --target-tokens '1e9': expected a number was the message.
        bare = self.dir / "bare"
        bare.mkdir()
        (bare / "dirname").symlink_to(shutil.which("dirname"))
        done = run("/bin/bash", COMPARE, env={**self.env, "PATH": str(bare)}, timeout=20)
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertIn("python3 not found", done.stderr)
        self.assertNotIn("--target-tokens", done.stderr)

    def compare_command(self, out: Path, *args: str, gpus_per_node: int | None = None) -> list[str]:
        self.gpus = gpus_per_node or min(1024, (os.cpu_count() or 1) + 1)
        return ["bash", str(COMPARE), "--binary", str(BINARY), "--config", "tiny", "--gpus-per-node", str(self.gpus),
                "--nodes", "2", "--steps", "3", "--set", "train.warmup_steps=1", "--set", "train.threads=1",
                "--set", "report.progress_every=0", *args, "--out", str(out)]

    def compare(self, out: Path, *args: str, extra_env: dict[str, str] | None = None,
                gpus_per_node: int | None = None) -> subprocess.CompletedProcess[str]:
        return run(*self.compare_command(out, *args, gpus_per_node=gpus_per_node),
                   env={**self.env, **(extra_env or {})}, timeout=120)

    def setUp(self) -> None:
        super().setUp()
        require_binary()

    def test_bad_counts_and_folders_for_files_are_refused_before_the_folder(self) -> None:
        # A --gpus-per-node past plan's 1024 failed in the plan, after the
        # output folder was made, in many lines; a folder as --binary or
        # --hostfile in bash's and sed's words (exit 126, 4); an empty
        # --steps ran the default.
        folder = self.dir / "a-folder"
        folder.mkdir()
        base = ["bash", COMPARE, "--config", "tiny", "--nodes", "1"]
        for args, code, words in ((["--gpus-per-node", "99999999999999999999"], 2, "an integer from 1 to 1024"),
                                  (["--gpus-per-node", "1025"], 2, "--gpus-per-node '1025'"),
                                  (["--gpus-per-node", "1", "--steps", ""], 2, "--steps '': an empty value"),
                                  (["--gpus-per-node", "1", "--binary", str(folder)], 3, "not an executable"),
                                  (["--gpus-per-node", "1", "--hostfile", str(folder)], 2, "not a file it can read")):
            with self.subTest(args=args):
                binary = [] if "--binary" in args else ["--binary", str(BINARY)]
                done = run(*base, *binary, *args, "--out", self.dir / "never", env=self.env, timeout=60)
                self.assert_refused(done, words, code=code)
                self.assertFalse((self.dir / "never").exists())
                self.assertEqual(self.mpirun_calls(), [])

    def test_each_sides_settings_are_checked_before_anything_runs(self) -> None:
        # --steps within the warm-up, or a bad key in one side's --set, was met
        # by the LoRA run after both plans, its message among mpirun's lines.
        base = ["bash", COMPARE, "--binary", BINARY, "--config", "tiny", "--gpus-per-node", "1", "--nodes", "1"]
        for args, named in ((["--steps", "3"], "must be < train.steps (3)"),
                            (["--lora-set", "lora.rnak=4"], "lora.rnak"),
                            (["--full-set", "train.micro_batch=0"], "train.micro_batch")):
            with self.subTest(args=args):
                done = run(*base, *args, "--out", self.dir / "never", env=self.env, timeout=60)
                self.assert_refused(done, named)
                self.assertFalse((self.dir / "never").exists())
                self.assertEqual(self.mpirun_calls(), [])

    def test_a_sides_setting_is_named_as_typed(self) -> None:
        # --lora-set lora.rank=0 was refused as "--set lora.rank=0: ...".
        base = ["bash", COMPARE, "--binary", BINARY, "--config", "tiny", "--gpus-per-node", "1", "--nodes", "1"]
        for args, named in ((["--lora-set", "lora.rank=0"], "--lora-set lora.rank=0: "),
                            (["--full-set", "train.micro_batch=0"], "--full-set train.micro_batch=0: "),
                            (["--set", "lora.rank=4", "--lora-set", "lora.rank=0"], "--lora-set lora.rank=0: "),
                            (["--lora-set", "lora.rank=0", "--set", "lora.rank=0"], "--lora-set lora.rank=0: "),
                            # A --set that begins as a side's does stays a --set.
                            (["--set", "lora.rank=1x", "--lora-set", "lora.rank=1"], "--set lora.rank=1x: "),
                            (["--lora-set", "lora.rank=1", "--set", "train.micro_batch=0"],
                             "--set train.micro_batch=0: ")):
            with self.subTest(args=args):
                done = run(*base, *args, "--out", self.dir / "never", env=self.env, timeout=60)
                self.assert_refused(done, "compare_finetune.sh: " + named)
                self.assertFalse((self.dir / "never").exists())

    def earlier_comparison(self, out: Path) -> tuple[list[str], dict[str, str]]:
        """A whole comparison in `out`, with an earlier full.aborted.json
        beside it: the files a failed rerun must leave as they are, and their digests."""
        first = self.compare(out, gpus_per_node=1)
        self.assertEqual(first.returncode, 0, first.stderr)
        (out / "full.aborted.json").write_text('{"earlier": "partial"}\n')
        kept = ["lora.json", "full.json", "compare.md", "plan-lora.json", "plan-full.json", "lora.log", "full.log",
                "full.aborted.json"]
        return kept, digests(out, kept)

    def test_an_aborted_runs_partial_result_is_set_aside_and_named(self) -> None:
        # A full run an abort ended left full.aborted.json beside the earlier
        # comparison put back, unnamed, written over the earlier one there.
        out = self.dir / "out"
        kept, earlier = self.earlier_comparison(out)
        # The full run (2 ranks) aborts as rank 0 does: its steps in full.aborted.json, exit 3.
        mpirun = write_tool(self.dir / "abort", "mpirun", 'if [ "$1" = -np ] && [ "$2" = 2 ]; then\n'
                            '  while [ $# -gt 0 ]; do if [ "$1" = --out ]; then result=$2; fi; shift; done\n'
                            '  echo \'{"this": "rerun"}\' > "${result%.json}.aborted.json"\n'
                            '  echo "trainbench: comm timeout" >&2; exit 3\nfi\n' + FAKE_MPIRUN)
        done = self.compare(out, gpus_per_node=1, extra_env={"MPIRUN": str(mpirun)})
        self.assertEqual(done.returncode, 3, done.stderr)
        self.assertEqual(digests(out, kept), earlier)
        self.assertEqual(json.loads((out / "full.failed.aborted.json").read_text()), {"this": "rerun"})
        self.assertIn(f"full: its partial result (the steps it completed) is {out}/full.failed.aborted.json",
                      done.stderr)
        self.assertTrue((out / "lora.unpaired.json").is_file())
        self.assertFalse(list(out.glob("*.previous")))

    def test_a_signal_to_the_script_alone_stops_the_running_step(self) -> None:
        # SIGTERM to compare_finetune.sh's pid alone set a flag that bash read
        # once the step's mpirun had ended: the run trained to its end, then
        # the comparison said "interrupted" and filed its complete result as
        # failed (full.failed.json). Passed on, it stops the run as a group's
        # Ctrl-C does, its partial result set aside and named.
        out = self.dir / "out"
        kept, earlier = self.earlier_comparison(out)
        # The full run (2 ranks) trains long.
        write_tool(self.tools, "mpirun", LONG_2_RANK_MPIRUN, shell="/bin/bash")
        code, err, seconds, run_pid = self.signal_the_script_alone(
            self.compare_command(out, "--set", "checkpoint.every_steps=0", "--set", "report.progress_every=10",
                                 gpus_per_node=1), out / "full.log")
        self.assertEqual(code, 143, err)
        self.assertLess(seconds, 20, err)
        self.assertFalse(running(run_pid), "the run was left running")
        self.assertIn("full interrupted (SIGTERM", err)
        self.assertEqual(digests(out, kept), earlier)
        partial = json.loads((out / "full.failed.aborted.json").read_text())
        self.assertEqual(partial["schema"], "trainbench.aborted_run/v1")
        self.assertEqual(partial["aborted"]["exit_code"], 143)
        self.assertIn(f"full: its partial result (the steps it completed) is {out}/full.failed.aborted.json", err)
        self.assertTrue((out / "lora.unpaired.json").is_file())
        self.assertFalse(list(out.glob("*.previous")))
        # No complete result filed as failed.
        self.assertFalse((out / "full.failed.json").exists())
        self.assertNotIn("the steps before it stopped", err)
        self.assertIn("step(s) it trained are in", (out / "full.failed.log").read_text())

    def test_a_failed_plan_leaves_no_empty_result(self) -> None:
        # Its stdout file was kept as plan-lora.failed.json, 0 bytes, named
        # as "its result (the steps before it stopped)".
        binary = write_tool(self.dir / "bin2", "trainbench",
                            'case " $* " in *" --json "*) echo "plan failed" >&2; exit 5 ;; esac\nexit 0\n')
        out = self.dir / "out"
        done = run("bash", COMPARE, "--binary", binary, "--gpus-per-node", "1", "--nodes", "1", "--out", out,
                   env=self.env, timeout=60)
        self.assertEqual(done.returncode, 5, done.stderr)
        self.assertFalse((out / "plan-lora.failed.json").exists())
        self.assertFalse((out / "plan-lora.json").exists())
        self.assertNotIn("its result", done.stderr)
        self.assertTrue((out / "plan-lora.failed.log").is_file())

    def test_ranks_past_the_cores_are_oversubscribed_and_logs_open_with_the_launch(self) -> None:
        # mpirun refused 8 and 16 ranks on one machine ("not enough slots"),
        # and each log opened with "launch 1 8 ...", not the mpirun line.
        out = self.dir / "out with space"
        done = self.compare(out)
        self.assertEqual(done.returncode, 0, done.stderr)
        calls = self.mpirun_calls()
        self.assertEqual([c[:3] for c in calls], [["-np", str(self.gpus), "--oversubscribe"],
                                                   ["-np", str(2 * self.gpus), "--oversubscribe"]])
        for name, ranks in (("lora", self.gpus), ("full", 2 * self.gpus)):
            first = (out / f"{name}.log").read_text().splitlines()[0]
            words = shlex.split(first)
            self.assertEqual(words[:5], [str(self.mpirun), "-np", str(ranks), "--oversubscribe", str(BINARY)])
            self.assertEqual(words[-2:], ["--out", str(out / f"{name}.json")])
            self.assertIn(f"{name}: {first}", done.stdout)
        self.assertEqual(shlex.split((out / "plan-lora.log").read_text().splitlines()[0])[:3],
                         [str(BINARY), "plan", "tiny"])

    def test_a_plans_stderr_stays_out_of_its_json(self) -> None:
        # plan-*.json was cut from the log of stdout and stderr together: a
        # warning after the JSON made it unreadable to report.py.
        wrapper = write_tool(self.dir / "wrap", "trainbench",
                             f'"{BINARY}" "$@"; code=$?\n'
                             '[ "$1" = plan ] && echo "trainbench: warning: said after the plan" >&2\n'
                             'exit $code\n')
        out = self.dir / "out"
        done = run("bash", COMPARE, "--binary", wrapper, "--config", "tiny", "--gpus-per-node", "1", "--nodes", "1",
                   "--steps", "3", "--set", "train.warmup_steps=1", "--set", "train.threads=1", "--set",
                   "report.progress_every=0", "--out", out, env=self.env, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        for side in ("lora", "full"):
            self.assertIsInstance(json.loads((out / f"plan-{side}.json").read_text()), dict)
            self.assertIn("warning: said after the plan", (out / f"plan-{side}.log").read_text())

    def test_a_hostfile_is_checked_and_decides_the_slots(self) -> None:
        done = self.compare(self.dir / "never", "--hostfile", str(self.dir / "no-such-hostfile"))
        self.assert_refused(done, "--hostfile")
        self.assertFalse((self.dir / "never").exists())
        hostfile = self.dir / "hosts"
        hostfile.write_text("localhost slots=1024\n")
        done = self.compare(self.dir / "out", "--hostfile", str(hostfile), gpus_per_node=2)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual([c[:4] for c in self.mpirun_calls()], [["-np", "2", "--hostfile", str(hostfile)],
                                                                 ["-np", "4", "--hostfile", str(hostfile)]])
        self.assertNotIn("--oversubscribe", sum(self.mpirun_calls(), []))

    def test_several_hosts_need_a_shared_checkpoint_folder(self) -> None:
        hostfile = self.dir / "hosts"
        hostfile.write_text("node1 slots=8\nnode2 slots=8\n")
        done = self.compare(self.dir / "never", "--hostfile", str(hostfile))
        self.assert_refused(done, "2 hosts", "checkpoint.dir")
        self.assertEqual(self.mpirun_calls(), [])
        self.assertFalse((self.dir / "never").exists())
        # Checkpoints off on one side only: still refused. Off on both sides
        # (each by its own --*-set) needs no shared folder: it was refused.
        off = "checkpoint.every_steps=0"
        done = self.compare(self.dir / "never", "--hostfile", str(hostfile), "--lora-set", off)
        self.assert_refused(done, "2 hosts", "checkpoint.dir")
        done = self.compare(self.dir / "off", "--hostfile", str(hostfile), "--lora-set", off, "--full-set", off)
        self.assertNotIn("2 hosts", done.stderr)
        self.assertEqual(len(self.mpirun_calls()), 2, done.stderr)

    def test_srun_runs_inside_an_allocation_of_the_nodes_and_kills_on_a_bad_exit(self) -> None:
        # Outside an allocation srun made its own, without GPUs; a short one
        # failed at the full run, after the whole LoRA run; a dead rank left
        # its peers waiting comm.timeout_s.
        srun_log = self.dir / "srun.log"
        write_tool(self.tools, "srun", f'printf "%s\\n" "$@" >> "{srun_log}"; echo --- >> "{srun_log}"\n'
                   'while [ $# -gt 0 ]; do case "$1" in --nodes|--ntasks|--ntasks-per-node) shift 2 ;;'
                   ' --*) shift ;; *) break ;; esac; done\nexec "$@"\n')
        off = ("--set", "checkpoint.every_steps=0")
        done = self.compare(self.dir / "never", "--launcher", "srun", *off, gpus_per_node=1,
                            extra_env={"SLURM_JOB_ID": ""})
        self.assert_refused(done, "--launcher srun runs inside a Slurm allocation of --nodes 2")
        done = self.compare(self.dir / "never", "--launcher", "srun", *off, gpus_per_node=1,
                            extra_env={"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1"})
        self.assert_refused(done, "--nodes 2: this Slurm allocation (job 7) has 1 node(s)")
        self.assertFalse(srun_log.exists())
        done = self.compare(self.dir / "out", "--launcher", "srun", *off, gpus_per_node=1,
                            extra_env={"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2"})
        self.assertEqual(done.returncode, 0, done.stderr)
        calls = [c.splitlines() for c in srun_log.read_text().split("---\n") if c.strip()]
        self.assertEqual(len(calls), 2, calls)
        for call in calls:
            self.assertEqual(call[:2], ["--mpi=pmix", "--kill-on-bad-exit=1"])

    def test_a_checkpoint_folder_from_the_home_folder_is_there(self) -> None:
        # --set checkpoint.dir=~/ck is one word no shell expands: it became
        # $PWD/~/ck here (scale.sh read it as trainbench does).
        home = self.dir / "home"
        home.mkdir()
        done = self.compare(self.dir / "out", "--set", "checkpoint.dir=~/ck", gpus_per_node=1,
                            extra_env={"HOME": str(home)})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"checkpoints: LoRA in {home}/ck/lora-", done.stderr + done.stdout)
        self.assertEqual(sorted(p.name.split("-")[0] for p in (home / "ck").iterdir()), ["full", "lora"])

    def test_a_failed_rerun_keeps_the_earlier_comparison(self) -> None:
        # A rerun overwrote lora.json and full.json even when a run failed,
        # and the earlier compare.md stayed beside numbers neither held.
        out = self.dir / "out"
        first = self.compare(out, gpus_per_node=1)
        self.assertEqual(first.returncode, 0, first.stderr)
        kept = ["lora.json", "full.json", "compare.md", "plan-lora.json", "plan-full.json", "lora.log", "full.log"]
        earlier = digests(out, kept)
        # The full fine-tuning run fails its loss check (exit 4).
        done = self.compare(out, "--full-set", "train.lr=1e38", gpus_per_node=1)
        self.assertEqual(done.returncode, 4, done.stderr)
        self.assertEqual(digests(out, kept), earlier)
        failed = json.loads((out / "full.failed.json").read_text())
        self.assertIn(("loss_finite", False), [(c["name"], c["passed"]) for c in failed["checks"]])
        self.assertIn("loss_finite", (out / "full.failed.log").read_text())
        # Its LoRA run finished: kept, apart, and named.
        unpaired = json.loads((out / "lora.unpaired.json").read_text())
        self.assertEqual(unpaired["config"]["train"]["mode"], "lora")
        self.assertFalse(list(out.glob("*.previous")))
        self.assertIn(f"{out}/full.failed.json", done.stderr)
        self.assertIn(f"{out}/lora.unpaired.json", done.stderr)
        self.assertIn("the earlier comparison is kept: ", done.stderr)
        self.assertIn(f"{out}/compare.md", done.stderr.split("the earlier comparison is kept: ")[1])
        # Now the LoRA run fails: the full run does not start.
        done = self.compare(out, "--lora-set", "train.lr=1e38", gpus_per_node=1)
        self.assertEqual(done.returncode, 4, done.stderr)
        self.assertEqual(digests(out, kept), earlier)
        self.assertTrue((out / "lora.failed.json").is_file())
        self.assertNotIn("compare_finetune.sh: full:", done.stdout)
        # A fresh comparison into an empty folder that fails leaves no compare.md.
        fresh = self.dir / "fresh"
        done = self.compare(fresh, "--full-set", "train.lr=1e38", gpus_per_node=1)
        self.assertEqual(done.returncode, 4, done.stderr)
        self.assertFalse((fresh / "compare.md").exists())
        self.assertFalse((fresh / "lora.json").exists())
        self.assertTrue((fresh / "lora.unpaired.json").is_file())
        self.assertIn("no compare.md: there was no earlier comparison", done.stderr)
        # And a successful rerun replaces the earlier comparison whole.
        done = self.compare(out, gpus_per_node=1)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotEqual(digests(out, ["lora.json", "full.json", "compare.md"]),
                            {k: earlier[k] for k in ("lora.json", "full.json", "compare.md")})
        self.assertFalse(list(out.glob("*.previous")))


if __name__ == "__main__":
    from run_as_ctest import main
    sys.exit(main(__name__))
