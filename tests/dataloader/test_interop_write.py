#!/usr/bin/env python3
"""Shards written by `trainbench shards synth` and `shards pack` read the same
in Python's tarfile and in webdataset 1.0.2: the same samples, keys,
extensions and bytes; for pack, exactly the files of the source tree.

CTest passes the binary in TRAINBENCH; by hand:

    TRAINBENCH=build/trainbench python3 -m unittest tests/dataloader/test_interop_write.py -v
"""

from __future__ import annotations

import gc
import io
import os
import subprocess
import tarfile
import tempfile
import unittest
import warnings
from pathlib import Path

import numpy as np
import webdataset as wds

REPO = Path(__file__).resolve().parents[2]
TRAINBENCH = os.environ.get("TRAINBENCH") or str(REPO / "build" / "trainbench")


def trainbench(*args: str) -> dict[str, str]:
    """Runs the binary, which must succeed; returns its summary (name -> first word)."""
    done = subprocess.run([TRAINBENCH, *args], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"trainbench {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if len(line.split()) > 1}


def webdataset_samples(urls: list[str]) -> list[dict]:
    """Samples as webdataset yields them, without its own bookkeeping entries."""
    samples = []
    with warnings.catch_warnings():
        # webdataset 1.0.2 leaves its shard files to the garbage collector.
        warnings.simplefilter("ignore", ResourceWarning)
        for sample in wds.WebDataset(urls, shardshuffle=False):
            samples.append({k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")})
        gc.collect()
    return samples


def tarfile_samples(urls: list[str]) -> list[dict]:
    """The same grouping done by hand over Python's tarfile (names as stored)."""
    samples: list[dict] = []
    for url in urls:
        with tarfile.open(url) as tar:
            for info in tar:
                directory, _, base = info.name.rpartition("/")
                stem, _, extension = base.partition(".")
                key = f"{directory}/{stem}" if directory else stem
                if not samples or samples[-1]["__key__"] != key or samples[-1]["__url__"] != url:
                    samples.append({"__key__": key, "__url__": url, "__info__": []})
                samples[-1][extension] = tar.extractfile(info).read()
                samples[-1]["__info__"].append(info)
    return samples


class SynthTests(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def synth(self, *args: str) -> tuple[dict[str, str], list[str]]:
        out = self.dir / "shards"
        summary = trainbench("shards", "synth", "--out", str(out), *args)
        return summary, sorted(str(p) for p in out.glob("*.tar"))

    def test_u16_and_payload_read_the_same_in_webdataset_and_tarfile(self) -> None:
        summary, urls = self.synth("--count", "3", "--size", "200K", "--tokens", "200:100",
                                   "--payload-bytes", "3K:1K", "--seed", "5")
        self.assertEqual(len(urls), 3)
        ours = webdataset_samples(urls)
        by_hand = tarfile_samples(urls)
        self.assertEqual(len(ours), int(summary["samples"]))
        self.assertEqual([s["__key__"] for s in ours], [f"{i:09d}" for i in range(len(ours))])
        self.assertEqual([s["__key__"] for s in by_hand], [s["__key__"] for s in ours])
        tokens = 0
        for sample, raw in zip(ours, by_hand):
            self.assertEqual(set(sample), {"__key__", "u16", "payload.bin"})
            self.assertEqual(sample["u16"], raw["u16"])
            self.assertEqual(sample["payload.bin"], raw["payload.bin"])
            self.assertTrue(2048 <= len(sample["payload.bin"]) <= 4096)
            ids = np.frombuffer(sample["u16"], dtype="<u2")
            self.assertTrue(100 <= len(ids) <= 300)
            self.assertLess(int(ids.max()), 50257)
            tokens += len(ids)
            for info in raw["__info__"]:
                self.assertTrue(info.isreg())
                self.assertEqual(info.mode, 0o644)
                self.assertEqual(info.mtime, by_hand[0]["__info__"][0].mtime)
        self.assertEqual(tokens, int(summary["tokens"]))
        for url in urls:
            self.assertLessEqual(os.path.getsize(url), 200 * 1024)
        self.assertEqual(sum(os.path.getsize(u) for u in urls), int(summary["bytes"]))

    def test_npy_tokens_load_with_numpy(self) -> None:
        for vocab, dtype in (("1000", np.uint16), ("100000", np.uint32)):
            # The second pass writes over the first's shard: its dtype proves it did.
            _, urls = self.synth("--count", "1", "--samples", "8", "--field", "npy", "--vocab", vocab,
                                 "--overwrite")
            samples = webdataset_samples(urls)
            self.assertEqual(len(samples), 8)  # none would pass the loop below
            for sample in samples:
                ids = np.load(io.BytesIO(sample["npy"]), allow_pickle=False)
                self.assertEqual(ids.dtype, dtype)
                self.assertEqual(ids.ndim, 1)
                self.assertLess(int(ids.max()), int(vocab))

    def test_txt_tokens_are_printable_ascii(self) -> None:
        _, urls = self.synth("--count", "2", "--samples", "5", "--field", "txt", "--tokens", "64")
        samples = webdataset_samples(urls)
        self.assertEqual(len(samples), 10)
        for sample in samples:
            text = sample["txt"].decode("ascii")
            self.assertEqual(len(text), 64)
            self.assertTrue(text.isprintable())


class PackTests(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self._tmp.name)
        self.tree = self.dir / "tree"
        self.files: dict[str, bytes] = {}

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def add(self, relative: str, data: bytes) -> None:
        path = self.tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files[relative] = data

    def test_pack_holds_exactly_the_tree_as_webdataset_samples(self) -> None:
        rng = np.random.default_rng(3)
        long_dir = "d" * 120
        long_stem = "n" * 150
        self.add("cats/0001.jpg", rng.bytes(5000))
        self.add("cats/0001.json", b'{"label": 1}')
        self.add("cats/0001.seg.png", rng.bytes(700))
        self.add("cats/0002.jpg", rng.bytes(3000))
        self.add("cats/0002.json", b"")
        self.add("v1.2/clip.mp4", rng.bytes(20000))
        self.add(f"{long_dir}/{long_stem}.txt", b"a long name needs a pax header")
        self.add("gr\u00fc\u00dfe/\u65e5\u672c.txt", "unicode names".encode())
        self.add("top.cls", b"7")
        latin1 = os.fsdecode(b"caf\xe9")  # not UTF-8: the tar holds the name's bytes
        self.add(f"{latin1}.txt", b"bytes of a Latin-1 name")
        summary = trainbench("shards", "pack", str(self.tree), "--out", str(self.dir / "out"),
                             "--max-count", "2")
        urls = sorted(str(p) for p in (self.dir / "out").glob("shard-*.tar"))
        self.assertEqual(len(urls), 4)  # 7 samples, 2 per shard
        self.assertEqual(int(summary["samples"]), 7)
        self.assertEqual(int(summary["files"]), len(self.files))

        ours = webdataset_samples(urls)
        by_hand = tarfile_samples(urls)
        self.assertEqual([s["__key__"] for s in ours], [s["__key__"] for s in by_hand])
        self.assertEqual(sorted(s["__key__"] for s in ours),
                         sorted({"cats/0001", "cats/0002", "v1.2/clip",
                                 f"{long_dir}/{long_stem}", "gr\u00fc\u00dfe/\u65e5\u672c", "top", latin1}))
        seen: dict[str, bytes] = {}
        for sample, raw in zip(ours, by_hand):
            for extension, data in sample.items():
                if extension == "__key__":
                    continue
                self.assertEqual(data, raw[extension])
                seen[f"{sample['__key__']}.{extension}"] = data
        self.assertEqual(seen, self.files)

        verify = trainbench("shards", "verify", str(self.dir / "out"))
        self.assertEqual(verify["errors"], "0")
        self.assertEqual(verify["samples"], summary["samples"])

    def test_pack_splits_by_size(self) -> None:
        for i in range(10):
            self.add(f"s{i:02d}.bin", bytes([i]) * 40000)
        trainbench("shards", "pack", str(self.tree), "--out", str(self.dir / "out" / "big-%03d.tar"),
                   "--max-size", "100K")
        urls = sorted(str(p) for p in (self.dir / "out").glob("big-*.tar"))
        self.assertEqual(len(urls), 5)  # two 40 KB samples fit in 100 KiB, three do not
        for url in urls:
            self.assertLessEqual(os.path.getsize(url), 100 * 1024)
        samples = webdataset_samples(urls)
        self.assertEqual([s["__key__"] for s in samples], [f"s{i:02d}" for i in range(10)])
        self.assertEqual([s["bin"] for s in samples], [bytes([i]) * 40000 for i in range(10)])


if __name__ == "__main__":
    unittest.main()
