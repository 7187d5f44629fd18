#!/usr/bin/env python3
"""Tests of scripts/scale.sh and scripts/report.py.

SweepTests makes a real sweep: `tiny` at 1, 2 and 4 MPI ranks on this machine
(oversubscribed), through scripts/scale.sh, which runs report.py over the
results; the tests read the report and the plots. It needs the trainbench
binary built with the MPI backend ($TRAINBENCH_BINARY, else build/trainbench)
and mpirun ($MPIRUN, else on PATH); without them it skips. The other classes
need no mpirun: report.py's errors, its reading of results with and without the
per-rank records, scale.sh's argument checks. Some of ResultReadingTests edit a
real 1-rank result the binary writes (no launcher needed) and skip, saying so,
where it is not built.

SlurmTests starts a one-node Slurm here (scripts/slurm/local_cluster.sh, as
root) and sends the same kind of sweep through `scale.sh --slurm`; without
Slurm it skips.

    python3 tests/scripts/test_report.py                 # all
    python3 tests/scripts/test_report.py SweepTests      # one class

Run as a script, it exits 77 (CTest: skipped) when every test it ran skipped.
"""

from __future__ import annotations

import copy
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCALE = REPO / "scripts" / "scale.sh"
COMPARE = REPO / "scripts" / "compare_finetune.sh"
REPORT = REPO / "scripts" / "report.py"
BINARY = Path(os.environ.get("TRAINBENCH_BINARY") or REPO / "build" / "trainbench")
MPIRUN = os.environ.get("MPIRUN") or "mpirun"
PLOTS = ["tokens_per_s.png", "scaling_efficiency.png", "stall_shares.png", "step_time_spread.png"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False,
                          env=env)


def report(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, REPORT, *args)


def require_binary_and_mpirun(what: str) -> None:
    """Skips the class (reason printed) where the binary or mpirun is missing."""
    if not os.access(BINARY, os.X_OK):
        raise unittest.SkipTest(f"{BINARY} is not built")
    if not shutil.which(MPIRUN):
        raise unittest.SkipTest(f"{MPIRUN} not found: {what} needs an MPI launcher")


def markdown_table(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first table under `heading`, as {column: cell}."""
    lines = text.splitlines()
    block = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("|"):
            block.append(line)
        elif block or line.startswith("#"):
            break
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block]
    header, body = cells[0], cells[2:]
    return [dict(zip(header, row)) for row in body]


def has_matplotlib() -> bool:
    return subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True).returncode == 0


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    if data[:8] != PNG_MAGIC or data[12:16] != b"IHDR":
        raise AssertionError(f"{path}: not a PNG (starts {data[:16]!r})")
    return struct.unpack(">II", data[16:24])


# A result as `trainbench run --out` writes it, cut to what report.py reads.
def fake_result(ranks: int, tokens_per_s: float, step_s: float = 0.1) -> dict:
    return {
        "schema": "trainbench.result/v1",
        "version": "test",
        "command": f"mpirun -np {ranks} trainbench run tiny",
        "config": {"model": {"d_model": 64, "n_layers": 2}, "train": {"micro_batch": 8, "steps": 20},
                   "report": {"out": f"r{ranks}.json"}},
        "environment": {"ranks": ranks, "hosts": ["a"], "compute_backend": "cpu", "comm_backend": "mpi"},
        "summary": {
            "tokens_per_s": tokens_per_s, "global_tokens_per_step": 512 * ranks,
            "step_s": {"median": step_s, "p10": step_s * 0.9, "p90": step_s * 1.2},
            "stall_shares": {"compute": 0.6, "comm_exposed": 0.3, "data_stall": 0.05, "ckpt_stall": 0.0,
                             "other": 0.05},
            "slowest_rank": ranks - 1, "mfu": None, "mfu_vs_gemm_ceiling": 0.5,
        },
        "steps": [{"step": i, "step_s": step_s * (1 + 0.01 * i), "warmup": i < 2} for i in range(1, 9)],
        "checks": [], "warnings": [],
    }


# A result of a run a failure stopped before its first step after warm-up, as
# the binary writes it (docs/metrics.md): tokens/s and the step figures null.
NO_BATCH = "data: no batch from reader 0 of rank 0 within data.timeout_s = 1 s"


def unmeasured_result(ranks: int) -> dict:
    result = fake_result(ranks, 1000.0)
    result["summary"].update(tokens_per_s=None, measured_steps=0, warmup_steps=0, slowest_rank=None, mfu=None,
                             mfu_vs_gemm_ceiling=None, step_s={"median": None, "p10": None, "p90": None},
                             stall_shares={key: None for key in result["summary"]["stall_shares"]})
    result["steps"] = []
    result["ranks"] = [{"rank": r, "host": "a", "step_s": None, "own_s": None, "compute_s": None}
                       for r in range(ranks)]
    result["checks"] = [{"name": "loss_finite", "passed": True, "detail": "every step's loss is finite"},
                        {"name": "data_read", "passed": False, "detail": NO_BATCH}]
    return result


# Real results, as `trainbench run --out` writes them: `tiny` on one rank
# (no launcher needed), timed and with report.instrument=false, made once per
# process. Tests that edit one (into more ranks, other shares) skip, with the
# reason, where the binary is not built.
_REAL_RESULTS: dict[bool, dict] = {}


def real_result(instrument: bool = True) -> dict:
    if not os.access(BINARY, os.X_OK):
        raise unittest.SkipTest(f"{BINARY} is not built: these tests edit a result it writes")
    if instrument not in _REAL_RESULTS:
        folder = Path(tempfile.mkdtemp(prefix="test_report_real_"))
        try:
            out = folder / "result.json"
            done = run(BINARY, "run", "tiny", "--steps", "8", "--set", "train.warmup_steps=2",
                       "--set", "train.threads=1", "--set", "report.progress_every=0",
                       "--set", f"report.instrument={'true' if instrument else 'false'}", "--out", out, timeout=300)
            if done.returncode != 0:
                raise AssertionError(f"{BINARY} run tiny failed (exit {done.returncode}): {done.stderr[-2000:]}")
            _REAL_RESULTS[instrument] = json.loads(out.read_text())
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return copy.deepcopy(_REAL_RESULTS[instrument])


def as_ranks(result: dict, own_share: list[float]) -> dict:
    """A real 1-rank result made into len(own_share) ranks as the binary
    writes them: every rank's step_s the same (the all-reduce ends every
    step together), its own work (own_s) `own_share` of it, the rest waited
    in the collectives (comm_exposed_s)."""
    result = copy.deepcopy(result)
    world = len(own_share)
    [record] = result["ranks"]
    step = record["step_s"]
    result["environment"]["ranks"] = world
    result["environment"]["hosts"] = [f"node{r}" for r in range(world)]
    result["summary"]["global_tokens_per_step"] *= world
    result["ranks"] = [dict(record, rank=r, host=f"node{r}", own_s=step * share, comm_exposed_s=step * (1 - share))
                       for r, share in enumerate(own_share)]
    return result


# In a file written by damaged(), this string (quoted) is replaced by raw JSON
# text: NaN, 1e400 and the like, which json.dumps cannot write.
RAW = "@raw@"


def damaged(result: dict, field: str, value: object) -> dict:
    """A copy of `result` with `field` (dotted, list items by index) set to `value`."""
    result = copy.deepcopy(result)
    keys = [int(k) if k.isdigit() else k for k in field.split(".")]
    node = result
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return result


def write_json(path: Path, data: object, raw: str | None = None) -> Path:
    text = json.dumps(data)
    if raw is not None:
        text = text.replace(json.dumps(RAW), raw)
    path.write_text(text)
    return path


def lora_and_full() -> tuple[dict, dict]:
    lora, full = fake_result(1, 1000.0), fake_result(2, 1500.0)
    lora["config"]["train"]["mode"] = "lora"
    full["config"]["train"]["mode"] = "full"
    full["checkpoints"] = [{"step": 10, "status": "committed", "bytes": 4096}]
    full["summary"]["memory_per_rank"] = {"total_bytes": 2 ** 30}
    return lora, full


# `tiny`'s model shape (configs/tiny.yaml): 164,160 parameters.
TINY_SHAPE = {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 192, "vocab": 512,
              "seq_len": 64}

# `trainbench plan --json`, cut to what report.py reads.
PLAN = {"config": "tiny", "gpus_per_node": 1, "nodes": 2,
        "rows": [{"mode": mode, "gpus": 2, "total_bytes": 2 ** 30, "fits": True}
                 for mode in ("full (DDP)", "full (ZeRO-1)", "lora")]}


class ReportErrorTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="test_report_"))
        self.addCleanup(shutil.rmtree, self.dir)
        # A report from before: a refused input must leave it as it is.
        self.out = self.dir / "out"
        self.out.mkdir()
        (self.out / "report.md").write_text("the previous report\n")

    def assert_refused(self, result: subprocess.CompletedProcess[str], *words: str) -> None:
        """Exit 2, one line naming `words` (the file, the field), nothing written to self.out."""
        self.assert_one_line_error(result, *words)
        self.assertEqual((self.out / "report.md").read_text(), "the previous report\n")
        self.assertEqual(sorted(p.name for p in self.out.iterdir()), ["report.md"])

    def refuse_result(self, result: dict, *words: str, raw: str | None = None) -> None:
        """`result` beside a good 2-rank result: refused, naming its file and `words`."""
        good = write_json(self.dir / "good.json", fake_result(2, 1800.0))
        bad = write_json(self.dir / "bad.json", result, raw)
        self.assert_refused(report(good, bad, "--out", self.out), str(bad), *words)

    def assert_one_line_error(self, result: subprocess.CompletedProcess[str], *words: str) -> None:
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertEqual(result.stdout, "")
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith("report.py: "), lines[0])
        for word in words:
            self.assertIn(word, lines[0])

    def test_a_file_that_is_not_json(self) -> None:
        bad = self.dir / "notes.json"
        bad.write_text("tokens/s: lots\n")
        self.assert_one_line_error(report(bad, "--out", self.dir), str(bad), "not JSON", "line 1")
        self.assertFalse((self.dir / "report.md").exists())

    def test_a_missing_file(self) -> None:
        self.assert_one_line_error(report(self.dir / "nope.json"), "nope.json", "no such file")

    def test_another_schema(self) -> None:
        other = self.dir / "comm.json"
        other.write_text(json.dumps({"schema": "trainbench.bench_comm/v1", "ranks": 2}))
        self.assert_one_line_error(report(other), "comm.json", "trainbench.bench_comm/v1", "trainbench.result/v1")

    def test_a_result_without_tokens_per_s(self) -> None:
        result = fake_result(1, 1000.0)
        del result["summary"]["tokens_per_s"]
        path = self.dir / "cut.json"
        path.write_text(json.dumps(result))
        self.assert_one_line_error(report(path), "cut.json", "summary.tokens_per_s")

    def test_a_folder_without_results(self) -> None:
        self.assert_one_line_error(report(self.dir), "no *.json")

    def test_bad_arguments(self) -> None:
        self.assert_one_line_error(report())
        self.assert_one_line_error(report("--bogus", self.dir))

    def test_fields_of_the_wrong_type(self) -> None:
        good = fake_result(1, 1000.0)
        for field, value, named in (
                ("summary.tokens_per_s", "fast", "summary.tokens_per_s"),
                ("summary.tokens_per_s", [1000.0], "summary.tokens_per_s"),
                ("summary.tokens_per_s", {"median": 1000.0}, "summary.tokens_per_s"),
                ("summary.step_s", "0.1", "summary.step_s"),
                ("summary.step_s", {"median": [0.1]}, "summary.step_s.median"),
                ("summary.stall_shares", [0.6, 0.3], "summary.stall_shares"),
                ("summary.stall_shares.compute", "60%", "summary.stall_shares.compute"),
                ("summary.bottleneck", 7, "summary.bottleneck"),
                ("summary.slowest_rank", "3", "summary.slowest_rank"),
                ("summary.mfu_vs_gemm_ceiling", "high", "summary.mfu_vs_gemm_ceiling"),
                ("summary", [], "summary"),
                ("environment", ["a"], "environment"),
                ("environment.hosts", "a,b", "environment.hosts"),
                ("environment.hosts", [["a"]], "environment.hosts[0]"),
                ("environment.gpus", [{"name": 80}], "environment.gpus[0].name"),
                ("config", [], "config"),
                ("config", "tiny", "config"),
                ("config.train", 8, "config.train"),
                ("config.model.d_model", "64", "config.model.d_model"),
                ("ranks", {"0": {"step_s": 0.1}}, "ranks"),
                ("ranks", ["rank 0"], "ranks[0]"),
                ("ranks", [{"rank": 0, "step_s": 0.1}, {"rank": 1, "step_s": "slow"}], "ranks[1].step_s"),
                ("ranks", [{"rank": [1], "step_s": 0.1}], "ranks[0].rank"),
                ("steps", [{"step": 1, "step_s": {"median": 0.1}, "warmup": False}], "steps[0].step_s"),
                ("steps", [{"step": 1, "step_s": 0.1, "warmup": "no"}], "steps[0].warmup"),
                ("checks", True, "checks"),
                ("warnings", "one", "warnings"),
                ("ceilings", {"compute": 5}, "ceilings.compute"),
                ("ceilings", {"compute": {"tokens_per_s": "many"}}, "ceilings.compute.tokens_per_s"),
                ("ceilings", {"network": {"collectives": 3}}, "ceilings.network.collectives")):
            with self.subTest(field=field, value=value):
                self.refuse_result(damaged(good, field, value), named)

    def test_booleans_are_not_numbers(self) -> None:
        good = fake_result(1, 1000.0)
        for field in ("summary.tokens_per_s", "summary.step_s", "environment.ranks", "summary.mfu",
                      "summary.global_tokens_per_step", "ranks"):
            with self.subTest(field=field):
                result = damaged(good, field, [{"rank": 0, "step_s": True}] if field == "ranks" else True)
                self.refuse_result(result, "ranks[0].step_s" if field == "ranks" else field, "true")

    def test_numbers_no_run_has(self) -> None:
        good = fake_result(1, 1000.0)
        # Python's json reads NaN and Infinity, makes 1e400 inf and 10**400 an int no float holds
        # (past 4300 digits it raises): each names its field.
        for field, raw in (("summary.tokens_per_s", "NaN"), ("summary.tokens_per_s", "Infinity"),
                           ("summary.step_s.median", "-Infinity"), ("summary.tokens_per_s", "1e400"),
                           ("summary.tokens_per_s", "1" + "0" * 400), ("summary.mfu", "9" * 5000),
                           ("config.train.lr", "NaN"), ("ranks", "[{\"rank\": 0, \"step_s\": 1e999}]")):
            with self.subTest(field=field, raw=raw[:20]):
                named = "ranks[0].step_s" if field == "ranks" else field
                self.refuse_result(damaged(good, field, RAW), named, raw=raw)
        for field, value in (("summary.tokens_per_s", 0), ("summary.tokens_per_s", -1000.0),
                             ("summary.tokens_per_s", 1e300), ("summary.step_s.median", -0.1),
                             ("summary.step_s", -0.1), ("summary.stall_shares.compute", -0.5),
                             ("environment.ranks", 0), ("environment.ranks", 2 ** 31),
                             ("summary.slowest_rank", -1), ("steps.3.step_s", -0.01),
                             ("summary.global_tokens_per_step", -512)):
            with self.subTest(field=field, value=value):
                self.refuse_result(damaged(good, field, value), field.replace(".3.", "[3]."))

    def test_a_result_version_this_script_does_not_read(self) -> None:
        # Only the versions report.py knows: a later one may change what a field means.
        for schema in ("trainbench.result/v9", "trainbench.result/v2", "trainbench.result/v0",
                       "trainbench.result/", "trainbench.result/v1.1"):
            with self.subTest(schema=schema):
                self.refuse_result(damaged(fake_result(1, 1000.0), "schema", schema), "schema", json.dumps(schema),
                                   "trainbench.result/v1")

    def test_stall_shares_no_run_has(self) -> None:
        good = fake_result(1, 1000.0)  # compute 0.6, comm_exposed 0.3, data_stall 0.05, ckpt 0, other 0.05
        for field, value in (("compute", 5), ("compute", 1.01), ("data_stall", -0.01), ("ckpt_stall", 2),
                             ("other", -1.5), ("other", 1.5)):
            with self.subTest(field=field, value=value):
                shares = damaged(good, f"summary.stall_shares.{field}", value)
                self.refuse_result(shares, f"summary.stall_shares.{field}", "a share from")
        # Each in range, but not adding up to 1 (a share is a category's time over the step's).
        for field, value, total in (("compute", 0.7, "1.1"), ("other", 0.0, "0.95"), ("comm_exposed", 0.0, "0.7")):
            with self.subTest(field=field, value=value):
                self.refuse_result(damaged(good, f"summary.stall_shares.{field}", value), "summary.stall_shares",
                                   f"add up to {total}", "expected 1")

    def test_stall_shares_as_runs_write_them(self) -> None:
        # Rounding in the sum, `other` below 0 where the categories double count
        # a little, and a missing or null share (no sum to check) are read.
        for shares in ({"compute": 0.6 + 1e-9, "comm_exposed": 0.3, "data_stall": 0.05, "ckpt_stall": 0.0,
                        "other": 0.05},
                       {"compute": 0.99, "comm_exposed": 0.03, "data_stall": 0.0, "ckpt_stall": 0.0, "other": -0.02},
                       {"compute": 0.6, "comm_exposed": 0.3, "data_stall": None, "ckpt_stall": 0.0, "other": 0.05},
                       {"compute": 0.6, "other": 0.05}):
            with self.subTest(shares=shares):
                result = damaged(fake_result(1, 1000.0), "summary.stall_shares", shares)
                done = report(write_json(self.dir / "r.json", result), "--out", self.out, "--no-plots")
                self.assertEqual(done.returncode, 0, done.stderr)

    def test_a_network_ceiling_names_the_collectives_it_timed(self) -> None:
        # run --ceilings writes ceilings.network.collectives, a word: it was refused as "expected a
        # number", and one such result stopped the whole report.
        result = fake_result(2, 1800.0)
        # Its busbw and what it timed (a list, refused as "expected a number" too) came later.
        timed = [{"collective": c, "bytes": 4096, "buckets": 1, "time_s": 0.001, "busbw_gbs": 2.048}
                 for c in ("reduce_scatter", "all_gather")]
        result["ceilings"] = {"network": {"tokens_per_s": 9000.0, "step_all_reduce_s": 0.002,
                                          "collectives": "reduce-scatter and all-gather", "busbw_gbs": 2.048,
                                          "timed": timed, "achieved_share": 0.2}}
        done = report(write_json(self.dir / "r.json", result), "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        text = (self.out / "report.md").read_text()
        self.assertIn("timed: reduce-scatter and all-gather", text)
        self.assertIn("step all reduce 2 ms", text)
        self.assertIn("busbw 2.05 GB/s", text)
        result["ceilings"]["network"]["timed"][1]["busbw_gbs"] = "fast"
        done = report(write_json(self.dir / "r.json", result), "--out", self.out, "--no-plots")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("ceilings.network.timed[1].busbw_gbs", done.stderr)

    def test_null_config_and_summary_fields_read_as_unknown_not_none(self) -> None:
        # Each may be null, as an absent one: they were printed as Python's "None"
        # ("d_model None", "None tokens/step", "None measured after 5 warm-up").
        result = fake_result(1, 1000.0)
        result["summary"].update(global_tokens_per_step=None, measured_steps=None, warmup_steps=None)
        result["config"]["model"]["d_model"] = None
        result["config"]["train"]["micro_batch"] = None
        result["environment"]["compute_backend"] = None
        done = report(write_json(self.dir / "r.json", result), "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        section = (self.out / "report.md").read_text().split("## Config and environment", 1)[1].split("<details>")[0]
        self.assertNotIn("None", section)
        for said in ("d_model ?, n_layers 2", "micro ? × accum ? per rank; ? tokens/step", "? measured after ? warm-up",
                     "engine / comm**: ? / mpi"):
            self.assertIn(said, section)

    def test_bench_compute_and_instrument_results_are_not_training_runs(self) -> None:
        # Their summary is the 2-step job the measurement ran in: it set the 1-rank ideal.
        run = write_json(self.dir / "run.json", fake_result(2, 1800.0))
        bench = fake_result(1, 99999.0)
        bench["compute_ceiling"] = {"tokens_per_s": 1000.0, "step_s": 0.5}
        compute = write_json(self.dir / "compute.json", bench)
        done = report(run, compute, "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"{compute}: left out: a `trainbench bench compute` result", done.stderr)
        self.assertNotIn("99999", (self.out / "report.md").read_text())
        del bench["compute_ceiling"]
        bench["instrumentation_cost"] = {"pairs": 4}
        alone = write_json(self.dir / "instrument.json", bench)
        self.assert_one_line_error(report(alone, "--out", self.dir / "other", "--no-plots"),
                                   "no training run among RESULTS", "bench instrument")

    def test_another_trainbench_output_in_a_folder_is_left_out_and_named_refused(self) -> None:
        # A sweep folder with a bench io result beside its runs: the whole
        # report was refused (exit 2) for it.
        folder = self.dir / "sweep"
        folder.mkdir()
        write_json(folder / "ranks-2.json", fake_result(2, 1800.0))
        io = write_json(folder / "io.json", {"schema": "trainbench.bench_io/v1", "by_threads": []})
        done = report(folder, "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"{io}: left out: schema is \"trainbench.bench_io/v1\"", done.stderr)
        self.assert_one_line_error(report(io, "--out", self.dir / "other", "--no-plots"),
                                   "schema is \"trainbench.bench_io/v1\"")
        # The binary's plan, as compare_finetune.sh writes it beside its runs:
        # without a schema it stopped the report.
        made = run(BINARY, "plan", "tiny", "--json")
        self.assertEqual(made.returncode, 0, made.stderr)
        plan = folder / "plan-lora.json"
        plan.write_text(made.stdout)
        done = report(folder, "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"{plan}: left out: schema is \"trainbench.plan/v1\"", done.stderr)
        # Not a trainbench file at all, or a result of another version: refused, folder or not.
        for name, schema in (("notes.json", "something/v1"), ("later.json", "trainbench.result/v2")):
            with self.subTest(schema=schema):
                write_json(folder / name, {"schema": schema})
                self.assert_one_line_error(report(folder, "--out", self.dir / "third", "--no-plots"), name)
                (folder / name).unlink()

    def test_step_times_and_tokens_per_step_of_zero(self) -> None:
        # A measured step takes time and a step trains on tokens.
        good = fake_result(2, 1800.0)
        good["ranks"] = [{"rank": r, "host": "a", "step_s": 0.1, "compute_s": 0.06, "other_s": 0.04} for r in (0, 1)]
        for field in ("summary.step_s.median", "summary.step_s.p10", "summary.step_s", "ranks.1.step_s",
                      "steps.3.step_s", "summary.global_tokens_per_step"):
            with self.subTest(field=field):
                named = field.replace(".1.", "[1].").replace(".3.", "[3].")
                self.refuse_result(damaged(good, field, 0), named, "is 0")

    def test_ranks_past_the_world_size(self) -> None:
        for ranks, field, value in ((1, "summary.slowest_rank", 7), (1, "summary.slowest_rank", 1),
                                    (2, "summary.slowest_rank", 2), (2, "ranks.1.rank", 2)):
            with self.subTest(ranks=ranks, field=field, value=value):
                result = fake_result(ranks, 1000.0 * ranks)
                result["ranks"] = [{"rank": r, "host": "a", "step_s": 0.1} for r in range(ranks)]
                self.refuse_result(damaged(result, field, value), field.replace(".1.", "[1]."), f"is {value}",
                                   f"from 0 to {ranks - 1}", f"environment.ranks is {ranks}")

    def test_unmeasured_step_times_are_shown_as_not_measured(self) -> None:
        # report.instrument=false times no step: older binaries wrote 0 for the
        # step times, the shares and the slowest rank, newer ones null. Both are
        # read, and shown as —, not as 0.
        zeros = fake_result(2, 1000.0)
        zeros["config"]["report"]["instrument"] = False
        zeros["summary"].update(step_s={"median": 0.0, "p10": 0.0, "p90": 0.0}, slowest_rank=0,
                                stall_shares={key: 0.0 for key in zeros["summary"]["stall_shares"]})
        zeros["ranks"] = [{"rank": r, "host": "a", "step_s": 0.0, "compute_s": 0.0, "other_s": 0.0} for r in (0, 1)]
        for step in zeros["steps"]:
            step["step_s"] = 0.0
        nulls = copy.deepcopy(zeros)
        nulls["summary"].update(step_s={"median": None, "p10": None, "p90": None}, slowest_rank=None,
                                stall_shares={key: None for key in zeros["summary"]["stall_shares"]})
        for rank in nulls["ranks"]:
            rank.update(step_s=None, compute_s=None, other_s=None)
        for step in nulls["steps"]:
            step["step_s"] = None
        for name, result in (("zeros", zeros), ("nulls", nulls)):
            with self.subTest(result=name):
                done = report(write_json(self.dir / f"{name}.json", result), "--out", self.dir / name, "--no-plots")
                self.assertEqual(done.returncode, 0, done.stderr)
                text = (self.dir / name / "report.md").read_text()
                row = markdown_table(text, "## Throughput and scaling")[0]
                self.assertEqual([row[k] for k in ("step median (ms)", "step p10 (ms)", "step p90 (ms)",
                                                   "slowest rank")], ["—"] * 4)
                shares = markdown_table(text, "## Where the step time goes")[0]
                self.assertEqual(set(shares.values()), {"2", "—"})
                self.assertNotIn("## Ranks at", text)
        # The same zeros in a run that timed its steps are no run's.
        del zeros["config"]["report"]["instrument"]
        self.refuse_result(zeros, "summary.step_s.median", "is 0")

    def test_nesting_past_what_a_result_has(self) -> None:
        deep = self.dir / "deep.json"
        deep.write_text("[" * 100000 + "]" * 100000)  # Python's json: RecursionError
        self.assert_refused(report(deep, "--out", self.out), str(deep), "nests deeper", "line 1 column 65")
        result = damaged(fake_result(1, 1000.0), "config.train.extra", RAW)
        self.refuse_result(result, "config.train.extra[0][0]", "nests deeper", raw="[" * 200 + "]" * 200)

    def test_empty_files_and_text_that_is_not_utf8(self) -> None:
        for name, data, words in (("empty.json", b"", ("empty file",)), ("blank.json", b" \n\t\n", ("empty file",)),
                                  ("latin1.json", b'{"schema": "trainbench.r\xe9sult/v1"}', ("not UTF-8", "0xe9")),
                                  ("utf16.json", "{}".encode("utf-16"), ("not UTF-8", "0xff"))):
            with self.subTest(name=name):
                (self.dir / name).write_bytes(data)
                self.assert_refused(report(self.dir / name, "--out", self.out), str(self.dir / name), *words)
        # A lone surrogate (\ud800) is valid JSON but no text: it could not be written to report.md.
        result = damaged(fake_result(1, 1000.0), "environment.hosts", [RAW])
        self.refuse_result(result, "environment.hosts[0]", "surrogate", raw='"\\ud800"')

    def test_folders_of_what_is_not_a_result(self) -> None:
        self.assert_refused(report(self.out, "--out", self.out), str(self.out), "no *.json")
        for name, make in (("sub.json", lambda p: p.mkdir()), ("pipe.json", os.mkfifo),
                           ("dangling.json", lambda p: p.symlink_to(self.dir / "nothing"))):
            with self.subTest(name=name):
                folder = self.dir / name.replace(".json", "")
                folder.mkdir()
                write_json(folder / "good.json", fake_result(1, 1000.0))
                make(folder / name)
                # A pipe would never end: the old script waited for it.
                self.assert_refused(run(sys.executable, REPORT, folder, "--out", self.out, timeout=30),
                                    str(folder / name), "not a regular file")
        for name in ("/dev/zero", "/dev/null"):
            if os.path.exists(name):
                with self.subTest(name=name):
                    self.assert_refused(report(name, "--out", self.out), name, "not a regular file")

    def test_a_newline_in_a_file_name_stays_on_the_line(self) -> None:
        folder = self.dir / "odd"
        folder.mkdir()
        (folder / "two\nlines.json").write_text("{}")
        self.assert_refused(report(folder, "--out", self.out), "two\\nlines.json", "schema is null")
        # A result of that name is read, and report.md names it on its one line.
        (folder / "two\nlines.json").unlink()
        write_json(folder / "two\nlines.json", fake_result(1, 1000.0))
        done = report(folder, "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        inputs = (self.out / "report.md").read_text().split("## Inputs\n\n", 1)[1]
        self.assertEqual(inputs.splitlines()[0], f"- 1 ranks: {folder}/two\\nlines.json")

    def test_unreadable_files_and_folders(self) -> None:
        # Root reads any file: as root (CI) report.py runs as nobody, through
        # setpriv and the system's python3 (root's own may sit under /root,
        # which nobody cannot enter). It was skipped there, so never ran.
        command: list[str | Path] = [sys.executable, REPORT]
        if os.geteuid() == 0:
            python = shutil.which("python3", path="/usr/bin:/bin")
            if shutil.which("setpriv") is None or python is None:
                self.skipTest("root reads any file, and setpriv or /usr/bin/python3 is missing to run as nobody")
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, REPORT]
            if run(*command, "--help").returncode != 0:
                self.skipTest(f"root reads any file, and nobody cannot run {REPORT} (a checkout nobody cannot read)")
            self.dir.chmod(0o755)  # nobody reaches the files, and is refused them
        locked = self.dir / "locked"
        locked.mkdir()
        write_json(locked / "r.json", fake_result(1, 1000.0))
        secret = write_json(self.dir / "secret.json", fake_result(1, 1000.0))
        secret.chmod(0)
        self.assert_refused(run(*command, secret, "--out", self.out), str(secret), "cannot read it")
        locked.chmod(0)
        self.addCleanup(locked.chmod, 0o755)
        self.assert_refused(run(*command, locked, "--out", self.out), str(locked), "cannot list")

    def test_bad_command_lines(self) -> None:
        good = write_json(self.dir / "r.json", fake_result(1, 1000.0))
        regular = self.dir / "regular"
        regular.write_text("not a folder\n")
        for args, words in (([good, "--out", regular, "--no-plots"], ("--out", str(regular), "not a folder")),
                            ([good, "--out", regular / "sub", "--no-plots"], ("--out", str(regular / "sub"))),
                            ([good, "--out", "", "--no-plots"], ("--out", "empty")),
                            (["", "--out", self.out], ("RESULTS", "empty")),
                            ([good, "--target-tokens", "-5", "--out", self.out], ("--target-tokens", "--compare")),
                            ([good, "--gpus-per-node", "0", "--out", self.out], ("--gpus-per-node", "--compare")),
                            ([good, "--plan", good, "--out", self.out], ("--plan", "--compare"))):
            with self.subTest(args=args):
                self.assert_refused(report(*args), *words)
        self.assertEqual(regular.read_text(), "not a folder\n")

    def test_an_out_folder_that_cannot_be_written(self) -> None:
        good = write_json(self.dir / "r.json", fake_result(1, 1000.0))
        if os.geteuid() == 0:
            if not os.path.isdir("/proc/self"):
                self.skipTest("root writes anywhere, and there is no /proc/self here")
            unwritable = Path("/proc/self")
        else:
            unwritable = self.dir / "read-only"
            unwritable.mkdir()
            unwritable.chmod(0o555)
        self.assert_one_line_error(report(good, "--out", unwritable, "--no-plots"), f"--out {unwritable}",
                                   "cannot write report.md")

    def test_writers_of_one_process_id_replace_the_report_whole(self) -> None:
        # NAME.tmp.PID was one temporary for two report.py of one PID (two
        # containers' PID 1 writing one shared folder; here two threads):
        # each wrote into the other's, and a short report could be renamed
        # over a long one's tail, or a rename find nothing.
        import importlib.util
        import threading
        spec = importlib.util.spec_from_file_location("report_module", REPORT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look themselves up there
        self.addCleanup(sys.modules.pop, spec.name, None)
        spec.loader.exec_module(module)
        out = module.OutDir(self.out, True)
        texts = ["L" * (64 << 10), "short\n"]
        failures: list[str] = []

        def writer(text: str) -> None:
            for _ in range(100):
                try:
                    module.write_text(out, "report.md", text)
                except Exception as e:  # noqa: BLE001 - any failure is the finding
                    failures.append(repr(e))
                now = (self.out / "report.md").read_text()
                if now not in texts:
                    failures.append(f"a report of {len(now)} characters, neither text")

        threads = [threading.Thread(target=writer, args=(text,)) for text in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(failures[:3], [])
        self.assertEqual([p.name for p in self.out.iterdir()], ["report.md"], "no temporary left")
        mask = os.umask(0)
        os.umask(mask)
        self.assertEqual((self.out / "report.md").stat().st_mode & 0o777, 0o666 & ~mask)

    def test_a_write_the_machine_refuses_exits_3_and_keeps_the_earlier_report(self) -> None:
        # A file size limit (as a full disk would) stops report.md part way:
        # the machine's fault, exit 3 as trainbench's own result write, where
        # it exited 2 as if the command were wrong. The earlier report stays whole.
        good = write_json(self.dir / "r.json", fake_result(1, 1000.0))
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "report.md").write_text("the earlier report\n")
        # Its plots too: they were removed (this report draws none) before
        # report.md failed, and the earlier report.md named plots now gone.
        (self.out / "stall_shares.png").write_bytes(b"an earlier plot")

        def limit_file_size() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

        done = subprocess.run([sys.executable, REPORT, good, "--out", self.out, "--no-plots"], capture_output=True,
                              text=True, timeout=120, check=False, preexec_fn=limit_file_size)
        self.assertEqual(done.returncode, 3, done.stdout + done.stderr)
        self.assertEqual(done.stderr, f"report.py: --out {self.out}: cannot write report.md (File too large)\n")
        self.assertEqual((self.out / "report.md").read_text(), "the earlier report\n")
        self.assertEqual((self.out / "stall_shares.png").read_bytes(), b"an earlier plot")
        self.assertEqual(sorted(p.name for p in self.out.iterdir()), ["report.md", "stall_shares.png"],
                         "no temporary left")
        (self.out / "stall_shares.png").unlink()
        # The plots, written first, likewise: an earlier one stays whole (it
        # was written in place, and a full disk truncated it).
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed: the plots' part is not checked (scripts/setup.sh installs it)")
        # Matplotlib's and fontconfig's caches made first, without the limit:
        # on a machine where nothing had plotted yet, the limited run made
        # them and said so ("Could not save font_manager cache"), which is
        # theirs, not report.py's (a fresh machine's first test run failed).
        warm = subprocess.run([sys.executable, REPORT, good, "--out", self.dir / "warm"], capture_output=True,
                              text=True, timeout=120, check=False)
        self.assertEqual(warm.returncode, 0, warm.stdout + warm.stderr)
        (self.out / "tokens_per_s.png").write_bytes(b"an earlier plot")
        done = subprocess.run([sys.executable, REPORT, good, "--out", self.out], capture_output=True,
                              text=True, timeout=120, check=False, preexec_fn=limit_file_size)
        self.assertEqual(done.returncode, 3, done.stdout + done.stderr)
        self.assertEqual(done.stderr, f"report.py: --out {self.out}: cannot write tokens_per_s.png (File too large)\n")
        self.assertEqual((self.out / "tokens_per_s.png").read_bytes(), b"an earlier plot")
        self.assertEqual(sorted(p.name for p in self.out.iterdir()), ["report.md", "tokens_per_s.png"])

    def test_a_reader_that_stops_reading_or_no_stdout_is_no_traceback(self) -> None:
        # `report.py DIR | head` ended in a BrokenPipeError traceback (exit 1)
        # and a closed stdout in an AttributeError, the report written both times.
        good = write_json(self.dir / "r.json", fake_result(1, 1000.0))
        read_end, write_end = os.pipe()
        os.close(read_end)  # nothing will read what it prints
        try:
            piped = subprocess.run([sys.executable, REPORT, good, "--out", self.out, "--no-plots"], stdout=write_end,
                                   stderr=subprocess.PIPE, text=True, timeout=120, check=False)
        finally:
            os.close(write_end)
        self.assertEqual(piped.returncode, -signal.SIGPIPE, piped.stderr)
        self.assertNotIn("Traceback", piped.stderr)
        self.assertTrue((self.out / "report.md").is_file())
        (self.out / "report.md").unlink()
        closed = subprocess.run([sys.executable, REPORT, good, "--out", self.out, "--no-plots"],
                                stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                                preexec_fn=lambda: os.close(1))
        self.assertEqual(closed.returncode, 0, closed.stderr)
        self.assertNotIn("Traceback", closed.stderr)
        self.assertTrue((self.out / "report.md").is_file())

    def test_a_rerun_leaves_no_earlier_plots_or_temporaries(self) -> None:
        # An earlier report's PNGs stayed beside a --no-plots report.md,
        # read as this one's figures.
        good = write_json(self.dir / "r.json", fake_result(1, 1000.0))
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "report.md").write_text("the earlier report\n")
        for name in ("tokens_per_s.png", "stall_shares.png"):
            (self.out / name).write_bytes(b"an earlier plot")
        (self.out / "notes.png").write_bytes(b"not the report's")
        done = report(good, "--out", self.out, "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("the earlier report", (self.out / "report.md").read_text())
        self.assertEqual(sorted(p.name for p in self.out.iterdir()), ["notes.png", "report.md"])


class ResultReadingTests(unittest.TestCase):
    """report.py on hand-made results: older ones (no per-rank records, no
    bottleneck line) and newer ones (`ranks`, `summary.bottleneck`)."""

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="test_report_"))
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name: str, result: dict) -> Path:
        path = self.dir / name
        path.write_text(json.dumps(result))
        return path

    def make_report(self, *paths: Path) -> str:
        result = report(*paths, "--out", self.dir / "out", "--no-plots")
        self.assertEqual(result.returncode, 0, result.stderr)
        return (self.dir / "out" / "report.md").read_text()

    def test_a_long_list_is_checked_in_little_memory_and_too_little_is_one_line(self) -> None:
        # Checking the values made a tuple and a field string per list
        # element: a 25 MB result took 0.9 GB and, under a 500 MB address
        # space, ended in a MemoryError traceback (exit 1). Now it fits, and
        # a limit too low for it is one line, exit 3 (the machine's).
        result = fake_result(1, 1000.0)
        result["pad"] = [0.5] * 5_000_000
        path = self.write("big.json", result)

        def limited(megabytes: int) -> subprocess.CompletedProcess[str]:
            limit = megabytes << 20
            return subprocess.run([sys.executable, str(REPORT), str(path), "--no-plots", "--out", str(self.dir / "out")],
                                  capture_output=True, text=True, timeout=120, check=False,
                                  preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))

        done = limited(500)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        done = limited(200)
        self.assertEqual(done.returncode, 3, done.stderr[-2000:])
        self.assertEqual(done.stderr.strip().splitlines()[-1:],
                         ["report.py: out of memory reading the results (a ulimit -v, or too little memory for them)"])
        self.assertNotIn("Traceback", done.stderr)

    def test_config_booleans_are_written_as_the_config_writes_them(self) -> None:
        # report.md printed Python's `async True`.
        for value, words in ((True, "async true,"), (False, "async false,")):
            with self.subTest(value=value):
                result = fake_result(1, 1000.0)
                result["config"]["checkpoint"] = {"every_steps": 10, "async": value, "dir": "/ckpt"}
                text = self.make_report(self.write("a.json", result))
                self.assertIn(f"- **checkpoint**: every 10 steps, {words} dir /ckpt", text)
                self.assertNotIn("True", text)
                self.assertNotIn("False", text)

    def test_a_run_without_checkpoints_says_none(self) -> None:
        result = fake_result(1, 1000.0)
        result["config"]["checkpoint"] = {"every_steps": 0, "async": True, "dir": ""}
        text = self.make_report(self.write("a.json", result))
        self.assertIn("- **checkpoint**: none (every_steps 0)\n", text)

    def test_older_results_group_by_world_size_and_derive_the_bottleneck(self) -> None:
        # Two repeats at 2 ranks: their median tokens/s (1650) stands for them.
        paths = [self.write("a.json", fake_result(1, 1000.0)), self.write("b.json", fake_result(2, 1500.0)),
                 self.write("c.json", fake_result(2, 1800.0)), self.write("d.json", fake_result(4, 3000.0))]
        text = self.make_report(*paths)
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([r["ranks"] for r in rows], ["1", "2", "4"])
        self.assertEqual([r["runs"] for r in rows], ["1", "2", "1"])
        self.assertEqual([r["ideal tokens/s"] for r in rows], ["1000.0", "2000.0", "4000.0"])
        self.assertEqual([r["scaling efficiency"] for r in rows], ["1.000", "0.825", "0.750"])
        self.assertEqual(rows[2]["slowest rank"], "rank 3")
        shares = markdown_table(text, "## Where the step time goes")
        self.assertEqual(shares[0]["comm exposed (%)"], "30.0%")
        # The binary's rule: comm exposed (30%) is the largest share beside compute and passes 10%.
        self.assertEqual(shares[0]["bottleneck"], "network — exposed communication 30% of step (compute 60%) \\*")
        self.assertIn("derived by this report", text)

    def test_newer_results_name_the_straggler_and_keep_their_bottleneck_line(self) -> None:
        small = fake_result(1, 1000.0)
        big = fake_result(4, 3200.0)
        big["summary"]["bottleneck"] = "network — comm exposed 30% of step"
        # The same step on every rank (the all-reduce ends it everywhere); rank 3 has the most work of its own.
        big["ranks"] = [
            {"rank": r, "host": f"node{r // 2}", "step_s": {"median": 0.180}, "own_s": own, "compute_s": 0.06,
             "comm_exposed_s": 0.180 - own, "data_stall_s": 0.005, "ckpt_stall_s": 0.0, "other_s": 0.005}
            for r, own in enumerate([0.100, 0.100, 0.102, 0.125])
        ]
        text = self.make_report(self.write("r1.json", small), self.write("r4.json", big))
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual(rows[1]["slowest rank"], "rank 3 (node1), +25.0% vs the others' median")
        self.assertEqual(rows[1]["scaling efficiency"], "0.800")
        shares = markdown_table(text, "## Where the step time goes")
        self.assertEqual(shares[1]["bottleneck"], "network — comm exposed 30% of step")
        per_rank = markdown_table(text, "## Ranks at 4 ranks (slowest first)")
        self.assertEqual([r["rank"] for r in per_rank], ["3", "2", "0", "1"])
        self.assertEqual(per_rank[0]["own (ms)"], "125.00")
        self.assertEqual(per_rank[0]["step (ms)"], "180.00")
        self.assertEqual(per_rank[0]["comm exposed (ms)"], "55.00")
        self.assertNotIn("waited for a CPU", per_rank[0], "results before cpu_wait_share have no such column")
        # Each rank's wait for a CPU, where the result has it: a rank slowed by
        # a busy neighbour is told from one slowed by its part.
        for r, share in zip(big["ranks"], [0.02, 0.03, None, 0.61]):
            r["cpu_wait_share"] = share
        text = self.make_report(self.write("r1.json", small), self.write("r4.json", big))
        per_rank = markdown_table(text, "## Ranks at 4 ranks (slowest first)")
        self.assertEqual([r["waited for a CPU"] for r in per_rank], ["61%", "—", "2%", "3%"])
        self.assertIn("Waited for a CPU: of the time a rank's threads were ready to run", text)


    def test_the_ranks_table_is_ordered_by_own_work(self) -> None:
        # step_s is the same on every rank (all wait for each other in the
        # all-reduce): the rank with the most work of its own comes first, as
        # the binary's slowest_rank.
        result = as_ranks(real_result(), [0.80, 0.70, 0.92, 0.85])
        result["summary"].update(slowest_rank=2, slowest_rank_excess=0.92 / 0.80 - 1)
        text = self.make_report(self.write("r4.json", result))
        per_rank = markdown_table(text, "## Ranks at 4 ranks (slowest first)")
        self.assertEqual([r["rank"] for r in per_rank], ["2", "3", "0", "1"])
        step_ms = f"{result['ranks'][0]['step_s'] * 1e3:.2f}"
        self.assertEqual([r["step (ms)"] for r in per_rank], [step_ms] * 4)
        self.assertEqual([r["own (ms)"] for r in per_rank],
                         [f"{result['ranks'][r]['own_s'] * 1e3:.2f}" for r in (2, 3, 0, 1)])
        self.assertEqual(markdown_table(text, "## Throughput and scaling")[0]["slowest rank"],
                         "rank 2 (node2), +15.0% vs the others' median")
        # A result older than that median (no summary.consistency_check_s) wrote its excess over every rank's:
        # 11.5% here. It is derived again from the per-rank records.
        self.assertIn("consistency_check_s", result["summary"])
        del result["summary"]["consistency_check_s"]
        result["summary"]["slowest_rank_excess"] = 0.92 / 0.825 - 1
        text = self.make_report(self.write("r4-old.json", result))
        self.assertEqual(markdown_table(text, "## Throughput and scaling")[0]["slowest rank"],
                         "rank 2 (node2), +15.0% vs the others' median")

    def test_the_slowest_rank_is_derived_from_own_work_as_the_binary_does(self) -> None:
        # Without summary.slowest_rank: the largest own_s (the first of equals),
        # its excess over the median of the other ranks' own_s (trainer/train_loop.cpp).
        base = real_result()
        for shares, named in (([0.80, 0.80, 0.92, 0.80], "rank 2 (node2), +15.0% vs the others' median"),
                              ([0.90, 0.80, 0.90, 0.70], "rank 0 (node0), +12.5% vs the others' median"),
                              ([0.5, 0.6, 0.4], "rank 1 (node1), +33.3% vs the others' median")):
            with self.subTest(shares=shares):
                result = as_ranks(base, shares)
                del result["summary"]["slowest_rank"], result["summary"]["slowest_rank_excess"]
                text = self.make_report(self.write("r.json", result))
                self.assertEqual(markdown_table(text, "## Throughput and scaling")[0]["slowest rank"], named)
                per_rank = markdown_table(text, f"## Ranks at {len(shares)} ranks (slowest first)")
                self.assertEqual(f"rank {per_rank[0]['rank']} ({per_rank[0]['host']})", named.split(",")[0])

    def test_a_derived_bottleneck_follows_the_binarys_rule(self) -> None:
        # trainer/train_loop.cpp bottleneck_line: the largest share beside
        # compute (the first of equals: network, storage read, storage write,
        # host overhead) when it takes 10% of the step, else compute; with a
        # pacing rank 10% above the median, the line says it is seen from it.
        base = real_result()
        for stall, line in (
                ({"compute": 0.76, "comm_exposed": 0.19, "data_stall": 0.01, "ckpt_stall": 0.0, "other": 0.04},
                 "network — exposed communication 19% of step (compute 76%)"),
                ({"compute": 0.82, "comm_exposed": 0.09, "data_stall": 0.01, "ckpt_stall": 0.0, "other": 0.08},
                 "compute — compute 82% of step; no other resource takes 10%"),
                ({"compute": 0.76, "comm_exposed": 0.0, "data_stall": 0.12, "ckpt_stall": 0.0, "other": 0.12},
                 "storage read — data stall 12% of step (compute 76%)"),
                ({"compute": 0.55, "comm_exposed": 0.05, "data_stall": 0.0, "ckpt_stall": 0.1, "other": 0.3},
                 "host overhead — other (launch gaps, host work) 30% of step (compute 55%)")):
            with self.subTest(line=line):
                result = copy.deepcopy(base)
                del result["summary"]["bottleneck"]
                result["summary"]["stall_shares"] = stall
                text = self.make_report(self.write("r.json", result))
                self.assertEqual(markdown_table(text, "## Where the step time goes")[0]["bottleneck"],
                                 line + " \\*")
                self.assertIn("derived by this report", text)
        result = as_ranks(base, [0.80, 0.80, 0.92, 0.80])
        del result["summary"]["bottleneck"], result["summary"]["slowest_rank"]
        del result["summary"]["slowest_rank_excess"]
        result["summary"]["stall_shares"] = {"compute": 0.76, "comm_exposed": 0.19, "data_stall": 0.01,
                                             "ckpt_stall": 0.0, "other": 0.04}
        text = self.make_report(self.write("r4.json", result))
        self.assertEqual(markdown_table(text, "## Where the step time goes")[0]["bottleneck"],
                         "network — exposed communication 19% of step (compute 76%); seen from rank 2 (node2), "
                         "which sets the pace: its own work per step is 15% above the other ranks' median \\*")

    def test_an_even_number_of_repeats_takes_the_true_median_and_names_the_run_shown(self) -> None:
        runs = []
        for name, tokens in (("a.json", 1300.0), ("b.json", 1000.0), ("c.json", 1100.0), ("d.json", 1250.0)):
            result = real_result()
            result["summary"]["tokens_per_s"] = tokens
            runs.append(self.write(name, result))
        text = self.make_report(*runs)
        [row] = markdown_table(text, "## Throughput and scaling")
        self.assertEqual((row["runs"], row["tokens/s"]), ("4", "1175.0"))  # (1100 + 1250) / 2
        # The figures that are one run's come from c.json, the slower of the two nearest the median.
        self.assertIn("1 rank: 4 runs, tokens/s median 1175.0 of b.json 1000.0, c.json 1100.0, d.json 1250.0, "
                      "a.json 1300.0; the other figures are c.json's", text)
        # Three repeats: the middle one, as before.
        text = self.make_report(runs[0], runs[1], runs[3])
        [row] = markdown_table(text, "## Throughput and scaling")
        self.assertEqual(row["tokens/s"], "1250.0")
        self.assertIn("the other figures are d.json's", text)

    def test_untimed_repeats_beside_timed_ones_are_warned_about_and_left_out(self) -> None:
        # report.instrument=false times no step (its figures are null, its
        # tokens/s is wall-clock): beside timed runs of the same configuration
        # it is named in a warning, and it is neither the run shown nor in the
        # median.
        timed, untimed = real_result(), real_result(instrument=False)
        self.assertIsNone(untimed["summary"]["step_s"]["median"])
        timed["summary"]["tokens_per_s"] = 1000.0
        untimed["summary"]["tokens_per_s"] = 900.0
        other = copy.deepcopy(timed)
        other["summary"]["tokens_per_s"] = 1200.0
        for names, tokens, count in ((("timed.json", "untimed.json"), "1000.0", 1),
                                     (("timed.json", "untimed.json", "timed2.json"), "1100.0", 2)):
            with self.subTest(runs=names):
                for stale in self.dir.glob("*.json"):
                    stale.unlink()
                paths = [self.write(name, {"timed.json": timed, "untimed.json": untimed,
                                           "timed2.json": other}[name]) for name in names]
                done = report(*paths, "--out", self.dir / "out", "--no-plots")
                self.assertEqual(done.returncode, 0, done.stderr)
                warning = ("1 rank: untimed.json ran with report.instrument=false (no step timed: its step figures "
                           f"are not measured, its tokens/s is wall-clock) beside {count} timed run(s); it is left "
                           "out of the median and of the figures shown")
                self.assertIn(warning, done.stderr)
                text = (self.dir / "out" / "report.md").read_text()
                self.assertIn(f"- {warning}", text)
                [row] = markdown_table(text, "## Throughput and scaling")
                self.assertEqual((row["runs"], row["tokens/s"]), (str(len(names)), tokens))
                self.assertEqual(row["step median (ms)"], f"{timed['summary']['step_s']['median'] * 1e3:.2f}")
                [shares] = markdown_table(text, "## Where the step time goes")
                self.assertNotIn("—", shares.values())

    def test_a_run_that_measured_no_step_is_reported_as_not_measured(self) -> None:
        # Alone: its table row, what it has (steps, the failed check), and the plots.
        path = self.write("stopped.json", unmeasured_result(1))
        out = self.dir / "alone"
        done = report(path, "--out", out, *([] if has_matplotlib() else ["--no-plots"]))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("1 ranks  tokens/s not measured", done.stdout)
        text = (out / "report.md").read_text()
        [row] = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([row[k] for k in ("tokens/s", "ideal tokens/s", "scaling efficiency", "step median (ms)",
                                           "slowest rank")], ["not measured", "—", "not measured", "—", "—"])
        self.assertIn("No run measured a step", text)
        self.assertIn(f"- 1 rank: stopped.json measured no step (0 measured after 0 warm-up; 0 step(s) recorded); "
                      f"failed: check data_read: {NO_BATCH}", text)
        self.assertIn(f"- stopped.json: check data_read FAILED: {NO_BATCH}", text)
        [shares] = markdown_table(text, "## Where the step time goes")
        self.assertEqual(set(shares.values()), {"1", "—"})
        if has_matplotlib():
            for name in PLOTS:
                self.assertGreater(png_size(out / name)[0], 0)
        # Beside measured world sizes: the ideal line starts at the smallest measured one (2 ranks).
        paths = [path, self.write("r2.json", fake_result(2, 2000.0)), self.write("r4.json", fake_result(4, 3000.0))]
        text = self.make_report(*paths)
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([(r["tokens/s"], r["ideal tokens/s"], r["scaling efficiency"]) for r in rows],
                         [("not measured", "1000.0", "not measured"), ("2000.0", "2000.0", "1.000"),
                          ("3000.0", "4000.0", "0.750")])
        self.assertIn("Ideal tokens/s = N/2 × tokens/s at 2 rank(s)", text)
        # Beside a measured repeat of its world size: left out of the median and the figures, with a warning.
        done = report(self.write("stopped.json", unmeasured_result(2)), paths[1], "--out", self.dir / "out",
                      "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        warning = ("2 ranks: stopped.json measured no step (a failure stopped it before the first step after "
                   "warm-up) beside 1 measured run(s); it is left out of the median and of the figures shown")
        self.assertIn(warning, done.stderr)
        text = (self.dir / "out" / "report.md").read_text()
        self.assertIn(f"- {warning}", text)
        [row] = markdown_table(text, "## Throughput and scaling")
        self.assertEqual((row["runs"], row["tokens/s"], row["step median (ms)"]), ("2", "2000.0", "100.00"))
        self.assertIn("left out: stopped.json (no step measured)", text)

    def test_a_null_tokens_per_s_of_a_run_with_measured_steps_is_refused(self) -> None:
        result = damaged(fake_result(1, 1000.0), "summary.tokens_per_s", None)
        for steps in (6, None):
            with self.subTest(measured_steps=steps):
                if steps is not None:
                    result["summary"]["measured_steps"] = steps
                done = report(self.write("bad.json", result), "--out", self.dir / "out", "--no-plots")
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(done.stderr.splitlines(), [
                    f"report.py: {self.dir / 'bad.json'}: summary.tokens_per_s is null, expected a number from "
                    "1e-30 to 1e+30 (null only where summary.measured_steps is 0: no step measured)"])
                self.assertFalse((self.dir / "out").exists())

    def test_a_real_run_stopped_before_any_step_is_reported(self) -> None:
        # The binary's own result of a run whose first batch never came (no batch within data.timeout_s).
        if not os.access(BINARY, os.X_OK):
            self.skipTest(f"{BINARY} is not built: this test reads a result it writes")
        out = self.dir / "stopped.json"
        made = run(BINARY, "run", "tiny", "--steps", "3", "--set", "train.warmup_steps=1", "--set",
                   "train.threads=1", "--set", "report.progress_every=0", "--set", "data.timeout_s=1",
                   "--set", "data.inject_delay_ms=3000", "--out", out, timeout=300)
        self.assertEqual(made.returncode, 3, made.stderr)
        result = json.loads(out.read_text())
        self.assertIsNone(result["summary"]["tokens_per_s"])
        self.assertEqual(result["summary"]["measured_steps"], 0)
        text = self.make_report(out)
        [row] = markdown_table(text, "## Throughput and scaling")
        self.assertEqual(row["tokens/s"], "not measured")
        self.assertIn("stopped.json measured no step (0 measured after", text)
        self.assertIn("failed: check data_read: data: no batch", text)

    def test_a_folder_is_read_whole_and_a_differing_config_is_warned_about(self) -> None:
        other = copy.deepcopy(fake_result(2, 1900.0))
        other["config"]["train"]["grad_accum"] = 4
        self.write("r1.json", fake_result(1, 1000.0))
        self.write("r2.json", other)
        text = self.make_report(self.dir)
        self.assertEqual(len(markdown_table(text, "## Throughput and scaling")), 2)
        self.assertIn("r2.json is configured differently from r1.json: train.grad_accum 4 vs null", text)
        # On the console too: the figures printed there are of different jobs.
        console = report(self.dir, "--out", self.dir / "out2", "--no-plots")
        self.assertEqual(console.returncode, 0, console.stderr)
        self.assertIn("report.py: warning: r2.json is configured differently from r1.json: train.grad_accum 4 vs null",
                      console.stderr)

    def test_runs_of_different_workloads_are_refused_not_a_median(self) -> None:
        # A folder of one model's 1- and 2-rank runs, then another model, a
        # LoRA run or a bf16 one beside them: each was a repeat or a world
        # size, with a warning among a dozen (a LoRA run set the ideal line:
        # "efficiency 0.545" for a sweep that scaled at 1.0).
        def resolved(ranks: int, tokens_per_s: float) -> dict:
            result = copy.deepcopy(fake_result(ranks, tokens_per_s))
            result["config"]["train"].update(mode="full", precision="fp32")
            result["config"]["model"]["n_layers_full"] = 0
            return result

        base = [self.write("r1.json", resolved(1, 1000.0)), self.write("r2.json", resolved(2, 1950.0))]
        for key, value, shown in ((("model", "n_layers"), 4, "model.n_layers 4 vs 2"),
                                  (("train", "mode"), "lora", 'train.mode "lora" vs "full"'),
                                  (("train", "precision"), "bf16", 'train.precision "bf16" vs "fp32"')):
            with self.subTest(key=key):
                other = resolved(2, 3000.0)
                other["config"][key[0]][key[1]] = value
                odd = self.write("odd.json", other)
                self.addCleanup(odd.unlink, missing_ok=True)
                for inputs in ((self.dir,), (*base, odd)):
                    result = report(*inputs, "--out", self.dir / "out", "--no-plots")
                    self.assertEqual(result.returncode, 2, result.stderr)
                    self.assertIn(f"report.py: odd.json and r1.json train different workloads ({shown}): a scaling "
                                  "report compares runs of one model, mode and precision", result.stderr)
                    self.assertEqual(result.stderr.count("\n"), 1, result.stderr)
                odd.unlink()
        # As the binary compares them: the depth `project` projects to builds
        # nothing, and a key an older result lacks is not compared (a warning).
        for key, value in ((("model", "n_layers_full"), 32), (("train", "precision"), None)):
            with self.subTest(key=key):
                other = resolved(2, 1900.0)
                if value is None:
                    del other["config"][key[0]][key[1]]
                else:
                    other["config"][key[0]][key[1]] = value
                odd = self.write("odd.json", other)
                result = report(self.dir, "--out", self.dir / "out", "--no-plots")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(f"odd.json is configured differently from r1.json: {'.'.join(key)}", result.stderr)
                odd.unlink()
        # LoRA runs of other adapters are other workloads, the same adapters
        # written in another order are not; a full run's unused lora section
        # is not either.
        one, two = fake_result(1, 1000.0), copy.deepcopy(fake_result(2, 1950.0))
        for run, rank in ((one, 8), (two, 16)):
            run["config"]["lora"] = {"rank": rank}
        self.write("r1.json", one)
        self.write("r2.json", two)
        self.make_report(self.dir)
        for run in (one, two):
            run["config"]["train"]["mode"] = "lora"
        self.write("r1.json", one)
        self.write("r2.json", two)
        result = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("(lora.rank 16 vs 8)", result.stderr)
        one["config"]["lora"] = {"rank": 8, "targets": "q,k,v,o"}
        two["config"]["lora"] = {"rank": 8, "targets": "v, q,o,k"}
        self.write("r1.json", one)
        self.write("r2.json", two)
        self.make_report(self.dir)

    def test_a_burn_in_result_is_left_out_naming_its_verdict(self) -> None:
        self.write("r1.json", fake_result(1, 1000.0))
        self.write("r2.json", fake_result(2, 1950.0))
        burnin = copy.deepcopy(fake_result(2, 1200.0))
        burnin["burnin"] = {"verdict": "FAIL"}
        self.write("burn.json", burnin)
        text = self.make_report(self.dir)
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([(r["runs"], r["tokens/s"]) for r in rows], [("1", "1000.0"), ("1", "1950.0")])
        self.assertIn("burn.json: left out: a `trainbench burnin` result (verdict FAIL)", text)

    def test_an_efficiency_above_one_is_said_to_be_within_noise_or_not(self) -> None:
        # fake_result's steps spread 30% from p10 to p90: 1.5% above 1 is that noise.
        self.write("r1.json", fake_result(1, 1000.0))
        self.write("r2.json", fake_result(2, 2030.0))
        result = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("report.py: warning: 2 ranks: scaling efficiency 1.015 is above 1 (tokens/s grew faster than the "
                      "ranks): within the step times' spread (p10-p90 30% at 1 and 30% at 2): noise", result.stderr)
        # Steps within 1% of their median: 5% above 1 is not noise.
        for name, ranks, tokens_per_s in (("r1.json", 1, 1000.0), ("r2.json", 2, 2100.0)):
            quiet = copy.deepcopy(fake_result(ranks, tokens_per_s))
            quiet["summary"]["step_s"].update(p10=0.099, p90=0.101)
            self.write(name, quiet)
        result = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertIn("scaling efficiency 1.050 is above 1 (tokens/s grew faster than the ranks): beyond the step "
                      "times' spread (p10-p90 2% at 1 and 2% at 2)", result.stderr)
        # A doubled per-rank batch is the reason, not noise.
        self.write("r1.json", fake_result(1, 1000.0))
        bigger = copy.deepcopy(fake_result(2, 2030.0))
        bigger["summary"]["global_tokens_per_step"] = 2048
        self.write("r2.json", bigger)
        result = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertIn("2 ranks: scaling efficiency 1.015 is above 1 (tokens/s grew faster than the ranks): each rank's "
                      "step holds 1024 tokens at 2 and 512 at 1, which the ideal line does not assume", result.stderr)
        self.assertNotIn("noise", result.stderr)
        # 1.0004 prints as 1.000: no warning; nor below 1.
        for tokens_per_s in (2000.8, 1990.0):
            self.write("r1.json", fake_result(1, 1000.0))
            self.write("r2.json", fake_result(2, tokens_per_s))
            self.assertNotIn("above 1", self.make_report(self.dir))

    def test_the_communicator_auto_picked_per_world_size_is_no_difference(self) -> None:
        # The result's comm.backend is what auto resolved to: mpi for a sweep's
        # 1-GPU point under mpirun, nccl for its multi-GPU points. Not two jobs.
        one, two = fake_result(1, 1000.0), copy.deepcopy(fake_result(2, 1900.0))
        one["config"].setdefault("comm", {})["backend"] = "mpi"
        two["config"].setdefault("comm", {})["backend"] = "nccl"
        self.write("r1.json", one)
        self.write("r2.json", two)
        text = self.make_report(self.dir)
        self.assertNotIn("configured differently", text)
        # At one world size another backend is another job.
        again = copy.deepcopy(fake_result(1, 1100.0))
        again["config"].setdefault("comm", {})["backend"] = "nccl"
        self.write("r3.json", again)
        self.assertIn('r3.json is configured differently from r1.json: comm.backend "nccl" vs "mpi"',
                      self.make_report(self.dir))

    def test_lora_targets_in_another_order_are_no_difference(self) -> None:
        # The binary compares the adapters the targets build (and report.py's
        # refusal did): "o,v,k,q" beside "q,k,v,o" was warned about.
        one, two = fake_result(1, 1000.0), copy.deepcopy(fake_result(2, 1900.0))
        one["config"]["lora"] = {"rank": 16, "targets": "q,k,v,o"}
        two["config"]["lora"] = {"rank": 16, "targets": "o,v,k,q"}
        self.write("r1.json", one)
        self.write("r2.json", two)
        self.assertNotIn("configured differently", self.make_report(self.dir))
        two["config"]["lora"]["targets"] = "o,v,k"
        self.write("r2.json", two)
        self.assertIn('r2.json is configured differently from r1.json: lora.targets "o,v,k" vs "q,k,v,o"',
                      self.make_report(self.dir))

    def test_several_hosts_gpus_are_said_to_be_rank_zeros_or_each_hosts(self) -> None:
        # The GPUs row showed rank 0's host's "8 × H200" beside "16 on 2 host(s)".
        result = copy.deepcopy(fake_result(16, 9000.0))
        host = {"host": "node0", "gpus": 8, "gpu_name": "NVIDIA H200", "gpu_memory_bytes": 150_000_000_000,
                "nvidia_driver": "570.86.15", "cuda_driver": "13.0"}
        result["environment"].update(hosts=["node0", "node1"], host_gpus=[host, {**host, "host": "node1"}],
                                     gpus=[{"name": "NVIDIA H200"}] * 8, cpu={"model": "EPYC"})
        self.write("r.json", result)
        text = self.make_report(self.dir)
        self.assertIn("8 × NVIDIA H200 on each of 2 hosts", text)
        self.assertIn("(rank 0's host)", text)
        result["environment"]["host_gpus"][1]["nvidia_driver"] = "550.54.15"
        self.write("r.json", result)
        self.assertIn("8 × NVIDIA H200 on rank 0's host; the 2 hosts differ", self.make_report(self.dir))

    def test_a_folders_failed_reruns_are_left_out_and_named(self) -> None:
        # scale.sh keeps a failed rerun's result as ranks-N.failed.json beside the
        # earlier ranks-N.json: reading it as a repeat moved the median.
        self.write("ranks-1.json", fake_result(1, 1000.0))
        self.write("ranks-2.json", fake_result(2, 1800.0))
        failed = fake_result(2, 9000.0)
        failed["checks"] = [{"name": "ranks_consistent", "passed": False, "detail": "parameters differ"}]
        self.write("ranks-2.failed.json", failed)
        done = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        text = (self.dir / "out" / "report.md").read_text()
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([(r["runs"], r["tokens/s"]) for r in rows], [("1", "1000.0"), ("1", "1800.0")])
        self.assertIn("left out ranks-2.failed.json (a failed rerun's result", done.stderr)
        self.assertIn("left out ranks-2.failed.json", text)
        self.assertNotIn("ranks_consistent", text)
        # Named, it is read.
        text = self.make_report(self.dir / "ranks-2.json", self.dir / "ranks-2.failed.json")
        [row] = markdown_table(text, "## Throughput and scaling")
        self.assertEqual((row["runs"], row["tokens/s"]), ("2", "5400.0"))
        # A folder of failed results only has none to report.
        only = self.dir / "only"
        only.mkdir()
        (only / "ranks-2.failed.json").write_text(json.dumps(failed))
        done = report(only, "--no-plots")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(done.stderr, f"report.py: {only}: no *.json result files in this folder "
                                      "(only 1 *.failed.json, left out)\n")

    def test_an_aborted_runs_steps_are_left_out_of_a_folder_and_refused_by_name(self) -> None:
        # trainbench writes r.aborted.json (trainbench.aborted_run/v1) for a run an
        # abort or a signal ended: its steps, no summary.
        self.write("ranks-1.json", fake_result(1, 1000.0))
        aborted = {"schema": "trainbench.aborted_run/v1", "version": "x", "command": "trainbench run",
                   "config": fake_result(2, 1.0)["config"], "environment": fake_result(2, 1.0)["environment"],
                   "aborted": {"exit_code": 143, "reason": "interrupted by SIGTERM", "steps_completed": 7,
                               "last_step": 7},
                   "steps": [{"step": 1, "loss": 10.0}]}
        self.write("ranks-2.aborted.json", aborted)
        done = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("left out ranks-2.aborted.json (the steps of a run an abort or a signal ended", done.stderr)
        rows = markdown_table((self.dir / "out" / "report.md").read_text(), "## Throughput and scaling")
        self.assertEqual([r["runs"] for r in rows], ["1"])
        done = report(self.dir / "ranks-2.aborted.json", "--no-plots")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn('a run that did not finish ("interrupted by SIGTERM", after 7 step(s)): it has its steps but '
                      "no summary to report", done.stderr)

    def test_a_copy_of_a_result_is_read_once(self) -> None:
        self.write("ranks-2.json", fake_result(2, 1800.0))
        self.write("ranks-2-again.json", fake_result(2, 2000.0))
        self.write("backup.json", fake_result(2, 1800.0))
        done = report(self.dir, "--out", self.dir / "out", "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        [row] = markdown_table((self.dir / "out" / "report.md").read_text(), "## Throughput and scaling")
        self.assertEqual((row["runs"], row["tokens/s"]), ("2", "1900.0"))
        self.assertIn(f"{self.dir / 'ranks-2.json'} holds the same result as {self.dir / 'backup.json'} "
                      "(a copy, not a repeat): read once", done.stderr)
        # The same file twice (by name, and in its folder): read once, and said.
        done = report(self.dir, self.dir / "ranks-2-again.json", "--out", self.dir / "out", "--no-plots")
        self.assertEqual(done.returncode, 0, done.stderr)
        [row] = markdown_table((self.dir / "out" / "report.md").read_text(), "## Throughput and scaling")
        self.assertEqual((row["runs"], row["tokens/s"]), ("2", "1900.0"))
        self.assertIn(f"{self.dir / 'ranks-2-again.json'} was given more than once: read once", done.stderr)

    def test_runs_whose_files_share_a_name_are_named_by_their_paths(self) -> None:
        (self.dir / "a").mkdir()
        (self.dir / "b").mkdir()
        other = fake_result(1, 1100.0)
        other["config"]["train"]["micro_batch"] = 4
        paths = [self.write("a/ranks-1.json", fake_result(1, 1000.0)), self.write("b/ranks-1.json", other)]
        text = self.make_report(*paths)
        self.assertIn(f"{paths[1]} is configured differently from {paths[0]}: train.micro_batch 4 vs 8", text)
        self.assertIn(f"2 runs, tokens/s median 1050.0 of {paths[0]} 1000.0, {paths[1]} 1100.0", text)

    def test_a_result_read_from_a_pipe_or_a_redirect_is_reported_in_the_current_folder(self) -> None:
        # Its folder would be /dev (or /proc/N/fd for <(...)): no place for a report,
        # and an error there named an --out the user never gave. `/dev/stdin`
        # redirected from a file is a file in /dev: the report went to /dev/report.md.
        result = self.write("r.json", fake_result(1, 1000.0))
        for kind in ("pipe", "redirect"):
            here = self.dir / kind
            here.mkdir()
            with open(result, encoding="utf-8") as file:
                stdin = {"input": file.read()} if kind == "pipe" else {"stdin": file}
                done = subprocess.run([sys.executable, REPORT, "/dev/stdin", "--no-plots"], cwd=here,
                                      capture_output=True, text=True, timeout=60, check=False, **stdin)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn(f"report: {here / 'report.md'}", done.stdout)
            self.assertTrue((here / "report.md").is_file())

    def test_results_in_unrelated_folders_are_reported_in_the_current_folder_not_the_root(self) -> None:
        # Their only common folder is /: the report went to /report.md.
        here = self.dir / "here"
        here.mkdir()
        # A folder whose only common folder with this test's is /.
        mine = os.path.realpath(self.dir)
        tops = [t for t in ("/var/tmp", "/tmp", "/dev/shm")
                if os.path.isdir(t) and os.access(t, os.W_OK)
                and os.path.commonpath([mine, os.path.realpath(t)]) == os.sep]
        if not tops:
            self.skipTest(f"no writable folder outside {mine}'s top folder among /var/tmp, /tmp, /dev/shm")
        elsewhere = Path(tempfile.mkdtemp(prefix="report-other-", dir=tops[0]))
        self.addCleanup(shutil.rmtree, elsewhere, True)
        other = elsewhere / "ranks-2.json"
        other.write_text(json.dumps(fake_result(2, 1900.0)), encoding="utf-8")
        self.assertEqual(os.path.commonpath([os.path.realpath(self.dir), os.path.realpath(elsewhere)]), "/")
        root_report_before = Path("/report.md").exists()
        done = subprocess.run([sys.executable, REPORT, str(self.write("ranks-1.json", fake_result(1, 1000.0))),
                               str(other), "--no-plots"], cwd=here, capture_output=True, text=True, timeout=60,
                              check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"report: {here / 'report.md'}", done.stdout)
        if not root_report_before:
            self.assertFalse(Path("/report.md").exists())

    def test_a_result_named_as_an_output_is_refused_not_replaced(self) -> None:
        # A result saved as report.md, or as a plot's name, was replaced by the
        # report (or deleted as an earlier report's plot) and the run exited 0.
        first = self.write("report.md", fake_result(1, 1000.0))
        second = self.write("stall_shares.png", fake_result(2, 1900.0))
        before = (first.read_bytes(), second.read_bytes())
        for args in ([str(first), str(second), "--no-plots"], [str(self.write("r1.json", fake_result(1, 1000.0))),
                                                               str(second), "--no-plots"]):
            done = report(*args)
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertEqual(done.stderr.count("\n"), 1, done.stderr)
            self.assertIn("which the report would replace: choose another --out", done.stderr)
            self.assertEqual((first.read_bytes(), second.read_bytes()), before)
        out = self.dir / "elsewhere"
        self.assertEqual(report(str(first), str(second), "--no-plots", "--out", str(out)).returncode, 0)

    def test_an_unwritable_default_folder_is_not_called_out(self) -> None:
        # Not "--out DIR": no --out was given. (A folder named report.md stops
        # the write whoever runs it, root too.)
        result = self.write("r.json", fake_result(1, 1000.0))
        (self.dir / "report.md").mkdir()
        done = report(result, "--no-plots")
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(done.stderr, f"report.py: the results' folder {self.dir} (the default; choose another "
                                      "with --out): cannot write report.md (Is a directory)\n")


class FormattingTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        import importlib.util
        spec = importlib.util.spec_from_file_location("report_formatting", REPORT)
        cls.module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = cls.module  # its dataclasses look themselves up there
        spec.loader.exec_module(cls.module)

    @classmethod
    def tearDownClass(cls) -> None:
        sys.modules.pop("report_formatting", None)

    def test_figures_past_the_prefixes_are_written_as_exponents(self) -> None:
        # 1e30 tokens/s printed "1000000000000000000.00 T", 1e-30 "0.00".
        si = self.module.si
        self.assertEqual(si(1e30), "1e+30")
        self.assertEqual(si(1e-30), "1e-30")
        self.assertEqual(si(0.0), "0.00")
        self.assertEqual(si(19630.0), "19.63 k")
        self.assertEqual(si(999.9e12), "999.90 T")

    def test_a_failed_check_without_detail_ends_without_a_colon(self) -> None:
        self.assertEqual(self.module.failed_detail({"name": "x", "passed": False}), "")
        self.assertEqual(self.module.failed_detail({"name": "x", "passed": False, "detail": ""}), "")
        self.assertEqual(self.module.failed_detail({"name": "x", "passed": False, "detail": "why"}), ": why")


class ScaleArgumentTests(unittest.TestCase):
    def test_bad_rank_lists_exit_2_before_running_anything(self) -> None:
        for ranks in ("1,x", "2,1", ""):
            with self.subTest(ranks=ranks):
                result = run("bash", SCALE, "--ranks", ranks, "--out", "/nonexistent/never-made")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("--ranks", result.stderr)

    def test_options_of_the_other_sweep_are_refused(self) -> None:
        # The mpirun sweep ran its default ranks 1,2,4 with --nodes or
        # --sbatch-args given, which only the Slurm sweep reads.
        for args, words in ((["--nodes", "1,2"], "--nodes is for --slurm"),
                            (["--sbatch-args", "-p x"], "--sbatch-args is for --slurm"),
                            (["--slurm", "--ranks", "2"], "--ranks is for the mpirun sweep")):
            with self.subTest(args=args):
                result = run("bash", SCALE, *args, "--out", "/nonexistent/never-made")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(words, result.stderr)

    def fake_tools(self, folder: Path) -> Path:
        """A folder of stand-ins that record how they were called: mpirun
        (writes {} at --out), sbatch (its CKPT_DIR and arguments, prints job
        42), srun (its arguments)."""
        bin_dir = folder / "bin"
        bin_dir.mkdir(parents=True)
        scripts = {
            "mpirun": 'printf "%s\\n" "$@" >> "$LOG"; echo --- >> "$LOG"\n'
                      'while [ $# -gt 0 ]; do [ "$1" = --out ] && echo "{}" > "$2"; shift; done\n',
            "sbatch": 'echo "CKPT_DIR=${CKPT_DIR:-}" >> "$LOG"; printf "%s\\n" "$@" >> "$LOG"; echo 42\n',
            "srun": 'printf "%s\\n" "$@" >> "$LOG"\n',
        }
        for name, body in scripts.items():
            (bin_dir / name).write_text("#!/bin/sh\n" + body)
            (bin_dir / name).chmod(0o755)
        return bin_dir

    def test_a_checkpoint_dir_from_the_home_folder_is_there(self) -> None:
        # `--set checkpoint.dir=~/ck` is one word, which no shell expands:
        # it became $PWD/~/ck. It is $HOME/ck, as trainbench reads it.
        folder = Path(tempfile.mkdtemp(prefix="test_scale_home_"))
        self.addCleanup(shutil.rmtree, folder)
        bin_dir = self.fake_tools(folder)
        log = folder / "calls.log"
        env = {**os.environ, "LOG": str(log), "MPIRUN": str(bin_dir / "mpirun"), "HOME": str(folder / "home")}
        env.pop("CKPT_DIR", None)
        done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "1", "--set", "checkpoint.dir=~/ck",
                   "--out", folder / "out", "--no-report", env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"checkpoints in {folder}/home/ck/ranks-<N>-", done.stdout)
        self.assertNotIn("/~/", log.read_text())
        # What the run is given, not only what is said: one folder, in $HOME.
        launched = [a for a in log.read_text().splitlines() if a.startswith("checkpoint.dir=")]
        self.assertEqual(len(launched), 1, launched)
        self.assertRegex(launched[0],
                         rf"^checkpoint\.dir={re.escape(str(folder))}/home/ck/ranks-1-\d{{8}}T\d{{6}}Z-\d+$")

    def test_a_checkpoint_dir_set_is_one_folder_per_world_size(self) -> None:
        # `--set checkpoint.dir=D` went to every world size as it was: the
        # 2-rank run found D holding the 1-rank run's checkpoints (exit 2).
        folder = Path(tempfile.mkdtemp(prefix="test_scale_ckpt_"))
        self.addCleanup(shutil.rmtree, folder)
        bin_dir = self.fake_tools(folder)
        log = folder / "calls.log"
        env = {**os.environ, "LOG": str(log), "MPIRUN": str(bin_dir / "mpirun")}
        env.pop("CKPT_DIR", None)
        done = run("bash", SCALE, "--binary", "/bin/true", "--ranks", "1,2", "--set", "train.threads=1",
                   "--set", f"checkpoint.dir={folder}/ckpt", "--out", folder / "out", "--no-report", env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        calls = [c.splitlines() for c in log.read_text().split("---\n") if "-np" in c.splitlines()]
        self.assertEqual(len(calls), 2, calls)
        dirs = [[a for a in call if a.startswith("checkpoint.dir=")] for call in calls]
        for n, found in zip((1, 2), dirs):
            self.assertEqual(len(found), 1, found)
            self.assertRegex(found[0],
                             rf"^checkpoint\.dir={re.escape(str(folder))}/ckpt/ranks-{n}-\d{{8}}T\d{{6}}Z-\d+$")
        self.assertIn(f"checkpoints in {folder}/ckpt/ranks-<N>-", done.stdout)
        # The same under --slurm: the job gets CKPT_DIR (a folder per job), not the --set.
        log.unlink()
        done = run("bash", SCALE, "--slurm", "--binary", "/bin/true", "--nodes", "1,2",
                   "--set", f"checkpoint.dir={folder}/ckpt", "--out", folder / "slurm",
                   env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = log.read_text().splitlines()
        self.assertEqual(lines.count(f"CKPT_DIR={folder}/ckpt"), 2, lines)
        self.assertFalse([a for a in lines if a.startswith("checkpoint.dir=")], lines)
        # Two folders named two ways: refused before anything runs.
        for args, extra_env in ((["--ckpt-dir", "/b"], {}), ([], {"CKPT_DIR": "/b"})):
            with self.subTest(args=args, env=extra_env):
                done = run("bash", SCALE, "--ranks", "1", "--set", "checkpoint.dir=/a", *args,
                           "--out", folder / "never", env={**env, **extra_env})
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(len(done.stderr.splitlines()), 1, done.stderr)
                self.assertIn("--set checkpoint.dir=/a and", done.stderr)
                self.assertIn(" /b name two checkpoint folders", done.stderr)
                self.assertFalse((folder / "never").exists())

    def test_the_sbatch_script_gives_a_set_checkpoint_dir_a_folder_per_job(self) -> None:
        # By hand: `sbatch trainbench.sbatch --set checkpoint.dir=D` checkpointed
        # every job into D itself, which fails every job after the first.
        folder = Path(tempfile.mkdtemp(prefix="test_sbatch_ckpt_"))
        self.addCleanup(shutil.rmtree, folder)
        bin_dir = self.fake_tools(folder)
        log = folder / "calls.log"
        env = {**os.environ, "LOG": str(log), "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
               "SLURM_JOB_NUM_NODES": "2", "TRAINBENCH_BINARY": "/bin/true", "OUT": str(folder / "out")}
        env.pop("CKPT_DIR", None)
        sbatch = REPO / "scripts" / "slurm" / "trainbench.sbatch"
        for args in (["--set", "checkpoint.dir=/shared/ckpt"], ["--set=checkpoint.dir=/shared/ckpt"]):
            with self.subTest(args=args):
                log.unlink(missing_ok=True)
                done = run("bash", sbatch, "--steps", "5", *args, "--set", "train.threads=1", env=env)
                self.assertEqual(done.returncode, 0, done.stderr)
                srun_args = log.read_text().splitlines()
                self.assertIn("checkpoint.dir=/shared/ckpt/nodes-2-7", srun_args)
                self.assertNotIn("checkpoint.dir=/shared/ckpt", srun_args)
                self.assertNotIn("--set=checkpoint.dir=/shared/ckpt", srun_args)
                self.assertIn("train.threads=1", srun_args)
                self.assertIn("checkpoints in /shared/ckpt/nodes-2-7", done.stdout)
        done = run("bash", sbatch, "--set", "checkpoint.dir=/a", env={**env, "CKPT_DIR": "/b"})
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("name two checkpoint folders", done.stderr)
        # Two nodes and no shared folder (an empty one is a temporary folder):
        # passed on as it is, for trainbench, which refuses a multi-node job
        # that checkpoints to one (and runs one that does not checkpoint).
        log.unlink(missing_ok=True)
        done = run("bash", sbatch, "--set", "checkpoint.dir=", env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("checkpoint.dir=", log.read_text().splitlines())

    def test_the_sbatch_script_finds_the_binary_in_the_build_folder_the_build_used(self) -> None:
        # scripts/build.sh builds into $TRAINBENCH_BUILD_DIR; a job submitted
        # by hand from that shell looked for <submit dir>/build/trainbench only.
        folder = Path(tempfile.mkdtemp(prefix="test_sbatch_build_"))
        self.addCleanup(shutil.rmtree, folder)
        bin_dir = self.fake_tools(folder)
        log = folder / "calls.log"
        for build, expected in (("gpu-build", folder / "gpu-build" / "trainbench"),
                                (str(folder / "abs"), folder / "abs" / "trainbench"),
                                ("", folder / "build" / "trainbench")):
            with self.subTest(build=build):
                expected.parent.mkdir(parents=True, exist_ok=True)
                expected.write_text("#!/bin/sh\n")
                expected.chmod(0o755)
                log.unlink(missing_ok=True)
                env = {**os.environ, "LOG": str(log), "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
                       "SLURM_JOB_NUM_NODES": "1", "SLURM_SUBMIT_DIR": str(folder), "OUT": str(folder / "out")}
                for name in ("TRAINBENCH_BINARY", "CKPT_DIR", "TRAINBENCH_BUILD_DIR"):
                    env.pop(name, None)
                if build:
                    env["TRAINBENCH_BUILD_DIR"] = build
                done = run("bash", REPO / "scripts" / "slurm" / "trainbench.sbatch", "--steps", "5", env=env)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn(str(expected), log.read_text().splitlines())
                expected.unlink()
        env["TRAINBENCH_BUILD_DIR"] = "missing"
        done = run("bash", REPO / "scripts" / "slurm" / "trainbench.sbatch", "--steps", "5", env=env)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(f"{folder}/missing/trainbench: not found", done.stderr)

    def test_slurm_without_sbatch_says_so(self) -> None:
        # A PATH of every system command but sbatch (CI installs Slurm: the
        # test skipped there, so never ran).
        tools = Path(tempfile.mkdtemp(prefix="test_no_sbatch_"))
        self.addCleanup(shutil.rmtree, tools)
        for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
            for entry in os.scandir(folder) if os.path.isdir(folder) else []:
                if entry.name != "sbatch" and not (tools / entry.name).exists():
                    (tools / entry.name).symlink_to(entry.path)
        path = str(tools)
        self.assertIsNone(shutil.which("sbatch", path=path))
        result = run("bash", SCALE, "--slurm", "--nodes", "1", env={**os.environ, "PATH": path})
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertIn("sbatch not found", result.stderr)


class CompareArgumentTests(unittest.TestCase):
    """report.py --compare and compare_finetune.sh refuse what they cannot use."""

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="test_compare_args_"))
        lora, full = fake_result(1, 1000.0), fake_result(2, 1500.0)
        lora["config"]["train"]["mode"] = "lora"
        full["config"]["train"]["mode"] = "full"
        (self.dir / "lora.json").write_text(json.dumps(lora))
        (self.dir / "full.json").write_text(json.dumps(full))

    def tearDown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_runs_of_different_models_are_refused(self) -> None:
        # The verdict line stood, bold, above a warning that the shapes differ.
        other = json.loads((self.dir / "full.json").read_text())
        other["config"]["model"]["d_model"] = 128
        (self.dir / "other.json").write_text(json.dumps(other))
        result = report("--compare", self.dir / "lora.json", self.dir / "other.json", "--out", self.dir)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("train different models (model.d_model 64 vs 128): LoRA against full fine-tuning compares one "
                      "model", result.stderr)
        self.assertFalse((self.dir / "compare.md").exists())

    def test_runs_in_the_wrong_order_or_number(self) -> None:
        for args, words in ((["full.json", "lora.json"], "train.mode is not lora"),
                            (["lora.json"], "two results"),
                            (["lora.json", "full.json", "--target-tokens", "0"], "--target-tokens"),
                            (["lora.json", "full.json", "--plan", "nope.json"], "--plan nope.json")):
            with self.subTest(args=args):
                result = report("--compare", *[a if not a.endswith(".json") or a == "nope.json" else self.dir / a
                                               for a in args])
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(words, result.stderr)
                self.assertEqual(result.stderr.count("\n"), 1, result.stderr)

    def test_the_verdict_follows_the_figures(self) -> None:
        # Full fine-tuning on 2 GPUs at 1.5x the tokens/s: sooner, but 1.33x the GPU-hours.
        result = report("--compare", self.dir / "lora.json", self.dir / "full.json", "--gpus-per-node", "1",
                        "--target-tokens", "3.6e6", "--out", self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        text = (self.dir / "compare.md").read_text()
        self.assertIn("Full fine-tuning on 2 node(s) finishes", text)
        self.assertIn("1.3x fewer GPU-hours", text)
        rows = markdown_table(text, "**Verdict:** " + text.split("**Verdict:** ")[1].splitlines()[0])
        self.assertEqual([r["mode"] for r in rows], ["LoRA", "full fine-tuning"])
        self.assertEqual(rows[0]["time for 3.60 M tokens"], "1.0 h")  # 3.6e6 / 1000 tokens/s
        self.assertEqual(rows[1]["GPU-hours"], "1.33")                    # 2400 s × 2 GPUs

    def test_a_run_that_failed_a_check_is_no_clean_comparison(self) -> None:
        # Ranks that diverged: the figures stand, but the verdict says so first
        # and the warnings name the check (it gave a confident verdict silently).
        full = json.loads((self.dir / "full.json").read_text())
        full["checks"] = [{"name": "ranks_consistent", "passed": False, "detail": "rank 1 differs at step 8"}]
        full["warnings"] = ["only 4 measured steps: step-time statistics are rough"]
        (self.dir / "full.json").write_text(json.dumps(full))
        result = report("--compare", self.dir / "lora.json", self.dir / "full.json", "--out", self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("verdict: Not a clean comparison: a run failed a check (full fine-tuning: ranks_consistent)",
                      result.stdout)
        failed = f"full fine-tuning ({self.dir / 'full.json'}): check ranks_consistent FAILED: rank 1 differs at step 8"
        rough = f"full fine-tuning ({self.dir / 'full.json'}): only 4 measured steps: step-time statistics are rough"
        self.assertIn(f"report.py: warning: {failed}\n", result.stderr)
        self.assertIn(f"report.py: warning: {rough}\n", result.stderr)
        text = (self.dir / "compare.md").read_text()
        self.assertIn("**Verdict:** Not a clean comparison:", text)
        self.assertIn(f"- {failed}", text)
        self.assertIn(f"- {rough}", text)

    def test_a_lora_win_names_extra_nodes_only_where_full_had_them(self) -> None:
        # Full fine-tuning slower than LoRA: on 2 nodes the extra nodes do not
        # pay; with both on 1 node (4 GPUs a node) there were no extra nodes to blame.
        slow_full = fake_result(2, 500.0)
        slow_full["config"]["train"]["mode"] = "full"
        (self.dir / "full.json").write_text(json.dumps(slow_full))
        for gpus_per_node, nodes_words, absent in (("1", "the extra nodes do not pay", None),
                                                   ("4", "on 2 GPU(s) against 1", "extra nodes")):
            with self.subTest(gpus_per_node=gpus_per_node):
                result = report("--compare", self.dir / "lora.json", self.dir / "full.json", "--gpus-per-node",
                                gpus_per_node, "--target-tokens", "3.6e6", "--out", self.dir)
                self.assertEqual(result.returncode, 0, result.stderr)
                verdict = (self.dir / "compare.md").read_text().split("**Verdict:** ")[1].splitlines()[0]
                self.assertIn("LoRA on 1 node(s) is both faster", verdict)
                self.assertIn(nodes_words, verdict)
                if absent:
                    self.assertNotIn(absent, verdict)

    def verdict_of(self, lora_ranks: int, lora_tokens_per_s: float, full_ranks: int, full_tokens_per_s: float,
                   gpus_per_node: int = 1, plan: dict | None = None) -> str:
        """The verdict line of compare.md for these runs, 3.6e6 target tokens (1 h at 1000 tokens/s)."""
        lora, full = fake_result(lora_ranks, lora_tokens_per_s), fake_result(full_ranks, full_tokens_per_s)
        lora["config"]["train"]["mode"] = "lora"
        full["config"]["train"]["mode"] = "full"
        plan_args = [] if plan is None else ["--plan", write_json(self.dir / "plan.json", plan)]
        result = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", full),
                        *plan_args, "--gpus-per-node", str(gpus_per_node), "--target-tokens", "3.6e6",
                        "--out", self.dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        line = (self.dir / "compare.md").read_text().split("**Verdict:** ")[1].splitlines()[0]
        self.assertEqual(result.stdout.splitlines()[0], f"verdict: {line}")
        # Every ratio is the winner's: at least 1.
        for ratio in re.findall(r"([0-9.]+)x", line):
            self.assertGreaterEqual(float(ratio), 1.0, line)
        return line

    def test_the_verdict_names_the_winner_of_time_and_of_gpu_hours(self) -> None:
        # (LoRA ranks, tokens/s, full ranks, tokens/s, GPUs a node), the words the verdict must have and
        # must not. At 3.6e6 tokens, 1000 tokens/s is 1 h; GPU-hours = hours x ranks.
        cases = [
            # Full fine-tuning on 1 GPU at 1.5x LoRA's tokens/s: sooner and cheaper (the probe's case).
            ((1, 1000.0, 1, 1500.0, 1),
             ["Full fine-tuning on 1 node(s) is both faster (40.0 min vs 1.0 h for 3.60 M tokens) and 1.5x "
              "cheaper in GPU-hours (0.667 vs 1) than LoRA on 1 node(s)."], ["LoRA on 1 node(s) uses", "fewer"]),
            # Full fine-tuning on 2 GPUs at 4x: 2x the GPUs, 4x the tokens/s: sooner and cheaper.
            ((1, 1000.0, 2, 4000.0, 1),
             ["Full fine-tuning on 2 node(s) is both faster (15.0 min vs 1.0 h", "2.0x cheaper in GPU-hours "
              "(0.5 vs 1) than LoRA on 1 node(s) on 1 GPU(s) against 2."], ["LoRA on 1 node(s) uses"]),
            # LoRA sooner and cheaper.
            ((1, 1000.0, 2, 500.0, 1),
             ["LoRA on 1 node(s) is both faster (1.0 h vs 2.0 h for 3.60 M tokens) and 4.0x cheaper in GPU-hours "
              "(1 vs 4) than full fine-tuning on 2 node(s): the extra nodes do not pay"], ["Full fine-tuning"]),
            # Full sooner (2 GPUs at 1.5x), LoRA cheaper.
            ((1, 1000.0, 2, 1500.0, 1),
             ["Full fine-tuning on 2 node(s) finishes 3.60 M tokens 1.5x sooner (40.0 min vs 1.0 h), but LoRA on "
              "1 node(s) uses 1.3x fewer GPU-hours (1 vs 1.33): buy the nodes"], ["both"]),
            # LoRA on 2 GPUs of one node sooner, full on 1 GPU cheaper.
            ((2, 2000.0, 1, 1500.0, 2),
             ["LoRA on 1 node(s) finishes 3.60 M tokens 1.3x sooner (30.0 min vs 40.0 min), but full "
              "fine-tuning on 1 node(s) uses 1.5x fewer GPU-hours (0.667 vs 1)"], ["both", "buy the nodes"]),
            # The same tokens/s on 1 GPU each: no winner.
            ((1, 1000.0, 1, 1000.0, 1),
             ["take about the same time (1.0 h vs 1.0 h for 3.60 M tokens) and GPU-hours (1 vs 1)"],
             ["sooner", "fewer", "both"]),
            # The same time, LoRA on half the GPUs.
            ((1, 1000.0, 2, 1000.0, 1),
             ["LoRA on 1 node(s) takes about as long as full fine-tuning on 2 node(s) (1.0 h vs 1.0 h for "
              "3.60 M tokens) and uses 2.0x fewer GPU-hours (1 vs 2)"], ["sooner", "both"]),
            # Twice the GPUs at twice the tokens/s: the same GPU-hours, full sooner.
            ((1, 1000.0, 2, 2000.0, 1),
             ["Full fine-tuning on 2 node(s) finishes 3.60 M tokens 2.0x sooner (30.0 min vs 1.0 h) than LoRA on "
              "1 node(s) for about the same GPU-hours (1 vs 1)"], ["fewer", "both"]),
            # A small difference is not rounded away to 1.0x.
            ((1, 1000.0, 1, 1040.0, 1), ["1.04x cheaper in GPU-hours", "Full fine-tuning on 1 node(s) is both"],
             ["1.0x"]),
        ]
        for (lora_ranks, lora_tps, full_ranks, full_tps, per_node), words, absent in cases:
            with self.subTest(lora=(lora_ranks, lora_tps), full=(full_ranks, full_tps)):
                line = self.verdict_of(lora_ranks, lora_tps, full_ranks, full_tps, per_node)
                for word in words:
                    self.assertIn(word, line)
                for word in absent:
                    self.assertNotIn(word, line)

    def test_the_verdict_says_what_does_not_fit_by_the_plan(self) -> None:
        def plan(lora_fits: bool, full_fits: bool) -> dict:
            rows = [dict(row, fits=lora_fits if row["mode"] == "lora" else full_fits) for row in PLAN["rows"]]
            return dict(PLAN, rows=rows)
        for lora_fits, full_fits, words in (
                (False, True, "LoRA does not fit in GPU memory at this shape and batch: full fine-tuning on 2 "
                              "node(s) is the option that runs"),
                (True, False, "Full fine-tuning does not fit in GPU memory on 2 GPUs: LoRA on 1 node(s) is the "
                              "option that runs"),
                (False, False, "Neither LoRA nor full fine-tuning fits in GPU memory")):
            with self.subTest(lora_fits=lora_fits, full_fits=full_fits):
                # Full fine-tuning sooner and cheaper: which fits still decides.
                line = self.verdict_of(1, 1000.0, 2, 4000.0, plan=plan(lora_fits, full_fits))
                self.assertIn(words, line)
                self.assertNotIn("both faster", line)

    def refuse(self, lora: object, full: dict, plan: object, *words: str, raw: str | None = None,
               plan_raw: str | None = None, args: tuple[str, ...] = ()) -> None:
        """Exit 2 with one line naming `words`; compare.md from before left as it is."""
        lora_path = write_json(self.dir / "lora.json", lora, raw)
        full_path = write_json(self.dir / "full.json", full)
        plan_args = [] if plan is None else ["--plan", write_json(self.dir / "plan.json", plan, plan_raw)]
        out = self.dir / "out"
        out.mkdir(exist_ok=True)
        (out / "compare.md").write_text("the previous comparison\n")
        result = report("--compare", lora_path, full_path, *plan_args, *args, "--out", out)
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertEqual(result.stdout, "")
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        for word in words:
            self.assertIn(word, lines[0])
        self.assertEqual((out / "compare.md").read_text(), "the previous comparison\n")
        self.assertEqual([p.name for p in out.iterdir()], ["compare.md"])

    def test_damaged_runs_name_the_file_and_the_field(self) -> None:
        lora, full = lora_and_full()
        lora_file = str(self.dir / "lora.json")
        for field, value, named in (("config", [], "config"), ("config", "lora", "config"),
                                    ("config.comm", 1, "config.comm"), ("checkpoints", 5, "checkpoints"),
                                    ("checkpoints", [{"status": "committed", "bytes": "4 KiB"}],
                                     "checkpoints[0].bytes"),
                                    ("environment.hosts", [["a"]], "environment.hosts[0]"),
                                    ("summary.memory_per_rank", [1], "summary.memory_per_rank"),
                                    ("summary.memory_per_rank", {"total_bytes": "1 GiB"},
                                     "summary.memory_per_rank.total_bytes"),
                                    ("summary.tokens_per_s", 0, "summary.tokens_per_s")):
            with self.subTest(field=field, value=value):
                self.refuse(damaged(lora, field, value), full, None, lora_file, named)
        for raw in ("NaN", "1e400", "1" + "0" * 5000):
            with self.subTest(raw=raw[:10]):
                self.refuse(damaged(lora, "summary.tokens_per_s", RAW), full, None, lora_file,
                            "summary.tokens_per_s", raw=raw)
        self.refuse(RAW, full, None, lora_file, "nests deeper", raw="[" * 100000 + "]" * 100000)
        # null sections are read as absent, as the report reads them
        lora_ok = damaged(damaged(lora, "checkpoints", None), "config.comm", None)
        done = report("--compare", write_json(self.dir / "lora.json", lora_ok),
                      write_json(self.dir / "full.json", full), "--out", self.dir / "ok")
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_a_run_that_measured_no_step_cannot_be_compared(self) -> None:
        lora, full = lora_and_full()
        stopped = unmeasured_result(2)
        stopped["config"]["train"]["mode"] = "full"
        self.refuse(lora, stopped, None, f"{self.dir / 'full.json'}: the full fine-tuning run measured no step "
                    "(summary.tokens_per_s is null; check data_read failed): no tokens/s to compare")
        stopped = unmeasured_result(1)
        stopped["config"]["train"]["mode"] = "lora"
        self.refuse(stopped, full, None, f"{self.dir / 'lora.json'}: the LoRA run measured no step")

    def test_a_bench_or_burnin_result_cannot_be_compared(self) -> None:
        # Their summary is another job's (a bench's 2-step job, a burn-in's
        # steps between golden checks): it decided the verdict, exit 0.
        lora, full = lora_and_full()
        compute = damaged(full, "compute_ceiling", {"tokens_per_s": 1000.0, "step_s": 0.5})
        self.refuse(lora, compute, None, f"{self.dir / 'full.json'}: a `trainbench bench compute` result",
                    "compare two `trainbench run` results")
        instrument = damaged(lora, "instrumentation_cost", {"pairs": 3})
        self.refuse(instrument, full, None, f"{self.dir / 'lora.json'}: a `trainbench bench instrument` result")
        burnin = damaged(lora, "burnin", {"verdict": "PASS"})
        self.refuse(burnin, full, None, f"{self.dir / 'lora.json'}: a `trainbench burnin` result (verdict PASS)")

    def test_a_damaged_plan_names_the_file_and_the_field(self) -> None:
        lora, full = lora_and_full()
        plan_file = f"--plan {self.dir / 'plan.json'}"
        for plan, raw, words in ((damaged(PLAN, "rows", {"lora": {}}), None, ("rows",)),
                                 (damaged(PLAN, "rows.0", "full"), None, ("rows[0]",)),
                                 (damaged(PLAN, "rows.2.fits", "yes"), None, ("rows[2].fits",)),
                                 (damaged(PLAN, "rows.2.total_bytes", -1), None, ("rows[2].total_bytes",)),
                                 (damaged(PLAN, "rows.1.mode", None), None, ("rows[1].mode",)),
                                 (damaged(PLAN, "rows.1.total_bytes", RAW), "NaN", ("rows[1].total_bytes", "NaN")),
                                 ({"config": "tiny"}, None, ("rows", "missing")),
                                 ([PLAN], None, ("not the output of `trainbench plan --json`",)),
                                 (RAW, "[" * 100000 + "]" * 100000, ("nests deeper",)),
                                 (RAW, "", ("empty file",))):
            with self.subTest(words=words):
                self.refuse(lora, full, plan, plan_file, *words, plan_raw=raw)
        (self.dir / "latin1.json").write_bytes(b"{\"rows\": \"\xe9\"}")
        self.refuse(lora, full, None, "latin1.json", "not UTF-8", args=("--plan", str(self.dir / "latin1.json")))

    def test_a_plan_of_another_model_is_refused(self) -> None:
        # `tiny`'s shape: 164,160 parameters (kernels/model_shape.cpp's layout).
        lora, full = lora_and_full()
        for run in (lora, full):
            run["config"]["model"] = dict(TINY_SHAPE)
        tiny_plan = damaged(PLAN, "rows.0.trainable_params", 164160)
        done = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", full),
                      "--plan", write_json(self.dir / "plan.json", tiny_plan), "--out", self.dir / "ok")
        self.assertEqual(done.returncode, 0, done.stderr)
        rows = markdown_table((self.dir / "ok" / "compare.md").read_text(), "**Verdict:** " + done.stdout.split(
            "verdict: ")[1].splitlines()[0])
        self.assertEqual([r["memory/GPU (plan)"] for r in rows], ["1.00 GiB"] * 2)
        plan_file = f"--plan {self.dir / 'plan.json'}"
        big = damaged(damaged(PLAN, "rows.0.trainable_params", 70553706496), "config", "preset:llama3-70b")
        self.refuse(lora, full, big, plan_file, "preset:llama3-70b", "70,553,706,496 parameters",
                    str(self.dir / "lora.json"), "164,160", "n_layers 2")
        # The same config name, another depth set on the runs (--set model.n_layers=4).
        deeper = copy.deepcopy(full)
        deeper["config"]["model"]["n_layers"] = 4
        self.refuse(damaged(lora, "config.model.n_layers", 4), deeper, damaged(tiny_plan, "config", "preset:tiny"),
                    plan_file, "164,160 parameters (config preset:tiny)", "n_layers 4")
        # Only the full run's shape differs: the two runs are not one model,
        # whatever the plan says.
        self.refuse(lora, deeper, tiny_plan, str(self.dir / "full.json"),
                    "train different models (model.n_layers 2 vs 4)")
        # A plan without parameter counts, or runs without a whole shape, cannot be checked: read as before.
        for plan, model in ((PLAN, TINY_SHAPE), (big, {"d_model": 64, "n_layers": 2})):
            with self.subTest(plan=plan["rows"][0].get("trainable_params"), model=model):
                done = report("--compare", write_json(self.dir / "lora.json", damaged(lora, "config.model", model)),
                              write_json(self.dir / "full.json", damaged(full, "config.model", model)),
                              "--plan", write_json(self.dir / "plan.json", plan), "--out", self.dir / "ok")
                self.assertEqual(done.returncode, 0, done.stderr)
        self.refuse(lora, full, damaged(tiny_plan, "rows.0.trainable_params", "164160"), plan_file,
                    "rows[0].trainable_params")

    def test_the_binarys_plan_of_another_model_is_refused(self) -> None:
        # The probe's case: `trainbench plan llama3-70b --json` beside two real `tiny` runs.
        full = real_result()
        lora = damaged(full, "config.train.mode", "lora")
        # The binary's plan records the model planned: any key that differs is
        # named, seq_len too (it sizes the activations, not the parameters).
        for config, words in ((("llama3-70b",), ("config preset:llama3-70b", "model.d_model = 8192", "= 64")),
                              (("tiny", "--set", "model.seq_len=128"), ("model.seq_len = 128", "= 64")),
                              (("tiny",), None)):
            with self.subTest(config=config):
                made = run(BINARY, "plan", *config, "--json")
                self.assertEqual(made.returncode, 0, made.stderr)
                plan = json.loads(made.stdout)
                if words is None:
                    out = self.dir / "ok"
                    done = report("--compare", write_json(self.dir / "lora.json", lora),
                                  write_json(self.dir / "full.json", full), "--plan",
                                  write_json(self.dir / "plan.json", plan), "--out", out)
                    self.assertEqual(done.returncode, 0, done.stderr)
                    self.assertIn("| yes |", (out / "compare.md").read_text())
                else:
                    self.refuse(lora, full, plan, f"--plan {self.dir / 'plan.json'}", *words)

    def test_a_result_given_as_the_plan_is_named_so(self) -> None:
        # It said "config is an object, expected a string".
        lora, full = lora_and_full()
        self.refuse(lora, full, full, f"--plan {self.dir / 'plan.json'}: not the output of `trainbench plan --json` "
                    '(a `trainbench run` result, schema "trainbench.result/v1")')
        self.refuse(lora, full, damaged(full, "schema", None), f"--plan {self.dir / 'plan.json'}: not the output of "
                    "`trainbench plan --json`")

    def plan_rows(self, total: dict[str, int], fits: dict[str, bool] | None = None, **lora_row: object) -> dict:
        rows = [dict(row, total_bytes=total[row["mode"].split()[0]],
                     fits=(fits or {}).get(row["mode"].split()[0], True)) for row in PLAN["rows"]]
        rows[2].update(lora_row)
        return dict(PLAN, rows=rows)

    def test_each_side_has_its_own_plan(self) -> None:
        # compare_finetune.sh plans each side with its own --set's: the LoRA
        # row from the LoRA side's plan, the full rows from the full side's.
        lora, full = lora_and_full()
        lora_plan = self.plan_rows({"full": 7 * 2**30, "lora": 3 * 2**30}, {"full": False})
        full_plan = self.plan_rows({"full": 5 * 2**30, "lora": 9 * 2**30}, {"lora": False})
        out = self.dir / "sides"
        done = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", full),
                      "--lora-plan", write_json(self.dir / "plan-lora.json", lora_plan),
                      "--full-plan", write_json(self.dir / "plan-full.json", full_plan), "--out", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        text = (out / "compare.md").read_text()
        verdict = text.split("**Verdict:** ")[1].splitlines()[0]
        self.assertNotIn("does not fit", verdict)
        rows = markdown_table(text, "**Verdict:** " + verdict)
        self.assertEqual([r["memory/GPU (plan)"] for r in rows], ["3.00 GiB", "5.00 GiB"])
        self.assertEqual([r["fits"] for r in rows], ["yes", "yes"])
        self.assertIn(f"- plan (LoRA): {self.dir / 'plan-lora.json'}", text)
        self.assertIn(f"- plan (full fine-tuning): {self.dir / 'plan-full.json'}", text)
        # One side's plan only: the other side has none.
        done = report("--compare", self.dir / "lora.json", self.dir / "full.json",
                      "--lora-plan", self.dir / "plan-lora.json", "--out", out)
        self.assertEqual(done.returncode, 0, done.stderr)
        rows = markdown_table((out / "compare.md").read_text(), "**Verdict:** " + done.stdout.split(
            "verdict: ")[1].splitlines()[0])
        self.assertEqual([r["memory/GPU (plan)"] for r in rows], ["3.00 GiB", "—"])
        self.refuse(lora, full, None, "--plan is one plan for both runs",
                    args=("--plan", str(self.dir / "plan-lora.json"), "--full-plan", str(self.dir / "plan-full.json")))
        for option in ("--lora-plan", "--full-plan"):
            with self.subTest(option=option):
                done = report(self.dir / "lora.json", option, self.dir / "plan-lora.json")
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertEqual(done.stderr, f"report.py: {option}: only with --compare\n")

    def test_a_plan_of_other_adapters_attention_or_zero_world_is_refused(self) -> None:
        # Only the model was checked: a plan of another LoRA rank, other
        # targets or another attention was set beside the runs without a word.
        lora, full = lora_and_full()
        for run in (lora, full):
            run["config"]["model"] = dict(TINY_SHAPE)
            run["config"]["lora"] = {"rank": 16, "targets": "q, k,v,o"}
            run["config"]["train"]["attention"] = "auto"
        # rank 16 on q,k,v,o of `tiny`: 2 layers x 16 x (128 + 96 + 96 + 128) = 14,336
        plan = self.plan_rows({"full": 2**30, "lora": 2**30}, trainable_params=14336)
        plan["attention"] = {"kernel": "cudnn-sdpa", "basis": "assumed: this build has no CUDA engine"}
        done = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", full),
                      "--plan", write_json(self.dir / "plan.json", plan), "--out", self.dir / "ok")
        self.assertEqual(done.returncode, 0, done.stderr)
        plan_file = f"--plan {self.dir / 'plan.json'}"
        lora_file = str(self.dir / "lora.json")
        for option in ("--plan", "--lora-plan"):
            with self.subTest(option=option):
                self.refuse(lora, full, None, f"{option} {self.dir / 'other.json'}: plans LoRA adapters of 155,648 "
                            f"parameters (its lora row), but {lora_file} trained lora.rank 16 on q, k,v,o "
                            "(14,336 parameters)",
                            args=(option, str(write_json(self.dir / "other.json",
                                                         damaged(plan, "rows.2.trainable_params", 155648)))))
        # The full side's plan is not checked against the LoRA run's adapters.
        done = report("--compare", self.dir / "lora.json", self.dir / "full.json", "--full-plan",
                      self.dir / "other.json", "--out", self.dir / "ok")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.refuse(damaged(lora, "config.lora.targets", "q,v"), full, plan, plan_file, "lora.rank 16 on q,v",
                    "(7,168 parameters)")
        self.refuse(lora, damaged(full, "config.train.attention", "gemm"), plan, plan_file,
                    "plans the cudnn-sdpa attention", str(self.dir / "full.json"), 'train.attention = "gemm"')
        gemm = damaged(damaged(plan, "attention.basis", "train.attention=gemm"), "attention.kernel", "gemm")
        self.refuse(lora, full, gemm, plan_file, "plans the gemm attention (train.attention=gemm)", lora_file,
                    'train.attention = "auto"')
        # A build without cuDNN plans GEMM attention whatever the config asks: that is the run's.
        no_cudnn = damaged(gemm, "attention.basis", "this build has no cuDNN attention")
        for attention in ("gemm", "auto"):
            with self.subTest(attention=attention):
                done = report("--compare",
                              write_json(self.dir / "lora.json", damaged(lora, "config.train.attention", attention)),
                              write_json(self.dir / "full.json", damaged(full, "config.train.attention", attention)),
                              "--plan", write_json(self.dir / "plan.json", no_cudnn), "--out", self.dir / "ok")
                self.assertEqual(done.returncode, 0, done.stderr)
        # ZeRO-1's optimizer shard is of one world size: the full run's.
        zero = damaged(full, "config.comm", {"zero": 1})
        self.refuse(lora, zero, damaged(plan, "rows.1.gpus", 4), plan_file, "plans ZeRO-1 over 4 GPUs",
                    f"{self.dir / 'full.json'} trained on 2 ranks")
        done = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", zero),
                      "--plan", write_json(self.dir / "plan.json", plan), "--out", self.dir / "ok")
        self.assertEqual(done.returncode, 0, done.stderr)
        # Newer plans record the micro-batch and train.deterministic, which
        # size the activations and the attention's workspace.
        for run in (lora, full):
            run["config"]["train"]["micro_batch"] = 8
            run["config"]["train"]["deterministic"] = True
        recorded = damaged(plan, "train", {"micro_batch": 8, "deterministic": True})
        done = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", full),
                      "--plan", write_json(self.dir / "plan.json", recorded), "--out", self.dir / "ok")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.refuse(lora, damaged(full, "config.train.micro_batch", 4), recorded, plan_file,
                    "plans train.micro_batch = 8", f"{self.dir / 'full.json'} trained train.micro_batch = 4")
        self.refuse(damaged(lora, "config.train.deterministic", False), full, recorded, plan_file,
                    "plans train.deterministic = true", "trained train.deterministic = false")

    def test_the_binarys_plan_of_other_adapters_or_attention_is_refused(self) -> None:
        # The tester's case: a LoRA run of rank 64 on all seven projections
        # beside a plan of the config's rank 16 on q,k,v,o.
        full = real_result()
        lora = damaged(damaged(damaged(full, "config.train.mode", "lora"), "config.lora.rank", 64),
                       "config.lora.targets", "q,k,v,o,gate,up,down")
        for sets, words in (((), ("plans LoRA adapters of 14,336 parameters", "lora.rank 64 on q,k,v,o,gate,up,down",
                                  "155,648")),
                            (("--set", "lora.rank=64"), ("plans LoRA adapters of 57,344 parameters",)),
                            (("--set", "lora.rank=64", "--set", "lora.targets=q,k,v,o,gate,up,down",
                              "--set", "train.attention=gemm"), ("plans the gemm attention", "train.attention")),
                            (("--set", "lora.rank=64", "--set", "lora.targets=down,up,gate,o,v,k,q"), None)):
            with self.subTest(sets=sets):
                made = run(BINARY, "plan", "tiny", *sets, "--json")
                self.assertEqual(made.returncode, 0, made.stderr)
                plan = json.loads(made.stdout)
                if words is None:
                    done = report("--compare", write_json(self.dir / "lora.json", lora),
                                  write_json(self.dir / "full.json", full), "--plan",
                                  write_json(self.dir / "plan.json", plan), "--out", self.dir / "ok")
                    self.assertEqual(done.returncode, 0, done.stderr)
                else:
                    self.refuse(lora, full, plan, f"--plan {self.dir / 'plan.json'}", *words)

    def test_bad_options(self) -> None:
        lora, full = lora_and_full()
        regular = self.dir / "regular"
        regular.write_text("")
        for args, words in ((("--target-tokens", "-5"), ("--target-tokens", "-5")),
                            (("--target-tokens", "abc"), ("--target-tokens", "abc")),
                            (("--target-tokens", "inf"), ("--target-tokens", "inf")),
                            (("--target-tokens", "1e-300"), ("--target-tokens",)),
                            (("--gpus-per-node", "0"), ("--gpus-per-node", "0")),
                            (("--gpus-per-node", "x"), ("--gpus-per-node",)),
                            (("--plan", ""), ("--plan", "empty"))):
            with self.subTest(args=args):
                self.refuse(lora, full, None, *words, args=args)
        done = report("--compare", write_json(self.dir / "lora.json", lora), write_json(self.dir / "full.json", full),
                      "--out", regular)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(done.stderr.splitlines(), [f"report.py: --out {regular}: not a folder"])

    def test_compare_script_checks_its_arguments_first(self) -> None:
        for args, words in ((["--nodes", "0"], "--nodes"), (["--gpus-per-node", "x"], "--gpus-per-node"),
                            (["--target-tokens", "-5"], "--target-tokens"),
                            (["--target-tokens", "0.5"], "--target-tokens"),
                            (["--target-tokens", "inf"], "--target-tokens"), (["--launcher", "ssh"], "--launcher")):
            with self.subTest(args=args):
                result = run("bash", COMPARE, *args, "--out", self.dir / "never")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(words, result.stderr)
                self.assertFalse((self.dir / "never").exists())


class CompareTests(unittest.TestCase):
    """compare_finetune.sh end to end: LoRA on one 'node' of one rank against
    full fine-tuning on two, real CPU runs of `tiny` under mpirun."""

    out: Path
    done: subprocess.CompletedProcess[str]

    @classmethod
    def setUpClass(cls) -> None:
        require_binary_and_mpirun("the comparison")
        cls.out = Path(tempfile.mkdtemp(prefix="test_compare_"))
        cls.done = run("bash", COMPARE, "--binary", BINARY, "--config", "tiny", "--gpus-per-node", "1",
                       "--nodes", "2", "--steps", "12", "--set", "train.threads=1",
                       "--set", "report.progress_every=0", "--lora-set", "lora.rank=8",
                       "--set", f"checkpoint.dir={cls.out / 'ckpt'}",
                       "--mpirun-args", "--oversubscribe", "--out", cls.out,
                       env={**os.environ, "MPIRUN": MPIRUN}, timeout=400)
        print(cls.done.stdout, file=sys.stderr)
        if cls.done.returncode != 0:
            print(cls.done.stderr, file=sys.stderr)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self) -> None:
        self.assertEqual(self.done.returncode, 0, self.done.stderr)

    def test_both_runs_are_real_and_of_their_mode(self) -> None:
        lora = json.loads((self.out / "lora.json").read_text())
        full = json.loads((self.out / "full.json").read_text())
        self.assertEqual(lora["config"]["train"]["mode"], "lora")
        self.assertEqual(lora["config"]["lora"]["rank"], 8)
        self.assertEqual(full["config"]["train"]["mode"], "full")
        self.assertEqual(lora["environment"]["ranks"], 1)
        self.assertEqual(full["environment"]["ranks"], 2)
        self.assertEqual(lora["config"]["model"], full["config"]["model"])
        # LoRA trains and checkpoints far fewer bytes.
        self.assertLess(lora["summary"]["memory_per_rank"]["optimizer_bytes"] * 10,
                        full["summary"]["memory_per_rank"]["optimizer_bytes"])

    def test_the_report_has_both_rows_the_plan_and_a_verdict(self) -> None:
        text = (self.out / "compare.md").read_text()
        verdict = text.split("**Verdict:** ")[1].splitlines()[0]
        self.assertRegex(verdict, r"LoRA|Full fine-tuning")
        self.assertIn(verdict, self.done.stdout)
        rows = markdown_table(text, "**Verdict:** " + verdict)
        self.assertEqual([r["mode"] for r in rows], ["LoRA", "full fine-tuning"])
        self.assertEqual([r["nodes"] for r in rows], ["1", "2"])
        for r in rows:
            self.assertNotEqual(r["memory/GPU (plan)"], "—")
            self.assertEqual(r["fits"], "yes")
            self.assertNotEqual(r["checkpoint"], "—")
            self.assertGreater(float(r["GPU-hours"]), 0)
        # Each side planned with its own --set's: the LoRA row is rank 8's
        # (2 layers x 8 x (128 + 96 + 96 + 128) = 7,168 parameters), not the
        # config's rank 16 the full side's plan has.
        plans = {side: json.loads((self.out / f"plan-{side}.json").read_text()) for side in ("lora", "full")}
        for plan in plans.values():
            self.assertEqual([r["mode"] for r in plan["rows"]], ["full (DDP)", "full (ZeRO-1)", "lora"])
        self.assertEqual(plans["lora"]["rows"][2]["trainable_params"], 7168)
        self.assertEqual(plans["full"]["rows"][2]["trainable_params"], 14336)
        self.assertEqual(rows[0]["memory/GPU (plan)"], f"{plans['lora']['rows'][2]['total_bytes'] / 2**20:.2f} MiB")
        self.assertEqual(rows[1]["memory/GPU (plan)"], f"{plans['full']['rows'][0]['total_bytes'] / 2**20:.2f} MiB")
        self.assertNotEqual(rows[0]["memory/GPU (plan)"],
                            f"{plans['full']['rows'][2]['total_bytes'] / 2**20:.2f} MiB")

    def test_a_rerun_with_the_same_checkpoint_dir_gets_fresh_folders(self) -> None:
        # The second run with one --set checkpoint.dir=D failed at the LoRA
        # step: D/lora held the first run's checkpoints (exit 2).
        ckpt = self.out / "ckpt"
        first = sorted(p.name for p in ckpt.iterdir())
        self.assertEqual([name.split("-")[0] for name in first], ["full", "lora"], first)
        again = run("bash", COMPARE, "--binary", BINARY, "--config", "tiny", "--gpus-per-node", "1",
                    "--nodes", "2", "--steps", "3", "--set", "train.warmup_steps=1", "--set", "train.threads=1",
                    "--set", "report.progress_every=0", "--set", "checkpoint.every_steps=2",
                    "--set", f"checkpoint.dir={ckpt}", "--mpirun-args", "--oversubscribe",
                    "--out", self.out / "again", env={**os.environ, "MPIRUN": MPIRUN}, timeout=200)
        self.assertEqual(again.returncode, 0, again.stderr)
        folders = sorted(p.name for p in ckpt.iterdir())
        new = [name for name in folders if name not in first]
        self.assertEqual([name.split("-")[0] for name in new], ["full", "lora"], folders)
        for name in folders:
            self.assertTrue((ckpt / name / "latest").is_file(), name)
        lora_dir, full_dir = ckpt / new[1], ckpt / new[0]
        self.assertIn(f"checkpoints: LoRA in {lora_dir}, full fine-tuning in {full_dir}", again.stdout)


class SweepTests(unittest.TestCase):
    """A real 1/2/4-rank sweep of `tiny`, made once for the class."""

    out: Path
    sweep: subprocess.CompletedProcess[str]

    @classmethod
    def setUpClass(cls) -> None:
        require_binary_and_mpirun("the sweep")
        cls.out = Path(tempfile.mkdtemp(prefix="test_report_sweep_"))
        # One thread per rank: four ranks share two cores in CI.
        cls.sweep = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1,2,4", "--steps", "8",
                        "--set", "train.warmup_steps=2", "--set", "train.threads=1",
                        "--set", "report.progress_every=0", "--out", cls.out,
                        env={**os.environ, "MPIRUN": MPIRUN}, timeout=400)
        print(cls.sweep.stdout, file=sys.stderr)
        if cls.sweep.returncode != 0:
            print(cls.sweep.stderr, file=sys.stderr)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self) -> None:
        self.assertEqual(self.sweep.returncode, 0, self.sweep.stderr)

    def test_a_sweep_repeated_with_one_ckpt_dir_gets_fresh_checkpoint_folders(self) -> None:
        # trainbench refuses a checkpoint.dir that holds another run's
        # checkpoints: a fixed DIR/ranks-N failed the second sweep.
        ckpt = self.out / "ckpt"
        for attempt in (1, 2):
            done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "6",
                       "--set", "checkpoint.every_steps=3", "--set", "report.progress_every=0",
                       "--ckpt-dir", ckpt, "--out", self.out / f"again-{attempt}", "--no-report",
                       env={**os.environ, "MPIRUN": MPIRUN}, timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
        folders = sorted(p.name for p in ckpt.iterdir())
        self.assertEqual(len(folders), 2, folders)
        for folder in folders:
            self.assertTrue(folder.startswith("ranks-1-"), folder)
            self.assertTrue((ckpt / folder / "latest").is_file(), folder)

    def test_a_checkpoint_dir_set_gets_a_folder_per_world_size(self) -> None:
        # `--set checkpoint.dir=D` went to every world size as it was: the
        # 2-rank run found D holding the 1-rank run's checkpoints (exit 2).
        ckpt = self.out / "set-ckpt"
        done = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1,2", "--steps", "3",
                   "--set", "train.warmup_steps=1", "--set", "train.threads=1", "--set", "checkpoint.every_steps=2",
                   "--set", "report.progress_every=0", "--set", f"checkpoint.dir={ckpt}",
                   "--out", self.out / "set-ckpt-out", "--no-report", env={**os.environ, "MPIRUN": MPIRUN},
                   timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        folders = sorted(p.name for p in ckpt.iterdir())
        self.assertEqual([name.split("-")[:2] for name in folders], [["ranks", "1"], ["ranks", "2"]], folders)
        for folder in folders:
            self.assertTrue((ckpt / folder / "latest").is_file(), folder)

    def test_a_failed_rerun_keeps_the_earlier_result_and_sets_its_own_beside(self) -> None:
        # A run that fails may still write its result (a non-finite loss,
        # exit 4; a failed checkpoint, exit 3): it took the earlier result's
        # place, which was left as ranks-1.json.previous.
        out = self.out / "rerun"
        out.mkdir()
        earlier = (self.out / "ranks-1.json").read_text()
        (out / "ranks-1.json").write_text(earlier)
        failed = run("bash", SCALE, "--binary", BINARY, "--config", "tiny", "--ranks", "1", "--steps", "8",
                     "--set", "train.lr=1e38", "--set", "report.progress_every=0", "--out", out, "--no-report",
                     env={**os.environ, "MPIRUN": MPIRUN}, timeout=120)
        self.assertEqual(failed.returncode, 4, failed.stderr)
        self.assertEqual((out / "ranks-1.json").read_text(), earlier)
        self.assertFalse((out / "ranks-1.json.previous").exists())
        own = json.loads((out / "ranks-1.failed.json").read_text())
        self.assertIn({"name": "loss_finite", "passed": False}, [{k: c[k] for k in ("name", "passed")}
                                                                   for c in own["checks"]])
        self.assertIn(f"its result (the steps before it failed) is {out}/ranks-1.failed.json", failed.stderr)
        self.assertIn(f"the earlier {out}/ranks-1.json is kept", failed.stderr)

    def test_one_result_per_world_size_from_real_ranks(self) -> None:
        for n in (1, 2, 4):
            result = json.loads((self.out / f"ranks-{n}.json").read_text())
            self.assertEqual(result["schema"], "trainbench.result/v1")
            self.assertEqual(result["environment"]["ranks"], n)
            self.assertEqual(result["summary"]["global_tokens_per_step"], n * 8 * 64)
            if n > 1:
                self.assertEqual(result["environment"]["comm_backend"], "mpi")
            # The log opens with the command: every world size went through mpirun.
            command = (self.out / f"ranks-{n}.log").read_text().splitlines()[0]
            self.assertIn(f" -np {n} ", command)

    def test_the_report_table_has_one_row_per_world_size(self) -> None:
        text = (self.out / "report.md").read_text()
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([r["ranks"] for r in rows], ["1", "2", "4"])
        for row in rows:
            self.assertGreater(float(row["tokens/s"]), 0.0, row)
            self.assertGreater(float(row["scaling efficiency"]), 0.0, row)
        self.assertEqual(float(rows[0]["scaling efficiency"]), 1.0)
        self.assertEqual(float(rows[0]["ideal tokens/s"]), float(rows[0]["tokens/s"]))
        # Both printed to 0.1: four times a rounded figure is off by up to 0.25.
        self.assertAlmostEqual(float(rows[2]["ideal tokens/s"]), 4 * float(rows[0]["tokens/s"]), delta=0.3)
        shares = markdown_table(text, "## Where the step time goes")
        self.assertEqual(len(shares), 3)
        self.assertIn("## Config and environment (the smallest run)", text)
        self.assertIn("efficiency 1.000", self.sweep.stdout)

    def test_the_plots_are_pngs(self) -> None:
        for name in PLOTS:
            with self.subTest(plot=name):
                width, height = png_size(self.out / name)
                self.assertGreater(width, 100)
                self.assertGreater(height, 100)
                self.assertIn(f"]({name})", (self.out / "report.md").read_text())


class SlurmTests(unittest.TestCase):
    """The Slurm path on a one-node Slurm cluster started here
    (scripts/slurm/local_cluster.sh: munged, slurmctld, slurmd as root):
    scale.sh --slurm submits scripts/slurm/trainbench.sbatch, which starts 2
    ranks with srun --mpi=pmix; the result and report.py's table from it.
    One node only: a multi-node job needs a second machine."""

    cluster: Path
    out: Path
    submit: subprocess.CompletedProcess[str]
    env: dict[str, str]

    @classmethod
    def setUpClass(cls) -> None:
        if not os.access(BINARY, os.X_OK):
            raise unittest.SkipTest(f"{BINARY} is not built")
        for tool in ("sbatch", "squeue", "slurmctld", "slurmd", "munged"):
            if not shutil.which(tool):
                raise unittest.SkipTest(f"{tool} not found: scripts/setup.sh installs Slurm and munge")
        if os.geteuid() != 0:
            raise unittest.SkipTest("the local Slurm daemons run as root here")
        cls.cluster = Path(tempfile.mkdtemp(prefix="test_slurm_cluster_"))
        cls.out = Path(tempfile.mkdtemp(prefix="test_slurm_out_"))
        started = run("bash", REPO / "scripts" / "slurm" / "local_cluster.sh", "start", cls.cluster, timeout=120)
        if started.returncode != 0:
            # The daemons need what a container may not allow (ports, root);
            # that is this host's limit, not the sbatch path's: skipped, with why.
            shutil.rmtree(cls.cluster, ignore_errors=True)
            raise unittest.SkipTest("a local Slurm cluster did not start here: " +
                                    (started.stderr.strip().splitlines() or ["?"])[0])
        cls.env = {**os.environ, "SLURM_CONF": str(cls.cluster / "slurm.conf")}
        # The sbatch script asks for 8 tasks and 8 GPUs per node: a 2-core,
        # GPU-less node takes 2 tasks, no GPUs, one core each, oversubscribed.
        cls.submit = run("bash", SCALE, "--slurm", "--binary", BINARY, "--config", "tiny", "--nodes", "1",
                         "--steps", "8", "--set", "train.warmup_steps=2", "--set", "train.threads=1",
                         "--set", "report.progress_every=0", "--out", cls.out, "--sbatch-args",
                         "--ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --overcommit",
                         env=cls.env, timeout=120)
        print(cls.submit.stdout, cls.submit.stderr, file=sys.stderr)
        # Wait for the job: the queue empties when it ends (or 300 s).
        for _ in range(600):
            queue = run("squeue", "--noheader", env=cls.env)
            if queue.returncode == 0 and not queue.stdout.strip():
                break
            subprocess.run(["sleep", "0.5"], check=False)

    @classmethod
    def tearDownClass(cls) -> None:
        run("bash", REPO / "scripts" / "slurm" / "local_cluster.sh", "stop", cls.cluster, timeout=60)
        shutil.rmtree(cls.cluster, ignore_errors=True)
        shutil.rmtree(cls.out, ignore_errors=True)

    def setUp(self) -> None:
        self.assertEqual(self.submit.returncode, 0, self.submit.stderr)

    def test_the_job_ran_two_ranks_through_srun_and_pmix(self) -> None:
        logs = sorted(self.out.glob("nodes-1-*.log"))
        self.assertEqual(len(logs), 1, list(self.out.iterdir()))
        log = logs[0].read_text()
        self.assertIn("trainbench.sbatch: job", log)
        self.assertIn("2 ranks", log)
        result = json.loads((self.out / "nodes-1.json").read_text())
        self.assertEqual(result["environment"]["ranks"], 2)
        self.assertEqual(result["environment"]["comm_backend"], "mpi")
        self.assertEqual(result["summary"]["global_tokens_per_step"], 2 * 8 * 64)
        self.assertTrue(all(c["passed"] for c in result["checks"]), result["checks"])
        self.assertEqual(len(result["ranks"]), 2)

    def test_report_reads_the_slurm_results(self) -> None:
        made = report(self.out, "--out", self.out / "report")
        self.assertEqual(made.returncode, 0, made.stderr)
        rows = markdown_table((self.out / "report" / "report.md").read_text(), "## Throughput and scaling")
        self.assertEqual(len(rows), 1, rows)

    def test_a_job_exits_with_the_failed_ranks_code(self) -> None:
        # srun --kill-on-bad-exit: once rank 0 refused the key (exit 2) Slurm
        # ended rank 1 with SIGTERM, and the job exited 143, as if cancelled.
        out = Path(tempfile.mkdtemp(prefix="test_slurm_failed_"))
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        done = run("sbatch", "--wait", "--output", out / "job.log", "--nodes", "1", "--ntasks-per-node=2",
                   "--gpus-per-node=0", "--cpus-per-task=1", "--overcommit",
                   REPO / "scripts" / "slurm" / "trainbench.sbatch", "--steps", "3", "--set", "bogus.key=1",
                   env={**self.env, "CONFIG": "tiny", "OUT": str(out), "TRAINBENCH_BINARY": str(BINARY.resolve())},
                   timeout=300)
        log = (out / "job.log").read_text() if (out / "job.log").exists() else done.stderr
        self.assertEqual(done.returncode, 2, log)
        self.assertIn("unknown key 'bogus.key'", log)
        self.assertEqual(sorted(p.name for p in out.iterdir()), ["job.log"])


if __name__ == "__main__":
    from run_as_ctest import main
    sys.exit(main(__name__))
