"""Seed inputs for the libFuzzer targets in tests/fuzz, one folder per
target: python3 make_seeds.py OUT [TARGET] writes OUT/shard_tokens,
OUT/loader_position and OUT/config (or TARGET's alone). scripts/fuzz.sh starts
its corpus from them; CTest replays them (and tests/fuzz/regressions/) through
each target on every build. The shard seeds need numpy: without it, exit 77
(CTest: skipped), the reason printed."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import struct
import sys
import tarfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def tar_bytes(members: list[tuple[str, bytes]], tar_format: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tar_format) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def npy(array: Any) -> bytes:
    import numpy as np
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def shard_seeds() -> dict[str, bytes]:
    import numpy as np
    tokens = np.arange(1, 9, dtype="<u2")
    plain = tar_bytes([("000.tokens.u16", tokens.tobytes()), ("000.json", b"{}"),
                       ("001.tokens.u16", tokens[::-1].tobytes())])
    gz = tar_bytes([("g.txt", b"gz"), ("g.npy", npy(tokens)), ("g.u16", tokens.tobytes())])
    return {
        "u16.tar": plain,
        "npy.tar": tar_bytes([("a.b/x.input_ids.npy", npy(tokens.astype(">i8"))), ("a.b/x.TXT", b"text")],
                             tarfile.GNU_FORMAT),
        "u32_ustar.tar": tar_bytes([("d/k.u32", np.arange(5, dtype="<u4").tobytes()), ("d/k.u32", b"dup")],
                                   tarfile.USTAR_FORMAT),
        "long_pax.tar": tar_bytes([("l" * 150 + ".txt", b"long name"), ("__meta__.json", b"{}")]),
        "gzip.tar.gz": gzip.compress(gz),
        # Since the first fuzzing run: zlib inflates gzip (CRC checked at each
        # member's end, members concatenated), data after the end marker is
        # told, and libarchive's other filters.
        "two_members.tar.gz": gzip.compress(gz[:1024]) + gzip.compress(gz[1024:]),
        "cut.tar.gz": gzip.compress(gz)[:-6],
        "trailing.tar": plain + b"\x01after the end marker",
        "trailing.tar.gz": gzip.compress(plain + b"\x01after"),
        "bz2.tar.bz2": bz2.compress(plain),
        "xz.tar.xz": lzma.compress(plain),
        "cut_member.tar": plain[:700],
        "raw.npy": npy(np.arange(3, dtype="<u4")),
    }


def position(shard_count: int, rank: int, world: int, readers: list[dict]) -> bytes:
    """A loader position as dataloader/loader_position.cpp writes it."""
    def tokens(values: list[int]) -> bytes:
        return struct.pack("<q", len(values)) + struct.pack(f"<{len(values)}i", *values)
    out = b"TBLOADP1" + struct.pack("<qqqqQq", shard_count, rank, world, len(readers), 0x9E3779B97F4A7C15, 12)
    out += struct.pack("<q", len(readers))
    for r in readers:
        out += struct.pack("<qqqQ", r.get("epoch", 0), r.get("cursor", 0), r.get("into", 0), 7)
        buffer = r.get("buffer", [])
        out += struct.pack("<q", len(buffer)) + b"".join(tokens(s) for s in buffer)
        out += tokens(r.get("window", [])) + tokens(r.get("rest", [])) + struct.pack("<Q", r.get("eos", 0))
    return out


def position_seeds() -> dict[str, bytes]:
    return {
        "fresh.bin": position(4, 0, 1, [{}]),
        "two_readers.bin": position(8, 1, 2, [{"epoch": 1, "cursor": 1, "into": 3, "buffer": [[1, 2, 3], [4]],
                                               "window": [5, 6], "rest": [7], "eos": 1},
                                              {"cursor": 0, "into": 0}]),
        "truncated.bin": position(4, 0, 1, [{"buffer": [[1, 2]]}])[:-5],
    }


def config_seeds() -> dict[str, bytes]:
    seeds = {f"preset_{path.stem}.yaml": path.read_bytes() for path in sorted((REPO / "configs").glob("*.yaml"))}
    seeds["override.yaml"] = b"model:\n  d_model: 64\n\x00train.lr=0.5"
    seeds["override_list.yaml"] = b"train:\n  steps: 3\n\x00model={d_model: 64, n_heads: [1]}"
    seeds["anchors.yaml"] = b"base: &b {lr: 0.1}\ntrain: *b\n---\nmore: 1\n"
    seeds["nested.yaml"] = b"model: " + b"[" * 64 + b"]" * 64 + b"\n"
    return seeds


SEEDS = {"shard_tokens": shard_seeds, "loader_position": position_seeds, "config": config_seeds}


def main(out: str, only: str | None = None) -> int:
    for folder, make in SEEDS.items():
        if only not in (None, folder):
            continue
        try:
            seeds = make()
        except ImportError as e:
            print(f"make_seeds.py: {folder}: {e.name} is not installed (scripts/setup.sh installs it)")
            return 77
        target = Path(out) / folder
        target.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (target / name).write_bytes(data)
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in SEEDS):
        print(f"usage: make_seeds.py OUT [{'|'.join(SEEDS)}]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
