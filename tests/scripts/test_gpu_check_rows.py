"""scripts/lib/gpu_check_rows.py, the text of scripts/gpu_check.sh's table
rows, against results of the current schema made here by the built binary
($TRAINBENCH_BINARY) on the cpu engine: the keys the rows read are the ones
a GPU run writes, so a key renamed in the result fails here, in CI, instead
of as a traceback in the one table a lent GPU gives. The rows' figures are
compared with the result files they come from."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROWS_SCRIPT = REPO / "scripts" / "lib" / "gpu_check_rows.py"
GPU_CHECK = REPO / "scripts" / "gpu_check.sh"
BINARY = Path(os.environ.get("TRAINBENCH_BINARY") or REPO / "build" / "trainbench").resolve()

sys.path.insert(0, str(ROWS_SCRIPT.parent))
import gpu_check_rows as rows  # noqa: E402  (the module under test, found beside gpu_check.sh)

QUICK = ["--set", "report.progress_every=0", "--set", "train.threads=1"]


def trainbench(*args: str) -> None:
    done = subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        raise AssertionError(f"trainbench {' '.join(args)}: exit {done.returncode}\n{done.stderr}")


class GpuCheckRowsTests(unittest.TestCase):
    folder: tempfile.TemporaryDirectory[str]
    out: Path

    @classmethod
    def setUpClass(cls) -> None:
        if not BINARY.is_file():
            raise unittest.SkipTest(f"{BINARY} is not built")
        cls.folder = tempfile.TemporaryDirectory(prefix="test_gpu_check_rows_")
        cls.out = Path(cls.folder.name)
        # The runs gpu_check.sh makes, at tiny's size and on the cpu engine.
        trainbench("run", "tiny", "--steps", "8", "--set", "train.warmup_steps=3", "--set", "report.op_times=true",
                   *QUICK, "--out", str(cls.out / "run.json"))
        trainbench("run", "tiny", "--steps", "8", "--set", "train.mode=lora", *QUICK, "--out", str(cls.out / "lora.json"))
        # gpu_check's one-batch run, as it makes it: the same micro-batch every step.
        trainbench("run", "tiny", "--steps", "12", "--set", "train.warmup_steps=2", "--set", "data.source=synthetic",
                   "--set", "data.synthetic_batches=1", *QUICK, "--out", str(cls.out / "one_batch.json"))
        # The rows read a passed burn-in; a loaded machine's drift over 2 s (-16% beside other tests) is not
        # what they test.
        trainbench("burnin", "tiny", "--duration", "2s", "--set", "checkpoint.every_steps=0",
                   "--set", "burnin.degrade_pct=90", *QUICK, "--out", str(cls.out / "burnin.json"))
        trainbench("bench", "instrument", "tiny", "--pairs", "2", "--block-steps", "2", *QUICK,
                   "--out", str(cls.out / "instrument.json"))
        trainbench("bench", "comm", "tiny", "--max-bytes", "1M", "--iters", "2", "--out", str(cls.out / "comm.json"))

    @classmethod
    def tearDownClass(cls) -> None:
        cls.folder.cleanup()

    def result(self, name: str) -> dict:
        return json.loads((self.out / name).read_text())

    def test_every_function_of_the_script_is_defined_whatever_sections_run(self) -> None:
        # finish() stood inside `if [ -z "${GPU_CHECK_EXTRAS_ONLY:-}" ]`, which
        # GPU_CHECK_EXTRAS_ONLY=1 skips: its last line was "finish: command not
        # found", exit 127, and no table. Functions go at the top level.
        depth, nested = 0, []
        for number, line in enumerate(GPU_CHECK.read_text().splitlines(), 1):
            if re.match(r"if\b", line) and not re.search(r"\bfi\s*(#.*)?$", line):
                depth += 1
            elif re.match(r"fi\b", line):
                depth -= 1
            function = re.match(r"(\w+)\(\)\s*\{", line)
            if function and depth > 0:
                nested.append(f"{function.group(1)} (line {number})")
        self.assertEqual(depth, 0, "the script's top-level if/fi do not pair up")
        self.assertEqual(nested, [])

    def test_every_row_the_script_asks_for_exists_with_its_arguments(self) -> None:
        script = GPU_CHECK.read_text()
        calls = re.findall(r'gpu_check_rows\.py (\w+)((?: "[^"]*")+)\)', script)
        # Every call the pattern read (none it missed for an odd quoting), and
        # every row the module defines asked for at least once.
        self.assertEqual(len(calls), len(re.findall(r'gpu_check_rows\.py \w+', script)), calls)
        self.assertEqual({kind for kind, _ in calls}, set(rows.ROWS), calls)
        for kind, arguments in calls:
            with self.subTest(kind=kind):
                self.assertIn(kind, rows.ROWS)
                given = re.findall(r'"[^"]*"', arguments)
                self.assertEqual(len(given), len(inspect.signature(rows.ROWS[kind]).parameters), arguments)

    def test_a_preset_row_gives_the_runs_own_figures(self) -> None:
        r = self.result("run.json")
        s = r["summary"]
        line = rows.preset(str(self.out / "run.json"))
        self.assertTrue(line.startswith("{:,.0f} tokens/s, MFU ".format(s["tokens_per_s"])), line)
        self.assertIn("step {:.1f} ms".format(1e3 * s["step_s"]["median"]), line)
        self.assertIn("host {:.1f}%".format(100 * s["stall_shares"]["other"]), line)
        untimed = self.result("run.json")
        untimed["summary"]["stall_shares"]["other"] = None  # not measured: n/a, not 0.0%
        (self.out / "untimed.json").write_text(json.dumps(untimed))
        self.assertIn(", host n/a, ", rows.preset(str(self.out / "untimed.json")))
        self.assertIn("attention {} (".format(r["environment"]["attention"]["kernel"]), line)
        self.assertIn(r["environment"]["gemm"]["detail"], rows.gemm(str(self.out / "run.json")))
        # The CPU has no datasheet peak: its MFU is null, said so (it read
        # "MFU 0.0% of 989"); a GPU's is of its own peak.
        self.assertIsNone(s["mfu"])
        self.assertIn("MFU n/a of no known peak", line)
        s.update(mfu=0.479, datasheet_peak_flops_per_s=989e12, mfu_vs_gemm_ceiling=0.6)
        (self.out / "gpu-run.json").write_text(json.dumps(r))
        self.assertIn("MFU 47.9% of 989, 60.0% of the in-run ceiling", rows.preset(str(self.out / "gpu-run.json")))

    def test_the_op_row_adds_up_to_the_compute_per_step(self) -> None:
        ops = self.result("run.json")["summary"]["op_seconds_per_step"]
        self.assertTrue(ops, "report.op_times=true gives op times on the cpu engine too")
        line = rows.ops(str(self.out / "run.json"))
        self.assertTrue(line.startswith("{:.1f} ms per step: ".format(1e3 * sum(ops.values()))), line)
        largest = max(ops, key=ops.get)
        self.assertEqual(line.split(": ", 1)[1].split(" ")[0], largest, line)

    def test_the_variant_rows_read_their_runs(self) -> None:
        for row in (rows.variant, rows.deterministic, rows.nccl, rows.zero1):
            line = row(str(self.out / "run.json"))
            self.assertRegex(line, r"^[0-9,]+ tokens/s, ")
        lora = self.result("lora.json")["summary"]
        self.assertIn("loss {:.3f} -> {:.3f}".format(lora["loss_first"], lora["loss_last"]),
                      rows.lora(str(self.out / "lora.json")))
        self.assertTrue(rows.nccl(str(self.out / "run.json")).endswith("checks pass"))

    def test_the_one_batch_row_fails_a_loss_that_does_not_fall(self) -> None:
        one_batch = self.out / "one_batch.json"
        r = self.result("one_batch.json")
        s = r["summary"]
        self.assertGreater(s["loss_first"] - s["loss_last"], 0.5)  # tiny memorises its batch in 12 steps
        line = rows.learns(str(one_batch))
        self.assertEqual(line, "loss {:.3f} -> {:.3f} over 12 steps of one repeated micro-batch (ln vocab 6.238): "
                               "learns".format(s["loss_first"], s["loss_last"]), line)
        # A step that learns nothing, or too little, or whose loss went non-finite (null in the result):
        # gpu_check.sh fails the row on "did not fall".
        for last, why in ((s["loss_first"], "by 0.1 or more"), (s["loss_first"] - 0.05, "by 0.1 or more"),
                          (None, ": it is not finite")):
            with self.subTest(last=last):
                s["loss_last"] = last
                broken = self.out / "one_batch_broken.json"
                broken.write_text(json.dumps(r))
                line = rows.learns(str(broken))
                self.assertIn("the loss did not fall" + ("" if why.startswith(":") else " ") + why, line)
                self.assertNotIn(": learns", line)

    def test_the_bench_comm_row_gives_the_step_and_the_largest_all_reduce(self) -> None:
        r = self.result("comm.json")
        line = rows.bench_comm(str(self.out / "comm.json"))
        step = r["gradient_step"][0]
        self.assertTrue(line.startswith("local on host buffers, 1 rank(s): gradient step {:.1f} us (1 buckets)".format(
            1e6 * step["time_s"])), line)
        self.assertIn("all-reduce 1 MiB ", line)  # the sweep's largest size: --max-bytes
        self.assertTrue(line.endswith("check ok"), line)
        # Under comm.zero 1 the step is ZeRO-1's, on the communicator's path
        # (it read a "bucketed" row there was none of: IndexError).
        r.update(gradient_step_collectives=["reduce_scatter", "all_gather"],
                 gradient_step_s={"comm": 0.000168, "raw": 0.000195},
                 gradient_step=[dict(step, collective="reduce_scatter", path="comm")])
        (self.out / "zero-comm.json").write_text(json.dumps(r))
        self.assertIn("gradient step 168.0 us (ZeRO-1: reduce_scatter + all_gather)",
                      rows.bench_comm(str(self.out / "zero-comm.json")))

    def test_the_burnin_and_instrument_rows(self) -> None:
        b = self.result("burnin.json")["burnin"]
        line = rows.burnin(str(self.out / "burnin.json"), "0")
        self.assertTrue(line.startswith("{} (exit 0): {} steps".format(b["verdict"], b["steps"])), line)
        self.assertIn("NVML not sampled: ", line)  # the cpu engine has no GPU to sample
        # A GPU run's health figures, as the burn-in writes them.
        gpu = {"samples": 12, "max_temperature_c": 61, "max_power_w": 650, "min_sm_clock_mhz": 1980,
               "ecc_uncorrected_delta": 0, "hardware_slowdown_samples": 0}
        data = self.result("burnin.json")
        data["burnin"]["gpus"][0]["figures"]["gpu"] = gpu
        (self.out / "burnin-gpu.json").write_text(json.dumps(data))
        self.assertIn("NVML 12 samples, max 61 C, max 650 W, SM min 1980 MHz",
                      rows.burnin(str(self.out / "burnin-gpu.json"), "0"))
        cost = self.result("instrument.json")["instrumentation_cost"]
        self.assertIn("median of {} pairs".format(cost["pairs"]), rows.instrument(str(self.out / "instrument.json")))

    def torch_record(self, mode: str, tokens_per_s: float, **changes: object) -> dict:
        """A torch_baseline.py record of the same shapes as run.json's."""
        r = self.result("run.json")
        record = {"mode": mode, "tokens_per_s": tokens_per_s, "loss_finite": True,
                  "tokens_per_step": r["summary"]["global_tokens_per_step"],
                  "measured_steps": r["summary"]["measured_steps"],
                  "config": {"model": {k: v for k, v in r["config"]["model"].items() if k != "n_layers_full"},
                             "train": dict(r["config"]["train"])}}
        for key, value in changes.items():
            if key in record["config"]["model"]:
                record["config"]["model"][key] = value
            elif key in record["config"]["train"]:
                record["config"]["train"][key] = value
            else:
                record[key] = value
        return record

    def test_the_ratio_row_says_whether_the_targets_are_met(self) -> None:
        tokens = self.result("run.json")["summary"]["tokens_per_s"]
        torch = self.out / "torch.jsonl"
        torch.write_text("a warning line\n" + json.dumps(self.torch_record("eager", tokens / 2)) + "\n" +
                         json.dumps({"mode": "compile", "error": "cut by the time limit"}) + "\n" +
                         '{"mode": "compile", "tok')  # a line cut short when the baseline was stopped
        line = rows.ratio(str(self.out / "run.json"), str(torch), "h200-llama8b-4l")
        self.assertEqual(line, "2.00x eager (target >= 1.2x: met), compile: cut by the time limit, MFU n/a (target "
                               ">= 55%: not measured)")
        self.assertNotIn("MFU", rows.ratio(str(self.out / "run.json"), str(torch), "h200-gpt2-124m"))

    def test_a_ratio_of_runs_that_differ_is_not_printed(self) -> None:
        tokens = self.result("run.json")["summary"]["tokens_per_s"]
        torch = self.out / "torch-differs.jsonl"
        for changes, why in (({"d_model": 128}, "model.d_model differs (trainbench 64, PyTorch 128)"),
                             ({"micro_batch": 4}, "train.micro_batch differs (trainbench 8, PyTorch 4)"),
                             ({"tokens_per_step": 7}, "tokens per step differ (trainbench 512 over 1 rank(s), "
                                                      "PyTorch 7)"),
                             ({"measured_steps": 2}, "measured steps differ (trainbench 5, PyTorch 2)"),
                             ({"loss_finite": False}, "PyTorch's loss was not finite"),
                             ({"config": None}, "the PyTorch record has no config to check it against")):
            with self.subTest(why=why):
                torch.write_text(json.dumps(self.torch_record("eager", tokens / 2, **changes)) + "\n" +
                                 json.dumps(self.torch_record("compile", tokens)) + "\n")
                line = rows.ratio(str(self.out / "run.json"), str(torch), "h200-gpt2-124m")
                self.assertEqual(line, "eager: not compared: " + why + ", 1.00x compile (target >= 1.0x: met)")

    def test_an_unreadable_result_is_one_line_not_a_traceback(self) -> None:
        (self.out / "cut.json").write_text('{"summary": {')
        for args in (["preset", str(self.out / "cut.json")], ["burnin", str(self.out / "run.json"), "4"],
                     ["ops", str(self.out / "missing.json")]):
            done = subprocess.run([sys.executable, str(ROWS_SCRIPT), *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 1, done.stderr)
            self.assertEqual(len(done.stdout.splitlines()), 1, done.stdout)
            self.assertTrue(done.stdout.startswith("no row from " + args[1]), done.stdout)
            self.assertEqual(done.stderr, "")
        # A call the script got wrong is a usage error, not a result file's fault.
        for args in (["nonsense", "x"], ["burnin", str(self.out / "burnin.json")], ["variant", "a", "b"], []):
            done = subprocess.run([sys.executable, str(ROWS_SCRIPT), *args], capture_output=True, text=True)
            self.assertEqual(done.returncode, 2, done.stdout)
            self.assertEqual(done.stdout, "")
            self.assertIn("burnin PATH STATUS", done.stderr)


if __name__ == "__main__":
    from run_as_ctest import main
    sys.exit(main(__name__))
