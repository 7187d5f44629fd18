#!/usr/bin/env python3
"""Tokens/s of Python webdataset iterating the same shards as `trainbench
bench io`: the baseline a PyTorch user's input pipeline starts from.

Each process iterates its share of the shards (split as webdataset's
split_by_worker does) with wds.WebDataset, reads every member (as trainbench
does) and decodes the token field with numpy. One process, then --workers
processes, as a DataLoader with num_workers would run it.

Usage: webdataset_read_bench.py SHARD [SHARD ...] [--field u16] [--workers 2] [--json OUT]
"""
import argparse
import json
import multiprocessing
import sys
import time

import numpy as np
import webdataset as wds

DTYPES = {"u16": "<u2", "u32": "<u4"}


def read_shards(args: tuple[list[str], str]) -> tuple[int, int, int]:
    """(samples, tokens, bytes) of every sample in `urls`."""
    urls, field = args
    dtype = DTYPES[field.rsplit(".", 1)[-1]]
    samples = tokens = nbytes = 0
    # shardshuffle=False: read order, as the benchmark reads every shard once;
    # empty_check=False: a worker with few shards is not an error here.
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        samples += 1
        for key, value in sample.items():
            if isinstance(value, bytes):
                nbytes += len(value)
        tokens += np.frombuffer(sample[field], dtype=dtype).size
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", nargs="+")
    parser.add_argument("--field", default="u16", choices=sorted(DTYPES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    rows = [measure(args.shards, args.field, 1)]
    if args.workers > 1:
        rows.append(measure(args.shards, args.field, args.workers))
    for row in rows:
        print(f"webdataset {row['workers']} process(es): {row['tokens_per_s'] / 1e6:.2f} M tokens/s, "
              f"{row['samples_per_s']:.0f} samples/s, {row['seconds']:.2f} s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"webdataset_version": wds.__version__, "runs": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
