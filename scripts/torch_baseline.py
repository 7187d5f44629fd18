#!/usr/bin/env python3
"""The PyTorch baseline trainbench's engines are measured against.

It trains the same Llama-style decoder as trainbench (docs/metrics.md) on the
same synthetic "compute ceiling" workload -- seeded random tokens resident on
the device, no data loader, no communication, no checkpoints -- written the way
a competent PyTorch user writes a fast single-GPU training loop: bf16 autocast
over fp32 master weights, ``F.scaled_dot_product_attention`` (flash/cuDNN
kernels), fused AdamW, ``clip_grad_norm_``, ``zero_grad(set_to_none=True)``,
and optionally ``torch.compile``. It is a yardstick, not a reference for
numerics: the libtorch reference in tests/reference/ checks correctness.

    python3 scripts/torch_baseline.py --config configs/gpt2-124m.yaml --mode both --json
    python3 scripts/torch_baseline.py --device cpu --dtype fp32 --vocab 512 --d-model 64 \\
        --n-layers 2 --n-heads 4 --n-kv-heads 2 --ffn-hidden 192 --seq-len 64 \\
        --micro-batch 8 --steps 20 --warmup-steps 3 --mode eager --json

Timing follows ../shared/DESIGN.md: a step lasts from the end of the previous
step to the end of this one (the first from the start of the loop), warm-up
steps are excluded, and tokens/s = micro_batch * grad_accum * seq_len / median
step time. With --json, stdout holds one JSON object per mode and nothing else
(the human-readable lines go to stderr), so a script can read it line by line.

Exit status: 0 when the requested modes ran (a torch.compile failure is a
reported result, {"mode": "compile", "error": ...}, not a crash); 2 for bad
arguments or configuration; 3 when the environment cannot run it (no torch, no
GPU, out of memory); 4 when a loss was not finite.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

# torch is imported here but only required once a run starts, so --help, the
# argument and config checks (and their tests) work on a machine without it.
try:
    import torch
    import torch.nn.functional as F
    from torch import nn

    _ModuleBase: type = nn.Module
except ImportError:  # reported by require_torch() when a run is asked for
    torch = None  # type: ignore[assignment]
    F = None  # type: ignore[assignment]
    nn = None  # type: ignore[assignment]
    _ModuleBase = object

PROGRAM = "torch_baseline.py"
EXIT_USAGE = 2  # bad arguments or configuration (DESIGN.md: user error)
EXIT_ENVIRONMENT = 3  # no torch / no GPU / out of memory (environment failure)
EXIT_CHECK_FAILED = 4  # a loss was NaN or infinite (failed check)
COMPILE_MIN_WARMUP_STEPS = 3  # compilation (and recompilation) happens in the first steps
MAX_TOKEN_ID = 2**31 - 1  # trainbench's token ids are int32


class UsageError(Exception):
    """A user error: one line naming the flag or key, exits 2."""


class EnvironmentFailure(Exception):
    """The environment cannot run what was asked: one line, exits 3."""


def one_line(text: str, limit: int = 400) -> str:
    """The first non-empty line of an exception message, bounded, so every
    failure prints as one line (torch's messages span pages)."""
    for line in str(text).splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def describe_exception(error: BaseException) -> str:
    message = one_line(str(error))
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


# --------------------------------------------------------------------------
# Settings: trainbench's defaults, a YAML file, then explicit flags.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class ModelShape:
    """trainbench's `model` section (kernels/model_shape.h); defaults are
    trainbench's, i.e. configs/tiny.yaml."""

    vocab: int = 512
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_hidden: int = 192
    seq_len: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclasses.dataclass
class TrainSettings:
    """The `train` and `data` keys the baseline uses, with trainbench's
    defaults (trainer/config.h), so a config means the same run in both."""

    micro_batch: int = 4
    grad_accum: int = 1
    steps: int = 30  # optimizer steps, warm-up included (as trainbench counts them)
    warmup_steps: int = 5  # excluded from the statistics
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1  # matrices only
    grad_clip: float = 1.0  # 0 disables clipping
    seed: int = 1234  # parameter initialisation
    data_seed: int = 1  # synthetic tokens
    synthetic_batches: int = 8  # distinct micro-batches, cycled


@dataclasses.dataclass
class RunSettings:
    """What to run and how, beyond the model and the training recipe."""

    mode: str = "eager"  # eager | compile | both
    device: str = "auto"  # auto | cuda | cpu
    dtype: str = "auto"  # auto | bf16 | fp32
    compile_mode: str = "default"
    gqa: str = "auto"  # auto | native | expand
    # The embedding's and LM head's rows rounded up to a multiple of this, as
    # nanoGPT pads GPT-2's 50257 to 50304 for faster GEMMs; the extra rows
    # are part of the model (tokens stay below model.vocab, the loss runs over
    # every row). 1: the model's vocab as it is.
    pad_vocab: int = 1
    json_output: bool = False


# Flag name -> (section, key, type). The YAML keys are trainbench's; flags use
# dashes. An explicit flag beats the file.
MODEL_FLAGS: dict[str, tuple[str, type]] = {
    "vocab": ("vocab", int),
    "d_model": ("d_model", int),
    "n_layers": ("n_layers", int),
    "n_heads": ("n_heads", int),
    "n_kv_heads": ("n_kv_heads", int),
    "ffn_hidden": ("ffn_hidden", int),
    "seq_len": ("seq_len", int),
    "rope_theta": ("rope_theta", float),
    "norm_eps": ("norm_eps", float),
}
TRAIN_FLAGS: dict[str, tuple[str, type]] = {
    "micro_batch": ("micro_batch", int),
    "grad_accum": ("grad_accum", int),
    "steps": ("steps", int),
    "warmup_steps": ("warmup_steps", int),
    "lr": ("lr", float),
    "beta1": ("beta1", float),
    "beta2": ("beta2", float),
    "eps": ("eps", float),
    "weight_decay": ("weight_decay", float),
    "grad_clip": ("grad_clip", float),
    "seed": ("seed", int),
    "data_seed": ("data_seed", int),
    "synthetic_batches": ("synthetic_batches", int),
}
# Without --config these must be given: a shape silently taken from the tiny
# defaults would make a GPU comparison meaningless.
REQUIRED_WITHOUT_CONFIG = ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads",
                           "ffn_hidden", "seq_len", "micro_batch")

# YAML keys (section.key) -> where they go. train.precision and train.device
# map onto --dtype and --device; data.seed is the token seed.
YAML_MODEL_KEYS = {key: flag for flag, (key, _) in MODEL_FLAGS.items()}
YAML_TRAIN_KEYS = {"micro_batch", "grad_accum", "steps", "warmup_steps", "lr", "beta1",
                   "beta2", "eps", "weight_decay", "grad_clip", "seed"}
# trainbench keys that do not change what the baseline computes. The
# baseline's tokens are held in memory, so no data-loader key (data.shards,
# data.field, data.readers, ...) has an effect on it; data.seed does.
YAML_IGNORED_KEYS = {"train.threads", "report.out", "report.progress_every"}
YAML_IGNORED_SECTIONS = ("data.",)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse prints usage plus the message on an error; the project's rule
    is one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def positive_int(text: str) -> int:
    value = _parse_int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def non_negative_int(text: str) -> int:
    value = _parse_int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return value


def _parse_int(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not finite")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=PROGRAM,
        description="Train trainbench's Llama-style model in plain PyTorch (bf16 autocast, "
        "SDPA, fused AdamW, optional torch.compile) on synthetic tokens and report tokens/s.",
        epilog="Steps count warm-up, as trainbench does. With --config, flags that are given "
        "override the file and keys the file omits take trainbench's defaults.",
    )
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="trainbench YAML config (model.*, train.*; needs PyYAML)")
    model = parser.add_argument_group("model (trainbench's model.* keys)")
    model.add_argument("--vocab", type=positive_int)
    model.add_argument("--d-model", type=positive_int)
    model.add_argument("--n-layers", type=positive_int)
    model.add_argument("--n-heads", type=positive_int)
    model.add_argument("--n-kv-heads", type=positive_int)
    model.add_argument("--ffn-hidden", type=positive_int)
    model.add_argument("--seq-len", type=positive_int)
    model.add_argument("--rope-theta", type=finite_float, help="default 10000")
    model.add_argument("--norm-eps", type=finite_float, help="default 1e-5")
    train = parser.add_argument_group("training (trainbench's train.* keys)")
    train.add_argument("--micro-batch", type=positive_int)
    train.add_argument("--grad-accum", type=positive_int, help="default 1")
    train.add_argument("--steps", type=positive_int, help="optimizer steps incl. warm-up; default 30")
    train.add_argument("--warmup-steps", type=non_negative_int,
                       help="steps excluded from the statistics; default 5 (compile mode: at least "
                       f"{COMPILE_MIN_WARMUP_STEPS})")
    train.add_argument("--lr", type=finite_float, help="constant learning rate; default 1e-3")
    train.add_argument("--beta1", type=finite_float, help="default 0.9")
    train.add_argument("--beta2", type=finite_float, help="default 0.95")
    train.add_argument("--eps", type=finite_float, help="AdamW epsilon; default 1e-8")
    train.add_argument("--weight-decay", type=finite_float, help="matrices only; default 0.1")
    train.add_argument("--grad-clip", type=finite_float,
                       help="global-norm clipping threshold, 0 = off; default 1.0")
    train.add_argument("--seed", type=non_negative_int, help="weight initialisation; default 1234")
    train.add_argument("--data-seed", type=non_negative_int, help="synthetic tokens; default 1")
    train.add_argument("--synthetic-batches", type=positive_int,
                       help="distinct micro-batches held on the device, cycled; default 8")
    run = parser.add_argument_group("run")
    run.add_argument("--mode", choices=("eager", "compile", "both"), help="default eager")
    run.add_argument("--device", choices=("auto", "cuda", "cpu"),
                     help="default auto: cuda when a GPU is visible")
    run.add_argument("--dtype", choices=("auto", "bf16", "fp32"),
                     help="bf16 = autocast over fp32 weights; default auto: bf16 on cuda, fp32 on cpu")
    run.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune",
                                                "max-autotune-no-cudagraphs"),
                     help="torch.compile mode; default 'default'")
    run.add_argument("--gqa", choices=("auto", "native", "expand"),
                     help="grouped-query attention: SDPA enable_gqa (native), repeat kv heads "
                     "(expand), or native when a fused SDPA kernel accepts it (auto, default)")
    run.add_argument("--pad-vocab", type=positive_int, metavar="MULTIPLE",
                     help="embedding and LM head rows rounded up to a multiple of this (nanoGPT's "
                     "50304 for GPT-2: --pad-vocab 64); tokens stay below the vocab; default 1 (off)")
    run.add_argument("--json", action="store_true",
                     help="one JSON object per mode on stdout; human lines go to stderr")
    return parser


def load_yaml_config(path: str) -> dict[str, Any]:
    """Reads a trainbench config into {flag_name: value}. Only the keys that
    shape the computation are read; unknown model keys are errors (they would
    change the model), other unknown keys are reported and ignored so that
    keys trainbench gains later do not break the baseline."""
    try:
        import yaml  # optional dependency: only --config needs it
    except ImportError:
        raise UsageError("--config needs PyYAML (pip install pyyaml); give the model and "
                         "train settings as flags instead") from None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:  # a binary file given as the config
        raise UsageError(f"{path}: not UTF-8 text (byte {error.start}): not a config") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: not valid YAML: {one_line(str(error))}") from None
    except RecursionError:  # lists nested thousands deep
        raise UsageError(f"{path}: not valid YAML: nested too deep") from None
    except ValueError as error:  # PyYAML's own int/float conversions (e.g. an over-long number)
        raise UsageError(f"{path}: not valid YAML: {one_line(str(error))}") from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise UsageError(f"{path}: the top level must be a mapping of sections")

    values: dict[str, Any] = {}
    for section, entries in document.items():
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise UsageError(f"{path}: section '{section}' must be a mapping")
        for key, raw in entries.items():
            name = f"{section}.{key}"
            if name == "model.n_layers_full":
                continue  # the depth `trainbench project` projects to; the trained depth is n_layers
            if section == "model":
                if key not in YAML_MODEL_KEYS:
                    raise UsageError(f"{path}: unknown key {name}")
                flag = YAML_MODEL_KEYS[key]
                values[flag] = _yaml_number(path, name, raw, MODEL_FLAGS[flag][1])
            elif section == "train" and key in YAML_TRAIN_KEYS:
                values[key] = _yaml_number(path, name, raw, TRAIN_FLAGS[key][1])
            elif name == "train.precision":
                values["dtype"] = _yaml_choice(path, name, raw, ("auto", "fp32", "bf16"))
            elif name == "train.device":
                values["device"] = _yaml_choice(path, name, raw, ("auto", "cpu", "cuda"))
            elif name == "train.mode":
                if _yaml_choice(path, name, raw, ("full", "lora")) != "full":
                    raise UsageError(f"{path}: {name}: the baseline trains every parameter (full)")
            elif name == "data.seed":
                values["data_seed"] = _yaml_number(path, name, raw, int)
            elif name == "data.synthetic_batches":
                values["synthetic_batches"] = _yaml_number(path, name, raw, int)
            elif name not in YAML_IGNORED_KEYS and not name.startswith(YAML_IGNORED_SECTIONS):
                print(f"{PROGRAM}: {path}: ignoring {name} (no effect on the baseline)",
                      file=sys.stderr)
    return values


def _yaml_number(path: str, name: str, raw: Any, kind: type) -> int | float:
    """YAML 1.1 (PyYAML) reads `3e-4` as a string and `1e3` too, while
    trainbench's parser takes them as numbers; accept both spellings."""
    if isinstance(raw, bool):
        raise UsageError(f"{path}: {name}: expected a number, got {raw!r}")
    try:
        if kind is int:
            if isinstance(raw, int):
                return raw
            value = float(raw)
            if not value.is_integer():
                raise ValueError
            return int(value)
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError
        return value
    except (TypeError, ValueError, OverflowError):  # int(1e400): OverflowError
        expected = "an integer" if kind is int else "a number"
        raise UsageError(f"{path}: {name}: expected {expected}, got {raw!r}") from None


def _yaml_choice(path: str, name: str, raw: Any, choices: Sequence[str]) -> str:
    if not isinstance(raw, str) or raw not in choices:
        raise UsageError(f"{path}: {name}: {raw!r} is not one of {', '.join(choices)}")
    return raw


def resolve_settings(argv: Sequence[str]) -> tuple[ModelShape, TrainSettings, RunSettings]:
    """Defaults, then the YAML file, then explicit flags; then the cross-key
    checks trainbench's validate_config makes, so both reject the same runs."""
    args = build_parser().parse_args(argv)
    given = {name: value for name, value in vars(args).items() if value is not None}
    from_file = load_yaml_config(args.config) if args.config else {}
    if not args.config:
        missing = [name for name in REQUIRED_WITHOUT_CONFIG if name not in given]
        if missing:
            flags = ", ".join("--" + name.replace("_", "-") for name in missing)
            raise UsageError(f"missing {flags} (or give --config FILE.yaml)")
    merged = {**from_file, **given}

    shape = ModelShape(**{MODEL_FLAGS[name][0]: merged[name] for name in MODEL_FLAGS if name in merged})
    train = TrainSettings(**{TRAIN_FLAGS[name][0]: merged[name] for name in TRAIN_FLAGS if name in merged})
    run = RunSettings(
        mode=merged.get("mode", "eager"),
        device=merged.get("device", "auto"),
        dtype=merged.get("dtype", "auto"),
        compile_mode=merged.get("compile_mode", "default"),
        gqa=merged.get("gqa", "auto"),
        pad_vocab=merged.get("pad_vocab", 1),
        json_output=bool(args.json),
    )
    validate(shape, train)
    return shape, train, run


def validate(shape: ModelShape, train: TrainSettings) -> None:
    """The value and cross-key checks of trainbench's validate_config."""
    for name in ("vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "seq_len"):
        if getattr(shape, name) <= 0:
            raise UsageError(f"model.{name}: must be > 0, got {getattr(shape, name)}")
    for name in ("rope_theta", "norm_eps"):
        if not getattr(shape, name) > 0:
            raise UsageError(f"model.{name}: must be > 0, got {getattr(shape, name)}")
    for name in ("micro_batch", "grad_accum", "steps", "synthetic_batches"):
        if getattr(train, name) <= 0:
            raise UsageError(f"train.{name}: must be > 0, got {getattr(train, name)}")
    for name in ("warmup_steps", "seed", "data_seed"):
        if getattr(train, name) < 0:
            raise UsageError(f"train.{name}: must be >= 0, got {getattr(train, name)}")
    if not train.lr > 0:
        raise UsageError(f"train.lr: must be > 0, got {train.lr}")
    for name in ("beta1", "beta2"):
        if not 0 <= getattr(train, name) < 1:
            raise UsageError(f"train.{name}: must be in [0, 1), got {getattr(train, name)}")
    if not train.eps > 0:
        raise UsageError(f"train.eps: must be > 0, got {train.eps}")
    for name in ("weight_decay", "grad_clip"):
        if getattr(train, name) < 0:
            raise UsageError(f"train.{name}: must be >= 0, got {getattr(train, name)}")
    if shape.vocab > MAX_TOKEN_ID:
        raise UsageError(f"model.vocab: {shape.vocab} exceeds {MAX_TOKEN_ID} (token ids are int32)")
    if shape.d_model % shape.n_heads != 0:
        raise UsageError(f"model.n_heads: {shape.n_heads} does not divide model.d_model ({shape.d_model})")
    if shape.n_heads % shape.n_kv_heads != 0:
        raise UsageError(f"model.n_kv_heads: {shape.n_kv_heads} does not divide model.n_heads "
                         f"({shape.n_heads})")
    if shape.head_dim % 2 != 0:
        raise UsageError(f"model.d_model: head dimension d_model / n_heads = {shape.head_dim} is odd; "
                         "RoPE rotates pairs of dimensions")
    if train.warmup_steps >= train.steps:
        raise UsageError(f"train.warmup_steps: {train.warmup_steps} must be < train.steps "
                         f"({train.steps}) so that some steps are measured")


# --------------------------------------------------------------------------
# Statistics (docs/metrics.md: median, p10, p90 with linear interpolation).
# --------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """numpy.percentile's default ('linear'): interpolate between the two
    closest ranks, so the figures match trainbench's own statistics."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    weight = position - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * weight


# --------------------------------------------------------------------------
# The model: docs/metrics.md, in idiomatic PyTorch.
# --------------------------------------------------------------------------


def require_torch() -> None:
    if torch is None:
        raise EnvironmentFailure("PyTorch is not installed for " + sys.executable +
                                 " (pip install torch)")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * w. F.rms_norm (torch >= 2.4) where it
    exists -- what a user reaches for -- else the same formula spelled out."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_tables(seq_len: int, head_dim: int, theta: float,
                device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [seq_len, head_dim] for the half-split (HF rotate_half)
    pairing: element i turns with i + head_dim/2 by t * theta^(-2i/head_dim).
    Angles in float64 and rounded once; held in the compute dtype, as HF
    Llama does, so RoPE does not promote bf16 activations to fp32."""
    pair = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    inverse_frequency = theta ** (-2.0 * pair / head_dim)
    positions = torch.arange(seq_len, dtype=torch.float64, device=device)
    angles = torch.outer(positions, inverse_frequency)
    both_halves = torch.cat((angles, angles), dim=-1)
    return both_halves.cos().to(dtype), both_halves.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [batch, heads, seq, head_dim]; cos/sin [seq, head_dim] broadcast."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class DecoderLayer(_ModuleBase):
    """One pre-norm block: GQA attention with RoPE, then a SwiGLU MLP, each
    added to the residual stream. Separate q/k/v and gate/up weights, as
    trainbench's parameter layout (and torchtitan's Llama) has them."""

    def __init__(self, shape: ModelShape, gqa_native: bool) -> None:
        super().__init__()
        self.n_heads = shape.n_heads
        self.n_kv_heads = shape.n_kv_heads
        self.head_dim = shape.head_dim
        self.norm_eps = shape.norm_eps
        self.gqa_native = gqa_native
        q_dim = shape.n_heads * shape.head_dim
        kv_dim = shape.n_kv_heads * shape.head_dim
        self.attn_norm = nn.Parameter(torch.empty(shape.d_model))
        self.wq = nn.Linear(shape.d_model, q_dim, bias=False)
        self.wk = nn.Linear(shape.d_model, kv_dim, bias=False)
        self.wv = nn.Linear(shape.d_model, kv_dim, bias=False)
        self.wo = nn.Linear(q_dim, shape.d_model, bias=False)
        self.mlp_norm = nn.Parameter(torch.empty(shape.d_model))
        self.w_gate = nn.Linear(shape.d_model, shape.ffn_hidden, bias=False)
        self.w_up = nn.Linear(shape.d_model, shape.ffn_hidden, bias=False)
        self.w_down = nn.Linear(shape.ffn_hidden, shape.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq_len, _ = x.shape
        h = rms_norm(x, self.attn_norm, self.norm_eps)
        q = self.wq(h).view(batch, seq_len, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(batch, seq_len, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(batch, seq_len, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv_heads == self.n_heads:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.gqa_native:
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            # Query head h reads kv head h // group: repeat_interleave builds
            # exactly that grouping (torchtitan's repeat_kv).
            group = self.n_heads // self.n_kv_heads
            attn = F.scaled_dot_product_attention(
                q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                is_causal=True)
        x = x + self.wo(attn.transpose(1, 2).reshape(batch, seq_len, -1))
        m = rms_norm(x, self.mlp_norm, self.norm_eps)
        return x + self.w_down(F.silu(self.w_gate(m)) * self.w_up(m))


class Llama(_ModuleBase):
    """trainbench's decoder: embedding, layers, final norm, untied LM head;
    forward returns the mean cross-entropy so torch.compile sees (and can
    fuse) the loss too."""

    def __init__(self, shape: ModelShape, gqa_native: bool, vocab_rows: int | None = None) -> None:
        super().__init__()
        self.shape = shape
        vocab_rows = vocab_rows or shape.vocab  # more with RunSettings.pad_vocab
        self.tok_embedding = nn.Embedding(vocab_rows, shape.d_model)
        self.layers = nn.ModuleList(DecoderLayer(shape, gqa_native) for _ in range(shape.n_layers))
        self.final_norm = nn.Parameter(torch.empty(shape.d_model))
        self.lm_head = nn.Linear(shape.d_model, vocab_rows, bias=False)
        self.register_buffer("rope_cos", torch.empty(shape.seq_len, shape.head_dim), persistent=False)
        self.register_buffer("rope_sin", torch.empty(shape.seq_len, shape.head_dim), persistent=False)

    def initialize(self, seed: int, rope_dtype: torch.dtype) -> None:
        """docs/metrics.md's initialisation: matrices normal(0, 0.02), the
        residual output projections (wo, w_down) scaled by 1/sqrt(2 n_layers),
        norm gains 1. Drawn on the device from a seeded generator (not
        trainbench's splitmix64 stream: the baseline needs the distribution,
        not the same bits)."""
        device = self.lm_head.weight.device
        generator = torch.Generator(device=device).manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * self.shape.n_layers)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if parameter.ndim == 1:
                    parameter.fill_(1.0)
                elif name.endswith(("wo.weight", "w_down.weight")):
                    parameter.normal_(0.0, residual_std, generator=generator)
                else:
                    parameter.normal_(0.0, 0.02, generator=generator)
        cos, sin = rope_tables(self.shape.seq_len, self.shape.head_dim, self.shape.rope_theta,
                               device, rope_dtype)
        self.rope_cos = cos
        self.rope_sin = sin

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        seq_len = inputs.shape[1]
        cos, sin = self.rope_cos[:seq_len], self.rope_sin[:seq_len]
        x = self.tok_embedding(inputs)  # fp32: the residual stream stays fp32 under autocast
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = rms_norm(x, self.final_norm, self.shape.norm_eps)
        logits = self.lm_head(x)  # bf16 under autocast; cross_entropy runs in fp32
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def build_model(shape: ModelShape, seed: int, device: torch.device, compute_dtype: torch.dtype,
                gqa_native: bool, vocab_rows: int | None = None) -> Llama:
    """Built on the meta device and materialised once on the target device,
    so a multi-GB model is not first initialised on the host."""
    with torch.device("meta"):
        model = Llama(shape, gqa_native, vocab_rows)
    model = model.to_empty(device=device)
    model.initialize(seed, rope_dtype=compute_dtype)
    return model


def build_optimizer(model: Llama, train: TrainSettings, device: torch.device) -> torch.optim.AdamW:
    """AdamW with decay on matrices only (embedding, projections, LM head),
    as trainbench. Fused on CUDA: one kernel for the whole update."""
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": matrices, "weight_decay": train.weight_decay},
              {"params": vectors, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train.lr, betas=(train.beta1, train.beta2), eps=train.eps,
                             fused=True if device.type == "cuda" else None)


def choose_gqa_native(run: RunSettings, shape: ModelShape, device: torch.device,
                      compute_dtype: torch.dtype) -> bool:
    """SDPA's enable_gqa (torch >= 2.5) avoids materialising repeated k/v, but
    only pays if a fused kernel (flash, cuDNN, mem-efficient) takes it; when
    only the math kernel does, repeating kv heads keeps flash attention. So
    'auto' tries forward and backward with the math kernel switched off."""
    if shape.n_heads == shape.n_kv_heads:
        return False
    if run.gqa == "expand":
        return False
    probe_shape = (1, shape.n_heads, 16, shape.head_dim)
    kv_shape = (1, shape.n_kv_heads, 16, shape.head_dim)

    def probe() -> None:
        q = torch.randn(probe_shape, device=device, dtype=compute_dtype, requires_grad=True)
        k = torch.randn(kv_shape, device=device, dtype=compute_dtype, requires_grad=True)
        v = torch.randn(kv_shape, device=device, dtype=compute_dtype, requires_grad=True)
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

    try:
        probe()  # does this torch know enable_gqa at all?
    except TypeError:
        if run.gqa == "native":
            raise UsageError(f"--gqa native: torch {torch.__version__} has no enable_gqa") from None
        return False
    if run.gqa == "native" or device.type != "cuda":
        return True
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            fused.append(SDPBackend.CUDNN_ATTENTION)
        with sdpa_kernel(fused):
            probe()
        return True
    except (ImportError, RuntimeError):
        return False


# --------------------------------------------------------------------------
# The timed loop.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Context:
    """Everything a mode's run shares with the other mode."""

    shape: ModelShape
    train: TrainSettings
    run: RunSettings
    device: torch.device
    compute_dtype: torch.dtype
    dtype_name: str
    gqa_native: bool


def vocab_rows(shape: ModelShape, run: RunSettings) -> int:
    """The embedding's and LM head's rows: model.vocab rounded up to --pad-vocab."""
    return -(-shape.vocab // run.pad_vocab) * run.pad_vocab


def synthetic_batches(ctx: Context) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Uniform random token windows of seq_len + 1, targets shifted by one,
    made once on the device from a seeded generator: trainbench's synthetic
    source, with nothing between the loop and the GPU. Each batch a tensor
    of its own, as a data loader hands them over: views into one tensor
    differ in storage offset, which some torch.compile versions recompile for."""
    generator = torch.Generator(device=ctx.device).manual_seed(ctx.train.data_seed)
    windows = torch.randint(0, ctx.shape.vocab,
                            (ctx.train.synthetic_batches, ctx.train.micro_batch, ctx.shape.seq_len + 1),
                            generator=generator, device=ctx.device, dtype=torch.int64)
    own = torch.contiguous_format
    return ([window[:, :-1].clone(memory_format=own) for window in windows],
            [window[:, 1:].clone(memory_format=own) for window in windows])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """Marks the end of each step. CUDA events on the compute stream on a GPU
    (no host synchronisation inside the loop: the host may run ahead, as in
    any real training loop); perf_counter on the CPU, where ops are
    synchronous. Intervals are end of previous mark to end of this one."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_seconds(self) -> list[float]:
        synchronize(self.device)
        intervals = range(1, len(self.marks))
        if self.device.type == "cuda":
            return [self.marks[i - 1].elapsed_time(self.marks[i]) / 1e3 for i in intervals]
        return [self.marks[i] - self.marks[i - 1] for i in intervals]


def run_mode(ctx: Context, mode: str) -> dict[str, Any]:
    """Builds a fresh model and optimizer (same seeds in every mode), trains
    warm-up + measured steps and returns the result record."""
    train = ctx.train
    warmup_steps = train.warmup_steps
    if mode == "compile":
        warmup_steps = max(warmup_steps, COMPILE_MIN_WARMUP_STEPS)
    measured_steps = train.steps - train.warmup_steps  # the same number in every mode
    total_steps = warmup_steps + measured_steps

    torch.manual_seed(train.seed)
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    model = build_model(ctx.shape, train.seed, ctx.device, ctx.compute_dtype, ctx.gqa_native,
                        vocab_rows(ctx.shape, ctx.run))
    optimizer = build_optimizer(model, train, ctx.device)
    inputs, targets = synthetic_batches(ctx)
    parameters = list(model.parameters())
    n_params = sum(p.numel() for p in parameters)
    loss_fn: Callable[..., Any] = model
    if mode == "compile":
        compile_mode = None if ctx.run.compile_mode == "default" else ctx.run.compile_mode
        loss_fn = torch.compile(model, mode=compile_mode)
    use_autocast = ctx.compute_dtype != torch.float32

    step_losses: list[Any] = []  # device scalars, read once after the loop (no per-step sync)
    clock = StepClock(ctx.device)
    micro_step = 0
    synchronize(ctx.device)
    clock.mark()  # the first step counts from the start of the loop
    for _ in range(total_steps):
        step_loss = None
        for _ in range(train.grad_accum):
            batch = micro_step % train.synthetic_batches
            micro_step += 1
            with torch.autocast(device_type=ctx.device.type, dtype=ctx.compute_dtype,
                                enabled=use_autocast):
                loss = loss_fn(inputs[batch], targets[batch])
            # Each micro-batch adds the gradient of loss / grad_accum: the
            # step's gradient is that of the mean over all its tokens.
            (loss / train.grad_accum).backward()
            detached = loss.detach() / train.grad_accum
            step_loss = detached if step_loss is None else step_loss + detached
        if train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(parameters, train.grad_clip, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_losses.append(step_loss)
        clock.mark()

    step_s = clock.step_seconds()  # synchronises
    losses = torch.stack(step_losses).float().cpu().tolist()
    measured = step_s[warmup_steps:]
    median_step_s = percentile(measured, 0.5)
    tokens_per_step = train.micro_batch * train.grad_accum * ctx.shape.seq_len
    peak_memory = torch.cuda.max_memory_allocated(ctx.device) if ctx.device.type == "cuda" else None
    result: dict[str, Any] = {
        "mode": mode,
        "tokens_per_s": tokens_per_step / median_step_s,
        "median_step_s": median_step_s,
        "p10_step_s": percentile(measured, 0.1),
        "p90_step_s": percentile(measured, 0.9),
        "steps": total_steps,
        "warmup_steps": warmup_steps,
        "measured_steps": measured_steps,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_finite": all(math.isfinite(value) for value in losses),
        "peak_memory_bytes": peak_memory,  # null on the CPU: not measured, not 0
        "torch_version": torch.__version__,
        "device_name": device_name(ctx.device),
        "dtype": ctx.dtype_name,
        "tokens_per_step": tokens_per_step,
        "n_params": n_params,
        "attention": "sdpa-enable-gqa" if ctx.gqa_native else "sdpa",
        "vocab_rows": vocab_rows(ctx.shape, ctx.run),
        "fused_adamw": ctx.device.type == "cuda",
        "compile_mode": ctx.run.compile_mode if mode == "compile" else None,
        "config": {"model": dataclasses.asdict(ctx.shape),
                   "train": dataclasses.asdict(ctx.train)},
        "step_s": step_s,
        "losses": losses,
    }
    del loss_fn, model, optimizer, inputs, targets, parameters, step_losses
    release_memory(ctx.device, compiled=mode == "compile")
    return result


def release_memory(device: torch.device, compiled: bool = False) -> None:
    """Frees one mode's model, optimizer state and compiled graphs before the
    next mode builds its own, so each mode's peak memory is its own."""
    if compiled and hasattr(torch, "compiler"):
        torch.compiler.reset()  # drops dynamo's caches and the graphs they hold
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def make_context(shape: ModelShape, train: TrainSettings, run: RunSettings) -> Context:
    require_torch()
    if run.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif run.device == "cuda":
        if not torch.cuda.is_available():
            raise EnvironmentFailure(f"--device cuda: no CUDA device visible to torch "
                                     f"{torch.__version__} (torch.cuda.is_available() is False)")
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    dtype_name = run.dtype if run.dtype != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    if dtype_name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise EnvironmentFailure(f"--dtype bf16: {torch.cuda.get_device_name(device)} has no bf16 support")
    compute_dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    gqa_native = choose_gqa_native(run, shape, device, compute_dtype)
    return Context(shape, train, run, device, compute_dtype, dtype_name, gqa_native)


def human_line(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"torch {result['mode']:<7}  failed: {result['error']}"
    peak = result["peak_memory_bytes"]
    memory = f"{peak / 2**30:.2f} GiB" if peak is not None else "n/a"
    return (f"torch {result['mode']:<7}  {result['tokens_per_s']:,.0f} tokens/s  "
            f"step {1e3 * result['median_step_s']:.2f} ms (p10 {1e3 * result['p10_step_s']:.2f}, "
            f"p90 {1e3 * result['p90_step_s']:.2f}; {result['measured_steps']} measured after "
            f"{result['warmup_steps']} warm-up)  loss {result['loss_first']:.4f} -> "
            f"{result['loss_last']:.4f}  peak memory {memory}  "
            f"[torch {result['torch_version']}, {result['device_name']}, {result['dtype']}, "
            f"{result['attention']}]")


def emit(result: dict[str, Any], run: RunSettings) -> None:
    """JSON on stdout with --json (and the human line on stderr); otherwise
    the human line on stdout. Flushed per mode so a compile mode that hangs or
    dies does not take the eager figure with it."""
    if run.json_output:
        print(human_line(result), file=sys.stderr, flush=True)
        print(json.dumps(result), flush=True)
    else:
        print(human_line(result), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        shape, train, run = resolve_settings(sys.argv[1:] if argv is None else argv)
        ctx = make_context(shape, train, run)
        modes = ["eager", "compile"] if run.mode == "both" else [run.mode]
        all_finite = True
        for mode in modes:
            try:
                result = run_mode(ctx, mode)
            except (UsageError, EnvironmentFailure):
                raise
            except Exception as error:  # noqa: BLE001 -- reported, see below
                if mode != "compile":
                    if isinstance(error, RuntimeError):  # CUDA errors and out of memory
                        raise EnvironmentFailure(f"{mode}: {describe_exception(error)}") from None
                    raise
                # A failed torch.compile (no Triton, no C++ compiler, an
                # unsupported op, out of memory) is a result: say so, keep eager.
                result = {"mode": mode, "error": describe_exception(error),
                          "torch_version": torch.__version__, "device_name": device_name(ctx.device),
                          "dtype": ctx.dtype_name}
            if "error" in result:
                # Outside the except block: the traceback no longer pins the
                # failed run's tensors, so this frees them.
                release_memory(ctx.device, compiled=True)
            emit(result, run)
            all_finite = all_finite and result.get("loss_finite", True)
        if not all_finite:
            print(f"{PROGRAM}: a loss was not finite (NaN or inf)", file=sys.stderr)
            return EXIT_CHECK_FAILED
        return 0
    except UsageError as error:
        print(f"{PROGRAM}: error: {one_line(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except EnvironmentFailure as error:
        print(f"{PROGRAM}: {one_line(str(error))}", file=sys.stderr)
        return EXIT_ENVIRONMENT


if __name__ == "__main__":
    sys.exit(main())
