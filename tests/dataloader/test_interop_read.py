"""Shards written by Python's webdataset and tarfile read the same in our reader.

Each shard is read twice: by webdataset's own iteration (tar_file_iterator +
group_by_keys) and by our TarReader + SampleReader through the dump_samples
tool (path in $DUMP_SAMPLES). Keys, extensions, sizes, FNV-1a hashes of the
bytes and sample offsets must agree sample by sample. Our one documented
difference from webdataset, skipping names whose last component starts with
"__" (e.g. __meta__.json), is applied to webdataset's side with its own
select_files hook.
"""

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

import numpy as np
import webdataset as wds
from webdataset import tariterators

DUMP_SAMPLES = os.environ.get("DUMP_SAMPLES", "")


def fnv1a64(data):
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def dump(*args):
    """Runs dump_samples; returns (exit status, JSON lines, stderr lines)."""
    run = subprocess.run([DUMP_SAMPLES, *args], capture_output=True, text=True, check=False)
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    return run.returncode, lines, run.stderr.splitlines()


def kept_by_us(name):
    return not name.rsplit("/", 1)[-1].startswith("__")


# What group_by_keys adds to a sample besides its members.
WEBDATASET_FIELDS = {"__key__", "__url__", "__local_path__"}


def webdataset_samples(path):
    """What webdataset yields for a plain or gzip tar, in our dump's shape,
    with each sample's offset: the tar header offset of its first member."""
    with open(path, "rb") as stream:
        files = list(tariterators.tar_file_iterator(stream, select_files=kept_by_us))
    samples = tariterators.group_by_keys({**f, "__url__": path} for f in files)
    expected = []
    for sample in samples:
        members = {ext: {"size": len(data), "fnv1a64": fnv1a64(data)}
                   for ext, data in sample.items() if ext not in WEBDATASET_FIELDS}
        expected.append({"key": sample["__key__"], "members": members})
    # The same members again through tarfile, for their offsets.
    offsets, previous_key = [], None
    with tarfile.open(path, "r|*") as tar:
        for info in tar:
            key, _ = tariterators.base_plus_ext(info.name)
            if not info.isreg() or not kept_by_us(info.name) or key is None:
                continue
            if tariterators.re.match(r"__[^/]*__($|/)", info.name):
                continue
            if key != previous_key:
                offsets.append(info.offset)
            previous_key = key
    assert len(offsets) == len(expected), (offsets, expected)
    for sample, offset in zip(expected, offsets):
        sample["offset"] = offset
    return expected


def add_member(tar, name, data=b"", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mtime = 1700000000
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


LONG_DIR = "d" * 120 + ".v2"  # with a dot, and long: pax or GNU longname needed
TRICKY_MEMBERS = [
    ("000.tokens.u16", b"\x01\x00\x02\x00"),
    ("000.json", b'{"a": 1}'),
    ("a.b/c.d.u16", b"ab"),  # key a.b/c, extension d.u16
    ("a.b/c.TXT", b"upper"),  # compared lower-cased
    ("dir", None),  # a directory entry
    ("dir/link.txt", "symlink"),
    ("dir/hard.txt", "hardlink"),
    ("README", b"no dot: skipped"),
    ("__key__", b"meta"),
    ("__meta__.json", b"{}"),
    ("__meta__/x.txt", b"webdataset's skip_meta"),
    (LONG_DIR + "/" + "k" * 90 + ".txt", b"long name"),
    ("dir/.hidden", b"key dir/"),
    ("empty.bin", b""),
    ("block.bin", bytes(range(256)) * 2),  # exactly one 512-byte block
    ("big.bin", np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()),
    ("ünïcode/ké.txt", "utf-8 name".encode()),
    ("Key.Upper/Name.Tokens.U16", b"\x05\x00"),
    ("last.txt", b"the end"),
]


def write_tricky_tar(path, tar_format, mode="w", members=TRICKY_MEMBERS):
    with tarfile.open(path, mode, format=tar_format) as tar:
        for name, data in members:
            if data is None:
                add_member(tar, name, kind=tarfile.DIRTYPE)
            elif data == "symlink":
                add_member(tar, name, kind=tarfile.SYMTYPE, link="../000.json")
            elif data == "hardlink":
                add_member(tar, name, kind=tarfile.LNKTYPE, link="000.json")
            else:
                add_member(tar, name, data)


def old_gnu_sparse_header(name, real_size, blocks, stored=None):
    """The header of an old-GNU sparse member (type 'S', what GNU tar
    --sparse writes for up to 4 data blocks): the blocks' (offset, size)
    map in the header, the member's stored size the blocks' sum (unless
    `stored` says otherwise: a damaged header)."""
    def octal(value, width):
        return f"{value:0{width - 1}o}".encode() + b"\0"
    header = bytearray(512)
    header[0:len(name)] = name.encode()
    header[100:108] = octal(0o644, 8)
    header[108:116] = octal(0, 8)
    header[116:124] = octal(0, 8)
    header[124:136] = octal(sum(len(data) for _, data in blocks) if stored is None else stored, 12)
    header[136:148] = octal(1700000000, 12)
    header[156:157] = b"S"
    header[257:265] = b"ustar  \0"
    for i, (offset, data) in enumerate(blocks):
        header[386 + 24 * i:398 + 24 * i] = octal(offset, 12)
        header[398 + 24 * i:410 + 24 * i] = octal(len(data), 12)
    header[483:495] = octal(real_size, 12)
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}".encode() + b"\0 "
    return bytes(header)


SPARSE_BLOCKS = [(0, b"a" * 512), (4096, b"b" * 512)]  # of 8192 bytes: a trailing hole


def write_sparse_shard(path, short_key=None, sparse_field="payload.bin", blocks=None):
    """Samples 000 and 001: tokens.u16 [1, 2, 3] and an 8192-byte sparse
    member (sparse_field) of SPARSE_BLOCKS; short_key's map lists 1024
    bytes where its member stores 512."""
    tokens = np.array([1, 2, 3], dtype="<u2").tobytes()
    with open(path, "wb") as f:
        for key in ("000", "001"):
            info = tarfile.TarInfo(f"{key}.tokens.u16")
            info.size, info.mtime = len(tokens), 1700000000
            f.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
            f.write(tokens.ljust(512, b"\0"))
            short = key == short_key
            mapped = blocks or SPARSE_BLOCKS
            f.write(old_gnu_sparse_header(f"{key}.{sparse_field}", 8192, mapped, stored=512 if short else None))
            f.write(b"a" * 512 if short else b"".join(data for _, data in mapped))
        f.write(b"\0" * 1024)


@unittest.skipUnless(DUMP_SAMPLES, "DUMP_SAMPLES (the dump_samples tool) is not set")
class InteropRead(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="trainbench_interop_")
        self.addCleanup(shutil.rmtree, self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_reads_like_webdataset(self, shard, reference=None):
        status, ours, errors = dump(shard)
        self.assertEqual(status, 0, errors)
        expected = webdataset_samples(reference or shard)
        self.assertGreater(len(expected), 0)
        self.assertEqual(len(ours), len(expected), [s["key"] for s in ours])
        for mine, theirs in zip(ours, expected):
            self.assertEqual(mine, theirs)
        return ours

    def test_tarfile_formats_plain_gzip_zstd(self):
        for tar_format, label in [(tarfile.PAX_FORMAT, "pax"), (tarfile.GNU_FORMAT, "gnu")]:
            with self.subTest(format=label):
                plain = self.path(f"{label}.tar")
                write_tricky_tar(plain, tar_format)
                ours = self.assert_reads_like_webdataset(plain)
                keys = [s["key"] for s in ours]
                self.assertIn("a.b/c", keys)
                self.assertIn("dir/", keys)
                self.assertIn(LONG_DIR + "/" + "k" * 90, keys)
                self.assertIn("Key.Upper/Name", keys)  # keys keep their case
                self.assertNotIn("__meta__", keys)
                self.assertNotIn("README", keys)
                sample = ours[keys.index("a.b/c")]
                self.assertEqual(sorted(sample["members"]), ["d.u16", "txt"])

                gzipped = self.path(f"{label}.tar.gz")
                write_tricky_tar(gzipped, tar_format, mode="w:gz")
                self.assert_reads_like_webdataset(gzipped)

                subprocess.run(["zstd", "-q", "-f", plain, "-o", plain + ".zst"], check=True)
                self.assert_reads_like_webdataset(plain + ".zst", reference=plain)

    def test_ustar_with_prefix_field(self):
        # ustar stores names up to 255 bytes by splitting them into prefix and name.
        members = [("p" * 140 + "/s.x/" + "n" * 80 + ".txt", b"split name"), ("b.txt", b"b")]
        path = self.path("ustar.tar")
        write_tricky_tar(path, tarfile.USTAR_FORMAT, members=members)
        ours = self.assert_reads_like_webdataset(path)
        self.assertEqual(ours[0]["key"], "p" * 140 + "/s.x/" + "n" * 80)

    def test_odd_names_split_like_webdataset(self):
        # Random names over the characters that matter to base_plus_ext and
        # skip_meta; a separator sample keeps each in a sample of its own.
        rng = np.random.default_rng(7)
        alphabet = ["a", "B", ".", "/", "_", "\n"]
        members = []
        for index in range(1000):
            name = "".join(rng.choice(alphabet, size=rng.integers(1, 9)))
            if name.endswith("/"):
                continue  # a directory, whatever its type flag says
            members += [(f"sep{index}.x", b"s"), (name, name.encode())]
        path = self.path("odd.tar")
        write_tricky_tar(path, tarfile.PAX_FORMAT, members=members)
        self.assert_reads_like_webdataset(path)

    def test_members_match_tarfile(self):
        for tar_format in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
            path = self.path("members.tar")
            write_tricky_tar(path, tar_format)
            status, ours, errors = dump("--members", path)
            self.assertEqual(status, 0, errors)
            with tarfile.open(path) as tar:
                theirs = tar.getmembers()
            self.assertEqual(len(ours), len(theirs))
            for mine, info in zip(ours, theirs):
                # tarfile drops a directory's trailing '/'; the name is stored with it.
                name = mine["name"].rstrip("/") if info.isdir() else mine["name"]
                self.assertEqual(name, info.name)
                self.assertEqual(mine["offset"], info.offset, info.name)
                self.assertEqual(mine["regular"], info.isreg(), info.name)
                self.assertEqual(mine["size"], info.size if info.isreg() else 0, info.name)

    def test_webdataset_tarwriter_and_shardwriter(self):
        def samples(count):
            for index in range(count):
                yield {
                    "__key__": f"doc.v1/{index:05d}",
                    "tokens.u16": np.arange(index, index + 7, dtype="<u2").tobytes(),
                    "txt": f"sample {index} " * index,
                    "json": {"index": index},
                }

        single = self.path("writer.tar")
        with wds.TarWriter(single) as writer:
            for sample in samples(20):
                writer.write(sample)
        ours = self.assert_reads_like_webdataset(single)
        self.assertEqual(ours[3]["key"], "doc.v1/00003")
        self.assertEqual(sorted(ours[3]["members"]), ["json", "tokens.u16", "txt"])

        gzipped = self.path("writer.tar.gz")
        with wds.TarWriter(gzipped, compress=True) as writer:
            for sample in samples(5):
                writer.write(sample)
        self.assert_reads_like_webdataset(gzipped)

        pattern = self.path("shard-%06d.tar")
        with wds.ShardWriter(pattern, maxcount=8, verbose=0) as writer:
            for sample in samples(20):
                writer.write(sample)
        shards = sorted(p for p in os.listdir(self.dir) if p.startswith("shard-"))
        self.assertEqual(len(shards), 3)
        total = sum(len(self.assert_reads_like_webdataset(self.path(s))) for s in shards)
        self.assertEqual(total, 20)

    def test_repeated_extension_spoils_one_sample_and_the_next_reads(self):
        path = self.path("dup.tar")
        members = [("a.txt", b"a"), ("b.txt", b"1"), ("b.TXT", b"2"), ("c.txt", b"c")]
        write_tricky_tar(path, tarfile.PAX_FORMAT, members=members)
        status, ours, errors = dump(path)
        self.assertEqual(status, 2)
        self.assertEqual([s["key"] for s in ours], ["a", "c"])
        self.assertEqual(errors, [f"{path}: byte 2048: sample b has a second .txt member (b.TXT)"])

    def test_truncated_and_foreign_files_fail_with_one_line(self):
        whole = self.path("whole.tar")
        write_tricky_tar(whole, tarfile.PAX_FORMAT)
        with open(whole, "rb") as f:
            data = f.read()
        cut = self.path("cut.tar")
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2])
        status, ours, errors = dump(cut)
        self.assertEqual(status, 2)
        self.assertGreater(len(ours), 0)  # what came before the cut was read
        self.assertEqual(len(errors), 1)
        self.assertRegex(errors[0], rf"^{cut}: byte \d+: truncated tar archive: ")

        zipped = shutil.make_archive(self.path("archive"), "zip", self.dir, "whole.tar")
        status, _, errors = dump(zipped)
        self.assertEqual((status, errors), (2, [f"{zipped}: not a tar archive"]))

    def test_a_sparse_member_reads_whole(self):
        # GNU tar --sparse stores a file's data blocks only; the loader's
        # read-through of a member it does not decode took the blocks' sum
        # for a member ending early, and called the sample corrupt.
        path = self.path("sparse.tar")
        write_sparse_shard(path)
        with tarfile.open(path) as tar:  # a sparse member as Python reads it
            info = tar.getmember("000.payload.bin")
            self.assertTrue(info.issparse())
            payload = tar.extractfile(info).read()
        self.assertEqual(payload, b"a" * 512 + b"\0" * 3584 + b"b" * 512 + b"\0" * 3584)
        self.assert_reads_like_webdataset(path)
        status, ours, errors = dump("--tokens", "tokens.u16", "100", path)
        self.assertEqual((status, errors), (0, []))
        self.assertEqual(ours, [{"key": k, "tokens": [1, 2, 3]} for k in ("000", "001")])
        # Cut inside the second sample's sparse data: still an error, not a whole sample.
        with open(path, "rb") as f:
            data = f.read()
        cut = self.path("sparse-cut.tar")
        with open(cut, "wb") as f:
            f.write(data[:2560 + 1024 + 512 + 700])  # sample 000, then 001: tokens, the sparse header, 700 of 1024
        status, ours, errors = dump("--tokens", "tokens.u16", "100", cut)
        self.assertEqual(status, 2)
        self.assertEqual(ours, [{"key": "000", "tokens": [1, 2, 3]}])
        self.assertEqual(len(errors), 1, errors)
        self.assertRegex(errors[0], rf"^{cut}: byte \d+: truncated tar archive")
        # A map listing more data than the member stores (512 of its 1024
        # bytes): the shard is damaged there, as where any member ends early
        # (libarchive ends that map without an error).
        damaged = self.path("sparse-short.tar")
        write_sparse_shard(damaged, short_key="000")
        status, ours, errors = dump("--tokens", "tokens.u16", "100", damaged)
        self.assertEqual((status, ours), (2, []))
        self.assertEqual(errors, [f"{damaged}: byte 2048: 000.payload.bin (header at byte 1024) ends after 512 of "
                                  "its 1024 bytes"])

    def test_a_sparse_member_decodes_whole_or_fails_where_its_map_runs_short(self):
        # The decoded member itself sparse: its holes read as zeros, as in
        # Python's tarfile; a map listing more than the member stores was
        # read with zeros in place of the missing data, a silent wrong sample.
        path = self.path("sparse-tokens.tar")
        write_sparse_shard(path, sparse_field="ids.u16")
        a, b = 0x6161, 0x6262  # the blocks' bytes b"a" and b"b", as little-endian u16
        expected = [a] * 256 + [0] * 1792 + [b] * 256 + [0] * 1792
        status, ours, errors = dump("--tokens", "ids.u16", "100000", path)
        self.assertEqual((status, errors), (0, []))
        self.assertEqual(ours, [{"key": k, "tokens": expected} for k in ("000", "001")])
        damaged = self.path("sparse-tokens-short.tar")
        write_sparse_shard(damaged, short_key="001", sparse_field="ids.u16")
        status, ours, errors = dump("--tokens", "ids.u16", "100000", damaged)
        self.assertEqual((status, ours), (2, [{"key": "000", "tokens": expected}]))
        self.assertEqual(len(errors), 1, errors)
        self.assertRegex(errors[0], rf"^{damaged}: byte \d+: 001.ids.u16 \(header at byte \d+\) ends after 512 of "
                                    "its 1024 bytes$")
        # A map whose blocks go back (the second before the first): the last
        # block written won, a sample no other reader assembles; damage.
        backwards = self.path("sparse-tokens-backwards.tar")
        write_sparse_shard(backwards, sparse_field="ids.u16", blocks=list(reversed(SPARSE_BLOCKS)))
        status, ours, errors = dump("--tokens", "ids.u16", "100000", backwards)
        self.assertEqual((status, ours), (2, []))
        self.assertEqual(len(errors), 1, errors)
        self.assertRegex(errors[0], rf"^{backwards}: byte \d+: 000.ids.u16 \(header at byte \d+\) has a sparse block "
                                    "at byte 0 before the end of the one before it \(byte 4608\)")

    def test_numpy_token_arrays_decode(self):
        arrays = {
            "a": np.array([1, 2, 50000], dtype="<u2"),
            "b": np.array([7, 65535], dtype=">u2"),
            "c": np.array([3, 100000], dtype="<u4"),
            "d": np.array([0, 2**31 - 1], dtype=">i4"),
            "e": np.array([5, 6], dtype="<i8"),
            "f": np.array([], dtype="<u2"),
        }
        members = []
        for version in [(1, 0), (2, 0), (3, 0)]:
            for key, array in arrays.items():
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, array, version=version)
                members.append((f"v{version[0]}/{key}.input_ids.npy", buffer.getvalue()))
        path = self.path("npy.tar")
        write_tricky_tar(path, tarfile.PAX_FORMAT, members=members)
        status, ours, errors = dump("--tokens", "input_ids.npy", str(2**31), path)
        self.assertEqual(status, 0, errors)
        expected = [{"key": f"v{v}/{key}", "tokens": array.tolist()}
                    for v in (1, 2, 3) for key, array in arrays.items()]
        self.assertEqual(ours, expected)

        status, ours, errors = dump("--tokens", "input_ids.npy", "60000", path)
        self.assertEqual(status, 2)
        self.assertIn(f"{path}: byte 1024: v1/b: token 65535 >= vocab 60000 at index 1", errors)


if __name__ == "__main__":
    unittest.main()
