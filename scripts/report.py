#!/usr/bin/env python3
"""The scaling report of a set of trainbench runs, or the fine-tuning comparison.

    scripts/report.py RESULTS... [--out DIR] [--no-plots]
    scripts/report.py --compare LORA.json FULL.json [--plan PLAN.json | [--lora-plan PLAN.json]
                      [--full-plan PLAN.json]] [--target-tokens N] [--gpus-per-node N] [--out DIR]

RESULTS are result JSON files (schema trainbench.result/v1, `trainbench run
--out`) or folders of them (every *.json in the folder but *.failed.json, a
failed rerun's result that scale.sh and compare_finetune.sh keep beside the
earlier one: named in a warning; give the file itself to read it). A file
with the same result as another (a copy) is read once, with a warning; a
bench compute or bench instrument result (its summary is the 2-step job its
measurement ran in) and a burn-in result (its verdict named) are left out,
with a warning; runs of different workloads (model.*, train.mode,
train.precision, lora.* under LoRA, as the binary compares configs) are
refused, exit 2, as are --compare's two runs of different models; a scaling
efficiency above 1 is warned about, judged against the step times' p10-p90
spread. In a folder, another trainbench output (bench io, bench comm, a
projection) is left out with a warning naming its schema (named itself, it
is refused); runs
whose files share a name are named by their paths. Runs are grouped by
world size (environment.ranks); several runs of one world size are repeats:
its tokens/s (and the ideal and efficiency from it) is the median of theirs
(of an even number, the mean of the two middle ones), and its other figures
are one run's, named in the report: the middle run, of the two middle ones
the slower. Runs with report.instrument=false beside timed runs of the same
world size are left out of both, with a warning (stderr and report.md): their
tokens/s is wall-clock and their step figures are not measured. DIR (default:
the folder of the results; the current folder for a result that is not a
file in a folder, such as /dev/stdin or <(...)) receives

    report.md               the tables: tokens/s against the ideal line and the
                            scaling efficiency, step time and stall shares (the
                            slowest rank's, as the result's summary has them:
                            docs/metrics.md), the bottleneck, the slowest rank
                            (the one with the most work of its own per step,
                            own_s), the ranks of the largest run ordered by
                            own_s (with each rank's wait for a CPU, where the
                            result has it); the smallest run's config and
                            environment
    tokens_per_s.png        tokens/s against ranks, with the ideal line
    scaling_efficiency.png  scaling efficiency against ranks
    stall_shares.png        stacked shares of the step per world size
    step_time_spread.png    per-rank median step times per world size (from
                            the result's `ranks`; older results: rank 0's steps)

Definitions are DESIGN.md's ("What is measured"): ideal tokens/s at N ranks =
N/N0 x tokens/s(N0), N0 the smallest world size with a measured tokens/s (a smaller
world size that measured no step is shown the line's value at its N); scaling efficiency =
tokens/s(N) / ideal. Where a result lacks summary.slowest_rank or
summary.bottleneck, the report derives them as the binary does
(trainer/train_loop.cpp; docs/metrics.md): the slowest rank has the largest
own_s, its excess is over the other ranks' median own_s; the bottleneck is the
category beside compute with the largest share if that takes 10% of the step,
else compute.

Every input is read and checked whole before anything is written. A bad one
exits 2 with one line on stderr naming the file and, where it is a field, the
field (`r4.json: summary.tokens_per_s is "fast", expected a number ...`): a
file that is missing, unreadable, empty, not UTF-8 or not JSON; JSON that is
not a trainbench result of a version this script reads (trainbench.result/v1;
or, for --plan, not `trainbench plan --json` output); a field the report reads
of the wrong type, or a number no run can have (NaN, Infinity, 1e400, a
negative time or size, a step time, tokens/s or tokens per step of 0, a stall
share outside 0 to 1 (`other`: -1 to 1) or five that do not add up to 1, a
slowest rank not below environment.ranks, a magnitude past 1e30 or below
1e-30); nesting deeper than 64 levels. So does a bad option: a value out of
range, --plan/--lora-plan/--full-plan/--target-tokens/--gpus-per-node without
--compare, --plan with --lora-plan or --full-plan, a DIR that is
a file or cannot be written. A run with `report.instrument=false` times no
step: its step times, shares and slowest rank are null (older binaries wrote
0, read as null) and show as —. A run a failure stopped before its first
step after warm-up (summary.measured_steps 0) has its tokens/s null too
(docs/metrics.md): its tokens/s and scaling efficiency show as "not measured"
and the report lists what it has (its step counts, its failed checks); beside
measured runs of its world size it is left out, with a warning. A null
tokens/s where measured_steps is not 0 exits 2. matplotlib missing exits 3,
and so does a write the machine refuses (a full disk or quota, an I/O error,
a file size limit, out of file descriptors or memory), as trainbench's own
result write does: the machine's fault, not the command's.

--compare sets a LoRA run (train.mode lora, typically one node) beside a full
fine-tuning run (typically several nodes) of the same model shape and data
(scripts/compare_finetune.sh makes both) and writes DIR/compare.md: tokens/s,
the wall time and GPU-hours to process --target-tokens (default 1e9), memory
per GPU (the run's own plan, and `trainbench plan --json` beside it when a
plan is given: --plan for both runs, or --lora-plan and --full-plan, each the
plan of one side's setup, whose lora row, or full rows, are used),
checkpoint size, stall shares, and a one-line verdict: which side finishes
sooner and which uses fewer GPU-hours (either side may win both, or each one;
every ratio the winner's, >= 1; within 0.5%, "about the same"), after what
does not fit in GPU memory by the plan, and after "Not a clean comparison"
when a run failed a check (each failed check and each run's own warnings
are listed under Warnings and on stderr). A plan of another setup than the run
it is set beside exits 2 naming what differs: the first key of its `model`
that differs from the run's config.model (plans of older binaries, without
`model`: the parameters of the full fine-tuning row against those of the
run's shape); the trainable parameters of its lora row against those of the
LoRA run's lora.rank and lora.targets; its attention (`train.attention=gemm`
or not) against the run's train.attention; for a full run with comm.zero 1,
the GPUs of its ZeRO-1 row against the run's ranks; its train.micro_batch
and train.deterministic (plans of binaries that record them) against the
runs'. A result given as a plan exits 2 saying it is not a plan.
GPUs = the run's ranks (one rank per GPU); nodes = its distinct hosts, or
ranks / --gpus-per-node when given. --target-tokens is 1 to 1e30. A run that
measured no step has no tokens/s to compare: exit 2 naming it.
"""

from __future__ import annotations

import argparse
import errno
import fnmatch
import json
import math
import os
import re
import secrets
import signal
import stat
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# A folder's result files that are not read with it: a failed rerun's result
# (scripts/scale.sh, scripts/compare_finetune.sh).
FAILED_SUFFIX = ".failed.json"
# What a run that an abort or a signal ended leaves beside its result path
# (trainbench.aborted_run/v1: its steps, no summary).
ABORTED_SUFFIX = ".aborted.json"
ABORTED_SCHEMA = "trainbench.aborted_run/v1"
# The field a bench command adds to a result it writes, and the command's name.
BENCH_RESULT_KEYS = {"compute_ceiling": "compute", "instrumentation_cost": "instrument"}
# The result versions this script reads: a later one may change what a field means.
SCHEMAS = ("trainbench.result/v1",)
# The categories of the step (DESIGN.md), their labels, and the resource each
# one names when it is the bottleneck.
CATEGORIES = [
    ("compute", "compute", "compute"),
    ("comm_exposed", "comm exposed", "network"),
    ("data_stall", "data stall", "storage read"),
    ("ckpt_stall", "ckpt stall", "storage write"),
    ("other", "other", "host overhead"),
]
COLORS = {"compute": "#4c72b0", "comm_exposed": "#dd8452", "data_stall": "#55a868",
          "ckpt_stall": "#c44e52", "other": "#8c8c8c"}
PLOTS = ["tokens_per_s.png", "scaling_efficiency.png", "stall_shares.png", "step_time_spread.png"]


class ReportError(Exception):
    """One line on stderr; exit 2 (the command's or an input's fault) unless
    `code` says 3 (the machine's)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class OtherTrainbenchFile(ReportError):
    """Another trainbench output (bench io, bench comm, a projection, ...):
    refused when named, left out with a note when a folder holds it."""


# What a write can meet that no choice of DIR would mend: exit 3.
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EMFILE, errno.ENFILE, errno.ENOMEM}


def write_error(out: OutDir, doing: str, e: OSError) -> ReportError:
    """`DIR: cannot write report.md (No space left on device)`, exit 3 where
    the machine refused (MACHINE_ERRNOS), 2 where DIR is the wrong place."""
    return ReportError(f"{out}: {doing} ({e.strerror or e})", 3 if e.errno in MACHINE_ERRNOS else 2)


# ----------------------------------------------------------------------------- input
#
# Every input file is checked whole when it is read, before anything is
# written: each field the report reads has a type (and a range) below, and
# a field that breaks it stops the report with one line naming the file and
# the field. The rest of the script reads fields the check has passed.

# No trainbench file nests deeper than 4; Python's own JSON reader gives up near 1000.
MAX_DEPTH = 64
# What a figure of a run can be: bytes, seconds, tokens/s, FLOP/s and their
# ratios stay well inside these, and their products and quotients stay finite.
SMALLEST, LARGEST = 1e-30, 1e30
MAX_RANKS = 2**31 - 1  # MPI counts ranks in an int
# A result of 100000 steps is some 30 MB; a file past this is not one (the
# binary's own limit on a result it reads, checkpoint_io::kMaxSmallFileBytes).
# At 1 GiB, one of lists of numbers took ~40 GB to check, and died of it.
MAX_BYTES = 256 << 20


class BadNumber:
    """A number JSON text may hold but no figure can be: NaN, ±Infinity, or
    one beyond a double's range (1e400, 10**400). Python's reader would make
    it a float nan/inf or an int too large to convert; the check that meets
    it names the field."""

    def __init__(self, text: str) -> None:
        self.text = text


def parse_float(text: str) -> float | BadNumber:
    value = float(text)
    return value if math.isfinite(value) else BadNumber(text)


def parse_int(text: str) -> int | BadNumber:
    # Past 310 digits no int fits a double (and past 4300, int() refuses).
    if len(text) > 320:
        return BadNumber(text)
    value = int(text)
    return value if abs(value) <= sys.float_info.max else BadNumber(text)


def key_text(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_]{1,40}", key) else shown(key)


def shown(value: Any) -> str:
    """A value as an error line quotes it: short, one line."""
    if isinstance(value, BadNumber):
        text = value.text
    elif isinstance(value, dict):
        return "an object"
    elif isinstance(value, list):
        return "a list"
    else:
        text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Source:
    """An input file as its error lines name it, and what it should be."""

    def __init__(self, name: str, kind: str, complete: str) -> None:
        self.name = name
        self.kind = kind            # "a trainbench result"
        self.complete = complete    # "a complete trainbench result"

    def wrong(self, field: str, value: Any, expected: str) -> ReportError:
        return ReportError(f"{self.name}: {field or 'the top level'} is {shown(value)}, expected {expected}")

    def missing(self, field: str) -> ReportError:
        return ReportError(f"{self.name}: not {self.complete}: {field} is missing")


def join(field: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{field}[{key}]"
    return f"{field}.{key_text(key)}" if field else key_text(key)


class Spec:
    """The type of a field."""
    expected = ""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def check(self, value: Any, field: str, source: Source) -> None:
        if not self.accepts(value):
            raise source.wrong(field, value, self.expected)


class Str(Spec):
    expected = "a string"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str)


class Bool(Spec):
    expected = "true or false"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


class Int(Spec):
    def __init__(self, low: int = 0, high: int | None = None) -> None:
        self.low, self.high = low, high
        self.expected = (f"an integer from {low} to {high}" if high is not None
                         else "a positive integer" if low == 1 else f"an integer >= {low}")

    def accepts(self, value: Any) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool) and value >= self.low
                and (self.high is None or value <= self.high))


class Num(Spec):
    """A finite number (not a boolean), 0 or of a magnitude in [SMALLEST, LARGEST]."""

    def __init__(self, sign: str = "any") -> None:
        self.sign = sign  # "any", ">=0" or ">0"
        span = f"{SMALLEST:g} to {LARGEST:g}"
        self.expected = {"any": f"0 or a number of magnitude {span}", ">=0": f"0 or a number from {span}",
                         ">0": f"a number from {span}"}[sign]

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if value == 0:
            return self.sign != ">0"
        if value < 0 and self.sign != "any":
            return False
        return SMALLEST <= abs(value) <= LARGEST


# Shares are quotients of sums of doubles: this much past a bound is rounding.
SHARE_TOLERANCE = 1e-6


class Share(Num):
    """A share of the step time, from `low` to 1."""

    def __init__(self, low: float) -> None:
        super().__init__("any")
        self.low = low
        self.expected = f"a share from {low:g} to 1"

    def accepts(self, value: Any) -> bool:
        return super().accepts(value) and self.low - SHARE_TOLERANCE <= value <= 1 + SHARE_TOLERANCE


class Opt(Spec):
    """The field may be null (or, in an object, absent)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def check(self, value: Any, field: str, source: Source) -> None:
        if value is not None:
            self.spec.check(value, field, source)


class Figure(Spec):
    """A number, or a spread {median, p10, p90} of them (each may be null)."""

    def __init__(self, num: Num) -> None:
        self.num = num
        self.expected = f"{num.expected}, or an object {{median, p10, p90}} of such"

    def check(self, value: Any, field: str, source: Source) -> None:
        if isinstance(value, dict):
            for key in ("median", "p10", "p90"):
                Opt(self.num).check(value.get(key), join(field, key), source)
        elif not self.num.accepts(value):
            raise source.wrong(field, value, self.expected)


class Obj(Spec):
    """An object; its named fields checked where present (`required` must be),
    the others by `others` where given, else not read; then `rule`, what the
    fields must be together, once each has its type."""
    expected = "an object"

    def __init__(self, fields: dict[str, Spec], required: tuple[str, ...] = (), others: Spec | None = None,
                 rule: Callable[[dict[str, Any], str, Source], None] | None = None) -> None:
        self.fields, self.required, self.others, self.rule = fields, required, others, rule

    def check(self, value: Any, field: str, source: Source) -> None:
        if not isinstance(value, dict):
            raise source.wrong(field, value, self.expected)
        for key, spec in self.fields.items():
            if key in value:
                spec.check(value[key], join(field, key), source)
            elif key in self.required:
                raise source.missing(join(field, key))
        if self.others is not None:
            for key, item in value.items():
                if key not in self.fields:
                    self.others.check(item, join(field, key), source)
        if self.rule is not None:
            self.rule(value, field, source)


class Either(Spec):
    """A string, or an object of `Obj`'s kind."""

    def __init__(self, obj: Obj) -> None:
        self.obj = obj
        self.expected = "a string or an object"

    def check(self, value: Any, field: str, source: Source) -> None:
        if isinstance(value, dict):
            self.obj.check(value, field, source)
        elif not isinstance(value, str):
            raise source.wrong(field, value, self.expected)


class Each(Spec):
    """A list, every item of `spec`."""
    expected = "a list"

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def check(self, value: Any, field: str, source: Source) -> None:
        if not isinstance(value, list):
            raise source.wrong(field, value, self.expected)
        for i, item in enumerate(value):
            self.spec.check(item, join(field, i), source)


STR, BOOL, COUNT = Opt(Str()), Opt(Bool()), Opt(Int(0))
RANK = Int(0, MAX_RANKS - 1)
SIGNED, NONNEG, POSITIVE = Num("any"), Num(">=0"), Num(">0")
# A step takes time: a step time is > 0 (null where not measured: see
# unmeasured_as_null). Each timed category is a part of the step, so its
# share is 0 to 1; `other`, the step less the rest, is below 0 where they
# double count (timer noise; a step's other_s below -1 ms fails the
# step_time_accounted check, which the report warns of), but not by as much
# as a whole step.
STEP_TIME = Opt(Figure(POSITIVE))
TIMES = {key: Opt(Figure(SIGNED if key == "other" else NONNEG)) for key, _, _ in CATEGORIES}
SHARES = {key: Opt(Figure(Share(-1.0 if key == "other" else 0.0))) for key, _, _ in CATEGORIES}
# A rank's own work per step (own_s, the median of step_s - comm_exposed_s):
# the step less its wait in the collectives, which lies inside the step.
OWN_TIME = Opt(Figure(NONNEG))


def add_up_to_one(shares: dict[str, Any], field: str, source: Source) -> None:
    """Each share is a category's sum over the steps' sum (docs/metrics.md):
    where all five are there, they add up to 1."""
    values = [number(shares.get(key)) for key, _, _ in CATEGORIES]
    if None not in values and abs(math.fsum(values) - 1) > SHARE_TOLERANCE:
        raise ReportError(f"{source.name}: {field} add up to {math.fsum(values):.6g}, expected 1 "
                          "(each is a category's time over the step time)")


def within_world(result: dict[str, Any], field: str, source: Source) -> None:
    """A rank the result names is one of its environment.ranks."""
    world = result["environment"]["ranks"]
    expected = f"a rank from 0 to {world - 1} (environment.ranks is {world})"
    named = [("summary.slowest_rank", result["summary"].get("slowest_rank"))]
    named += [(f"ranks[{i}].rank", record.get("rank")) for i, record in enumerate(result.get("ranks") or [])]
    for name, rank in named:
        if rank is not None and rank >= world:
            raise source.wrong(name, rank, expected)


def measured_or_null(summary: dict[str, Any], field: str, source: Source) -> None:
    """tokens/s is null only in a run that measured no step: a failure
    stopped it before the first step after warm-up (docs/metrics.md), and
    summary.measured_steps is 0."""
    if summary.get("tokens_per_s") is None and summary.get("measured_steps") != 0:
        raise source.wrong(join(field, "tokens_per_s"), None,
                           f"{POSITIVE.expected} (null only where summary.measured_steps is 0: no step measured)")


# ceilings.network.timed: what the network ceiling timed, as bench comm reports it.
TIMED_COLLECTIVE = Obj({"collective": STR, "bytes": COUNT, "buckets": COUNT, "time_s": Opt(Figure(NONNEG)),
                        "busbw_gbs": Opt(Figure(NONNEG))})
# A ceiling's figures are numbers; the network ceiling also names the collectives it timed
# ("all-reduces", or under comm.zero 1 "reduce-scatter and all-gather") and lists them (timed).
CEILINGS = Opt(Obj({}, others=Opt(Obj({"tokens_per_s": Opt(Figure(POSITIVE)), "achieved_share": Opt(Figure(NONNEG)),
                                       "collectives": Opt(STR), "timed": Opt(Each(TIMED_COLLECTIVE))},
                                      others=Opt(Figure(NONNEG))))))
SHAPE_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "vocab", "seq_len")

# The fields of a result (trainbench.result/v1) this script reads.
RESULT = Obj({
    "version": STR,
    "command": STR,
    "config": Opt(Obj({
        "model": Opt(Obj({k: COUNT for k in SHAPE_KEYS})),
        "train": Opt(Obj({"micro_batch": COUNT, "grad_accum": COUNT, "mode": STR, "precision": STR,
                          "attention": STR, "deterministic": BOOL})),
        "lora": Opt(Obj({"rank": COUNT, "targets": STR})),
        "data": Opt(Obj({"shards": STR, "source": STR, "readers": COUNT})),
        "checkpoint": Opt(Obj({"every_steps": COUNT, "async": BOOL, "dir": STR})),
        "comm": Opt(Obj({"zero": COUNT})),
        "report": Opt(Obj({"instrument": BOOL})),
    })),
    "environment": Obj({
        "ranks": Int(1, MAX_RANKS),
        "hosts": Opt(Each(Str())),
        "host_gpus": Opt(Each(Obj({"host": STR, "gpus": COUNT, "gpu_name": STR, "nvidia_driver": STR,
                                   "cuda_driver": STR}))),
        "gpus": Opt(Each(Obj({"name": STR}))),
        "gpus_unavailable_reason": STR,
        "cpu": Opt(Obj({"model": STR, "threads_used": COUNT, "hardware_threads": COUNT, "usable_threads": COUNT})),
        **{k: STR for k in ("cuda_runtime", "cuda_driver", "nvidia_driver", "nccl", "mpi", "compute_backend",
                            )},
        "filesystems": Opt(Each(Obj({"role": STR, "path": STR, "type": STR}))),
    }, required=("ranks",)),
    "summary": Obj({
        "tokens_per_s": Opt(POSITIVE),
        "step_s": STEP_TIME,
        "stall_shares": Opt(Obj(SHARES, rule=add_up_to_one)),
        "bottleneck": Opt(Either(Obj({k: STR for k in ("line", "text", "resource", "name")}))),
        "slowest_rank": Opt(RANK),
        "slowest_rank_excess": Opt(Figure(NONNEG)),
        "global_tokens_per_step": Opt(POSITIVE),
        "measured_steps": COUNT,
        "warmup_steps": COUNT,
        "mfu": Opt(Figure(NONNEG)),
        "mfu_vs_gemm_ceiling": Opt(Figure(NONNEG)),
        "memory_per_rank": Opt(Obj({"total_bytes": Opt(Figure(NONNEG))})),
        "ceilings": CEILINGS,
    }, required=("tokens_per_s", "step_s"), rule=measured_or_null),
    "ranks": Opt(Each(Obj({"rank": Opt(RANK), "host": STR, "step_s": STEP_TIME, "step_s_median": STEP_TIME,
                           "own_s": OWN_TIME, "own_s_median": OWN_TIME,
                           "cpu_wait_share": Opt(Figure(NONNEG)),
                           **{f"{key}_s{median}": spec for key, spec in TIMES.items()
                              for median in ("", "_median")}}))),
    "steps": Opt(Each(Obj({"step_s": Opt(POSITIVE), "warmup": BOOL}))),
    "checks": Opt(Each(Obj({"name": STR, "passed": BOOL, "detail": STR}))),
    "warnings": Opt(Each(Str())),
    "checkpoints": Opt(Each(Obj({"status": STR, "bytes": Opt(Figure(NONNEG))}))),
    "ceilings": CEILINGS,
}, required=("environment", "summary"), rule=within_world)

# The schema of `trainbench plan --json` output (absent from older plans).
PLAN_SCHEMA = "trainbench.plan/v1"
# The fields of `trainbench plan --json` output this script reads.
PLAN = Obj({"config": STR, "model": Opt(Obj({})), "attention": Opt(Obj({"kernel": STR, "basis": STR})),
            "train": Opt(Obj({"micro_batch": COUNT, "deterministic": BOOL})),
            "rows": Each(Obj({"mode": Str(), "fits": Bool(), "total_bytes": Opt(NONNEG), "gpus": COUNT,
                              "trainable_params": Opt(Int(0))}, required=("mode", "fits")))}, required=("rows",))
# What `trainbench plan` says of its attention when the config set train.attention=gemm
# (trainer/plan_command.cpp, planned_attention).
PLAN_GEMM_BASIS = "train.attention=gemm"
# The projections LoRA can adapt (kernels/model_shape.cpp) and their [out, in]
# sizes, from d_model, q_dim, kv_dim and ffn_hidden.
LORA_TARGETS = {"q": ("q", "d"), "k": ("kv", "d"), "v": ("kv", "d"), "o": ("d", "q"),
                "gate": ("ffn", "d"), "up": ("ffn", "d"), "down": ("d", "ffn")}
# The sizes of config.model that set the number of parameters (seq_len does not).
PARAM_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "vocab")


def deep_at(text: str) -> str:
    """Where JSON text first nests deeper than MAX_DEPTH: "line L column C"."""
    depth = 0
    for match in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text, re.S):
        token, at = match.group(), match.start()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                return f"line {text.count(chr(10), 0, at) + 1} column {at - text.rfind(chr(10), 0, at)}"
        elif token in ("]", "}"):
            depth -= 1
    return "somewhere"


def check_values(data: Any, source: Source) -> None:
    """What no field may hold: a number JSON numbers cannot be (NaN, ±Infinity,
    beyond a double), a string that is not Unicode (a lone surrogate), nesting
    deeper than MAX_DEPTH."""

    def check_leaf(value: Any, field: Callable[[], str]) -> None:
        if isinstance(value, BadNumber):
            raise source.wrong(field(), value, "a finite JSON number within a double's range")
        if isinstance(value, str) and not is_unicode(value):
            raise source.wrong(field(), value, "Unicode text (it has a lone surrogate)")

    # Containers only are stacked, each element checked where it is met and
    # its field named only for an error: a tuple and a field string per list
    # element took ~20 times the file's size (a 1 GiB file ran out of memory).
    check_leaf(data, lambda: "")
    stack: list[tuple[Any, str, int]] = [(data, "", 0)] if isinstance(data, (dict, list)) else []
    while stack:
        node, field, depth = stack.pop()
        if depth > MAX_DEPTH:
            shown_field = field if len(field) <= 80 else field[:77] + "..."
            raise ReportError(f"{source.name}: {shown_field} nests deeper than {MAX_DEPTH} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(key, str) and not is_unicode(key):
                raise ReportError(f"{source.name}: {join(field, key)}: a key that is not Unicode text "
                                  "(it has a lone surrogate)")
            if isinstance(value, (dict, list)):
                stack.append((value, join(field, key), depth + 1))
            else:
                check_leaf(value, lambda: join(field, key))


def is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_json(path: Path, source: Source) -> Any:
    """The JSON in `path`, or ReportError naming what is wrong with it."""
    try:
        with open(path, "rb") as f:
            kind = os.fstat(f.fileno()).st_mode
            # A file, or a pipe (`<(...)`); a device such as /dev/zero would never end.
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):
                raise ReportError(f"{source.name}: not a regular file, not {source.kind}")
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ReportError(f"{source.name}: no such file") from None
    except OSError as e:
        raise ReportError(f"{source.name}: cannot read it ({e.strerror or e})") from None
    if len(raw) > MAX_BYTES:
        raise ReportError(f"{source.name}: larger than {MAX_BYTES >> 20} MiB, not {source.kind}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(f"{source.name}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    if not text.strip():
        raise ReportError(f"{source.name}: an empty file, not {source.kind}")
    try:
        data = json.loads(text, parse_float=parse_float, parse_int=parse_int, parse_constant=BadNumber)
    except json.JSONDecodeError as e:
        raise ReportError(f"{source.name}: not JSON (line {e.lineno} column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise ReportError(f"{source.name}: nests deeper than {MAX_DEPTH} levels ({deep_at(text)})") from None
    return data


@dataclass
class Run:
    path: Path
    data: dict[str, Any]
    # How the report names it: the file's name, or the path as given where two
    # runs' files have one name (ranks-1.json of two sweeps).
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.path.name

    @property
    def ranks(self) -> int:
        return int(self.data["environment"]["ranks"])

    @property
    def summary(self) -> dict[str, Any]:
        return self.data["summary"]

    @property
    def tokens_per_s(self) -> float | None:
        """None where the run measured no step (a failure stopped it first)."""
        value = self.summary["tokens_per_s"]
        return None if value is None else float(value)

    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.data.get("checks") or [] if isinstance(c, dict) and c.get("passed") is False]

    def unmeasured_text(self) -> str:
        """Why a run has no tokens/s: its step counts and failed checks, for the report."""
        s = self.summary
        steps = [step for step in self.data.get("steps") or [] if isinstance(step, dict)]
        text = (f"measured no step ({s.get('measured_steps', '?')} measured after {s.get('warmup_steps', '?')} "
                f"warm-up; {len(steps)} step(s) recorded)")
        checks = self.failed_checks()
        if checks:
            text += "; failed: " + "; ".join(f"check {c.get('name')}: {c.get('detail', '')}" for c in checks)
        return text

    def config(self, section: str) -> dict[str, Any]:
        """A section of the resolved config ({} where the result has none)."""
        return (self.data.get("config") or {}).get(section) or {}

    @property
    def timed(self) -> bool:
        """False for a run with report.instrument=false: no step timed, its
        step figures null and its tokens/s wall-clock (docs/metrics.md)."""
        return self.config("report").get("instrument") is not False

    def per_rank(self) -> list[dict[str, Any]]:
        """The result's per-rank records (newer results), else []."""
        ranks = self.data.get("ranks")
        return [r for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []


def number(value: Any) -> float | None:
    """A figure that may be a number or a {median, p10, p90} object."""
    if isinstance(value, dict):
        value = value.get("median")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def rank_figure(record: dict[str, Any], name: str) -> float | None:
    """A per-rank median: `name` as a number or {median...}, or `name`_median."""
    value = number(record.get(name))
    return value if value is not None else number(record.get(name + "_median"))


def own_work(record: dict[str, Any]) -> float | None:
    """A rank's own work per step: its own_s (the median of step_s −
    comm_exposed_s, the step less its wait in the collectives), or, in a
    result from before own_s, its median step_s less its median
    comm_exposed_s, the nearest figure it has. step_s itself cannot tell the
    ranks apart: every step ends in the same all-reduce."""
    own = rank_figure(record, "own_s")
    if own is not None:
        return own
    step, exposed = rank_figure(record, "step_s"), rank_figure(record, "comm_exposed_s")
    return step - exposed if step is not None and exposed is not None else None


def binary_median(values: list[float]) -> float:
    """The median as trainbench computes it (trainer/statistics.h: linear
    interpolation, numpy's default), so that a figure derived here is the
    binary's to the last digit."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = 0.5 * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def read_object(path: Path, source: Source) -> dict[str, Any]:
    data = read_json(path, source)
    if not isinstance(data, dict):
        kind = ("array" if isinstance(data, list) else "string" if isinstance(data, str) else "null" if data is None
                else "boolean" if isinstance(data, bool) else "number")
        raise ReportError(f"{source.name}: not {source.kind} (a JSON {kind}, not an object)")
    return data


def unmeasured_as_null(data: dict[str, Any]) -> None:
    """A run with report.instrument=false times no step: its step times,
    shares and slowest rank are not measured. Newer binaries write them null;
    older ones wrote 0 (and rank 0 as the slowest), which become null here,
    before the check: so a 0 step time or shares that do not add up to 1 are
    refused in every other result, and the report shows — for these."""
    config = data.get("config")
    report = config.get("report") if isinstance(config, dict) else None
    if not isinstance(report, dict) or report.get("instrument") is not False:
        return

    def null_zeros(node: Any, keys: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for key in keys:
                value = node.get(key)
                if isinstance(value, dict):
                    null_zeros(value, ("median", "p10", "p90"))
                elif value == 0 and not isinstance(value, bool):
                    node[key] = None

    summary = data.get("summary")
    if isinstance(summary, dict):
        null_zeros(summary, ("step_s", "slowest_rank", "slowest_rank_excess"))
        null_zeros(summary.get("stall_shares"), tuple(key for key, _, _ in CATEGORIES))
    for key in ("ranks", "steps"):
        for record in data.get(key) if isinstance(data.get(key), list) else []:
            null_zeros(record, ("step_s", "step_s_median", "own_s", "own_s_median"))


def load_run(path: Path) -> Run:
    source = Source(str(path), "a trainbench result", "a complete trainbench result")
    data = read_object(path, source)
    schema = data.get("schema")
    if schema == ABORTED_SCHEMA:
        aborted = data.get("aborted") if isinstance(data.get("aborted"), dict) else {}
        raise ReportError(f"{path}: a run that did not finish ({shown(aborted.get('reason'))}, after "
                          f"{shown(aborted.get('steps_completed'))} step(s)): it has its steps but no summary "
                          "to report; rerun it")
    if schema not in SCHEMAS:
        # Another output, not another version of a result (a trainbench.result/v2 is refused, folder or not).
        other = (isinstance(schema, str) and schema.startswith("trainbench.")
                 and not schema.startswith("trainbench.result"))
        error = OtherTrainbenchFile if other else ReportError
        raise error(f"{path}: schema is {shown(schema)}, expected {' or '.join(SCHEMAS)} "
                    "(the result JSON of `trainbench run --out`)")
    check_values(data, source)
    unmeasured_as_null(data)
    RESULT.check(data, "", source)
    return Run(path, data)


def not_a_training_run(run: Run) -> str | None:
    """Why a result of the run's schema is not a training run's (a bench or
    burnin result), or None. Its summary is another job's: as a training run
    it set a sweep's ideal line, or decided a comparison's verdict."""
    # bench compute and bench instrument write a result whose summary is the 2-step job their
    # measurement ran in (the binary labels it "not the measurement").
    bench = next((name for key, name in BENCH_RESULT_KEYS.items() if key in run.data), None)
    if bench:
        return (f"a `trainbench bench {bench}` result, whose summary is the 2-step job its measurement ran in, "
                "not a training run")
    if isinstance(run.data.get("burnin"), dict):
        # Deterministic kernels, golden checks and health measurements
        # between its steps: another job than the run's, whose verdict
        # (a FAIL too) its own table reports.
        verdict = run.data["burnin"].get("verdict")
        return ("a `trainbench burnin` result" + (f" (verdict {verdict})" if isinstance(verdict, str) else "")
                + ", not a training run's: its steps share the time with its golden checks and health "
                "measurements, and its verdict table reports it")
    return None


def load_plan(option: str, name: str, lora_run: Run | None, full_run: Run | None) -> dict[str, dict[str, Any]]:
    """`trainbench plan --json` output given as `option` (--plan: for both
    runs; --lora-plan, --full-plan: for one): its rows by mode; refused where
    it plans another setup than the runs' it is set beside, in what the plan
    records: the model, the attention, the LoRA adapters (its lora row's
    trainable parameters), the ZeRO-1 world size, and (newer plans) the
    micro-batch and train.deterministic."""
    where = f"{option} {name}"
    source = Source(where, "the output of `trainbench plan --json`",
                    "the complete output of `trainbench plan --json`")
    data = read_object(Path(input_name(name, option)), source)
    # A result given in a plan's place (both are JSON objects with a `config`).
    # Plans carry trainbench.plan/v1 since 2026-12-05; older ones no schema.
    schema = data.get("schema")
    if schema not in (None, PLAN_SCHEMA) or isinstance(data.get("config"), dict) or "summary" in data:
        what = (f"a `trainbench run` result, schema {shown(schema)}" if isinstance(schema, str)
                and schema.startswith("trainbench.result") else "it has no plan's fields")
        raise ReportError(f"{where}: not the output of `trainbench plan --json` ({what}): make one with "
                          "`trainbench plan CONFIG --json` and the runs' --set")
    check_values(data, source)
    PLAN.check(data, "", source)
    rows = {row["mode"]: row for row in data["rows"]}
    runs = [run for run in (lora_run, full_run) if run is not None]
    fix = ("make the plan with the runs' config and --set" if option == "--plan" else
           f"make the plan with the {'LoRA' if lora_run is not None else 'full fine-tuning'} run's config and --set")
    # Newer plans record the model planned, as the results do: every key
    # both state must agree (seq_len included: it sizes the activations).
    planned_model = data.get("model")
    if isinstance(planned_model, dict):
        for run in runs:
            model = run.config("model")
            differs = [key for key in sorted(planned_model) if key in model and model[key] != planned_model[key]]
            if differs:
                key = differs[0]
                raise ReportError(f"{where}: plans model.{key} = {shown(planned_model[key])}"
                                  + (f" (config {data.get('config')})" if data.get("config") else "")
                                  + f", but {run.path} trained model.{key} = {shown(model[key])}: {fix}")
    else:
        # Older plans name their config (`preset:tiny`, a file) but not the
        # model's shape, nor the --set that changed it; the parameters of their
        # full fine-tuning row (every one trainable) are that shape's.
        planned = (rows.get("full (DDP)") or {}).get("trainable_params")
        for run in runs if planned is not None else []:
            model = run.config("model")
            params = model_parameters(model)
            if params is not None and params != planned:
                config = data.get("config")
                shape = ", ".join(f"{key} {model[key]}" for key in PARAM_KEYS)
                raise ReportError(f"{where}: plans a model of {planned:,} parameters"
                                  + (f" (config {config})" if config else "")
                                  + f", but {run.path} trained one of {params:,} ({shape}): {fix}")
    # The micro-batch sizes the activations; train.deterministic the
    # attention's workspace (older plans do not say).
    planned_train = data.get("train") if isinstance(data.get("train"), dict) else {}
    for key in ("micro_batch", "deterministic"):
        if key not in planned_train:
            continue
        for run in runs:
            trained = run.config("train").get(key)
            if trained is not None and trained != planned_train[key]:
                raise ReportError(f"{where}: plans train.{key} = {config_text(planned_train[key])}, but {run.path} "
                                  f"trained train.{key} = {config_text(trained)}: {fix}")
    # The attention planned: the GEMM one where the config set it, else the
    # fused one (or GEMM where that build has no cuDNN: the config's choice
    # all the same).
    attention = data.get("attention") or {}
    if attention.get("kernel") is not None or attention.get("basis") is not None:
        planned_gemm = attention.get("basis") == PLAN_GEMM_BASIS
        for run in runs:
            trained = run.config("train").get("attention")
            if trained is None:
                continue
            if (trained == "gemm") != planned_gemm and not (trained == "gemm" and attention.get("kernel") == "gemm"):
                raise ReportError(f"{where}: plans the {attention.get('kernel', '?')} attention"
                                  + (" (train.attention=gemm)" if planned_gemm else "")
                                  + f", but {run.path} trained with train.attention = {shown(trained)}: {fix}")
    # The adapters: the lora row's trainable parameters are theirs.
    planned_lora = (rows.get("lora") or {}).get("trainable_params")
    if lora_run is not None and planned_lora is not None:
        trained = lora_parameters(lora_run.config("model"), lora_run.config("lora"))
        if trained is not None and trained != planned_lora:
            lora = lora_run.config("lora")
            raise ReportError(f"{where}: plans LoRA adapters of {planned_lora:,} parameters (its lora row), but "
                              f"{lora_run.path} trained lora.rank {lora.get('rank')} on {lora.get('targets')} "
                              f"({trained:,} parameters): {fix}")
    # ZeRO-1 shards the optimizer state over the job: its row is of one world size.
    planned_zero = rows.get("full (ZeRO-1)") or {}
    if (full_run is not None and full_run.config("comm").get("zero") == 1 and planned_zero.get("gpus") is not None
            and planned_zero["gpus"] != full_run.ranks):
        raise ReportError(f"{where}: plans ZeRO-1 over {planned_zero['gpus']} GPUs, but {full_run.path} trained on "
                          f"{full_run.ranks} ranks: make the plan with --gpus-per-node and --nodes of that run")
    return rows


def projection_dims(model: dict[str, Any]) -> dict[str, int] | None:
    """The sizes the projections of a layer are made of, as
    kernels/model_shape.cpp has them: d (d_model), q (n_heads x head_dim), kv
    (n_kv_heads x head_dim; head_dim = d_model / n_heads, an integer
    division), ffn (ffn_hidden), and layers and vocab. None where the shape
    lacks a size."""
    sizes = [model.get(key) for key in PARAM_KEYS]
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in sizes):
        return None
    d, layers, heads, kv_heads, ffn, vocab = sizes
    head_dim = d // heads
    return {"d": d, "q": heads * head_dim, "kv": kv_heads * head_dim, "ffn": ffn, "layers": layers, "vocab": vocab}


def lora_parameters(model: dict[str, Any], lora: dict[str, Any]) -> int | None:
    """The adapters' parameters as kernels/model_shape.cpp lays them out: per
    layer and target projection [out, in], A (rank x in) and B (out x rank).
    None where the config lacks a size, or names a target this script does
    not know (the binary refuses those)."""
    dims = projection_dims(model)
    rank, targets = lora.get("rank"), lora.get("targets")
    if dims is None or not isinstance(rank, int) or isinstance(rank, bool) or rank < 1 or not isinstance(targets, str):
        return None
    # As trainer/config.cpp's split_targets: commas separate, spaces are ignored.
    names = {name for name in targets.replace(" ", "").split(",") if name}
    if not names or not names <= set(LORA_TARGETS):
        return None
    return dims["layers"] * sum(rank * (dims[LORA_TARGETS[n][0]] + dims[LORA_TARGETS[n][1]]) for n in names)


def model_parameters(model: dict[str, Any]) -> int | None:
    """The parameters of a model of this shape, as kernels/model_shape.cpp
    lays them out (ParameterLayout): the token embedding and the LM head
    (vocab x d_model each), the final norm, and per layer two norms, Wq and Wo
    (q by d), Wk and Wv (kv by d) and the three ffn by d of the MLP
    (projection_dims). None where the shape lacks a size."""
    dims = projection_dims(model)
    if dims is None:
        return None
    d, q, kv, ffn = dims["d"], dims["q"], dims["kv"], dims["ffn"]
    per_layer = 2 * d + 2 * q * d + 2 * kv * d + 3 * ffn * d
    return 2 * dims["vocab"] * d + d + dims["layers"] * per_layer


def input_name(name: str, what: str) -> str:
    if not name:
        raise ReportError(f"{what}: an empty name")
    return name


def collect(inputs: list[str]) -> tuple[list[Run], list[str]]:
    """The runs RESULTS name, and notes on what was left out: a folder's
    *.failed.json (scale.sh and compare_finetune.sh keep a failed rerun's
    result so, beside the earlier one), and a file whose contents are another
    one's (a copy is no repeat)."""
    paths: list[Path] = []
    in_folder: set[Path] = set()  # found by listing a folder, not named
    notes: list[str] = []
    for name in inputs:
        p = Path(input_name(name, "RESULTS"))
        if os.path.isdir(p):
            try:
                listed = sorted(p / entry for entry in os.listdir(p) if fnmatch.fnmatchcase(entry, "*.json"))
            except OSError as e:
                raise ReportError(f"{p}: cannot list this folder ({e.strerror or e})") from None
            found = [entry for entry in listed if not entry.name.endswith((FAILED_SUFFIX, ABORTED_SUFFIX))]
            failed = [entry.name for entry in listed if entry.name.endswith(FAILED_SUFFIX)]
            aborted = [entry.name for entry in listed if entry.name.endswith(ABORTED_SUFFIX)]
            if failed:
                notes.append(f"{p}: left out {', '.join(failed)} (a failed rerun's result, kept beside the "
                             "earlier one by scale.sh or compare_finetune.sh; name the file to read it)")
            if aborted:
                notes.append(f"{p}: left out {', '.join(aborted)} (the steps of a run an abort or a signal "
                             "ended: no summary to report)")
            if not found:
                left = [f"{len(names)} *{suffix}" for names, suffix in ((failed, FAILED_SUFFIX),
                                                                        (aborted, ABORTED_SUFFIX)) if names]
                raise ReportError(f"{p}: no *.json result files in this folder"
                                  + (f" (only {' and '.join(left)}, left out)" if left else ""))
            for entry in found:  # a folder or a pipe named *.json is no result (and a pipe would never end)
                if not os.path.isfile(entry):
                    raise ReportError(f"{entry}: not a regular file (every *.json in {p} is read as a result)")
            paths.extend(found)
            in_folder.update(found)
        else:
            paths.append(p)
    seen: set[str] = set()
    runs: list[Run] = []
    contents: dict[str, Run] = {}  # canonical JSON text -> the first run with it
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            # The same file again (named twice, or by name and in its folder):
            # a copy's contents are said below; this was read once unsaid.
            notes.append(f"{p} was given more than once: read once")
            continue
        seen.add(key)
        try:
            run = load_run(p)
        except OtherTrainbenchFile as other:
            # A sweep's folder may hold a bench io or bench comm result beside
            # its runs: the whole report was refused for it.
            if p not in in_folder:
                raise
            notes.append(f"{p}: left out: {str(other).removeprefix(f'{p}: ')}")
            continue
        other_job = not_a_training_run(run)
        if other_job:
            notes.append(f"{p}: left out: {other_job}")
            continue
        text = json.dumps(run.data, sort_keys=True)
        if text in contents:
            notes.append(f"{p} holds the same result as {contents[text].path} (a copy, not a repeat): read once")
            continue
        contents[text] = run
        runs.append(run)
    if not runs:
        raise ReportError("no training run among RESULTS: " + "; ".join(notes))
    named: dict[str, int] = {}
    for run in runs:
        named[run.path.name] = named.get(run.path.name, 0) + 1
    for run in runs:
        if named[run.path.name] > 1:
            run.name = str(run.path)
    return runs, notes


# What makes two runs different workloads, not repeats or world sizes of one:
# the model, full or LoRA (and LoRA's adapters), the precision. A scaling
# line or a median over them compares nothing (the per-rank batch may differ:
# a strong-scaling sweep changes it; that is warned about).
# As the binary compares configs (trainer/config.cpp, as_state_sees_it):
# model.n_layers_full (the depth `project` projects to) builds nothing, and
# lora.targets are the adapters they build, in whatever order written.
WORKLOAD_KEYS = ("model.", "train.mode", "train.precision")
NOT_WORKLOAD_KEYS = ("model.n_layers_full",)


def as_compared(config: dict[str, Any]) -> dict[str, Any]:
    """A flattened config with lora.targets as the adapters they build."""
    if isinstance(config.get("lora.targets"), str):
        config["lora.targets"] = ",".join(sorted({t.strip() for t in config["lora.targets"].split(",") if t.strip()}))
    return config


def workload_config(run: Run, prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The run's config keys under `prefixes`, as the binary compares them."""
    return as_compared({k: v for k, v in flatten(run.data.get("config") or {}).items()
                        if k.startswith(prefixes) and k not in NOT_WORKLOAD_KEYS})


def config_difference(a: Run, b: Run, prefixes: tuple[str, ...]) -> list[str]:
    """The keys under `prefixes` both configs hold with other values, each
    as "key A vs B" (a key one result lacks, an older binary's, is not
    compared: the warnings name every config difference)."""
    ca, cb = workload_config(a, prefixes), workload_config(b, prefixes)
    return [f"{k} {json.dumps(ca[k])} vs {json.dumps(cb[k])}" for k in sorted(set(ca) & set(cb)) if ca[k] != cb[k]]


def workload_difference(a: Run, b: Run) -> list[str]:
    """What makes a and b different workloads; lora.* counts where either
    trains LoRA."""
    lora = "lora" in (a.config("train").get("mode"), b.config("train").get("mode"))
    return config_difference(a, b, WORKLOAD_KEYS + (("lora.",) if lora else ()))


def refuse_mixed_workloads(runs: list[Run]) -> None:
    """One report is one workload's: runs of another model, mode or
    precision read as repeats or world sizes gave a median and an
    efficiency of nothing (a LoRA run set a full fine-tune's ideal line),
    with a warning among a dozen."""
    base = min(runs, key=lambda r: (r.ranks, str(r.path)))
    for run in runs:
        differ = workload_difference(run, base)
        if differ:
            more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
            raise ReportError(f"{run.name} and {base.name} train different workloads ({', '.join(differ[:3])}{more}): "
                              "a scaling report compares runs of one model, mode and precision; report each "
                              "workload's runs on their own")


# ----------------------------------------------------------------------------- analysis

@dataclass
class Point:
    """One world size: its runs, their median tokens/s, and the run whose
    other figures stand for them.

    tokens/s is the true median of the runs' tokens/s (of an even number,
    the mean of the two middle ones). The other figures (step times, MFU,
    shares, bottleneck, slowest rank, ceilings, per-rank table) are one run's,
    not averaged: the middle run, and of the two middle ones the slower.
    Runs with report.instrument=false beside timed ones are left out of both
    (`left_out`): their tokens/s is wall-clock, not from the median step, and
    their step figures are not measured. So are runs that measured no step
    (a failure stopped them first) beside runs that did (`unmeasured`); where
    none did, tokens/s is None (not measured)."""
    ranks: int
    runs: list[Run]
    used: list[Run] = field(init=False)      # by tokens/s, slowest first
    left_out: list[Run] = field(init=False)
    unmeasured: list[Run] = field(init=False)
    run: Run = field(init=False)
    tokens_per_s: float | None = field(init=False)
    ideal_tokens_per_s: float | None = None
    efficiency: float | None = None

    def __post_init__(self) -> None:
        measured = [r for r in self.runs if r.tokens_per_s is not None]
        self.unmeasured = [r for r in self.runs if r.tokens_per_s is None] if measured else []
        pool = measured or self.runs
        timed = [r for r in pool if r.timed]
        self.left_out = [r for r in pool if not r.timed] if timed else []
        self.used = sorted(timed or pool, key=lambda r: (r.tokens_per_s or 0.0, str(r.path)))
        self.tokens_per_s = statistics.median(r.tokens_per_s for r in self.used) if measured else None
        self.run = self.used[(len(self.used) - 1) // 2]

    @property
    def hosts(self) -> int | None:
        hosts = self.run.data["environment"].get("hosts")
        return len(hosts) if isinstance(hosts, list) and hosts else None


def group(runs: list[Run]) -> list[Point]:
    by_ranks: dict[int, list[Run]] = {}
    for run in runs:
        by_ranks.setdefault(run.ranks, []).append(run)
    points = [Point(n, rs) for n, rs in sorted(by_ranks.items())]
    base = base_point(points)
    for p in points if base is not None else []:
        p.ideal_tokens_per_s = p.ranks / base.ranks * base.tokens_per_s
        p.efficiency = p.tokens_per_s / p.ideal_tokens_per_s if p.tokens_per_s is not None else None
    return points


def base_point(points: list[Point]) -> Point | None:
    """The world size the ideal line starts from: the smallest with a
    measured tokens/s (None where no run measured a step)."""
    return next((p for p in points if p.tokens_per_s is not None), None)


def shares(run: Run) -> dict[str, float | None]:
    stall = run.summary.get("stall_shares")
    stall = stall if isinstance(stall, dict) else {}
    return {key: number(stall.get(key)) for key, _, _ in CATEGORIES}


# The words of the binary's bottleneck line (trainer/train_loop.cpp,
# bottleneck_line) for each category beside compute, in its order.
BOTTLENECK_TIME = {"comm_exposed": "exposed communication", "data_stall": "data stall",
                   "ckpt_stall": "checkpoint stall", "other": "other (launch gaps, host work)"}


def bottleneck(run: Run) -> tuple[str, bool]:
    """The result's own bottleneck line, or (results without one) the line
    the binary would write from the summary's shares, flagged as derived."""
    own = run.summary.get("bottleneck")
    if isinstance(own, str) and own.strip():
        return own.strip(), False
    if isinstance(own, dict):  # tolerate {"resource": ..., "line": ...}
        for key in ("line", "text", "resource", "name"):
            if isinstance(own.get(key), str) and own[key].strip():
                return own[key].strip(), False
    line = bottleneck_line(run)
    return (line, True) if line is not None else ("—", False)


def bottleneck_line(run: Run) -> str | None:
    """trainer/train_loop.cpp's rule, mirrored: the category beside compute
    with the largest share (the first of equals, in the order network,
    storage read, storage write, host overhead) when it takes at least 10%
    of the step, otherwise compute; percentages rounded as the binary rounds
    them. With more than one rank and a pacing rank 10% or more above the
    other ranks' median own work, the binary adds whose view it is. None where
    nothing was measured (report.instrument=false)."""
    sh = shares(run)
    if all(value is None for value in sh.values()):
        return None

    def percent(share: float | None) -> str:
        return "—" if share is None else f"{int(100.0 * share + 0.5)}%"

    worst = None
    for key, _, resource in CATEGORIES[1:]:
        if sh[key] is not None and (worst is None or sh[key] > sh[worst[0]]):
            worst = (key, resource)
    if worst is None or sh[worst[0]] < 0.10:
        line = f"compute — compute {percent(sh['compute'])} of step; no other resource takes 10%"
    else:
        key, resource = worst
        line = (f"{resource} — {BOTTLENECK_TIME[key]} {percent(sh[key])} of step "
                f"(compute {percent(sh['compute'])})")
    lag = straggler(run)
    if run.ranks > 1 and lag.rank is not None and lag.slower is not None and lag.slower >= 0.1:
        line += (f"; seen from rank {lag.rank}" + (f" ({lag.host})" if lag.host is not None else "")
                 + f", which sets the pace: its own work per step is {percent(lag.slower)} above the other ranks' median")
    return line


@dataclass
class Straggler:
    rank: int | None
    host: str | None
    slower: float | None  # its own work over the other ranks' median, − 1 (slowest_rank_excess)
    own_s: float | None


def by_rank(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-rank records in rank order (the order the binary gathers them in)."""
    def key(item: tuple[int, dict[str, Any]]) -> tuple[float, int]:
        rank = item[1].get("rank")
        return (rank if isinstance(rank, int) and not isinstance(rank, bool) else math.inf, item[0])
    return [record for _, record in sorted(enumerate(records), key=key)]


def straggler(run: Run) -> Straggler:
    """The rank that sets the pace and how much more work of its own it does
    per step than the other ranks' median: the result's own figures
    (summary.slowest_rank, _excess) where it has them (an excess written
    before the other ranks' median, by a result without
    summary.consistency_check_s, is derived again), else derived from its
    per-rank records as trainer/train_loop.cpp does: the largest own work
    (the lowest rank of equals), over the median of the other ranks', − 1
    (0 for one rank)."""
    records = [(rec, own_work(rec)) for rec in by_rank(run.per_rank())]
    hosts = {rec.get("rank"): rec.get("host") for rec, _ in records if isinstance(rec.get("host"), str)}
    records = [(rec, own) for rec, own in records if own is not None]
    own_rank = run.summary.get("slowest_rank")
    own_rank = own_rank if isinstance(own_rank, int) and not isinstance(own_rank, bool) else None
    # A result without consistency_check_s is older than the other ranks'
    # median: its excess was over every rank's (the slowest's own included),
    # so it is derived again from the per-rank records where they are (and
    # kept as it is where they are not: the only figure there is).
    stored = number(run.summary.get("slowest_rank_excess"))
    excess = stored if "consistency_check_s" in run.summary else None

    def over_the_others(index: int) -> float:
        others = [own for i, (_, own) in enumerate(records) if i != index]
        typical = binary_median(others) if others else 0.0
        return records[index][1] / typical - 1.0 if typical > 0 else 0.0

    if own_rank is not None:
        chosen = [i for i, (rec, _) in enumerate(records) if rec.get("rank") == own_rank]
        own = records[chosen[0]][1] if chosen else None
        if excess is None and chosen:
            excess = over_the_others(chosen[0])
        return Straggler(own_rank, hosts.get(own_rank), stored if excess is None else excess, own)
    if not records:
        return Straggler(None, None, stored, None)
    index = 0
    for i, (_, own) in enumerate(records):
        if own > records[index][1]:  # std::max_element: the first of equals
            index = i
    rec, slowest = records[index]
    rank = rec.get("rank")
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    return Straggler(rank, hosts.get(rank), over_the_others(index), slowest)


def step_spread(point: Point) -> tuple[list[float], str]:
    """The step times (s) shown for a world size in the spread plot, and what they are."""
    medians = [s for run in point.used for s in (rank_figure(r, "step_s") for r in run.per_rank()) if s is not None]
    if medians:
        return medians, "per-rank median step time"
    steps = []
    for run in point.used:
        for step in run.data.get("steps") or []:
            if isinstance(step, dict) and not step.get("warmup") and number(step.get("step_s")) is not None:
                steps.append(float(step["step_s"]))
    return steps, "rank 0's measured steps"


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


# Keys that differ between the runs of one sweep without making them different
# jobs: the run length, where files go, and what the run sizes for itself.
PER_RUN_KEYS = ("train.steps", "train.warmup_steps", "checkpoint.dir", "data.synth_samples_per_shard")
# And between world sizes, what auto picks for each: comm.backend as the result
# says it resolved (mpi for one GPU, nccl for several). At one world size a
# different backend is a different job.
PER_WORLD_SIZE_KEYS = ("comm.backend",)


def ranks_text(n: int) -> str:
    return f"{n} rank" + ("" if n == 1 else "s")


def timing_warnings(points: list[Point]) -> list[str]:
    """Runs with report.instrument=false mixed with timed ones: repeats left
    out of a world size's figures, and world sizes whose tokens/s are
    different measures (wall-clock against the median step). Printed on
    stderr too."""
    warnings = []
    for p in points:
        if p.unmeasured:
            names = ", ".join(r.name for r in p.unmeasured)
            it, it_is = ("it", "it is") if len(p.unmeasured) == 1 else ("them", "they are")
            warnings.append(f"{ranks_text(p.ranks)}: {names} measured no step (a failure stopped {it} before the "
                            f"first step after warm-up) beside {len(p.used)} measured run(s); {it_is} left out "
                            "of the median and of the figures shown")
        if p.left_out:
            names = ", ".join(r.name for r in p.left_out)
            its, it_is = ("its", "it is") if len(p.left_out) == 1 else ("their", "they are")
            warnings.append(f"{ranks_text(p.ranks)}: {names} ran with report.instrument=false (no step timed: "
                            f"{its} step figures are not measured, {its} tokens/s is wall-clock) beside "
                            f"{len(p.used)} timed run(s); {it_is} left out of the median and of the figures shown")
    untimed = [p.ranks for p in points if not p.run.timed]
    if untimed and len(untimed) < len(points):
        timed = [p.ranks for p in points if p.run.timed]
        warnings.append(f"tokens/s at {', '.join(map(str, untimed))} rank(s) is wall-clock "
                        f"(report.instrument=false), at {', '.join(map(str, timed))} rank(s) from the median step: "
                        "the scaling efficiency compares two different measures")
    return warnings


def consistency_warnings(points: list[Point]) -> list[str]:
    """What makes the runs not one sweep: different configs (report.* and the
    step count aside), different per-rank batches (the ideal line assumes weak
    scaling: the same tokens per rank and step), timed and untimed runs mixed."""
    warnings = timing_warnings(points)
    base = points[0].run
    # Compared as the binary compares them (lora.targets "o,v,k,q" and
    # "q,k,v,o" were "configured differently"), shown as written.
    base_config = flatten(base.data.get("config") or {})
    base_compared = as_compared(dict(base_config))
    for p in points:
        for run in p.runs:
            if run is base:
                continue
            config = flatten(run.data.get("config") or {})
            compared = as_compared(dict(config))
            differ = sorted(k for k in set(base_config) | set(config)
                            if not k.startswith("report.") and k not in PER_RUN_KEYS
                            and not (k in PER_WORLD_SIZE_KEYS and run.ranks != base.ranks)
                            and base_compared.get(k) != compared.get(k))
            if differ:
                # This run's value first, as it is named first (they read
                # the other way round: each value under the other file).
                shown = ", ".join(f"{k} {json.dumps(config.get(k))} vs {json.dumps(base_config.get(k))}"
                                  for k in differ[:4])
                more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
                warnings.append(f"{run.name} is configured differently from {base.name}: {shown}{more}")
    per_rank = {}
    for p in points:
        tokens = number(p.run.summary.get("global_tokens_per_step"))
        if tokens is not None:
            per_rank[p.ranks] = tokens / p.ranks
    if len(set(per_rank.values())) > 1:
        shown = ", ".join(f"{n} ranks: {t:g}" for n, t in per_rank.items())
        warnings.append(f"tokens per rank and step differ between world sizes ({shown}): "
                        "the ideal line assumes the same per-rank batch")
    # Above 1: more than N/N0 times the base's tokens/s. Each side is a
    # median step, whose runs' p10-p90 spread says how far their noise
    # reaches: an excess within the mean of the two spreads is that noise.
    ideal_from = base_point(points)
    for p in points:
        if p.efficiency is None or round(p.efficiency, 3) <= 1.0 or ideal_from is None:
            continue
        spreads = []
        for run in (ideal_from.run, p.run):
            median, p10, p90 = step_stats(run)
            spreads.append((p90 - p10) / median if None not in (median, p10, p90) and median > 0 else None)
        excess = p.efficiency - 1.0
        line = (f"{ranks_text(p.ranks)}: scaling efficiency {p.efficiency:.3f} is above 1 "
                "(tokens/s grew faster than the ranks)")
        # A larger per-rank batch is a reason of its own, whatever the spread
        # ("noise" beside a doubled batch).
        if per_rank.get(p.ranks) not in (None, per_rank.get(ideal_from.ranks)) and ideal_from.ranks in per_rank:
            line += (f": each rank's step holds {per_rank[p.ranks]:g} tokens at {p.ranks} and "
                     f"{per_rank[ideal_from.ranks]:g} at {ideal_from.ranks}, which the ideal line does not assume")
        elif None in spreads:
            line += ": no step-time spread to judge it against"
        else:
            shown = f"p10-p90 {spreads[0]:.0%} at {ideal_from.ranks} and {spreads[1]:.0%} at {p.ranks}"
            line += (f": within the step times' spread ({shown}): noise" if excess <= sum(spreads) / 2 else
                     f": beyond the step times' spread ({shown}): a lighter per-rank step at {p.ranks}, or a slower "
                     f"machine under the {ideal_from.ranks}-rank run")
        warnings.append(line)
    for p in points:
        for run in p.runs:
            for check in run.data.get("checks") or []:
                if isinstance(check, dict) and check.get("passed") is False:
                    warnings.append(f"{run.name}: check {check.get('name')} FAILED{failed_detail(check)}")
            for w in run.data.get("warnings") or []:
                warnings.append(f"{run.name}: {w}")
    return warnings


# ----------------------------------------------------------------------------- formatting

def si(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    # Past 1000 T, or below 0.01 but not 0, as %.3g: 1e30 tokens/s printed
    # "1000000000000000000.00 T", and 1e-30 "0.00".
    if abs(value) >= 1e15 or 0 < abs(value) < 0.01:
        return f"{value:.3g} {unit}".rstrip()
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}".rstrip()
    return f"{value:.2f} {unit}".rstrip()


def failed_detail(check: dict) -> str:
    """': DETAIL' of a failed check, or nothing: "FAILED: " ended on a colon."""
    detail = check.get("detail") or ""
    return f": {detail}" if detail else ""


NOT_MEASURED = "not measured"


def rate(value: float | None) -> str:
    """A tokens/s of the report: one decimal, or "not measured"."""
    return NOT_MEASURED if value is None else f"{value:.1f}"


def ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.2f}"


def pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value * 100:.{digits}f}%"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; columns of figures (numbers, percentages, "—") right-aligned."""
    def figure(cell: str) -> bool:
        return (cell in ("—", NOT_MEASURED)
                or re.fullmatch(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?( ?[kMGT])?%?", cell) is not None)
    align = ["---:" if rows and all(figure(row[i]) for row in rows) else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def step_stats(run: Run) -> tuple[float | None, float | None, float | None]:
    step = run.summary.get("step_s")
    step = step if isinstance(step, dict) else {"median": step}
    return number(step.get("median")), number(step.get("p10")), number(step.get("p90"))


def mfu_cells(run: Run) -> tuple[str, str]:
    s = run.summary
    return pct(number(s.get("mfu"))), pct(number(s.get("mfu_vs_gemm_ceiling")))


def straggler_cell(point: Point) -> str:
    if point.ranks == 1:
        return "—"
    lag = straggler(point.run)
    if lag.rank is None:
        return "—"
    where = f"rank {lag.rank}" + (f" ({lag.host})" if lag.host else "")
    if lag.slower is None:
        return where
    return f"{where}, +{lag.slower * 100:.1f}% vs the others' median"


def ceilings_of(run: Run) -> dict[str, Any]:
    """The result's isolation ceilings (`run --ceilings`): {resource: {figure: value}}."""
    for node in (run.data.get("ceilings"), run.summary.get("ceilings")):
        if isinstance(node, dict) and node:
            return {k: v for k, v in node.items() if isinstance(v, dict)}
    return {}


def ceiling_figure(key: str, value: Any) -> str | None:
    if key == "collectives":
        return f"timed: {value}" if isinstance(value, str) and value else None
    v = number(value)
    if v is None:
        return None
    label = key.replace("_", " ")
    if key.endswith("gbs"):
        return f"{label[:-3].strip() or 'bandwidth'} {v:.3g} GB/s".replace("  ", " ")
    if "bytes" in key:
        return f"{label} {si(v, 'B')}"
    if key.endswith("_s") or "_s_per_" in key:
        return f"{label.replace(' s per ', ' per ').removesuffix(' s')} {v * 1e3:.3g} ms"
    return f"{label} {v:.4g}"


def ceilings_section(points: list[Point]) -> list[str]:
    """Achieved tokens/s against each isolation ceiling, where the results have them."""
    rows = []
    for p in points:
        for name, figures in ceilings_of(p.run).items():
            tokens = number(figures.get("tokens_per_s"))
            achieved = number(figures.get("achieved_share"))
            if achieved is None and tokens and p.run.tokens_per_s is not None:
                achieved = p.run.tokens_per_s / tokens
            others = [f for k, v in figures.items() if k not in ("tokens_per_s", "achieved_share", "timed")
                      for f in [ceiling_figure(k, v)] if f]
            rows.append([str(p.ranks), name.replace("_", " "), si(tokens), pct(achieved),
                         "; ".join(others) or "—"])
    if not rows:
        return []
    return (["## Against the ceilings", "",
             "Each resource measured alone on the same config and ranks before the run (`trainbench run "
             "--ceilings`), as the tokens/s it could sustain; achieved = the run's tokens/s over that "
             "(— where not measured: no network on one rank, nor on NCCL where a GPU had no room for "
             "the buffers beside the run; storage write is in GB/s).", ""]
            + table(["ranks", "resource", "ceiling tokens/s", "achieved (%)", "other figures"], rows) + [""])


def rank_section(point: Point) -> list[str]:
    """The slowest ranks of the largest run: those with the most work of their
    own per step first (as the binary picks slowest_rank), category by category."""
    records = [r for r in by_rank(point.run.per_rank()) if own_work(r) is not None]
    if len(records) < 2:
        return []
    middle = binary_median([own_work(r) for r in records])
    estimated = any(rank_figure(r, "own_s") is None for r in records)
    records.sort(key=lambda r: own_work(r), reverse=True)  # stable: the lowest rank of equals first
    shown = records[:10]
    # Results from 2026-12-06 on: each rank's wait for a CPU (a busy
    # neighbour, or more threads than CPUs, slows a rank as a bad part does).
    cpu_wait = any(isinstance(r.get("cpu_wait_share"), (int, float)) for r in shown)
    rows = []
    for r in shown:
        row = [str(r.get("rank", "?")), str(r.get("host", "—")), ms(own_work(r)), ms(rank_figure(r, "step_s"))]
        row += [ms(rank_figure(r, key + "_s")) for key, _, _ in CATEGORIES]
        if cpu_wait:
            share = r.get("cpu_wait_share")
            row.append(pct(share if isinstance(share, (int, float)) else None, 0))
        rows.append(row)
    lines = [f"## Ranks at {point.ranks} ranks (slowest first)", "",
             "Ordered by each rank's own work per step (own: the median of step − comm exposed, the step less "
             "its wait in the collectives): every step ends in the same all-reduce, so the step time is about "
             "the same on every rank and a faster rank spends the difference waiting, as exposed communication. "
             f"Own work of the median rank: {ms(middle)} ms."
             + (" This result has no own_s: own is estimated as the median step less the median comm exposed."
                if estimated else "")
             + (f" The {len(records) - len(shown)} faster ranks are not listed." if len(records) > len(shown) else ""),
             ""]
    header = ["rank", "host", "own (ms)", "step (ms)"] + [f"{label} (ms)" for _, label, _ in CATEGORIES]
    if cpu_wait:
        header.append("waited for a CPU")
        lines[-1:-1] = ["Waited for a CPU: of the time a rank's threads were ready to run, the share they waited "
                        "for one (a busy neighbour on its cores, or more threads than CPUs); from 25% the run "
                        "warns.", ""]
    return lines + table(header, rows) + [""]


def config_text(value: Any) -> str:
    """A config value as the config writes it: true/false, not Python's True/False; ? where absent or
    null (a result's null read "None")."""
    if value is None:
        return "?"
    return json.dumps(value) if isinstance(value, bool) else str(value)


def environment_section(run: Run) -> list[str]:
    env = run.data.get("environment") or {}
    config = run.data.get("config") or {}
    s = run.summary
    gpus = env.get("gpus") or []
    names: dict[str, int] = {}
    for g in gpus:
        if isinstance(g, dict):
            names[str(g.get("name", "GPU"))] = names.get(str(g.get("name", "GPU")), 0) + 1
    gpu_text = ", ".join(f"{n} × {name}" for name, n in names.items()) or (
        "none" + (f" ({env['gpus_unavailable_reason']})" if env.get("gpus_unavailable_reason") else ""))
    # Several hosts: `gpus` is rank 0's host's; host_gpus says whether the others match it.
    host_gpus = [h for h in env.get("host_gpus") or [] if isinstance(h, dict)]
    if len(host_gpus) > 1:
        def without_name(h: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in h.items() if k != "host"}
        alike = all(without_name(h) == without_name(host_gpus[0]) for h in host_gpus)
        gpu_text += (f" on each of {len(host_gpus)} hosts" if alike else
                     f" on rank 0's host; the {len(host_gpus)} hosts differ (see the warnings)")
    cpu = env.get("cpu") or {}
    model = config.get("model") or {}
    train = config.get("train") or {}
    data = config.get("data") or {}
    ckpt = config.get("checkpoint") or {}
    hosts = env.get("hosts") or []
    shape = ", ".join(f"{k} {config_text(model[k])}" for k in ("d_model", "n_layers", "n_heads", "n_kv_heads",
                                                               "ffn_hidden", "vocab", "seq_len") if k in model)
    shards = data.get("shards") or "(synthetic shards made for the run)"
    if data.get("source") == "synthetic":
        shards = "(synthetic tokens in memory: no storage read)"
    items = [
        ("result", f"{run.name} — trainbench {config_text(run.data.get('version'))}"),
        ("command", f"`{config_text(run.data.get('command'))}`"),
        ("ranks / hosts", f"{env.get('ranks')} on {len(hosts)} host(s): {', '.join(map(str, hosts[:8]))}"
                          + (" …" if len(hosts) > 8 else "")),
        ("engine / comm", f"{config_text(env.get('compute_backend'))} / {config_text(env.get('comm_backend'))}"),
        ("GPUs", gpu_text),
        ("CPU", f"{config_text(cpu.get('model'))}, {config_text(cpu.get('threads_used'))} of "
                f"{config_text(cpu.get('hardware_threads'))} threads"
                + (f" ({cpu['usable_threads']} usable: affinity, cgroup)"
                   if isinstance(cpu.get('usable_threads'), int) and isinstance(cpu.get('hardware_threads'), int)
                   and cpu['usable_threads'] < cpu['hardware_threads'] else "")
                + (" (rank 0's host)" if len(hosts) > 1 else "")),
        ("libraries", ", ".join(f"{k} {env[k]}" for k in ("nvidia_driver", "cuda_runtime", "cuda_driver", "nccl", "mpi")
                                if env.get(k)) or "—"),
        ("model", shape or "—"),
        ("batch", f"micro {config_text(train.get('micro_batch'))} × accum {config_text(train.get('grad_accum'))} "
                  "per rank; "
                  f"{config_text(s.get('global_tokens_per_step'))} tokens/step over all ranks; "
                  f"mode {config_text(train.get('mode'))}, precision {config_text(train.get('precision'))}"),
        ("steps", f"{config_text(s.get('measured_steps'))} measured after "
                  f"{config_text(s.get('warmup_steps'))} warm-up"),
        ("data", f"{shards}, {config_text(data.get('readers'))} reader(s) per rank"),
        # every_steps 0 is no checkpoint: "every 0 steps" read as a setting.
        ("checkpoint", "none (every_steps 0)" if ckpt.get("every_steps") == 0 else
                       f"every {config_text(ckpt.get('every_steps'))} steps, async {config_text(ckpt.get('async'))}, "
                       f"dir {ckpt.get('dir') or '(temporary)'}"),
    ]
    for fs in env.get("filesystems") or []:
        if isinstance(fs, dict):
            items.append((f"filesystem ({config_text(fs.get('role'))})",
                          f"{config_text(fs.get('path'))}: {config_text(fs.get('type'))}"))
    lines = ["## Config and environment (the smallest run)", ""]
    lines += [f"- **{k}**: {v}" for k, v in items]
    flat = flatten(config)
    lines += ["", "<details><summary>resolved config</summary>", "", "```"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in flat.items()]
    lines += ["```", "", "</details>", ""]
    return lines


def repeats_section(points: list[Point]) -> list[str]:
    """Which run's figures stand for a world size with several runs."""
    repeated = [p for p in points if len(p.runs) > 1]
    if not repeated:
        return []
    lines = ["Repeats: a world size's tokens/s (and the ideal and efficiency from it) is the median of its runs' "
             "(of an even number, the mean of the two middle ones); its other figures (step time, MFU, shares, "
             "bottleneck, slowest rank, ceilings, per-rank table) are one run's, not averaged: the middle run, "
             "of the two middle ones the slower. Runs with report.instrument=false beside timed ones are left out, "
             "and so are runs that measured no step beside runs that did.",
             ""]
    for p in repeated:
        runs = ", ".join(f"{r.name} {rate(r.tokens_per_s)}" for r in p.used)
        line = (f"- {ranks_text(p.ranks)}: {len(p.runs)} runs, tokens/s median {rate(p.tokens_per_s)} of {runs}; "
                f"the other figures are {p.run.name}'s")
        if p.left_out:
            line += f"; left out: {', '.join(r.name for r in p.left_out)} (report.instrument=false)"
        if p.unmeasured:
            line += f"; left out: {', '.join(r.name for r in p.unmeasured)} (no step measured)"
        lines.append(line)
    return lines + [""]


def markdown_text(points: list[Point], plots: list[str], notes: list[str]) -> str:
    base = points[0]
    ideal = base_point(points)
    lines = ["# trainbench scaling report", ""]
    lines += [f"{len(points)} world size(s) from {sum(len(p.runs) for p in points)} run(s). "
              + (f"Ideal tokens/s = N/{ideal.ranks} × tokens/s at {ideal.ranks} rank(s); "
                 "scaling efficiency = tokens/s ÷ ideal. " if ideal is not None else
                 "No run measured a step: there is no tokens/s, ideal line or scaling efficiency. ")
              + "tokens/s is set by the largest of the ranks' median steps; the step times and shares are "
              "those of the slowest rank by its own work (its step less its wait in the collectives), which "
              "need not be the same rank (docs/metrics.md; older results: rank 0's).", ""]

    rows = []
    derived = False
    for p in points:
        median, p10, p90 = step_stats(p.run)
        mfu, vs_gemm = mfu_cells(p.run)
        line, was_derived = bottleneck(p.run)
        derived |= was_derived
        rows.append([str(p.ranks), str(p.hosts or "—"), str(len(p.runs)), rate(p.tokens_per_s),
                     "—" if p.ideal_tokens_per_s is None else f"{p.ideal_tokens_per_s:.1f}",
                     (NOT_MEASURED if p.tokens_per_s is None else "—") if p.efficiency is None
                     else f"{p.efficiency:.3f}",
                     ms(median), ms(p10), ms(p90), mfu, vs_gemm, straggler_cell(p)])
    lines += ["## Throughput and scaling", ""]
    lines += table(["ranks", "hosts", "runs", "tokens/s", "ideal tokens/s", "scaling efficiency",
                    "step median (ms)", "step p10 (ms)", "step p90 (ms)", "MFU (datasheet)", "MFU (GEMM ceiling)",
                    "slowest rank"], rows)
    lines.append("")
    unmeasured = [(p, r) for p in points for r in p.runs if r.tokens_per_s is None]
    if unmeasured:
        lines += ["Not measured: a run a failure stopped before its first step after warm-up has no tokens/s, "
                  "step times or shares (null in the result: docs/metrics.md); what it has is below.", ""]
        lines += [f"- {ranks_text(p.ranks)}: {r.name} {r.unmeasured_text()}" for p, r in unmeasured] + [""]
    lines += repeats_section(points)

    rows = []
    for p in points:
        sh = shares(p.run)
        line, was_derived = bottleneck(p.run)
        rows.append([str(p.ranks)] + [pct(sh[key]) for key, _, _ in CATEGORIES]
                    + [line + (" \\*" if was_derived else "")])
    lines += ["## Where the step time goes", "",
              "Shares of the step time on the slowest rank (DESIGN.md: compute, exposed communication, "
              "data stall, checkpoint stall, other).", ""]
    lines += table(["ranks"] + [f"{label} (%)" for _, label, _ in CATEGORIES] + ["bottleneck"], rows)
    if derived:
        lines += ["", "\\* derived by this report with the binary's rule (docs/metrics.md): the category beside "
                      "compute with the largest share when it takes at least 10% of the step, else compute; the "
                      "result has no `summary.bottleneck`."]
    lines.append("")

    lines += ceilings_section(points)
    lines += rank_section(points[-1])

    if plots:
        lines += ["## Plots", ""]
        titles = {"tokens_per_s.png": "tokens/s against ranks", "scaling_efficiency.png": "scaling efficiency",
                  "stall_shares.png": "stall shares", "step_time_spread.png": "step-time spread"}
        lines += [f"![{titles.get(name, name)}]({name})" for name in plots]
        lines.append("")

    warnings = notes + consistency_warnings(points)
    if warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in dict.fromkeys(warnings)] + [""]

    lines += environment_section(base.run)
    lines += ["## Inputs", ""]
    lines += [f"- {p.ranks} ranks: " + ", ".join(str(r.path) for r in p.runs) for p in points]
    lines.append("")
    return markdown_lines(lines)


# ----------------------------------------------------------------------------- plots

def write_plots(points: list[Point], out: OutDir, staged: "Staged") -> list[str]:
    """The plots, each into a temporary beside its name (staged: renamed in
    with report.md once everything is written)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = [p.ranks for p in points]
    labels = [str(n) for n in ranks]

    def log2_axis(ax: Any) -> None:
        if len(ranks) > 1 and ranks[-1] / ranks[0] >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ranks)
        ax.set_xticklabels(labels)
        ax.minorticks_off()
        ax.set_xlabel("ranks")
        ax.grid(True, alpha=0.3)

    written = []

    def save(fig: Any, name: str) -> None:
        # Beside it, renamed over it with the rest: a full disk part way
        # leaves the earlier plot whole, not a truncated PNG.
        try:
            staged.write(name, lambda temporary: fig.savefig(temporary, dpi=110, format="png"))
        finally:
            plt.close(fig)
        written.append(name)

    def nan(value: float | None) -> float:
        return float("nan") if value is None else value

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ideal = base_point(points)
    if ideal is not None:
        ax.plot(ranks, [nan(p.ideal_tokens_per_s) for p in points], "--", color="#999999",
                label=f"ideal (linear from {ranks_text(ideal.ranks)})")
    # The line joins the world sizes that measured a step.
    measured = [p for p in points if p.tokens_per_s is not None]
    ax.plot([p.ranks for p in measured], [p.tokens_per_s for p in measured], "o-", color=COLORS["compute"],
            label="measured")
    # A world size whose runs measured no step: a cross on the axis, not a point at 0 tokens/s.
    missing = [p.ranks for p in points if p.tokens_per_s is None]
    if missing:
        ax.plot(missing, [0.0] * len(missing), "x", color="#666666", markersize=8, clip_on=False,
                label="not measured (no step)")
    # The isolation ceilings, where the results have them: what each resource alone allows.
    for key, resource, marker in (("compute", "compute", "^"), ("network", "comm_exposed", "s"),
                                  ("storage_read", "data_stall", "D")):
        at = [(p.ranks, number(ceilings_of(p.run).get(key, {}).get("tokens_per_s"))) for p in points]
        at = [(n, t) for n, t in at if t is not None]
        if at:
            ax.plot([n for n, _ in at], [t for _, t in at], marker + ":", color=COLORS[resource], alpha=0.8,
                    markersize=5, label=f"{key.replace('_', ' ')} ceiling")
    for p in points:
        if len(p.used) > 1:
            ax.scatter([p.ranks] * len(p.used), [nan(r.tokens_per_s) for r in p.used], s=10,
                       color=COLORS["compute"], alpha=0.4)
    log2_axis(ax)
    ax.set_ylabel("tokens/s")
    ax.yaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
    if ideal is None:
        ax.set_ylim(0, 1)
        ax.set_yticks([])
    else:
        ax.set_ylim(bottom=0)
    ax.set_title("Throughput against world size")
    ax.legend(loc="upper left")
    fig.tight_layout()
    save(fig, "tokens_per_s.png")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    eff = [p.efficiency if p.efficiency is not None else float("nan") for p in points]
    ax.axhline(1.0, linestyle="--", color="#999999", label="ideal")
    ax.plot([n for n, e in zip(ranks, eff) if not math.isnan(e)], [e for e in eff if not math.isnan(e)], "o-",
            color=COLORS["comm_exposed"], label="measured")
    for n, e in zip(ranks, eff):
        if not math.isnan(e):
            ax.annotate(f"{e:.2f}", (n, e), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    log2_axis(ax)
    finite = [e for e in eff if not math.isnan(e)]
    ax.set_ylim(0, max([1.1] + [e * 1.1 for e in finite]))
    ax.set_ylabel("scaling efficiency")
    ax.set_title("Scaling efficiency = tokens/s ÷ ideal")
    ax.legend(loc="lower left")
    fig.tight_layout()
    save(fig, "scaling_efficiency.png")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    positions = list(range(len(points)))
    bottom = [0.0] * len(points)
    for key, label, _ in CATEGORIES:
        # A share not measured (report.instrument=false) is no bar, not a bar of 0.
        values = [shares(p.run)[key] for p in points]
        at = [i for i, v in enumerate(values) if v is not None]
        ax.bar([positions[i] for i in at], [values[i] for i in at], bottom=[bottom[i] for i in at],
               color=COLORS[key], label=label, width=0.6)
        bottom = [b + (v or 0.0) for b, v in zip(bottom, values)]
    for i, p in enumerate(points):
        if all(v is None for v in shares(p.run).values()):
            ax.text(positions[i], 0.5, "not\nmeasured", ha="center", va="center", fontsize=8, color="#666666")
    ax.set_xlim(-0.6, len(points) - 0.4)
    ax.set_xticks(positions)
    ax.set_xticklabels(labels)
    ax.set_xlabel("ranks")
    ax.set_ylabel("share of step time")
    ax.set_ylim(0, max([1.0] + bottom) * 1.02)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_title("Where the step time goes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    save(fig, "stall_shares.png")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    spreads = [step_spread(p) for p in points]
    data = [[s * 1e3 for s in values] for values, _ in spreads]
    kinds = sorted({kind for values, kind in spreads if values})
    filled = [i for i, d in enumerate(data) if d]
    if filled:
        ax.boxplot([data[i] for i in filled], positions=[positions[i] for i in filled], widths=0.5,
                   showfliers=False, medianprops={"color": COLORS["ckpt_stall"]})
        for i in filled:
            jitter = [positions[i] + 0.18 * ((k * 0.6180339887) % 1.0 - 0.5) for k in range(len(data[i]))]
            ax.scatter(jitter, data[i], s=9, alpha=0.6, color=COLORS["compute"], zorder=3)
    ax.set_xticks(positions)
    ax.set_xticklabels(labels)
    ax.set_xlim(-0.6, len(points) - 0.4)
    ax.set_xlabel("ranks")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("Step-time spread: " + (" / ".join(kinds) if kinds else "no step times"), fontsize=10)
    fig.tight_layout()
    save(fig, "step_time_spread.png")
    return written


# ----------------------------------------------------------------------------- main

# ----------------------------------------------------------------------------- fine-tuning comparison

@dataclass
class FinetuneSide:
    label: str
    run: Run
    gpus: int
    nodes: int
    hours: float          # wall time to process the target tokens
    gpu_hours: float
    memory_bytes: float | None
    checkpoint_bytes: float | None


def human_bytes(value: float | None) -> str:
    if value is None:
        return "—"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def duration(hours: float) -> str:
    if hours >= 48:
        return f"{hours / 24:.1f} days"
    if hours >= 1:
        return f"{hours:.1f} h"
    return f"{hours * 60:.1f} min"


def finetune_side(label: str, run: Run, target_tokens: float, gpus_per_node: int | None) -> FinetuneSide:
    tokens_per_s = run.tokens_per_s  # > 0 or None: load_run checked it
    if tokens_per_s is None:
        failed = [str(c.get("name")) for c in run.failed_checks()]
        raise ReportError(f"{run.path}: the {label} run measured no step (summary.tokens_per_s is null"
                          + (f"; check{'s' if len(failed) > 1 else ''} {', '.join(failed)} failed" if failed else "")
                          + "): no tokens/s to compare")
    hosts = run.data["environment"].get("hosts")
    if gpus_per_node:
        nodes = max(1, math.ceil(run.ranks / gpus_per_node))
    else:
        nodes = len(set(hosts)) if isinstance(hosts, list) and hosts else 1
    hours = target_tokens / tokens_per_s / 3600
    memory = run.summary.get("memory_per_rank")
    memory_bytes = number(memory.get("total_bytes")) if isinstance(memory, dict) else None
    sizes = [number(c.get("bytes")) for c in run.data.get("checkpoints") or [] if isinstance(c, dict)
             and c.get("status") == "committed"]
    sizes = [x for x in sizes if x]
    return FinetuneSide(label, run, run.ranks, nodes, hours, hours * run.ranks, memory_bytes,
                        statistics.median(sizes) if sizes else None)


def times(more: float, less: float) -> str:
    """How many times `less` goes into `more` (>= 1), as the verdict states it:
    two decimals below 1.1x, so that a small difference does not read as 1.0x."""
    r = more / less
    return f"{r:.2f}x" if r < 1.1 else f"{r:.1f}x"


def gpu_hours_text(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


# Within this ratio two times (or two GPU-hour counts) are about the same: the verdict says so rather
# than name a winner by 0.1%.
SAME = 1.005


def verdict(lora: FinetuneSide, full: FinetuneSide, target_tokens: float, lora_fits: bool | None,
            full_fits: bool | None) -> str:
    """One line: which side finishes sooner and which uses fewer GPU-hours (each may be either side, or
    neither where they are about the same), every ratio the winner's, >= 1; first, what does not fit
    in GPU memory by the plan."""
    tokens = si(target_tokens)
    if lora_fits is False and full_fits is False:
        return (f"Neither LoRA nor full fine-tuning fits in GPU memory at this shape and batch by the plan, "
                f"so neither is an option as planned (measured: LoRA {duration(lora.hours)}, full fine-tuning "
                f"{duration(full.hours)} for {tokens} tokens).")
    if lora_fits is False:
        return (f"LoRA does not fit in GPU memory at this shape and batch: full fine-tuning on {full.nodes} "
                f"node(s) is the option that runs ({duration(full.hours)} for {tokens} tokens).")
    if full_fits is False:
        return (f"Full fine-tuning does not fit in GPU memory on {full.gpus} GPUs: LoRA on {lora.nodes} node(s) "
                f"is the option that runs ({duration(lora.hours)} for {tokens} tokens).")
    names = {id(lora): f"LoRA on {lora.nodes} node(s)", id(full): f"full fine-tuning on {full.nodes} node(s)"}

    def name(side: FinetuneSide, first: bool = False) -> str:
        text = names[id(side)]
        return text[0].upper() + text[1:] if first else text

    faster, slower = (lora, full) if lora.hours <= full.hours else (full, lora)
    cheaper, dearer = (lora, full) if lora.gpu_hours <= full.gpu_hours else (full, lora)
    same_time = slower.hours / faster.hours < SAME
    same_cost = dearer.gpu_hours / cheaper.gpu_hours < SAME
    hours = f"{duration(faster.hours)} vs {duration(slower.hours)}"
    gpu_hours = f"{gpu_hours_text(cheaper.gpu_hours)} vs {gpu_hours_text(dearer.gpu_hours)}"
    if same_time and same_cost:
        return (f"LoRA on {lora.nodes} node(s) and full fine-tuning on {full.nodes} node(s) take about the same "
                f"time ({duration(lora.hours)} vs {duration(full.hours)} for {tokens} tokens) and GPU-hours "
                f"({gpu_hours_text(lora.gpu_hours)} vs {gpu_hours_text(full.gpu_hours)}).")
    if same_time:
        return (f"{name(cheaper, True)} takes about as long as {name(dearer)} ({duration(cheaper.hours)} vs "
                f"{duration(dearer.hours)} for {tokens} tokens) and uses "
                f"{times(dearer.gpu_hours, cheaper.gpu_hours)} fewer GPU-hours ({gpu_hours}).")
    if same_cost:
        return (f"{name(faster, True)} finishes {tokens} tokens {times(slower.hours, faster.hours)} sooner "
                f"({hours}) than {name(slower)} for about the same GPU-hours ({gpu_hours_text(faster.gpu_hours)} "
                f"vs {gpu_hours_text(slower.gpu_hours)}).")
    if faster is cheaper:
        if faster is lora and full.nodes > lora.nodes:
            # "The extra nodes" only where full fine-tuning had more of them.
            why = ": the extra nodes do not pay for this model and data"
        else:
            why = f" on {slower.gpus} GPU(s) against {faster.gpus}" if faster.gpus != slower.gpus else ""
        return (f"{name(faster, True)} is both faster ({hours} for {tokens} tokens) and "
                f"{times(dearer.gpu_hours, cheaper.gpu_hours)} cheaper in GPU-hours ({gpu_hours}) than "
                f"{name(slower)}{why}.")
    choice = (": buy the nodes for time to result, not for cost" if faster is full and full.nodes > lora.nodes
              else ": choose by time to result or by cost")
    return (f"{name(faster, True)} finishes {tokens} tokens {times(slower.hours, faster.hours)} sooner ({hours}), "
            f"but {name(cheaper)} uses {times(dearer.gpu_hours, cheaper.gpu_hours)} fewer GPU-hours "
            f"({gpu_hours}){choice}.")


def write_comparison(lora_run: Run, full_run: Run, plans: dict[str, str | None], target_tokens: float,
                     gpus_per_node: int | None, out: OutDir) -> tuple[Path, str, list[str]]:
    """compare.md, its verdict and its warnings; every input is read and
    checked before DIR is made or anything written. `plans`: --plan (for both
    runs), --lora-plan and --full-plan (for one each), where given."""
    if lora_run.config("train").get("mode") != "lora":
        raise ReportError(f"{lora_run.path}: config train.mode is not lora: pass the LoRA run first")
    if full_run.config("train").get("mode") == "lora":
        raise ReportError(f"{full_run.path}: config train.mode is lora: the second run must be full fine-tuning")
    differ = config_difference(lora_run, full_run, ("model.",))
    if differ:
        raise ReportError(f"{lora_run.path} and {full_run.path} train different models ({', '.join(differ[:3])}"
                          + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
                          + "): LoRA against full fine-tuning compares one model")
    warnings = []
    lora = finetune_side("LoRA", lora_run, target_tokens, gpus_per_node)
    full = finetune_side("full fine-tuning", full_run, target_tokens, gpus_per_node)
    lora_plan: dict[str, dict[str, Any]] = {}
    full_plan_rows: dict[str, dict[str, Any]] = {}
    if plans.get("--plan") is not None:
        lora_plan = full_plan_rows = load_plan("--plan", plans["--plan"], lora_run, full_run)
    if plans.get("--lora-plan") is not None:
        lora_plan = load_plan("--lora-plan", plans["--lora-plan"], lora_run, None)
    if plans.get("--full-plan") is not None:
        full_plan_rows = load_plan("--full-plan", plans["--full-plan"], None, full_run)
    planned_full = full_plan_rows.get("full (DDP)")
    planned_zero = full_plan_rows.get("full (ZeRO-1)")
    planned_lora = lora_plan.get("lora")
    zero = full_run.config("comm").get("zero") == 1
    full_plan = planned_zero if zero else planned_full
    lora_fits = planned_lora.get("fits") if planned_lora else None
    full_fits = full_plan.get("fits") if full_plan else None
    line = verdict(lora, full, target_tokens, lora_fits, full_fits)
    # A run that failed a check (ranks that diverged, a loss that was not
    # finite) measured a job that did not train right: its figures stand, but
    # the verdict says so first, and the warnings say what failed.
    failed = [(side, c) for side in (lora, full) for c in side.run.failed_checks()]
    if failed:
        names = "; ".join(f"{side.label}: {c.get('name')}" for side, c in failed)
        line = (f"Not a clean comparison: a run failed a check ({names}), so its figures are from a job that "
                f"did not train right. {line}")
    for side in (lora, full):
        warnings += [f"{side.label} ({side.run.path}): check {c.get('name')} FAILED{failed_detail(c)}"
                     for c in side.run.failed_checks()]
        warnings += [f"{side.label} ({side.run.path}): {w}" for w in side.run.data.get("warnings") or []]

    def row(side: FinetuneSide, planned: dict[str, Any] | None) -> list[str]:
        sh = shares(side.run)
        mfu, vs_gemm = mfu_cells(side.run)
        fits = "—" if planned is None else ("yes" if planned.get("fits") else "NO")
        return [side.label, str(side.nodes), str(side.gpus), si(side.run.tokens_per_s), duration(side.hours),
                f"{side.gpu_hours:.2f}", human_bytes(side.memory_bytes),
                human_bytes(number(planned.get("total_bytes")) if planned else None), fits,
                human_bytes(side.checkpoint_bytes), mfu, vs_gemm] + [pct(sh[key]) for key, _, _ in CATEGORIES]

    lines = ["# LoRA vs full fine-tuning", "", f"**Verdict:** {line}", ""]
    lines += [f"Processing {si(target_tokens)} tokens at each run's measured tokens/s. GPU-hours = wall time × "
              "GPUs. Memory per GPU: the run's own engine plan, and `trainbench plan` for the target GPUs "
              "beside it when given. Checkpoint: the median committed checkpoint of the run.", ""]
    lines += table(["mode", "nodes", "GPUs", "tokens/s", f"time for {si(target_tokens)} tokens", "GPU-hours",
                    "memory/GPU (run)", "memory/GPU (plan)", "fits", "checkpoint", "MFU (datasheet)",
                    "MFU (GEMM ceiling)"] + [f"{label} (%)" for _, label, _ in CATEGORIES],
                   [row(lora, planned_lora), row(full, full_plan)])
    lines += ["", "Bottleneck of each run:", "",
              f"- LoRA: {bottleneck(lora.run)[0]}", f"- full fine-tuning: {bottleneck(full.run)[0]}", ""]
    if warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]
    lines += ["## Inputs", "", f"- LoRA: {lora_run.path}", f"- full fine-tuning: {full_run.path}"]
    for option, label in (("--plan", "plan"), ("--lora-plan", "plan (LoRA)"),
                          ("--full-plan", "plan (full fine-tuning)")):
        if plans.get(option):
            lines.append(f"- {label}: {plans[option]}")
    lines.append("")
    prepare_out(out)
    return write_text(out, "compare.md", markdown_lines(lines)), line, warnings


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise ReportError(message)


@dataclass
class OutDir:
    """Where the report goes, and how an error names it: the --out given, or
    the default (the results' folder), which the user never typed."""
    path: Path
    given: bool

    def __str__(self) -> str:
        return (f"--out {self.path}" if self.given
                else f"the results' folder {self.path} (the default; choose another with --out)")


def default_out(inputs: list[str]) -> OutDir:
    """The results' folder; the current one for a result that is no file in
    a folder (`/dev/stdin`, `<(...)`: /dev or /proc/N/fd is no place for a
    report, and `/dev/stdin` redirected from a file is a file there), and for
    results in unrelated folders, whose only common folder is `/`."""
    def stream(i: str) -> bool:
        folder = os.path.dirname(os.path.abspath(i))
        return (folder in ("/dev", "/dev/fd") or re.fullmatch(r"/proc/[^/]+/fd", folder) is not None
                or not (os.path.isdir(i) or os.path.isfile(i)))
    folders = ["." if stream(i) else i if os.path.isdir(i) else (os.path.dirname(i) or ".") for i in inputs]
    try:
        real = [os.path.realpath(f) for f in folders]
        common = os.path.commonpath(real)
    except ValueError:
        return OutDir(Path.cwd(), False)
    if common == os.sep and any(f != os.sep for f in real):
        return OutDir(Path.cwd(), False)
    return OutDir(Path(common), False)


def refuse_outputs_over_inputs(out: OutDir, names: list[str], inputs: list[str]) -> None:
    """A result given by a name the report writes (or, for a plot not
    drawn, removes) in DIR: it was replaced or deleted, exit 0."""
    for name in names:
        target = out.path / name
        for given in inputs:
            try:
                same = os.path.isfile(given) and target.exists() and os.path.samefile(target, given)
            except OSError:
                same = False
            if same:
                raise ReportError(f"{out}: {name} there is one of the results read ({given}), which the report "
                                  f"would replace: choose another --out")


def prepare_out(out: OutDir) -> None:
    """DIR made (with its parents) if need be: only once every input has been read and checked."""
    try:
        out.path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ReportError(f"{out}: not a folder") from None
    except OSError as e:
        raise write_error(out, "cannot create it", e) from None


def temporary_beside(directory: Path, name: str) -> Path:
    """A new file of its own beside NAME, NAME.tmp.XXXXXX, to write and then
    rename over NAME. NAME.tmp.PID was one name for two report.py of one PID
    (two containers' PID 1 writing one shared folder): each wrote into the
    other's file. Made O_EXCL with open's mode under the umask."""
    for _ in range(100):
        candidate = directory / f"{name}.tmp.{secrets.token_hex(3)}"
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(directory / f"{name}.tmp.*"))


def write_text(out: OutDir, name: str, text: str) -> Path:
    """Written beside (temporary_beside), then renamed over NAME: a full disk
    or a kill part way leaves the earlier report whole, not a truncated one."""
    staged = Staged(out)
    try:
        staged.write_text(name, text)
        staged.commit()
    finally:
        staged.discard_all()
    return out.path / name


class Staged:
    """A report's files, each written into a temporary beside its name and
    renamed in only once all are written: a write the machine refuses part
    way (a full disk, a file size limit) leaves the earlier report whole,
    its report.md and its plots together. (Plots renamed in one by one, and
    the earlier ones removed, before report.md failed, left the earlier
    report.md naming plots that were gone or new.)"""

    def __init__(self, out: OutDir) -> None:
        self.out = out
        self.files: list[tuple[Path, str]] = []

    def write(self, name: str, fill: Callable[[Path], None]) -> None:
        temporary = None
        try:
            temporary = temporary_beside(self.out.path, name)
            fill(temporary)
        except OSError as e:
            discard(temporary)
            raise write_error(self.out, f"cannot write {name}", e) from None
        self.files.append((temporary, name))

    def write_text(self, name: str, text: str) -> None:
        # surrogateescape: a file name that is not UTF-8 is written back as its bytes
        self.write(name, lambda temporary: temporary.write_text(text, encoding="utf-8", errors="surrogateescape"))

    def commit(self) -> None:
        for temporary, name in self.files:
            try:
                os.replace(temporary, self.out.path / name)
            except OSError as e:
                raise write_error(self.out, f"cannot write {name}", e) from None
        self.files = []

    def discard_all(self) -> None:
        for temporary, _ in self.files:
            discard(temporary)
        self.files = []


def discard(temporary: Path | None) -> None:
    """A temporary file removed on the way out of a failed write; a removal
    that fails too (a filesystem gone read-only after an I/O error) must not
    replace the write's error with a traceback. None: none was made."""
    if temporary is None:
        return
    try:
        temporary.unlink(missing_ok=True)
    except OSError:
        pass


def remove_stale_plots(out: OutDir, written: list[str]) -> None:
    """An earlier report's plots this one did not draw (--no-plots, or fewer
    world sizes) would be read as this report's: removed."""
    for name in PLOTS:
        if name not in written:
            try:
                (out.path / name).unlink(missing_ok=True)
            except OSError as e:
                raise write_error(out, f"cannot remove the earlier {name}", e) from None


def one_line(text: str) -> str:
    """An error line with its control characters (a newline in a file name) escaped."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", lambda m: ascii(m.group())[1:-1], text)


def markdown_lines(lines: list[str]) -> str:
    """A report's text, each entry of `lines` one line of it: a newline in a
    file name or a warning split a list item or a table row."""
    return "\n".join(one_line(line) for line in lines)


def main(argv: list[str]) -> int:
    parser = Parser(prog="report.py", description="Markdown report and PNG plots of trainbench runs "
                    "at several world sizes (scripts/scale.sh writes such runs).")
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="result JSON files (trainbench run --out) or folders of them")
    parser.add_argument("--out", metavar="DIR", help="where report.md and the PNGs go (default: the results' folder)")
    parser.add_argument("--no-plots", action="store_true", help="write report.md only (no matplotlib needed)")
    parser.add_argument("--compare", action="store_true",
                        help="RESULTS are a LoRA run then a full fine-tuning run: write compare.md")
    parser.add_argument("--plan", metavar="PLAN.json",
                        help="with --compare: `trainbench plan --json` output for both runs' setup")
    parser.add_argument("--lora-plan", metavar="PLAN.json",
                        help="with --compare: `trainbench plan --json` output for the LoRA run's setup")
    parser.add_argument("--full-plan", metavar="PLAN.json",
                        help="with --compare: `trainbench plan --json` output for the full fine-tuning run's setup")
    parser.add_argument("--target-tokens", type=float, metavar="N",
                        help="with --compare: tokens to process (default 1e9)")
    parser.add_argument("--gpus-per-node", type=int, metavar="N",
                        help="with --compare: nodes = ranks / N (default: the runs' distinct hosts)")
    args = parser.parse_args(argv)
    out = OutDir(Path(input_name(args.out, "--out")), True) if args.out is not None else None

    if not args.compare:
        for option, value in (("--plan", args.plan), ("--lora-plan", args.lora_plan),
                              ("--full-plan", args.full_plan), ("--target-tokens", args.target_tokens),
                              ("--gpus-per-node", args.gpus_per_node)):
            if value is not None:
                raise ReportError(f"{option}: only with --compare")
    if args.compare:
        if len(args.results) != 2:
            raise ReportError("--compare takes two results: the LoRA run, then the full fine-tuning run")
        target_tokens = 1e9 if args.target_tokens is None else args.target_tokens
        if not 1 <= target_tokens <= LARGEST:
            raise ReportError(f"--target-tokens: must be from 1 to {LARGEST:g} (got {target_tokens:g})")
        if args.gpus_per_node is not None and not 1 <= args.gpus_per_node <= MAX_RANKS:
            raise ReportError(f"--gpus-per-node: must be from 1 to {MAX_RANKS} (got {args.gpus_per_node})")
        if args.plan is not None and (args.lora_plan is not None or args.full_plan is not None):
            raise ReportError("--plan is one plan for both runs: with --lora-plan or --full-plan, give each "
                              "side its own instead")
        lora_run, full_run = (load_run(Path(input_name(r, "RESULTS"))) for r in args.results)
        for run in (lora_run, full_run):
            # The sweep leaves such a result out; a comparison of two has
            # nothing to leave out, and gave a verdict from its 2-step job.
            other_job = not_a_training_run(run)
            if other_job:
                raise ReportError(f"{run.path}: {other_job}: compare two `trainbench run` results")
        plans = {"--plan": args.plan, "--lora-plan": args.lora_plan, "--full-plan": args.full_plan}
        out = out or default_out(args.results)
        refuse_outputs_over_inputs(out, ["compare.md"], args.results)
        path, line, warnings = write_comparison(lora_run, full_run, plans, target_tokens, args.gpus_per_node, out)
        for warning in warnings:
            print(f"report.py: warning: {one_line(warning)}", file=sys.stderr)
        print(f"verdict: {line}")
        print(f"report: {path}")
        return 0

    runs, notes = collect(args.results)
    refuse_mixed_workloads(runs)
    points = group(runs)
    out = out or default_out(args.results)
    refuse_outputs_over_inputs(out, ["report.md"] + PLOTS, args.results)
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401  (checked before anything is written)
        except ImportError:
            print("report.py: matplotlib is not installed (scripts/setup.sh installs it; or pass --no-plots)",
                  file=sys.stderr)
            return 3
    prepare_out(out)
    staged = Staged(out)
    try:
        plots = [] if args.no_plots else write_plots(points, out, staged)
        staged.write_text("report.md", markdown_text(points, plots, notes))
        staged.commit()
    finally:
        staged.discard_all()
    report = out.path / "report.md"
    remove_stale_plots(out, plots)
    # Also in report.md's warnings; here because they change which runs the
    # figures are from, or (different configs) what they mean.
    for warning in notes + consistency_warnings(points):
        print(f"report.py: warning: {one_line(warning)}", file=sys.stderr)

    width = max(len(str(p.ranks)) for p in points)
    for p in points:
        eff = "—" if p.efficiency is None else f"{p.efficiency:.3f}"
        tokens = NOT_MEASURED if p.tokens_per_s is None else si(p.tokens_per_s)
        print(f"  {p.ranks:>{width}} ranks  tokens/s {tokens:>9}  ideal {si(p.ideal_tokens_per_s):>9}  "
              f"efficiency {eff}  bottleneck {bottleneck(p.run)[0]}")
    print(f"report: {report}" + (f" and {len(plots)} plots in {out.path}" if plots else ""))
    return 0


if __name__ == "__main__":
    # A reader that stops reading (`| head`) ends it as it ends any filter,
    # after the report is written (its lines are printed last), not with a
    # BrokenPipeError traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # A path prints as its bytes, whatever the locale: a folder's name need
    # not be UTF-8. (No stdout at all, `>&-`: print writes nothing.)
    if sys.stdout is not None:
        sys.stdout.reconfigure(errors="surrogateescape")
    try:
        sys.exit(main(sys.argv[1:]))
    except ReportError as error:
        print(f"report.py: {one_line(str(error))}", file=sys.stderr)
        sys.exit(error.code)
    except MemoryError:
        # The machine's limit (exit 3, as the binary's), not a traceback.
        print("report.py: out of memory reading the results (a ulimit -v, or too little memory for them)",
              file=sys.stderr)
        sys.exit(3)
