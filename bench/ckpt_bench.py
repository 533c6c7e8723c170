"""Checkpoint save and resharding load: the C++ format vs DCP, and the disk.

Writes the "checkpoint" section of docs/benchmarks.md. From the repository
root, after a release build:

    cmake --preset release && cmake --build --preset release --target ckpt_probe elasticctl
    OMP_NUM_THREADS=1 .venv/bin/python bench/ckpt_bench.py

The state: float32 tensors shaped like a small transformer (an embedding
and an output matrix, --layers blocks of attention and MLP matrices and
norm vectors; the hidden size is odd and chosen so that the whole comes to
--size-mib), every tensor row-sharded. Each run saves it from --save-ranks
processes and loads it back into --load-ranks processes, each of which asks
for its own new row slice, so the load reshards. One process per rank.

- ours: bench/ckpt_probe (include/elasticrun/checkpoint.hpp): Checkpointer
  ::save (shards and metadata written and fsynced, the directory renamed,
  `latest` replaced, three barriers through an `elasticctl store`), then
  latest(), Reader and read_rows(). Rows split by even_rows().
- DCP: torch.distributed.checkpoint.save / load of DTensors with Shard(0) on
  a CPU device mesh, gloo on 127.0.0.1, FileSystemWriter's defaults
  (sync_files=True: each file fsynced; one file per rank; one writer
  thread). Rows split as DTensor splits them (torch.chunk: ceil(rows/N)).
- disk: the same volume with the same parallelism, without a format:
  write() and fsync of one file per saving rank, pread() of contiguous
  ranges by the loading ranks (ckpt_probe disk-write / disk-read).

Save is timed from a start barrier until the last rank returns (for ours
once `latest` names the checkpoint); load from a start barrier until the
last rank holds its slices. Before each load the files are evicted from the
page cache (fdatasync, posix_fadvise DONTNEED, checked with fincore): that
"cold" load reads the disk; a second load right after it ("warm") reads
the page cache and shows the format's own CPU cost. After every load each
rank checks every element it got against the generator and the bench fails
if one differs; the sums of the loaded values must be equal for ours and
DCP (the same state). Throughput is the state's size over the wall time;
figures are medians of --runs runs, the three sides in rotating order.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_sections import cpu_model, source_state, write_section  # noqa: E402
from store_process import StoreProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GB = 1e9

# One DCP rank; argv: mode (save|load), spec file, checkpoint directory.
# The values are the probe's (bench/ckpt_probe.cpp, value()).
DCP_RANK = r"""
import json, sys, time
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

mode, spec_path, ckpt_dir = sys.argv[1:4]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
specs = []
for line in open(spec_path):
    if line.split():
        name, *dims = line.split()
        specs.append((name, [int(d) for d in dims]))

def my_rows(rows):  # what Shard(0) gives this rank: chunks of ceil(rows / world)
    size = -(-rows // world)
    begin = min(rank * size, rows)
    return begin, min(begin + size, rows)

def expected(t, cols, begin, end):  # as int64; exact in float32
    e = torch.arange(begin * cols, end * cols, dtype=torch.int64)
    return e.mul_(2654435761).add_(t * 40503).remainder_(16777213)

state, locals_, slices = {}, [], []
for t, (name, shape) in enumerate(specs):
    cols = shape[1] if len(shape) > 1 else 1
    begin, end = my_rows(shape[0])
    if mode == "save":
        local = expected(t, cols, begin, end).to(torch.float32)
    else:
        local = torch.empty((end - begin) * cols, dtype=torch.float32)
    local = local.view([end - begin] + shape[1:])
    stride = (cols, 1) if len(shape) > 1 else (1,)
    state[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                     shape=torch.Size(shape), stride=stride)
    locals_.append(local)
    slices.append((t, cols, begin, end))
nbytes = sum(x.numel() * 4 for x in locals_)

def check():
    total = 0
    for local, (t, cols, begin, end) in zip(locals_, slices):
        want = expected(t, cols, begin, end)
        if not torch.equal(local.reshape(-1), want.to(torch.float32)):
            bad = (local.reshape(-1) != want.to(torch.float32)).nonzero()[0].item()
            raise SystemExit(f"rank {rank}: {specs[t][0]} element {begin * cols + bad}: "
                             f"loaded {local.reshape(-1)[bad].item()}, saved {want[bad].item()}")
        total += int(want.sum())
    return total

out = {"rank": rank, "bytes": nbytes}
if mode == "save":
    dist.barrier()
    out["start"] = time.monotonic_ns()
    dcp.save(state, checkpoint_id=ckpt_dir)
    out["end"] = time.monotonic_ns()
else:
    for key in ("", "warm_"):  # cold (the bench evicted the files), then warm
        for local in locals_:
            local.fill_(float("nan"))
        dist.barrier()
        out[key + "start"] = time.monotonic_ns()
        dcp.load(state, checkpoint_id=ckpt_dir)
        out[key + "end"] = time.monotonic_ns()
        out["sum"] = check()
print(json.dumps(out), flush=True)
dist.destroy_process_group()
"""


class BenchError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_spec(size_bytes: int, layers: int) -> tuple[list[tuple[str, list[int]]], int]:
    """Tensor shapes of a small transformer whose float32 state is about
    size_bytes, and its hidden size (odd, so that no split is even)."""

    def shapes(h: int) -> list[tuple[str, list[int]]]:
        vocab, ffn = 8 * h + 7, (8 * h // 3) | 1
        out = [("embed", [vocab, h])]
        for i in range(layers):
            p = f"layers.{i}."
            out += [(p + "wqkv", [3 * h, h]), (p + "wo", [h, h]), (p + "w1", [ffn, h]),
                    (p + "w3", [ffn, h]), (p + "w2", [h, ffn]), (p + "attn_norm", [h]),
                    (p + "ffn_norm", [h])]
        return out + [("norm", [h]), ("output", [vocab, h])]

    def nbytes(spec):
        return sum(4 * (s[0] * (s[1] if len(s) > 1 else 1)) for _, s in spec)

    h = 3
    while nbytes(shapes(h + 2)) <= size_bytes:
        h += 2
    return shapes(h), h


def run_ranks(argvs: list[list[str]], envs: list[dict], what: str,
              timeout: float) -> list[dict]:
    """Runs one process per argv (with its env) at once; returns each one's
    JSON line. When one fails the others are killed (they would wait for it
    in a barrier)."""
    with tempfile.TemporaryDirectory() as d:
        outs = [(Path(d) / f"{r}.out", Path(d) / f"{r}.err") for r in range(len(argvs))]
        procs = []
        for a, e, (out, err) in zip(argvs, envs, outs):
            with open(out, "w") as o, open(err, "w") as w:
                procs.append(subprocess.Popen(a, env=e, stdout=o, stderr=w))
        deadline = time.monotonic() + timeout
        try:
            while any(p.poll() is None for p in procs):
                failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    r = failed[0] if failed else None
                    raise BenchError(f"{what}: " + (
                        f"rank {r} exited {procs[r].returncode}: {outs[r][1].read_text()[-3000:]}"
                        if failed else f"still running after {timeout:.0f} s"))
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for r, p in enumerate(procs):
            if p.returncode != 0:
                raise BenchError(f"{what}: rank {r} exited {p.returncode}: "
                                 f"{outs[r][1].read_text()[-3000:]}")
        return [json.loads(out.read_text().strip().splitlines()[-1]) for out, _ in outs]


def wall(lines: list[dict], prefix: str = "") -> float:
    """Seconds from the first rank's start to the last rank's end."""
    return (max(x[prefix + "end"] for x in lines) - min(x[prefix + "start"] for x in lines)) / 1e9


def evict(directory: Path) -> int:
    """Drops directory's files from the page cache; returns the bytes that
    fincore still finds resident afterwards (-1 without fincore)."""
    files = [p for p in directory.rglob("*") if p.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # they are synced already; DONTNEED drops clean pages only
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if not shutil.which("fincore") or not files:
        return -1
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES",
                          *map(str, files)], capture_output=True, text=True, check=True).stdout
    return sum(int(x) for x in out.split())


class Bench:
    def __init__(self, args: argparse.Namespace, spec_path: Path, state_bytes: int, store: StoreProcess):
        self.a, self.spec, self.state_bytes, self.store = args, spec_path, state_bytes, store
        self.env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "python"))
        self.res: dict[str, list[float]] = {}
        self.resident: list[int] = []
        self.sums: dict[str, int] = {}

    def record(self, key: str, seconds: float) -> None:
        self.res.setdefault(key, []).append(self.state_bytes / seconds / GB)

    def after_load(self, side: str, lines: list[dict]) -> None:
        self.record(f"{side}_load", wall(lines))
        self.record(f"{side}_warm", wall(lines, "warm_"))
        total = sum(x["sum"] for x in lines)
        if self.sums.setdefault(side, total) != total:
            raise BenchError(f"{side}: the loaded values sum to {total}, before {self.sums[side]}")

    def ours(self, run: int, work: Path) -> None:
        a, root, tag = self.a, work / "ours", f"run{run}"
        probe = [a.probe]
        lines = run_ranks([probe + ["save", str(self.spec), str(root), self.store.endpoint,
                                    tag + "/save", str(r), str(a.save_ranks)]
                           for r in range(a.save_ranks)], [self.env] * a.save_ranks, "ours, save",
                          a.timeout)
        self.record("ours_save", wall(lines))
        self.resident.append(evict(root))
        lines = run_ranks([probe + ["load", str(self.spec), str(root), self.store.endpoint,
                                    tag + "/load", str(r), str(a.load_ranks)]
                           for r in range(a.load_ranks)], [self.env] * a.load_ranks, "ours, load",
                          a.timeout)
        self.after_load("ours", lines)
        shutil.rmtree(root)

    def dcp(self, run: int, work: Path) -> None:
        a, root = self.a, work / "dcp"

        def ranks(mode: str, world: int) -> list[dict]:
            env = dict(self.env, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(free_port()))
            return run_ranks([[a.python, "-c", DCP_RANK, mode, str(self.spec), str(root)]] * world,
                             [dict(env, RANK=str(r), LOCAL_RANK=str(r)) for r in range(world)],
                             f"DCP, {mode}", a.timeout)

        self.record("dcp_save", wall(ranks("save", a.save_ranks)))
        self.resident.append(evict(root))
        self.after_load("dcp", ranks("load", a.load_ranks))
        shutil.rmtree(root)

    def disk(self, run: int, work: Path) -> None:
        a, root, tag = self.a, work / "disk", f"run{run}"
        root.mkdir()
        total = str(self.state_bytes)
        lines = run_ranks([[a.probe, "disk-write", str(root), self.store.endpoint, tag + "/dw",
                            str(r), str(a.save_ranks), total] for r in range(a.save_ranks)],
                          [self.env] * a.save_ranks, "disk write", a.timeout)
        self.record("disk_save", wall(lines))
        self.resident.append(evict(root))
        lines = run_ranks([[a.probe, "disk-read", str(root), self.store.endpoint, tag + "/dr",
                            str(r), str(a.load_ranks), total, str(a.save_ranks)]
                           for r in range(a.load_ranks)], [self.env] * a.load_ranks, "disk read",
                          a.timeout)
        self.record("disk_load", wall(lines))
        self.record("disk_warm", wall(lines, "warm_"))
        shutil.rmtree(root)


def filesystem_of(path: Path) -> str:
    """'ext4 on /dev/vda (mounted at /)' for the mount that holds path."""
    best = ("", "unknown", "unknown")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if str(path).startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best[0]):
                best = (mnt, fstype, dev)
    except OSError:
        pass
    return f"{best[1]} on {best[2]} (mounted at {best[0] or '?'})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="size of the state (about)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--save-ranks", type=int, default=4)
    ap.add_argument("--load-ranks", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=ROOT / "build/ckpt_bench",
                    help="where checkpoints are written (not a tmpfs: the disk is measured)")
    ap.add_argument("--probe", default=str(ROOT / "build/release/bench/ckpt_probe"))
    ap.add_argument("--elasticctl", default=str(ROOT / "build/release/elasticctl"))
    ap.add_argument("--python", default=str(ROOT / ".venv/bin/python"))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per phase")
    ap.add_argument("--note", default="", help="a line added under the machine (e.g. 'shared')")
    ap.add_argument("--output", type=Path, default=ROOT / "docs/benchmarks.md")
    args = ap.parse_args()
    for exe in (args.probe, args.elasticctl):
        if not os.access(exe, os.X_OK):
            ap.error(f"{exe} is not an executable; build ckpt_probe and elasticctl (release)")

    specs, hidden = model_spec(args.size_mib << 20, args.layers)
    state_bytes = sum(4 * (s[0] * (s[1] if len(s) > 1 else 1)) for _, s in specs)
    args.dir.mkdir(parents=True, exist_ok=True)
    work = args.dir / f"work-{os.getpid()}"
    work.mkdir()
    spec_path = work / "tensors.txt"
    spec_path.write_text("".join(f"{n} {' '.join(map(str, s))}\n" for n, s in specs))
    torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"state: {state_bytes / 2**20:,.0f} MiB in {len(specs)} tensors (hidden {hidden}); "
          f"save at {args.save_ranks} ranks, load at {args.load_ranks}; {args.runs} runs in {work}",
          flush=True)
    store = Store(args.elasticctl)
    bench = Bench(args, spec_path, state_bytes, store)
    sides = [bench.ours, bench.dcp, bench.disk]
    try:
        for i in range(args.runs):
            for k in range(3):
                sides[(i + k) % 3](i, work)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in bench.res.items())
                  + " GB/s", flush=True)
    finally:
        store.stop()
        shutil.rmtree(work, ignore_errors=True)
    if bench.sums["ours"] != bench.sums["dcp"]:
        raise BenchError(f"ours loaded values summing to {bench.sums['ours']}, DCP "
                         f"{bench.sums['dcp']}: not the same state")
    load_end = os.getloadavg()
    med = {k: statistics.median(v) for k, v in bench.res.items()}
    resident = max(bench.resident)

    def runs(k: str) -> str:
        return ", ".join(f"{x:.2f}" for x in bench.res[k])

    def row(op: str, k: str) -> str:
        return (f"| {op} | {med['ours_' + k]:.2f} GB/s | {med['dcp_' + k]:.2f} GB/s | "
                f"**{med['ours_' + k] / med['dcp_' + k]:.2f}x** | {med['disk_' + k]:.2f} GB/s | "
                f"{med['ours_' + k] / med['disk_' + k]:.0%} |")

    mib = state_bytes / 2**20
    evicted = ("checked with fincore: at most "
               f"{resident / 2**20:,.1f} MiB of a checkpoint stayed resident" if resident >= 0
               else "fincore missing, not checked")
    body = f"""# Checkpoint save and resharding load: the C++ format vs `torch.distributed.checkpoint`

Generated by `bench/ckpt_bench.py` on {started}; medians of {args.runs} runs; source: {source_state()}.

Reproduce (from the repository root):

```sh
cmake --preset release && cmake --build --preset release --target ckpt_probe elasticctl
OMP_NUM_THREADS=1 .venv/bin/python bench/ckpt_bench.py --size-mib {args.size_mib} --layers {args.layers} --save-ranks {args.save_ranks} --load-ranks {args.load_ranks} --runs {args.runs}
```

- Machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.platform()}; load average {' / '.join(f'{x:.2f}' for x in load_start)} at start, {' / '.join(f'{x:.2f}' for x in load_end)} at end{chr(10) + '- ' + args.note if args.note else ''}
- Files: {filesystem_of(args.dir.resolve())}; PyTorch {torch_version}
- State: {mib:,.0f} MiB of float32 in {len(specs)} tensors (a transformer of hidden size {hidden}, {args.layers} layers), every tensor row-sharded; saved from {args.save_ranks} processes, loaded into {args.load_ranks}, each loading its own new row slice (resharding)

Target: at least DCP's speed, near the disk's. Throughput is the state's size over the wall time of all ranks.

| operation | ours (C++ format) | DCP | ours / DCP | disk | ours / disk |
|---|---:|---:|---:|---:|---:|
{row(f"save at {args.save_ranks}, until published, fsynced", "save")}
{row(f"load at {args.load_ranks} (reshard), page cache evicted", "load")}
{row(f"load at {args.load_ranks} again, from the page cache", "warm")}

Runs (GB/s): ours save {runs('ours_save')}; DCP save {runs('dcp_save')}; disk write {runs('disk_save')}; ours load {runs('ours_load')}; DCP load {runs('dcp_load')}; disk read {runs('disk_load')}; ours warm {runs('ours_warm')}; DCP warm {runs('dcp_warm')}; page cache read {runs('disk_warm')}.

## Method, and what to keep in mind

- ours: `bench/ckpt_probe` on `include/elasticrun/checkpoint.hpp`, one
  process per rank: `Checkpointer::save` (CRC32C of every record, shards
  and metadata written and fsynced, the directory fsynced and renamed,
  `latest` replaced, retention; three barriers, each a
  `StoreClient::barrier` on an `elasticctl store`), then `latest()`,
  `Reader` and `read_rows()` of every tensor (each overlapping record read
  whole and its CRC checked before the copy). Rows split by `even_rows`.
- DCP: `dcp.save` / `dcp.load` of DTensors (`Shard(0)` on a CPU device
  mesh), gloo on 127.0.0.1, `FileSystemWriter`'s defaults: one file per
  rank, one writer thread, `sync_files=True` (each data file and
  `.metadata` fsynced; no fsync of the directory, no `latest`). Rows split
  as DTensor splits them (chunks of ceil(rows/N)), so a rank's share
  differs from ours by at most one row per tensor.
- disk: the same bytes with the same parallelism and no format: one
  `write()` and `fsync` per saving rank, then each loading rank `pread()`s
  its contiguous share of the files. What the hardware gives these
  processes, not a bound neither side may pass (a checkpoint's shares are
  not contiguous ranges).
- Save: from a barrier after each rank has its data in memory until the
  last rank returns. Load: from a barrier after each rank has allocated
  (and filled with NaN) its slices until the last rank holds them; process
  start, `import torch` and process-group setup are outside both.
- Cold loads: before each load the checkpoint's files are evicted from the
  page cache (`posix_fadvise(DONTNEED)` after an fdatasync; {evicted}). A
  virtual disk may still be cached by its host. Warm loads follow at once
  and read the page cache: the format's CPU cost (checksums, copies, for
  DCP unpickling and planning) against the page cache read.
- Every load is checked: each rank compares every element it loaded with
  the generator (integers below 2^24, exact in float32) and the bench fails
  on the first difference; the loaded values summed over the ranks are the
  same for ours and DCP.
- The three sides run in rotating order within each run, so a slow spell
  of the machine is spread over them.
"""
    if str(args.output) != "-":
        write_section(args.output, "checkpoint", body)
        print(f"wrote {args.output}")
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
