#!/usr/bin/env python3
"""The text of scripts/gpu_check.sh's table rows, from the result files its
runs write: `gpu_check_rows.py KIND FILE [ARGS...]` prints one line.

In a file of their own (they were one-liners inside the script) so that CI,
which has no GPU, checks them against result files of the current schema
(tests/scripts/test_gpu_check_rows.py): a key renamed in the result would
otherwise show as a traceback in the one table a lent GPU produces.
"""
from __future__ import annotations

import inspect
import json
import math
import sys
from typing import Any, Callable


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def preset(path: str) -> str:
    """A GPU preset's run: throughput, MFU, step time, attention, memory.
    "host" is the step's other share (step_s - compute_s, no comm or I/O at
    one rank): the GPU's idle time between steps, where the host's work
    (the batch's checks and token groups, the loss and norm read back)
    is not overlapped with the device's."""
    r = load(path)
    s = r["summary"]
    c = s["gemm_ceiling_shape"]
    t = s["step_s"]
    return ("{:,.0f} tokens/s, MFU {} of {}, {} of the in-run ceiling ({:.0f} TFLOP/s at {}x{}x{}), "
            "step {:.1f} ms (p10 {:.1f}, p90 {:.1f}), data stall {:.1f}%, host {}, attention {} ({} backward), "
            "memory/GPU {:.1f} GiB").format(
                s["tokens_per_s"], percent(s["mfu"]), peak_named(s), percent(s["mfu_vs_gemm_ceiling"]),
                (s["gemm_ceiling_flops_per_s"] or 0) / 1e12, c["m"], c["n"], c["k"], 1e3 * (t["median"] or 0),
                1e3 * (t["p10"] or 0), 1e3 * (t["p90"] or 0), 100 * s["stall_shares"]["data_stall"],
                host_share(s),
                r["environment"]["attention"]["kernel"],
                "deterministic" if r["config"]["train"]["deterministic"] else "fastest",
                s["memory_per_rank"]["total_bytes"] / 2**30)


def host_share(s: dict[str, Any]) -> str:
    """The step's other share as a percentage, n/a where it was not measured."""
    other = s["stall_shares"]["other"]
    return "n/a" if other is None else "{:.1f}%".format(100 * other)


def gemm(path: str) -> str:
    """Which GEMM algorithms the run chose and what timing them saved."""
    g = load(path)["environment"]["gemm"]
    return g["algorithms"] + ": " + g["detail"]


def ops(path: str) -> str:
    """report.op_times: the step's compute by kind of op, largest first."""
    s = load(path)["summary"]
    times = s["op_seconds_per_step"] or {}
    total = sum(times.values())
    if total <= 0:
        return "no op times in the result"
    return "{:.1f} ms per step: ".format(1e3 * total) + ", ".join(
        "{} {:.1f} ms ({:.0f}%)".format(k, 1e3 * v, 100 * v / total)
        for k, v in sorted(times.items(), key=lambda kv: -kv[1]) if v > 0)


def variant(path: str) -> str:
    """A preset run with one setting changed (train.attention=gemm)."""
    s = load(path)["summary"]
    return "{:,.0f} tokens/s, MFU {:.1f}% of 989, memory/GPU {:.1f} GiB".format(
        s["tokens_per_s"], 100 * (s["mfu"] or 0), s["memory_per_rank"]["total_bytes"] / 2**30)


def deterministic(path: str) -> str:
    """A preset run with train.deterministic=true, and the attention it ran."""
    r = load(path)
    return variant(path) + ", attention {}".format(r["environment"]["attention"]["detail"])


def lora(path: str) -> str:
    """The LoRA run: throughput and that the loss moved."""
    s = load(path)["summary"]
    return variant(path) + ", loss {:.3f} -> {:.3f}".format(s["loss_first"], s["loss_last"])


# How far the loss of one micro-batch trained over and over must fall for the
# engine to count as learning it. A correct step memorises the batch: tiny
# on the cpu engine falls 6.25 -> 3.99 in 30 steps; any fall at all would
# take consistent gradients, and the bar is set low so that only a step
# that does not learn (wrong or zero gradients, a stuck optimizer) fails.
LEARNS_MIN_FALL = 0.1


def learns(path: str) -> str:
    """One micro-batch trained over and over: its loss must fall. The
    verdict's words "did not fall" mark a failed row for gpu_check.sh."""
    r = load(path)
    s = r["summary"]
    first, last = s["loss_first"], s["loss_last"]
    steps = len(r["steps"])
    if first is None or last is None or not math.isfinite(first) or not math.isfinite(last):
        verdict = "the loss did not fall: it is not finite"
    elif first - last >= LEARNS_MIN_FALL:
        verdict = "learns"
    else:
        verdict = "the loss did not fall by {} or more".format(LEARNS_MIN_FALL)
    return "loss {} -> {} over {} steps of one repeated micro-batch (ln vocab {:.3f}): {}".format(
        loss_text(first), loss_text(last), steps, math.log(r["config"]["model"]["vocab"]), verdict)


def loss_text(loss: float | None) -> str:
    return "null" if loss is None else "{:.3f}".format(loss)


def checks_word(r: dict[str, Any]) -> str:
    return "pass" if all(c["passed"] for c in r["checks"]) else "FAIL"


def nccl(path: str) -> str:
    """A 1-rank run through NCCL: the gradient all-reduce's time and the checks."""
    r = load(path)
    s = r["summary"]
    return "{:,.0f} tokens/s, comm_s median {:.3g} ms, exposed {:.3g} ms, NCCL {}, checks {}".format(
        s["tokens_per_s"], 1e3 * s["comm_s"]["median"], 1e3 * s["comm_exposed_s"]["median"],
        r["environment"]["nccl"], checks_word(r))


def bench_comm(path: str) -> str:
    """bench comm: where the buffers were, the gradient step (on the trainer's
    path: the buckets' all-reduces, or ZeRO-1's reduce-scatter and
    all-gather) and the largest all-reduce."""
    r = load(path)
    seconds = r["gradient_step_s"]
    trainers = "bucketed" if "bucketed" in seconds else "comm"
    what = ("{} buckets".format(len(r["bucket_bytes"])) if r["gradient_step_collectives"] == ["all_reduce"]
            else "ZeRO-1: " + " + ".join(r["gradient_step_collectives"]))
    largest = max((c for c in r["collectives"] if c["collective"] == "all_reduce"), key=lambda c: c["bytes"])
    return ("{} on {} buffers, {} rank(s): gradient step {:.1f} us ({}); all-reduce {:.0f} MiB "
            "{:.1f} us, busbw {:.1f} GB/s; check {}").format(
        r["backend"], r.get("buffers", "host"), r["ranks"], 1e6 * seconds[trainers], what, largest["bytes"] / 2**20,
        1e6 * largest["time_s"], largest["busbw_gbs"], r["check"])


def zero1(path: str) -> str:
    """ZeRO-1 over several GPUs: the AdamW state each rank kept."""
    r = load(path)
    s = r["summary"]
    return "{:,.0f} tokens/s, AdamW state {:.0f} of {:.0f} MiB per rank, checks {}".format(
        s["tokens_per_s"], s["optimizer_bytes_per_rank"] / 2**20, s["optimizer_bytes_unsharded"] / 2**20,
        checks_word(r))


def burnin(path: str, status: str) -> str:
    """The burn-in's verdict, steps, golden checks and GPU health (NVML)."""
    r = load(path)
    b = r["burnin"]
    g = b["gpus"][0]
    h = g["figures"].get("gpu")
    why = (g["failures"] + b["job"]["failures"])[:1]
    if h:
        health = ("NVML {:.0f} samples, max {:.0f} C, max {:.0f} W, SM min {:.0f} MHz, ECC uncorrected +{:.0f}, "
                  "HW slowdown in {:.0f}").format(h["samples"], h["max_temperature_c"], h["max_power_w"],
                                                  h["min_sm_clock_mhz"], max(h["ecc_uncorrected_delta"], 0),
                                                  h["hardware_slowdown_samples"])
    else:
        health = "NVML not sampled: " + b["gpu_health"]["why_not"]
    return "{} (exit {}): {} steps, {:,.0f} tokens/s, golden {} checks; {}{}".format(
        b["verdict"], status, b["steps"], r["summary"]["tokens_per_s"], b["golden"]["checks"], health,
        "; " + why[0] if why else "")


def instrument(path: str) -> str:
    """bench instrument: what the per-step timing costs."""
    c = load(path)["instrumentation_cost"]
    return "overhead {:+.2f}% median of {} pairs (95% {:+.2f} .. {:+.2f}%), untimed step {:.2f} ms".format(
        100 * c["overhead_median"], c["pairs"], 100 * c["overhead_ci95"][0], 100 * c["overhead_ci95"][1],
        1e3 * c["untimed_step_s"])


def percent(fraction: float | None) -> str:
    """A share as "47.9%", or "n/a" where the result has none (an unknown
    GPU's peak: null, which read as "0.0%" and a target not met)."""
    return "n/a" if fraction is None else "{:.1f}%".format(100 * fraction)


def peak_named(summary: dict[str, Any]) -> str:
    """The datasheet peak the run's MFU is of, in TFLOP/s (989 on an H100 or
    H200 SXM; other cards have their own), or "no known peak"."""
    peak = summary.get("datasheet_peak_flops_per_s")
    return "no known peak" if not peak else "{:.0f}".format(peak / 1e12)


def not_comparable(result: dict[str, Any], torch_run: dict[str, Any]) -> str:
    """Why a PyTorch run's tokens/s cannot be set against this trainbench
    run's ("" when it can): another model shape, batch or number of measured
    steps, or a loss that went non-finite (its figure is not a training
    step's). The ratio is the issue's headline: a mismatched pair must not
    print one."""
    config = torch_run.get("config")
    if not isinstance(config, dict):
        return "the PyTorch record has no config to check it against"
    ours_model, ours_train = result["config"]["model"], result["config"]["train"]
    for key, value in (config.get("model") or {}).items():
        if key in ours_model and ours_model[key] != value:
            return "model.{} differs (trainbench {}, PyTorch {})".format(key, ours_model[key], value)
    for key in ("micro_batch", "grad_accum"):
        if (config.get("train") or {}).get(key) != ours_train[key]:
            return "train.{} differs (trainbench {}, PyTorch {})".format(
                key, ours_train[key], (config.get("train") or {}).get(key))
    summary, ranks = result["summary"], result["environment"]["ranks"]
    if torch_run.get("tokens_per_step", 0) * ranks != summary["global_tokens_per_step"]:
        return "tokens per step differ (trainbench {} over {} rank(s), PyTorch {})".format(
            summary["global_tokens_per_step"], ranks, torch_run.get("tokens_per_step"))
    if torch_run.get("measured_steps") != summary["measured_steps"]:
        return "measured steps differ (trainbench {}, PyTorch {})".format(
            summary["measured_steps"], torch_run.get("measured_steps"))
    if torch_run.get("loss_finite") is not True:
        return "PyTorch's loss was not finite"
    return ""


def ratio(path: str, torch_jsonl: str, preset_name: str) -> str:
    """trainbench against PyTorch eager and compiled, and the issue's targets."""
    result = load(path)
    ours = result["summary"]
    torch: dict[str, dict[str, Any]] = {}
    with open(torch_jsonl, encoding="utf-8") as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue  # a warning, or a line cut short when the baseline was stopped
            if isinstance(d, dict) and "mode" in d:
                torch[d["mode"]] = d
    parts = []
    for mode, target in (("eager", 1.2), ("compile", 1.0)):
        d = torch.get(mode, {})
        why_not = not_comparable(result, d) if d.get("tokens_per_s") else ""
        if why_not:
            parts.append("{}: not compared: {}".format(mode, why_not))
        elif d.get("tokens_per_s"):
            value = ours["tokens_per_s"] / d["tokens_per_s"]
            parts.append("{:.2f}x {} (target >= {:.1f}x: {})".format(value, mode, target,
                                                                      "met" if value >= target else "not met"))
        else:
            parts.append("{}: {}".format(mode, d.get("error", "no figure")))
    mfu = ours.get("mfu")
    if preset_name == "h200-llama8b-4l":  # the MFU target is on this preset
        parts.append("MFU {} (target >= 55%: {})".format(
            percent(mfu), "not measured" if mfu is None else "met" if mfu >= 0.55 else "not met"))
    return ", ".join(parts)


ROWS: dict[str, Callable[..., str]] = {
    "preset": preset, "gemm": gemm, "ops": ops, "variant": variant, "deterministic": deterministic,
    "lora": lora, "learns": learns, "nccl": nccl, "bench_comm": bench_comm, "zero1": zero1, "burnin": burnin, "instrument": instrument, "ratio": ratio,
}


def usage() -> str:
    return "usage: gpu_check_rows.py " + " | ".join(
        name + " " + " ".join(p.upper() for p in inspect.signature(row).parameters) for name, row in ROWS.items())


def main(argv: list[str]) -> int:
    row = ROWS.get(argv[0]) if argv else None
    try:
        if row is None:
            raise TypeError("no such row")
        inspect.signature(row).bind(*argv[1:])
    except TypeError:
        # The script's own mistake, not a result file's: said as such.
        print(usage(), file=sys.stderr)
        return 2
    try:
        print(row(*argv[1:]))
    except (OSError, ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as e:
        # One line in the table, not a traceback: the files stay in the logs.
        print("no row from {} ({}: {})".format(" ".join(argv[1:]), type(e).__name__, e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
