#!/usr/bin/env python3
"""Tokens/s of Python webdataset iterating the same shards as `trainbench
bench io`: the baseline a PyTorch user's input pipeline starts from.

Each process iterates its share of the shards (split as webdataset's
split_by_worker does) with wds.WebDataset, reads every member (as trainbench
does) and decodes the token field with numpy. One process, then --workers
processes, as a DataLoader with num_workers would run it.

Usage: webdataset_read_bench.py SHARD [SHARD ...] [--field u16] [--workers 2] [--json OUT]

Bad input is one line on stderr, `webdataset_read_bench.py: ...`, exit 2:
a shard that is missing, a folder or not a tar file, a --field its samples
lack, --workers below 1, a --json whose folder does not exist or that
holds a file other than this script's figures (checked before any shard is
read). Exit 3: the machine's fault (a read error of the
storage, a full disk for --json, webdataset or numpy not installed).
"""
import argparse
import errno
import json
import multiprocessing
import os
import re
import sys
import tarfile
import time

ME = "webdataset_read_bench.py"

try:
    import numpy as np
    import webdataset as wds
except ImportError as missing:
    # A traceback said as much; the packages are the project's (scripts/setup.sh).
    print(f"{ME}: {missing.name} is not installed (scripts/setup.sh installs it: scripts/requirements.txt)",
          file=sys.stderr)
    sys.exit(3)

DTYPES = {"u16": "<u2", "u32": "<u4"}
# What a read or write can meet that no other argument would mend: exit 3
# (as report.py).
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EMFILE, errno.ENFILE, errno.ENOMEM}


class BenchError(Exception):
    """One line on stderr; exit 2 (the command's or a shard's fault) unless
    `code` says 3 (the machine's). Raised in a worker too: pool.map hands it
    to the parent, code included (__reduce__)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return BenchError, (str(self), self.code)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, not argparse's usage and message
        raise BenchError(message)


def worker_count(text: str) -> int:
    # 0 and -1 ran one process and said nothing of the --workers asked for.
    if not re.fullmatch(r"[0-9]{1,4}", text) or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"'{text}': expected a whole number from 1 to 1024")
    return int(text)


def failed_shard(error: Exception, urls: list[str]) -> str:
    """The shard an error of webdataset's names (it adds the url to the
    exception's arguments; an OSError has its filename), else all of `urls`."""
    for arg in (getattr(error, "filename", None), *reversed(error.args)):
        if isinstance(arg, str) and arg in urls:
            return arg
    return urls[0] if len(urls) == 1 else f"one of {', '.join(urls)}"


def read_shards(args: tuple[list[str], str]) -> tuple[int, int, int]:
    """(samples, tokens, bytes) of every sample in `urls`."""
    urls, field = args
    # More workers than shards: the extra ones read nothing, as a DataLoader's
    # would (wds.WebDataset([]) is an IndexError).
    if not urls:
        return 0, 0, 0
    dtype = DTYPES[field.rsplit(".", 1)[-1]]
    samples = tokens = nbytes = 0
    try:
        # shardshuffle=False: read order, as the benchmark reads every shard once;
        # empty_check=False: a worker with few shards is not an error here.
        for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
            samples += 1
            for key, value in sample.items():
                if isinstance(value, bytes):
                    nbytes += len(value)
            if field not in sample:
                members = ", ".join(sorted(k for k in sample if not k.startswith("__"))) or "none"
                raise BenchError(f"--field {field}: sample '{sample.get('__key__')}' of {sample.get('__url__')} "
                                 f"has no .{field} member (its members: {members})")
            tokens += np.frombuffer(sample[field], dtype=dtype).size
    except tarfile.TarError as e:
        # A shard cut short, or not a tar past its first header.
        raise BenchError(f"{failed_shard(e, urls)}: not a readable tar file ({e.args[0] if e.args else e})") from None
    except OSError as e:
        raise BenchError(f"{failed_shard(e, urls)}: cannot read it ({e.strerror or e})",
                         3 if e.errno in MACHINE_ERRNOS else 2) from None
    return samples, tokens, nbytes


def measure(urls: list[str], field: str, workers: int) -> dict:
    begin = time.perf_counter()
    if workers == 1:
        results = [read_shards((urls, field))]
    else:
        shares = [(urls[w::workers], field) for w in range(workers)]
        with multiprocessing.Pool(workers) as pool:
            results = pool.map(read_shards, shares)
    seconds = time.perf_counter() - begin
    samples, tokens, nbytes = (sum(r[i] for r in results) for i in range(3))
    return {"workers": workers, "samples": samples, "tokens": tokens, "member_bytes": nbytes,
            "seconds": seconds, "tokens_per_s": tokens / seconds, "samples_per_s": samples / seconds}


def check_shard(shard: str) -> None:
    """A local shard exists, is a file and is a tar, before anything is timed
    (each was a traceback from inside webdataset). A URL webdataset opens
    itself (pipe:..., http://...) is left to it."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", shard) and not os.path.lexists(shard):
        return
    if not os.path.exists(shard):
        raise BenchError(f"{shard}: no such shard")
    if os.path.isdir(shard):
        raise BenchError(f"{shard}: a folder, not a shard; give its shards (e.g. {shard.rstrip('/')}/*.tar)")
    try:
        is_tar = tarfile.is_tarfile(shard)
    except OSError as e:
        raise BenchError(f"{shard}: cannot read it ({e.strerror or e})", 3 if e.errno in MACHINE_ERRNOS else 2) from None
    if not is_tar:
        raise BenchError(f"{shard}: not a tar file")


def check_json_out(path: str) -> None:
    """--json can be written: said before the shards are read, not after the
    figures (a missing folder was a traceback once they were printed)."""
    if path == "":
        raise BenchError("--json: the path is empty")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise BenchError(f"--json {path}: no folder {folder}")
    if os.path.isdir(path):
        raise BenchError(f"--json {path}: a folder; give a file name")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise BenchError(f"--json {path}: cannot write it (permission denied)")
    if os.path.exists(path) and not is_our_figures(path):
        # It replaced any file (a notes file given by mistake), as trainbench's --out never does.
        raise BenchError(f"--json {path}: holds something other than this script's figures; "
                         "give a new path (an earlier figures file is replaced)")


def is_our_figures(path: str) -> bool:
    """Whether `path` is a figures file this script wrote (a JSON object with
    its webdataset_version and runs)."""
    # A FIFO or a device is no figures file (and a FIFO's read would block).
    if not os.path.isfile(path) or os.path.getsize(path) > 16 << 20:
        return False
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "webdataset_version" in data and isinstance(data.get("runs"), list)


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", nargs="+")
    parser.add_argument("--field", default="u16", choices=sorted(DTYPES))
    parser.add_argument("--workers", type=worker_count, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    for shard in args.shards:
        check_shard(shard)
    if args.json is not None:
        check_json_out(args.json)
    rows = [measure(args.shards, args.field, 1)]
    if args.workers > 1:
        rows.append(measure(args.shards, args.field, args.workers))
    for row in rows:
        print(f"webdataset {row['workers']} process(es): {row['tokens_per_s'] / 1e6:.2f} M tokens/s, "
              f"{row['samples_per_s']:.0f} samples/s, {row['seconds']:.2f} s")
    if args.json is not None:
        try:
            with open(args.json, "w") as out:
                json.dump({"webdataset_version": wds.__version__, "runs": rows}, out, indent=2)
        except OSError as e:
            # The figures are printed above: only the file is lost.
            raise BenchError(f"--json {args.json}: cannot write it ({e.strerror or e}); the figures are above",
                             3 if e.errno in MACHINE_ERRNOS else 2) from None
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"{ME}: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(error.code)
