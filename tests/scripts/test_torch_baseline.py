#!/usr/bin/env python3
"""Tests of scripts/torch_baseline.py.

The argument, config and statistics tests need only the standard library (and
PyYAML for the --config ones), so they run anywhere. The training tests need
PyTorch and skip without it; CI has no torch, and nothing here installs it.

    python3 -m unittest tests/scripts/test_torch_baseline.py -v
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "torch_baseline.py"

_spec = importlib.util.spec_from_file_location("torch_baseline", SCRIPT)
assert _spec is not None and _spec.loader is not None
baseline = importlib.util.module_from_spec(_spec)
sys.modules["torch_baseline"] = baseline
_spec.loader.exec_module(baseline)

HAVE_TORCH = baseline.torch is not None
HAVE_YAML = importlib.util.find_spec("yaml") is not None

TINY_FLAGS = ["--vocab", "512", "--d-model", "64", "--n-layers", "2", "--n-heads", "4",
              "--n-kv-heads", "2", "--ffn-hidden", "192", "--seq-len", "64", "--micro-batch", "8"]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, check=False)


class ArgumentTests(unittest.TestCase):
    def test_flags_resolve_with_trainbench_defaults(self) -> None:
        shape, train, run = baseline.resolve_settings(TINY_FLAGS + ["--steps", "20"])
        self.assertEqual((shape.vocab, shape.d_model, shape.head_dim), (512, 64, 16))
        self.assertEqual(shape.rope_theta, 10000.0)
        self.assertEqual((train.steps, train.warmup_steps, train.grad_accum), (20, 5, 1))
        self.assertEqual((train.beta2, train.weight_decay, train.grad_clip), (0.95, 0.1, 1.0))
        self.assertEqual((run.mode, run.device, run.dtype, run.json_output), ("eager", "auto", "auto", False))

    def test_missing_shape_names_every_missing_flag(self) -> None:
        with self.assertRaisesRegex(baseline.UsageError, r"missing --d-model, .*--micro-batch"):
            baseline.resolve_settings(["--vocab", "10"])

    def test_cross_key_checks_match_trainbench(self) -> None:
        cases = {
            ("--n-heads", "3"): "does not divide model.d_model",
            ("--n-kv-heads", "3"): "does not divide model.n_heads",
            ("--d-model", "72", "--n-heads", "8", "--n-kv-heads", "8"): "is odd",
            ("--steps", "5", "--warmup-steps", "5"): "must be < train.steps",
            ("--beta1", "1.0"): "beta1",
            ("--lr", "0"): "train.lr",
        }
        for extra, message in cases.items():
            with self.subTest(extra=extra), self.assertRaisesRegex(baseline.UsageError, message):
                baseline.resolve_settings(TINY_FLAGS + list(extra))

    def test_bad_arguments_exit_2_with_one_line(self) -> None:
        for args in (["--steps", "x"], ["--bogus"], ["--mode", "fast"], ["--n-heads", "3"], ["--pad-vocab", "0"]):
            with self.subTest(args=args):
                result = run_script(*TINY_FLAGS, *args)
                self.assertEqual(result.returncode, 2)
                self.assertEqual(result.stdout, "")
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)

    def test_help_works_without_running(self) -> None:
        result = run_script("--help")
        self.assertEqual(result.returncode, 0)
        self.assertIn("--micro-batch", result.stdout)


class PercentileTests(unittest.TestCase):
    def test_linear_interpolation_as_numpy(self) -> None:
        # numpy.percentile([1, 2, 3, 4, 10], [10, 50, 90]) == [1.4, 3.0, 7.6]
        values = [10.0, 2.0, 4.0, 1.0, 3.0]
        self.assertAlmostEqual(baseline.percentile(values, 0.1), 1.4)
        self.assertAlmostEqual(baseline.percentile(values, 0.5), 3.0)
        self.assertAlmostEqual(baseline.percentile(values, 0.9), 7.6)
        self.assertEqual(baseline.percentile([0.25], 0.9), 0.25)


class ConfigFileTestCase(unittest.TestCase):
    def write(self, text: str) -> str:
        handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        self.addCleanup(Path(handle.name).unlink)
        with handle:
            handle.write(text)
        return handle.name


@unittest.skipUnless(HAVE_YAML, "PyYAML is not installed")
class ConfigTests(ConfigFileTestCase):

    def test_repository_presets_load(self) -> None:
        paths = sorted((REPO / "configs").glob("*.yaml"))
        self.assertIn("tiny.yaml", [p.name for p in paths], "no presets found to load")
        for path in paths:
            with self.subTest(config=path.name):
                shape, train, _ = baseline.resolve_settings(["--config", str(path)])
                self.assertGreater(shape.vocab, 0)
                self.assertLess(train.warmup_steps, train.steps)

    def test_flags_override_the_file_and_exponents_parse(self) -> None:
        path = self.write("model:\n  vocab: 1000\n  n_layers: 4\ntrain:\n  lr: 3e-4\n  steps: 12\n"
                          "  precision: fp32\n")
        shape, train, run = baseline.resolve_settings(["--config", path, "--n-layers", "1"])
        self.assertEqual((shape.vocab, shape.n_layers, shape.d_model), (1000, 1, 64))
        self.assertEqual((train.lr, train.steps), (3e-4, 12))
        self.assertEqual(run.dtype, "fp32")

    def test_bad_files_name_the_key(self) -> None:
        cases = {
            "model:\n  widht: 3\n": "unknown key model.widht",
            "model:\n  vocab: abc\n": "model.vocab: expected an integer",
            "model: [1, 2]\n": "section 'model' must be a mapping",
            "train:\n  mode: lora\n": "train.mode",
        }
        for text, message in cases.items():
            with self.subTest(text=text), self.assertRaisesRegex(baseline.UsageError, message):
                baseline.resolve_settings(["--config", self.write(text)])

    def test_files_that_broke_the_reader_are_usage_errors(self) -> None:
        # Each raised a traceback (exit 1): a binary file, lists nested
        # past Python's recursion limit, an integer too large for a float
        # where a number goes.
        binary = self.write("")
        Path(binary).write_bytes(b"model:\n  vocab: \xff\xfe\n")
        cases = {
            binary: "not UTF-8 text",
            self.write("model: " + "[" * 5000 + "]" * 5000 + "\n"): "nested too deep",
            self.write("train:\n  lr: " + "9" * 400 + "\n"): "train.lr: expected a number",
        }
        for path, message in cases.items():
            with self.subTest(message=message), self.assertRaisesRegex(baseline.UsageError, message):
                baseline.resolve_settings(["--config", path])


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed")
class TrainingTests(unittest.TestCase):
    """Small CPU runs: the baseline must really train the model."""

    ARGS = ["--device", "cpu", "--dtype", "fp32", *TINY_FLAGS, "--steps", "20", "--warmup-steps", "3",
            "--mode", "eager", "--json"]

    def test_cpu_run_reports_json_and_trains(self) -> None:
        result = run_script(*self.ARGS)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1)
        record = json.loads(lines[0])
        for key in ("mode", "tokens_per_s", "median_step_s", "p10_step_s", "p90_step_s", "steps",
                    "warmup_steps", "loss_first", "loss_last", "peak_memory_bytes", "torch_version",
                    "device_name", "dtype"):
            self.assertIn(key, record)
        self.assertEqual((record["mode"], record["steps"], record["warmup_steps"]), ("eager", 20, 3))
        self.assertEqual(len(record["step_s"]), 20)
        self.assertIsNone(record["peak_memory_bytes"])  # not measured on the CPU
        self.assertAlmostEqual(record["loss_first"], math.log(512), delta=0.1)
        # The 8 synthetic batches cycle, so by step 20 the model has seen each
        # twice and its loss is clearly below chance.
        self.assertLess(record["loss_last"], record["loss_first"] - 0.1)
        self.assertAlmostEqual(record["tokens_per_s"], 8 * 64 / record["median_step_s"])

    def test_padded_vocabulary_adds_rows_and_still_trains(self) -> None:
        # nanoGPT's padding: vocab 500 as 512 rows in the embedding and the
        # head (2 × 12 × 64 more parameters); tokens stay below 500.
        flags = list(TINY_FLAGS)
        flags[flags.index("--vocab") + 1] = "500"
        common = ["--device", "cpu", "--dtype", "fp32", *flags, "--steps", "12", "--warmup-steps", "2",
                  "--mode", "eager", "--json"]
        records = {}
        for pad in ("1", "64"):
            result = run_script(*common, "--pad-vocab", pad)
            self.assertEqual(result.returncode, 0, result.stderr)
            records[pad] = json.loads(result.stdout.strip().splitlines()[0])
        self.assertEqual(records["1"]["vocab_rows"], 500)
        self.assertEqual(records["64"]["vocab_rows"], 512)
        self.assertEqual(records["64"]["n_params"] - records["1"]["n_params"], 2 * 12 * 64)
        # The loss starts near chance over the rows the softmax spans.
        self.assertAlmostEqual(records["64"]["loss_first"], math.log(512), delta=0.1)
        self.assertLess(records["64"]["loss_last"], records["64"]["loss_first"] - 0.1)

    def test_model_matches_a_naive_formulation(self) -> None:
        torch = baseline.torch
        shape = baseline.ModelShape(vocab=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                    ffn_hidden=48, seq_len=10, rope_theta=500.0)
        inputs = torch.randint(0, 97, (3, 10))
        targets = torch.randint(0, 97, (3, 10))
        for gqa_native in (False, True):
            with self.subTest(gqa_native=gqa_native):
                model = baseline.build_model(shape, 7, torch.device("cpu"), torch.float32, gqa_native)
                with torch.no_grad():
                    loss = model(inputs, targets).item()
                    expected = naive_loss(model, shape, inputs, targets)
                self.assertAlmostEqual(loss, expected, delta=1e-5)

    def test_compile_failure_is_reported_and_eager_kept(self) -> None:
        def broken_compile(*_args: object, **_kwargs: object) -> object:
            raise RuntimeError("no Triton here\nsecond line of a long trace")

        args = ["--device", "cpu", "--dtype", "fp32", *TINY_FLAGS, "--steps", "5", "--warmup-steps", "1",
                "--mode", "both", "--json"]
        stdout = io.StringIO()
        with mock.patch.object(baseline.torch, "compile", broken_compile), \
                contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
            code = baseline.main(args)
        self.assertEqual(code, 0)
        eager, compiled = (json.loads(line) for line in stdout.getvalue().strip().splitlines())
        self.assertEqual(eager["mode"], "eager")
        self.assertGreater(eager["tokens_per_s"], 0)
        self.assertEqual(compiled, {"mode": "compile", "error": "RuntimeError: no Triton here",
                                    "torch_version": eager["torch_version"],
                                    "device_name": eager["device_name"], "dtype": "fp32"})


def naive_loss(model, shape, inputs, targets) -> float:
    """docs/metrics.md written out loop by loop: explicit masked softmax per
    query head, RoPE from its definition, RMSNorm by its formula."""
    torch = baseline.torch
    batch, seq_len = inputs.shape
    head_dim = shape.head_dim
    group = shape.n_heads // shape.n_kv_heads

    def rms(x, weight):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + shape.norm_eps) * weight

    pair = torch.arange(head_dim // 2, dtype=torch.float64)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * shape.rope_theta ** (-2 * pair / head_dim)
    cos = angle.cos().float()[None, :, None, :]
    sin = angle.sin().float()[None, :, None, :]

    def rope(x):  # [batch, seq, heads, head_dim]; element i pairs with i + head_dim / 2
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)

    mask = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)
    x = model.tok_embedding.weight[inputs]
    for layer in model.layers:
        n = rms(x, layer.attn_norm)
        q = rope((n @ layer.wq.weight.T).view(batch, seq_len, shape.n_heads, head_dim))
        k = rope((n @ layer.wk.weight.T).view(batch, seq_len, shape.n_kv_heads, head_dim))
        v = (n @ layer.wv.weight.T).view(batch, seq_len, shape.n_kv_heads, head_dim)
        heads = []
        for head in range(shape.n_heads):
            kv = head // group
            scores = torch.einsum("btd,bsd->bts", q[:, :, head], k[:, :, kv]) / math.sqrt(head_dim)
            heads.append(torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v[:, :, kv])
        x = x + torch.cat(heads, dim=-1) @ layer.wo.weight.T
        m = rms(x, layer.mlp_norm)
        x = x + (torch.nn.functional.silu(m @ layer.w_gate.weight.T) * (m @ layer.w_up.weight.T)) \
            @ layer.w_down.weight.T
    logits = rms(x, model.final_norm) @ model.lm_head.weight.T
    return torch.nn.functional.cross_entropy(logits.view(-1, shape.vocab), targets.view(-1)).item()


# Not under ConfigTests' skip: a machine without PyYAML is this test's case.
class MissingYamlTests(ConfigFileTestCase):
    def test_missing_pyyaml_is_a_one_line_usage_error(self) -> None:
        with mock.patch.dict(sys.modules, {"yaml": None}), \
                self.assertRaisesRegex(baseline.UsageError, "needs PyYAML"):
            baseline.resolve_settings(["--config", self.write("model:\n  vocab: 10\n")])


if __name__ == "__main__":
    from run_as_ctest import main
    sys.exit(main(__name__))
