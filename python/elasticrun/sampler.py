"""A data sampler whose position survives a resize: within an epoch every
sample is seen exactly once, whatever sequence of world sizes the job runs at.

The epoch's order is one global permutation of [0, dataset_len), fixed by
(seed, epoch) and not by the world size. The state is where the job stands
in it: `position`, the number of samples of this epoch already consumed job
wide. Each optimizer step consumes the next global_batch samples of the
permutation, and rank r takes its contiguous slice of them:

    step's samples:  perm[position : position + global_batch]
    rank r's slice:  [offset_r, offset_r + local_batch_r),  offset_r = sum of
                     the local batches of the ranks below r

Local batches may be uneven (BatchPlan.local_batches). After a step,
advance() moves the position by global_batch on every rank alike; a
checkpoint saves state_dict(), which is the same on every rank; after a
resize each new rank loads it and calls set_world() with its new rank and
the new split, and the job goes on from the same sample. The order in which
the job sees the samples is the permutation's whatever the world sizes.

The position moves only through advance(), not through iteration: a
DataLoader fetches ahead of training (workers, prefetch_factor), so only the
training loop knows which step has finished and may be saved.

The epoch's tail, when dataset_len is not a multiple of global_batch: with
drop_last=False (the default) the last step is short: its t < global_batch
samples are split in proportion to the local batches (rank r takes
[t * offset_r // global_batch, t * (offset_r + local_batch_r) // global_batch)),
so every sample is still seen once, but that step's batch is smaller and a
rank can get no sample at all. With drop_last=True the epoch ends at the last
full step and its tail, different each epoch when shuffling, is not seen.

The permutation is computed, not stored: a keyed Feistel network on the
smallest power of two >= dataset_len, cycle-walked into [0, dataset_len)
(the way format-preserving encryption does it). It costs no memory whatever
the dataset's size and is defined here exactly (_Permutation), so another
implementation (the C++ SDK) can reproduce it bit for bit. It does not
depend on torch, NumPy or Python's random module.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    from .batch import BatchPlan

try:  # A Sampler when torch is there; DataLoader only needs __iter__ and __len__.
    from torch.utils.data import Sampler as _SamplerBase
except ImportError:  # pragma: no cover - exercised where torch is missing
    _SamplerBase = object  # type: ignore[assignment,misc]

__all__ = ["ElasticSampler"]

STATE_VERSION = 1

_M64 = (1 << 64) - 1
_ROUNDS = 6


def _mix64(z: int) -> int:
    """SplitMix64's output function on a 64-bit value."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class _Permutation:
    """The epoch's order: a bijection of [0, n) keyed by (seed, epoch).

    bits = max(2, bit length of n - 1). Round i on x in [0, 2^bits), with
    (t, u) = (bits // 2, bits - bits // 2) on even rounds and (u, t) on odd
    ones, takes the high t bits as L and the low u bits as R:
        x = (R << t) | (L ^ (mix64(key[i] ^ R) & (2^t - 1)))
    with base = mix64((mix64(seed) + epoch) mod 2^64) and
    key[i] = mix64((base + (i + 1) * 0x9E3779B97F4A7C15) mod 2^64).
    perm(i) applies the 6 rounds to i, and again to the result until it is
    below n (fewer than 2 passes on average: 2^bits < 2n).

    About 10 us per index in CPython: 0.3 ms for a local batch of 32."""

    def __init__(self, n: int, seed: int, epoch: int, shuffle: bool) -> None:
        self.n = n
        self.shuffle = shuffle and n > 1
        # (key, t, u, 2^t - 1, 2^u - 1) per round
        self.rounds: List[Tuple[int, int, int, int, int]] = []
        if not self.shuffle:
            return
        bits = max(2, (n - 1).bit_length())
        half = bits // 2
        base = _mix64((_mix64(seed) + epoch) & _M64)
        for i in range(_ROUNDS):
            t, u = (half, bits - half) if i % 2 == 0 else (bits - half, half)
            key = _mix64((base + (i + 1) * 0x9E3779B97F4A7C15) & _M64)
            self.rounds.append((key, t, u, (1 << t) - 1, (1 << u) - 1))

    def take(self, start: int, stop: int) -> List[int]:
        """[perm(i) for i in range(start, stop)]."""
        if not self.shuffle:
            return list(range(start, stop))
        n, rounds, m64 = self.n, self.rounds, _M64
        out = []
        for x in range(start, stop):
            while True:
                for key, t, u, t_mask, u_mask in rounds:
                    low = x & u_mask
                    z = key ^ low  # _mix64, inlined: this loop is the sampler's cost
                    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
                    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
                    x = (low << t) | ((x >> u) ^ ((z ^ (z >> 31)) & t_mask))
                if x < n:
                    break
            out.append(x)
        return out


class ElasticSampler(_SamplerBase):  # type: ignore[misc,valid-type]
    """This rank's sample indices, step after step, for the current world.

    Use: set_world() before iterating (and after every restart), set_epoch()
    at the start of each epoch, advance() after each optimizer step,
    state_dict() into the checkpoint, load_state_dict() on resume. Iterating
    yields this rank's indices for the rest of the epoch, from the position
    at the time iter() was called: local_batch indices per step, which a
    DataLoader with batch_size = the micro-batch cuts into accum_steps
    micro-batches."""

    def __init__(self, dataset_len: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = False) -> None:
        self._n = _count(dataset_len, "dataset_len")
        self._seed = _count(seed, "seed")
        if self._seed > _M64:
            raise ValueError(f"seed must be below 2**64, got {self._seed}")
        self._shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self._epoch = 0
        self._position = 0
        self._perm = _Permutation(self._n, self._seed, 0, self._shuffle)
        self._rank: Optional[int] = None
        self._local: Tuple[int, ...] = ()
        self._offsets: Tuple[int, ...] = ()

    # -- the world ---------------------------------------------------------

    def set_world(self, rank: int, world_size: int,
                  local_batches: Union[Sequence[int], int, "BatchPlan"]) -> None:
        """This rank and every rank's local batch (samples per optimizer
        step): a list of world_size ints, a BatchPlan, or one int for all.
        Their sum is the global batch. The position is kept."""
        world = _count(world_size, "world_size")
        if world < 1:
            raise ValueError("world_size must be at least 1")
        if hasattr(local_batches, "local_batches"):
            local_batches = local_batches.local_batches  # type: ignore[union-attr]
        if isinstance(local_batches, int):
            local_batches = [local_batches] * world
        local = tuple(_count(b, "a local batch") for b in local_batches)  # type: ignore[union-attr]
        if len(local) != world:
            raise ValueError(f"{len(local)} local batches for a world of {world} ranks")
        if min(local) < 1:
            raise ValueError(f"every local batch must be at least 1, got {list(local)}")
        r = _count(rank, "rank")
        if r >= world:
            raise ValueError(f"rank {r} is outside a world of {world} ranks")
        offsets, total = [], 0
        for b in local:
            offsets.append(total)
            total += b
        self._rank, self._local, self._offsets = r, local, tuple(offsets)

    def set_epoch(self, epoch: int) -> None:
        """Moves to epoch, at its start; the same epoch again keeps the
        position (so a resumed job calls set_epoch(state's epoch) safely)."""
        epoch = _count(epoch, "epoch")
        if epoch != self._epoch:
            self._epoch, self._position = epoch, 0
            self._perm = _Permutation(self._n, self._seed, epoch, self._shuffle)

    # -- where the job stands ------------------------------------------------

    @property
    def dataset_len(self) -> int:
        return self._n

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def position(self) -> int:
        """Samples of this epoch consumed job wide."""
        return self._position

    @property
    def global_batch(self) -> int:
        self._need_world()
        return self._offsets[-1] + self._local[-1]

    @property
    def steps_left(self) -> int:
        """Optimizer steps left in this epoch, the short last one included."""
        full, tail = divmod(self._n - self._position, self.global_batch)
        return full + (1 if tail and not self.drop_last else 0)

    @property
    def next_step_samples(self) -> int:
        """Samples, job wide, of the next step: global_batch, less on a short
        last step, 0 when the epoch is over (use it to scale the loss)."""
        if self.steps_left == 0:
            return 0
        return min(self.global_batch, self._n - self._position)

    def step_indices(self, steps_ahead: int = 0) -> List[int]:
        """This rank's indices of the step steps_ahead after the position
        (0: the next one); [] past the end of the epoch."""
        ahead = _count(steps_ahead, "steps_ahead")
        if ahead >= self.steps_left:
            return []
        start = self._position + ahead * self.global_batch
        lo, hi = self._slice(min(self.global_batch, self._n - start))
        return self._perm.take(start + lo, start + hi)

    def advance(self, steps: int = 1) -> None:
        """Records that the job finished `steps` more optimizer steps. Every
        rank calls it alike, so the state is the same on all of them."""
        steps = _count(steps, "steps")
        left = self.steps_left
        if steps > left:
            raise ValueError(f"cannot advance {steps} steps: epoch {self._epoch} has {left} left "
                             f"(position {self._position} of {self._n})")
        self._position = min(self._n, self._position + steps * self.global_batch)

    # -- iteration -----------------------------------------------------------

    def __iter__(self) -> Iterator[int]:
        self._need_world()
        perm, g, n = self._perm, self.global_batch, self._n
        start, steps = self._position, self.steps_left
        spans = [(start + k * g, min(g, n - start - k * g)) for k in range(steps)]
        slices = [(s + lo, s + hi) for s, size in spans for lo, hi in [self._slice(size)]]
        # One step's indices at a time: a DataLoader asks for them lazily.
        return (i for lo, hi in slices for i in perm.take(lo, hi))

    def __len__(self) -> int:
        """How many indices iterating now yields on this rank."""
        full, tail = divmod(self._n - self._position, self.global_batch)
        count = full * self._local[self._rank]  # type: ignore[index]
        if tail and not self.drop_last:
            lo, hi = self._slice(tail)
            count += hi - lo
        return count

    # -- checkpoint ----------------------------------------------------------

    def state_dict(self) -> Dict[str, int]:
        """Plain ints, the same on every rank (no rank, no world size), so a
        DCP checkpoint can hold it as it is."""
        return {
            "version": STATE_VERSION,
            "dataset_len": self._n,
            "seed": self._seed,
            "shuffle": int(self._shuffle),
            "epoch": self._epoch,
            "position": self._position,
        }

    def load_state_dict(self, state: Dict[str, int]) -> None:
        """Restores epoch and position. Refuses a state of another dataset
        length, seed or shuffle setting: its position would mean other
        samples, and exactly-once would be silently lost."""
        get = {k: operator.index(v) for k, v in state.items()}
        if get.get("version") != STATE_VERSION:
            raise ValueError(f"sampler state version {get.get('version')!r}; "
                             f"this SDK reads {STATE_VERSION}")
        for key, mine in (("dataset_len", self._n), ("seed", self._seed),
                          ("shuffle", int(self._shuffle))):
            if get.get(key) != mine:
                raise ValueError(f"sampler state has {key}={get.get(key)!r}, "
                                 f"this sampler {key}={mine}")
        epoch, position = get.get("epoch", -1), get.get("position", -1)
        if epoch < 0 or not 0 <= position <= self._n:
            raise ValueError(f"sampler state has epoch {epoch}, position {position} "
                             f"(dataset_len {self._n})")
        self.set_epoch(epoch)
        self._position = position

    # -- internals -----------------------------------------------------------

    def _need_world(self) -> None:
        if self._rank is None:
            raise RuntimeError("call set_world(rank, world_size, local_batches) first")

    def _slice(self, size: int) -> Tuple[int, int]:
        """This rank's [lo, hi) within a step of `size` samples."""
        g = self.global_batch
        off, local = self._offsets[self._rank], self._local[self._rank]  # type: ignore[index]
        if size == g:
            return off, off + local
        return size * off // g, size * (off + local) // g


def _count(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    number = operator.index(value)  # type: ignore[arg-type]
    if number < 0:
        raise ValueError(f"{what} must not be negative, got {number}")
    return number

