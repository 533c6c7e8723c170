"""The C++ SDK's sharded tensor checkpoints (include/elasticrun/checkpoint.hpp,
docs/checkpoint-format.md) through libtorch tensors: saved at one world
size, loaded at others with each rank reading just its rows, saved again
there and loaded back at the first size bit for bit; corruption reported
with the file's name; a save SIGKILLed at any point leaves the previous
checkpoint loadable; retention.

`ckpt_tool` (test/tools/ckpt_tool.cpp) saves known tensors, running the W
ranks as threads joined by a barrier, prints what each rank of another
world size loads, and saves what each rank of another size loaded
(resave). It links libtorch, so it lives in the plain libtorch build;
scripts/test.sh builds it and exports $CPP_CKPT_TOOL. Unset, these tests
skip, except under CI, where a missing tool is a broken build.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import optional_binary

TOOL_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def ckpt_tool() -> Path:
    return optional_binary("CPP_CKPT_TOOL", "scripts/test.sh builds ckpt_tool against libtorch",
                           "the C++ checkpoint format")


# --- what ckpt_tool saves at step n (its header comment is the other copy)

def expected(name: str, n: int, scale: int = 1) -> tuple[list[int], list[float]]:
    """Global shape and row-major values of tensor `name` at step n."""
    if name == "weight":
        return [10 * scale, 3], [n * 1000 + i for i in range(30 * scale)]
    if name == "ids":
        return [7], [n + i * i for i in range(7)]
    if name == "half":
        return [5, 2], [n + i for i in range(10)]
    if name == "lr":
        return [], [n + 0.5]
    assert name == "table"
    return [4, 2, 3], [n + i for i in range(24)]


SHARDED = ("weight", "ids", "half")
REPLICATED = ("lr", "table")


def even_rows(rows: int, rank: int, world: int) -> tuple[int, int]:
    base, extra = divmod(rows, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def run(tool: Path, *args: object, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if check:
        assert proc.returncode == 0, f"{args}: rc {proc.returncode}\n{proc.stderr}"
    return proc


def save(tool: Path, root: Path, step: int, world: int, **flags: object) -> None:
    args = ["save", "--root", root, "--step", step, "--world", world]
    for key, value in flags.items():
        args += [f"--{key.replace('_', '-')}", value]
    run(tool, *args)


def load(tool: Path, root: Path, world: int) -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in run(tool, "load", "--root", root, "--world", world).stdout.splitlines()]
    return lines[0], lines[1:]


def check_loaded(parts: list[dict], step: int, world: int, scale: int = 1) -> None:
    """Every rank of `world` got its even share of each sharded tensor and
    all of each replicated one, with the values of step `step`."""
    assert sorted({(p["rank"], p["name"]) for p in parts}) == sorted(
        (r, n) for r in range(world) for n in SHARDED + REPLICATED)
    for p in parts:
        shape, values = expected(p["name"], step, scale)
        if p["name"] in REPLICATED:
            assert p["shape"] == shape and p["values"] == values, p["name"]
            continue
        begin, end = even_rows(shape[0], p["rank"], world)
        row = len(values) // shape[0]
        assert p["rows"] == [begin, end], p
        assert p["shape"] == [end - begin, *shape[1:]], p
        assert p["values"] == values[begin * row:end * row], (p["rank"], p["name"])


def step_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step_"))


# --- resharding

@pytest.mark.parametrize("saved_at,loaded_at", [(2, (3, 1)), (4, (1, 2, 3, 5))])
def test_a_checkpoint_saved_at_one_world_size_loads_at_others_each_rank_reading_its_rows(
    ckpt_tool, tmp_path, saved_at, loaded_at
):
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 7, saved_at, extra='{"epoch": 2, "position": 640}')
    for world in loaded_at:
        head, parts = load(ckpt_tool, root, world)
        assert head == {"step": 7, "saved_world_size": saved_at,
                        "extra": {"epoch": 2, "position": 640}}
        check_loaded(parts, 7, world)


def records(step_dir: Path) -> dict[tuple[int, str], dict]:
    """Every record of every shard file, with its bytes, by rank and name."""
    out = {}
    for meta_file in sorted(step_dir.glob("shard_*.json")):
        meta = json.loads(meta_file.read_text())
        data = (step_dir / meta["data"]).read_bytes()
        for t in meta["tensors"]:
            out[(int(meta_file.stem.split("_")[1]), t["name"])] = {
                "dtype": t["dtype"], "shape": t["shape"], "rows": t["rows"],
                "bytes": data[t["offset"]:t["offset"] + t["bytes"]]}
    return out


def whole_tensors(step_dir: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """Each tensor's dtype, global shape and bytes, its records stitched in
    row order, however the ranks that saved it split it."""
    parts: dict[str, list[dict]] = {}
    for (_, name), record in records(step_dir).items():
        parts.setdefault(name, []).append(record)
    out = {}
    for name, rs in parts.items():
        rs.sort(key=lambda r: r["rows"])
        assert [r["rows"][0] for r in rs[1:]] == [r["rows"][1] for r in rs[:-1]], name
        out[name] = (rs[0]["dtype"], rs[0]["shape"], b"".join(r["bytes"] for r in rs))
    return out


@pytest.mark.parametrize("world", (1, 2, 3, 5))
def test_a_checkpoint_loaded_and_saved_again_at_another_size_loads_back_at_four_bit_for_bit(
    ckpt_tool, tmp_path, world
):
    extra = {"epoch": 2, "position": 640}
    original = tmp_path / "at4"
    save(ckpt_tool, original, 7, 4, extra=json.dumps(extra))
    there = tmp_path / f"at{world}"
    run(ckpt_tool, "resave", "--root", original, "--to", there, "--world", world)
    head, parts = load(ckpt_tool, there, world)
    assert head == {"step": 7, "saved_world_size": world, "extra": extra}
    check_loaded(parts, 7, world)
    back = tmp_path / "back"
    run(ckpt_tool, "resave", "--root", there, "--to", back, "--world", 4)
    head, parts = load(ckpt_tool, back, 4)
    assert head == {"step": 7, "saved_world_size": 4, "extra": extra}
    check_loaded(parts, 7, 4)

    step = "step_000000007"
    assert whole_tensors(original / step) == whole_tensors(there / step)
    # Back at 4, each rank holds what it held at first, byte for byte.
    assert records(back / step) == records(original / step)


def test_every_rank_writes_a_shard_and_replicated_tensors_are_written_once(ckpt_tool, tmp_path):
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 1, 2)
    assert (root / "latest").read_text() == "step_000000001\n"
    step = root / "step_000000001"
    assert sorted(p.name for p in step.iterdir()) == [
        "checkpoint.json", "shard_00000.bin", "shard_00000.json", "shard_00001.bin", "shard_00001.json"]
    names = [{t["name"] for t in json.loads((step / f"shard_0000{r}.json").read_text())["tensors"]}
             for r in (0, 1)]
    assert names == [set(SHARDED + REPLICATED), set(SHARDED)]


def crc32c(data: bytes) -> int:
    """CRC32C as docs/checkpoint-format.md defines it, bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_the_files_are_laid_out_as_the_format_document_says(ckpt_tool, tmp_path):
    assert crc32c(b"123456789") == 0xE3069283
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 3, 2, extra='{"seed": 9}')
    step = root / "step_000000003"
    manifest = json.loads((step / "checkpoint.json").read_text())
    assert manifest == {"format": "elasticrun-tensor-checkpoint", "version": 1, "step": 3,
                        "world_size": 2, "extra": {"seed": 9}}
    formats = {"float32": "f", "int64": "q", "float64": "d", "int32": "i"}
    for rank in (0, 1):
        meta = json.loads((step / f"shard_{rank:05d}.json").read_text())
        data = (step / meta["data"]).read_bytes()
        offset = 0
        for t in meta["tensors"]:
            # Records follow each other with no padding, each with its CRC32C.
            assert t["offset"] == offset
            chunk = data[offset:offset + t["bytes"]]
            offset += t["bytes"]
            assert crc32c(chunk) == t["crc32c"], t["name"]
            shape, values = expected(t["name"], 3)
            assert t["shape"] == shape
            if t["dtype"] in formats:  # row-major, little-endian
                row = len(values) // (shape[0] if shape else 1)
                begin, end = t["rows"]
                got = struct.unpack(f"<{len(chunk) // t['element_size']}{formats[t['dtype']]}", chunk)
                assert list(got) == values[begin * row:end * row], t["name"]
        assert offset == len(data)


# --- corruption

def record(step_dir: Path, rank: int, name: str) -> dict:
    meta = json.loads((step_dir / f"shard_{rank:05d}.json").read_text())
    return next(t for t in meta["tensors"] if t["name"] == name)


def test_a_flipped_byte_in_a_shard_fails_the_load_naming_the_file(ckpt_tool, tmp_path):
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 1, 2)
    data = root / "step_000000001" / "shard_00001.bin"
    where = record(data.parent, 1, "weight")
    raw = bytearray(data.read_bytes())
    raw[where["offset"] + 5] ^= 0x01
    data.write_bytes(bytes(raw))

    for args in (["load", "--root", root, "--world", "1"], ["verify", "--root", root]):
        proc = run(ckpt_tool, *args, check=False)
        assert proc.returncode == 1, proc.stderr
        assert str(data) in proc.stderr and "CRC32C" in proc.stderr, proc.stderr


def test_a_truncated_shard_fails_the_load_naming_the_file(ckpt_tool, tmp_path):
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 1, 2)
    data = root / "step_000000001" / "shard_00000.bin"
    data.write_bytes(data.read_bytes()[:-3])
    proc = run(ckpt_tool, "load", "--root", root, "--world", "3", check=False)
    assert proc.returncode == 1 and str(data) in proc.stderr, proc.stderr


# --- crash safety

@pytest.mark.parametrize("barrier,survivor", [(1, 1), (2, 1), (3, 2)],
                         ids=["before-any-shard", "shards-written-not-published", "published"])
def test_a_save_killed_at_a_barrier_leaves_a_checkpoint_that_loads(
    ckpt_tool, tmp_path, barrier, survivor
):
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 1, 2)
    proc = run(ckpt_tool, "save", "--root", root, "--step", 2, "--world", 2,
               "--kill-at-barrier", barrier, check=False)
    assert proc.returncode == -9, proc.stderr
    head, parts = load(ckpt_tool, root, 3)
    assert head["step"] == survivor
    check_loaded(parts, survivor, 3)
    # The next save cleans up after the dead one.
    save(ckpt_tool, root, 3, 2)
    assert not [p for p in root.iterdir() if p.name.endswith(".partial")]
    assert load(ckpt_tool, root, 1)[0]["step"] == 3


def test_saves_killed_at_random_moments_never_leave_a_checkpoint_that_loads_but_is_wrong(
    ckpt_tool, tmp_path
):
    root = tmp_path / "ckpt"
    scale = 100_000  # a few MB, so that kills land inside the writes too
    save(ckpt_tool, root, 1, 3, scale=scale)
    started = time.monotonic()
    save(ckpt_tool, root, 2, 3, scale=scale)
    duration = time.monotonic() - started
    rng = random.Random(5)
    published = 2
    for step in range(3, 9):
        proc = subprocess.Popen([str(ckpt_tool), "save", "--root", str(root), "--step", str(step),
                                 "--world", "3", "--scale", str(scale)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0, duration))
        proc.kill()
        proc.wait(TOOL_TIMEOUT_S)
        head, parts = load(ckpt_tool, root, 2)
        assert head["step"] in (published, step)
        published = head["step"]
        check_loaded(parts, published, 2, scale)
        run(ckpt_tool, "verify", "--root", root)


# --- publication and retention

def test_only_the_newest_k_checkpoints_are_kept(ckpt_tool, tmp_path):
    root = tmp_path / "ckpt"
    for step in range(1, 6):
        save(ckpt_tool, root, step, 2, keep=2)
    assert step_dirs(root) == ["step_000000004", "step_000000005"]
    assert (root / "latest").read_text() == "step_000000005\n"


def test_saving_a_step_again_replaces_it_whole(ckpt_tool, tmp_path):
    root = tmp_path / "ckpt"
    save(ckpt_tool, root, 4, 2, extra='{"try": 1}')
    save(ckpt_tool, root, 4, 3, extra='{"try": 2}')
    head, parts = load(ckpt_tool, root, 2)
    assert head == {"step": 4, "saved_world_size": 3, "extra": {"try": 2}}
    check_loaded(parts, 4, 2)
    assert step_dirs(root) == ["step_000000004"]
