#!/usr/bin/env python3
"""Tests of scripts/scale.sh and scripts/report.py.

SweepTests makes a real sweep: `tiny` at 1, 2 and 4 MPI ranks on this machine
(oversubscribed), through scripts/scale.sh, which runs report.py over the
results; the tests read the report and the plots. It needs the trainbench
binary built with the MPI backend ($TRAINBENCH_BINARY, else build/trainbench)
and mpirun ($MPIRUN, else on PATH); without them it skips. The other classes
need neither: report.py's errors, its reading of results with and without the
per-rank records, scale.sh's argument checks.

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
import shutil
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


class ReportErrorTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="test_report_"))
        self.addCleanup(shutil.rmtree, self.dir)

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

    def test_older_results_group_by_world_size_and_derive_the_bottleneck(self) -> None:
        # Two repeats at 2 ranks: the median-tokens/s one stands for them.
        paths = [self.write("a.json", fake_result(1, 1000.0)), self.write("b.json", fake_result(2, 1500.0)),
                 self.write("c.json", fake_result(2, 1800.0)), self.write("d.json", fake_result(4, 3000.0))]
        text = self.make_report(*paths)
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual([r["ranks"] for r in rows], ["1", "2", "4"])
        self.assertEqual([r["runs"] for r in rows], ["1", "2", "1"])
        self.assertEqual([r["ideal tokens/s"] for r in rows], ["1000.0", "2000.0", "4000.0"])
        self.assertEqual([r["scaling efficiency"] for r in rows], ["1.000", "0.750", "0.750"])
        self.assertEqual(rows[2]["slowest rank"], "rank 3")
        shares = markdown_table(text, "## Where the step time goes")
        self.assertEqual(shares[0]["comm exposed (%)"], "30.0%")
        self.assertIn("compute (60% of the step) \\*", shares[0]["bottleneck"])
        self.assertIn("derived by this report", text)

    def test_newer_results_name_the_straggler_and_keep_their_bottleneck_line(self) -> None:
        small = fake_result(1, 1000.0)
        big = fake_result(4, 3200.0)
        big["summary"]["bottleneck"] = "network — comm exposed 30% of step"
        big["ranks"] = [
            {"rank": r, "host": f"node{r // 2}", "step_s": {"median": s}, "compute_s": 0.06,
             "comm_exposed_s": s - 0.07, "data_stall_s": 0.005, "ckpt_stall_s": 0.0, "other_s": 0.005}
            for r, s in enumerate([0.100, 0.100, 0.102, 0.125])
        ]
        text = self.make_report(self.write("r1.json", small), self.write("r4.json", big))
        rows = markdown_table(text, "## Throughput and scaling")
        self.assertEqual(rows[1]["slowest rank"], "rank 3 (node1), +23.8% vs median rank")
        self.assertEqual(rows[1]["scaling efficiency"], "0.800")
        shares = markdown_table(text, "## Where the step time goes")
        self.assertEqual(shares[1]["bottleneck"], "network — comm exposed 30% of step")
        per_rank = markdown_table(text, "## Ranks at 4 ranks (slowest first)")
        self.assertEqual([r["rank"] for r in per_rank], ["3", "2", "0", "1"])
        self.assertEqual(per_rank[0]["step (ms)"], "125.00")
        self.assertEqual(per_rank[0]["comm exposed (ms)"], "55.00")

    def test_a_folder_is_read_whole_and_a_differing_config_is_warned_about(self) -> None:
        other = copy.deepcopy(fake_result(2, 1900.0))
        other["config"]["model"]["n_layers"] = 4
        self.write("r1.json", fake_result(1, 1000.0))
        self.write("r2.json", other)
        text = self.make_report(self.dir)
        self.assertEqual(len(markdown_table(text, "## Throughput and scaling")), 2)
        self.assertIn("r2.json is configured differently from r1.json: model.n_layers 2 vs 4", text)


class ScaleArgumentTests(unittest.TestCase):
    def test_bad_rank_lists_exit_2_before_running_anything(self) -> None:
        for ranks in ("1,x", "2,1", ""):
            with self.subTest(ranks=ranks):
                result = run("bash", SCALE, "--ranks", ranks, "--out", "/nonexistent/never-made")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("--ranks", result.stderr)

    def test_slurm_without_sbatch_says_so(self) -> None:
        path = "/usr/bin:/bin"
        if shutil.which("sbatch", path=path):
            self.skipTest("sbatch is installed here")
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

    def test_compare_script_checks_its_arguments_first(self) -> None:
        for args, words in ((["--nodes", "0"], "--nodes"), (["--gpus-per-node", "x"], "--gpus-per-node"),
                            (["--target-tokens", "-5"], "--target-tokens"), (["--launcher", "ssh"], "--launcher")):
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
        plan = json.loads((self.out / "plan.json").read_text())
        self.assertEqual([r["mode"] for r in plan["rows"]], ["full (DDP)", "full (ZeRO-1)", "lora"])


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


def main() -> int:
    program = unittest.main(module=__name__, exit=False, verbosity=2)
    result = program.result
    if result.failures or result.errors or result.unexpectedSuccesses:
        return 1
    if result.skipped and result.testsRun <= len(result.skipped):
        print("skipped: " + "; ".join(dict.fromkeys(reason for _, reason in result.skipped)))
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
