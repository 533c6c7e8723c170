"""A constant global batch at every world size.

When the job is resized, the global batch (samples per optimizer step, job
wide) must not change, or the run would not be the same training run. What
changes is how it is split: each rank's micro-batch (what one forward pass
takes) and the number of gradient-accumulation steps, common to all ranks:

    global_batch == accum_steps * sum(micro_batches)

Local batches may be uneven: at 24 ranks with micro-batch sizes {5, 6}, 128
is 8 ranks x 6 + 16 ranks x 5 with one accumulation step.

plan_batches() picks the split, admissible_world_sizes() and
discrete_values_flag() say which sizes admit one (to pass to elasticrun as
--replica-discrete-values), load_overrides() reads the per-world-size
learning rate and micro-batch (one size, or a range capped by memory) of the
job config file (docs/job-config.md), and micro_batch_sizes() turns an entry
into the sizes plan_batches may use.
"""

from __future__ import annotations

import bisect
import functools
import operator
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Tuple, Union

# The job config's reader lives in .overrides; its names stay importable
# from here, where they were first.
from .overrides import CONFIG_FILE_ENV, MAX_MICRO_BATCH_RANGE, Overrides, load_overrides  # noqa: F401

__all__ = [
    "BatchPlan",
    "plan_batches",
    "admissible_world_sizes",
    "discrete_values_flag",
    "load_overrides",
    "micro_batch_sizes",
]

MicroBatchSizes = Union[int, Iterable[int]]


@dataclass(frozen=True)
class BatchPlan:
    """How one global batch is split over the ranks of one world size.

    micro_batches[r] is rank r's micro-batch; every rank runs accum_steps
    micro-batches per optimizer step, so rank r's local batch is
    micro_batches[r] * accum_steps, and the local batches sum to
    global_batch. Larger micro-batches go to lower ranks."""

    global_batch: int
    micro_batches: Tuple[int, ...]
    accum_steps: int

    @property
    def world_size(self) -> int:
        return len(self.micro_batches)

    @property
    def local_batches(self) -> Tuple[int, ...]:
        """Each rank's samples per optimizer step; what ElasticSampler.set_world takes."""
        return tuple(m * self.accum_steps for m in self.micro_batches)

    def micro_batch(self, rank: int) -> int:
        return self.micro_batches[self._rank(rank)]

    def local_batch(self, rank: int) -> int:
        return self.micro_batches[self._rank(rank)] * self.accum_steps

    def describe(self) -> str:
        """One line, e.g. "global batch 128 on 24 ranks = 8 ranks x 6 +
        16 ranks x 5, 1 accumulation step"."""
        runs: List[Tuple[int, int]] = []  # (micro, ranks), in rank order
        for m in self.micro_batches:
            if runs and runs[-1][0] == m:
                runs[-1] = (m, runs[-1][1] + 1)
            else:
                runs.append((m, 1))
        split = " + ".join(f"{n} rank{'s' if n != 1 else ''} x {m}" for m, n in runs)
        steps = f"{self.accum_steps} accumulation step{'s' if self.accum_steps != 1 else ''}"
        return (f"global batch {self.global_batch} on {self.world_size} "
                f"rank{'s' if self.world_size != 1 else ''} = {split}, {steps}")

    def _rank(self, rank: int) -> int:
        rank = operator.index(rank)
        if not 0 <= rank < len(self.micro_batches):
            raise ValueError(f"rank {rank} is outside a world of {len(self.micro_batches)} ranks")
        return rank


def plan_batches(global_batch: int, world_size: int, micro_batch_sizes: MicroBatchSizes,
                 max_accum: int = 64) -> BatchPlan:
    """The split of global_batch over world_size ranks, each rank's
    micro-batch taken from micro_batch_sizes (one int: that size only; to
    allow any size up to m, pass range(1, m + 1)).

    Preferred, in order: the fewest accumulation steps (at most max_accum);
    then the most even split, that is the smallest difference between the
    largest and smallest micro-batch (the slowest rank sets the step time);
    then the larger micro-batches, that is the largest smallest micro-batch.
    With the accumulation steps fixed the micro-batches have a fixed sum, so
    the last rule only breaks ties, which arise only when the allowed sizes
    have gaps. When two allowed sizes around the mean can make the sum (always
    so for consecutive sizes) the plan uses just those two.

    Raises ValueError, saying why, when no plan exists."""
    g = _positive(global_batch, "global_batch")
    w = _positive(world_size, "world_size")
    sizes = _sizes(micro_batch_sizes)
    accum_limit = _positive(max_accum, "max_accum")
    plan = _plan(g, w, sizes, accum_limit)
    if plan is None:
        raise ValueError(_why_not(g, w, sizes, accum_limit))
    return plan


def admissible_world_sizes(global_batch: int, micro_batch_sizes: MicroBatchSizes,
                           candidates: Iterable[int], max_accum: int = 64) -> List[int]:
    """The world sizes (in ranks) among candidates for which plan_batches
    finds a plan; sorted, without repeats."""
    g = _positive(global_batch, "global_batch")
    sizes = _sizes(micro_batch_sizes)
    accum_limit = _positive(max_accum, "max_accum")
    worlds = {_positive(w, "a candidate world size") for w in candidates}
    return sorted(w for w in worlds if _plan(g, w, sizes, accum_limit) is not None)


def discrete_values_flag(global_batch: int, micro_batch_sizes: MicroBatchSizes,
                         nproc_per_node: int, nodes: Iterable[int], max_accum: int = 64,
                         overrides: Optional[Mapping[int, Mapping[str, object]]] = None) -> str:
    """"--replica-discrete-values 2,4,8": the node counts among nodes at which
    nproc_per_node ranks per node admit the global batch. An entry of
    overrides (load_overrides()) that gives a micro-batch (microBatchSize,
    or a range up to maxMicroBatchSize) replaces micro_batch_sizes at its
    node count, as the job will train there (micro_batch_sizes()).
    Raises ValueError when no node count does."""
    g = _positive(global_batch, "global_batch")
    per_node = _positive(nproc_per_node, "nproc_per_node")
    default_sizes = _sizes(micro_batch_sizes)
    accum_limit = _positive(max_accum, "max_accum")
    counts = sorted({_positive(n, "a node count") for n in nodes})
    admitted = []
    for n in counts:
        given = _override_sizes((overrides or {}).get(n, {}))
        sizes = default_sizes if given is None else _sizes(given)
        if _plan(g, n * per_node, sizes, accum_limit) is not None:
            admitted.append(n)
    if not admitted:
        raise ValueError(
            f"no node count in {counts} admits global batch {g} with {per_node} ranks per node, "
            f"micro-batch sizes {list(default_sizes)} and at most {accum_limit} accumulation steps")
    return "--replica-discrete-values " + ",".join(str(n) for n in admitted)


def micro_batch_sizes(override: Mapping[str, object],
                      default: MicroBatchSizes) -> MicroBatchSizes:
    """The micro-batch sizes one worldSizeOverrides entry (an item of
    load_overrides()) lets plan_batches choose from: its microBatchSize
    alone; every size from minMicroBatchSize (default 1) to
    maxMicroBatchSize, the largest that fits memory at that size; or, when
    it gives neither, default (the job's own sizes):

        override = load_overrides().get(nodes, {})
        plan = plan_batches(global_batch, world, micro_batch_sizes(override, range(1, 17)))

    At a size whose entry gives a range, plan_batches picks the fewest
    accumulation steps and the most even split within it, as it does with
    any sizes; the global batch stays what it is."""
    given = _override_sizes(override)
    return default if given is None else given


def _override_sizes(override: Mapping[str, object]) -> Optional[MicroBatchSizes]:
    # load_overrides() has refused entries that give both forms, a minimum
    # without a maximum or above it; a hand-made entry is checked here.
    micro = override.get("microBatchSize")
    low, high = override.get("minMicroBatchSize"), override.get("maxMicroBatchSize")
    if micro is not None:
        if low is not None or high is not None:
            raise ValueError("an override gives microBatchSize (one size) or "
                             "minMicroBatchSize/maxMicroBatchSize (a range), not both")
        return micro  # type: ignore[return-value]  # plan_batches refuses one below 1
    if high is None:
        if low is not None:
            raise ValueError("minMicroBatchSize needs maxMicroBatchSize")
        return None
    top = _positive(high, "maxMicroBatchSize")
    bottom = 1 if low is None else _positive(low, "minMicroBatchSize")
    if top > MAX_MICRO_BATCH_RANGE:
        raise ValueError(f"maxMicroBatchSize must be at most {MAX_MICRO_BATCH_RANGE}, got {top}")
    if bottom > top:
        raise ValueError(f"minMicroBatchSize {bottom} is above maxMicroBatchSize {top}")
    return range(bottom, top + 1)


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    number = operator.index(value)  # type: ignore[arg-type]
    if number < 1:
        raise ValueError(f"{what} must be at least 1, got {number}")
    return number


def _sizes(micro_batch_sizes: MicroBatchSizes) -> Tuple[int, ...]:
    if isinstance(micro_batch_sizes, int):
        micro_batch_sizes = (micro_batch_sizes,)
    sizes = tuple(sorted({_positive(m, "a micro-batch size") for m in micro_batch_sizes}))
    if not sizes:
        raise ValueError("micro_batch_sizes is empty")
    return sizes


def _plan(g: int, w: int, sizes: Tuple[int, ...], accum_limit: int) -> Optional[BatchPlan]:
    for accum in range(1, accum_limit + 1):
        if accum * w * sizes[0] > g:
            break  # more accumulation only needs more samples
        if g % accum == 0:
            micro = _most_even_split(g // accum, w, sizes)
            if micro is not None:
                return BatchPlan(g, tuple(micro), accum)
    return None


def _sizes_text(sizes: Tuple[int, ...]) -> str:
    """[1..64, 96]: runs of three or more consecutive sizes as first..last,
    so that a range of a million sizes is not a million numbers long."""
    parts: List[str] = []
    i = 0
    while i < len(sizes):
        j = i
        while j + 1 < len(sizes) and sizes[j + 1] == sizes[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{sizes[i]}..{sizes[j]}")
        else:
            parts.extend(str(m) for m in sizes[i:j + 1])
        i = j + 1
    return "[" + ", ".join(parts) + "]"


def _why_not(g: int, w: int, sizes: Tuple[int, ...], accum_limit: int) -> str:
    head = (f"no plan for global batch {g} on {w} ranks with micro-batch sizes "
            f"{_sizes_text(sizes)} and at most {accum_limit} accumulation steps: ")
    if w * sizes[0] > g:
        return head + (f"{w} ranks at the smallest micro-batch ({sizes[0]}) already take "
                       f"{w * sizes[0]} samples per step")
    return head + (f"no common accumulation count k divides {g} so that {g}/k is a sum of "
                   f"{w} allowed micro-batch sizes; try more sizes, another world size "
                   f"(admissible_world_sizes) or a larger max_accum")


def _most_even_split(total: int, w: int, sizes: Tuple[int, ...]) -> Optional[List[int]]:
    """w sizes (descending) summing to total, by the rules of plan_batches, or None."""
    if not w * sizes[0] <= total <= w * sizes[-1]:
        return None
    # a: the largest size not above the mean, b: the smallest not below it.
    # Every split has its smallest size <= a and its largest >= b, so when a
    # and b alone make the sum nothing is more even, and nothing is larger.
    a = sizes[bisect.bisect_right(sizes, total // w) - 1]
    b = sizes[bisect.bisect_left(sizes, -(-total // w))]
    if a == b:
        return [a] * w
    at_b, rest = divmod(total - w * a, b - a)
    if rest == 0:
        return [b] * at_b + [a] * (w - at_b)
    # The sizes have gaps and a, b miss the sum: try every (smallest,
    # largest) pair, most even first, then larger first.
    pairs = sorted((hi - lo, -lo, lo, hi) for lo in sizes for hi in sizes
                   if lo < hi and w * lo <= total <= w * hi)
    for _, _, lo, hi in pairs:
        steps = tuple(s - lo for s in sizes if lo < s <= hi)
        coins = _fewest_coins(total - w * lo, steps)
        if coins is not None and len(coins) <= w:
            return sorted((lo + c for c in coins), reverse=True) + [lo] * (w - len(coins))
    return None


def _fewest_coins(amount: int, coins: Tuple[int, ...]) -> Optional[List[int]]:
    """The fewest values from coins (ascending, repeats allowed) summing to
    amount, or None. With d the largest coin, some optimal choice has fewer
    than d others (among d values some nonempty subset sums to a multiple of
    d, and fewer d-coins replace it), so the others sum to at most (d-1)^2:
    a table that far, then d-coins for the rest."""
    d = coins[-1]
    best, last = _small_coin_table(coins)
    choice = None
    for v in range(amount % d, min(amount, len(best) - 1) + 1, d):
        if best[v] >= 0:
            count = best[v] + (amount - v) // d
            if choice is None or count < choice[0]:
                choice = (count, v)
    if choice is None:
        return None
    v = choice[1]
    out = [d] * ((amount - v) // d)
    while v:
        out.append(last[v])
        v -= last[v]
    return out


@functools.lru_cache(maxsize=64)
def _small_coin_table(coins: Tuple[int, ...]) -> Tuple[List[int], List[int]]:
    # best[v]: fewest coins other than the largest summing to v (-1: none);
    # last[v]: one coin of such a choice.
    d, small = coins[-1], coins[:-1]
    limit = (d - 1) * (d - 1) if small else 0
    best = [-1] * (limit + 1)
    last = [0] * (limit + 1)
    best[0] = 0
    for v in range(1, limit + 1):
        for c in small:
            if c > v:
                break
            prev = best[v - c]
            if prev >= 0 and (best[v] < 0 or prev + 1 < best[v]):
                best[v], last[v] = prev + 1, c
    return best, last
