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
learning rate and micro-batch of the job config file (docs/job-config.md).
"""

from __future__ import annotations

import bisect
import functools
import operator
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, NoReturn, Optional, Tuple, Union

__all__ = [
    "BatchPlan",
    "plan_batches",
    "admissible_world_sizes",
    "discrete_values_flag",
    "load_overrides",
]

CONFIG_FILE_ENV = "ELASTICRUN_CONFIG_FILE"

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
    overrides (load_overrides()) with a microBatchSize replaces
    micro_batch_sizes at its node count, as the job will train there.
    Raises ValueError when no node count does."""
    g = _positive(global_batch, "global_batch")
    per_node = _positive(nproc_per_node, "nproc_per_node")
    default_sizes = _sizes(micro_batch_sizes)
    accum_limit = _positive(max_accum, "max_accum")
    counts = sorted({_positive(n, "a node count") for n in nodes})
    admitted = []
    for n in counts:
        sizes = default_sizes
        micro = (overrides or {}).get(n, {}).get("microBatchSize")
        if micro is not None:
            sizes = _sizes(micro)
        if _plan(g, n * per_node, sizes, accum_limit) is not None:
            admitted.append(n)
    if not admitted:
        raise ValueError(
            f"no node count in {counts} admits global batch {g} with {per_node} ranks per node, "
            f"micro-batch sizes {list(default_sizes)} and at most {accum_limit} accumulation steps")
    return "--replica-discrete-values " + ",".join(str(n) for n in admitted)


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


def _why_not(g: int, w: int, sizes: Tuple[int, ...], accum_limit: int) -> str:
    head = (f"no plan for global batch {g} on {w} ranks with micro-batch sizes "
            f"{list(sizes)} and at most {accum_limit} accumulation steps: ")
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


# ---------------------------------------------------------------------------
# worldSizeOverrides of the job config file.
#
# elasticrun has already checked the whole file with a full YAML parser
# (src/cli/job_config.cpp) before it started this worker. This is a reader
# for the forms that section is written in (block and flow mappings of plain
# scalars, comments), not a YAML parser: PyYAML is not a dependency, and its
# YAML 1.1 would read 1e-4 as a string where elasticrun reads a number.
# Anything else in the section is refused with the line, not guessed at.

MAX_CONFIG_BYTES = 1 << 20
_OVERRIDE_KEYS = ("learningRate", "microBatchSize")
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_KEY_RE = re.compile(r"""(?P<key>"[^"]*"|'[^']*'|[^\s:#'"{}\[\],][^:#]*?)\s*:(?:\s+|\Z)(?P<rest>.*)\Z""")

Overrides = Dict[int, Dict[str, Union[float, int]]]


def load_overrides(path: Optional[Union[str, os.PathLike]] = None) -> Overrides:
    """{world size in nodes: {"learningRate": float, "microBatchSize": int}}
    from the worldSizeOverrides section of the job config file at path
    (default: $ELASTICRUN_CONFIG_FILE; no such variable, or no such section:
    {}). An entry holds only the keys the file gives. Raises ValueError,
    naming the file and line, on a section this reader does not understand
    or that elasticrun would have refused; OSError when it cannot be read."""
    if path is None:
        path = os.environ.get(CONFIG_FILE_ENV) or None
        if path is None:
            return {}
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{name}: larger than {MAX_CONFIG_BYTES} bytes")
    return _OverridesReader(name, data.decode("utf-8")).read()


class _OverridesReader:
    def __init__(self, name: str, text: str) -> None:
        self.name = name
        # (line number, indent, content without comment), content lines only.
        self.lines: List[Tuple[int, int, str]] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            if "\t" in raw[: len(raw) - len(raw.lstrip())]:
                self.fail(number, "a tab in the indentation")
            content = _strip_comment(raw).rstrip()
            if content.strip() and content.strip() not in ("---", "..."):
                self.lines.append((number, len(content) - len(content.lstrip()), content.strip()))

    def fail(self, line: int, why: str) -> NoReturn:
        raise ValueError(f"{self.name}, line {line}: worldSizeOverrides: {why}")

    def read(self) -> Overrides:
        if not self.lines:
            return {}
        top = self.lines[0][1]
        for i, (number, indent, text) in enumerate(self.lines):
            if indent != top:
                continue
            m = _KEY_RE.match(text)
            if m is None:
                if text.startswith("{"):
                    self.fail(number, "a flow mapping at the top level is not supported here")
                continue
            if _unquote(m.group("key")) != "worldSizeOverrides":
                continue
            body = []
            for line in self.lines[i + 1:]:
                if line[1] <= top:
                    break
                body.append(line)
            return self.section(number, m.group("rest").strip(), body)
        return {}

    def section(self, number: int, inline: str, body: List[Tuple[int, int, str]]) -> Overrides:
        if inline in ("", "~", "null") and not body:
            return {}
        if inline:
            entries = self.flow(number, " ".join([inline] + [t for _, _, t in body]))
            return self.entries(number, entries)
        out: Overrides = {}
        entry_indent = body[0][1]
        i = 0
        while i < len(body):
            line, indent, text = body[i]
            if indent != entry_indent:
                self.fail(line, "unexpected indentation")
            key, rest = self.key_value(line, text)
            nested = []
            i += 1
            while i < len(body) and body[i][1] > entry_indent:
                nested.append(body[i])
                i += 1
            if rest:
                value = self.flow(line, " ".join([rest] + [t for _, _, t in nested]))
            elif nested:
                value = self.block(nested)
            else:
                self.fail(line, f"{key}: expected a mapping (learningRate, microBatchSize)")
            self.add(out, line, key, value)
        return out

    def block(self, lines: List[Tuple[int, int, str]]) -> List[Tuple[int, str, str]]:
        out = []
        for line, indent, text in lines:
            if indent != lines[0][1]:
                self.fail(line, "unexpected indentation")
            key, rest = self.key_value(line, text)
            out.append((line, key, rest))
        return out

    def key_value(self, line: int, text: str) -> Tuple[str, str]:
        m = _KEY_RE.match(text)
        if m is None:
            self.fail(line, f"expected 'key: value', got {text!r}")
        return m.group("key"), m.group("rest").strip()

    def flow(self, line: int, text: str) -> List[Tuple[int, str, object]]:
        """{k: v, ...}, v a plain scalar or another such mapping."""
        pos = 0

        def fail(why: str) -> None:
            self.fail(line, f"{why} at column {pos + 1} of {text!r}")

        def skip() -> None:
            nonlocal pos
            while pos < len(text) and text[pos] == " ":
                pos += 1

        def scalar() -> str:
            nonlocal pos
            start = pos
            while pos < len(text) and text[pos] not in ",{}[]" and not (
                    text[pos] == ":" and (pos + 1 == len(text) or text[pos + 1] in " ,{}")):
                pos += 1
            return text[start:pos].strip()

        def mapping() -> List[Tuple[int, str, object]]:
            nonlocal pos
            if text[pos:pos + 1] != "{":
                fail("expected '{'")
            pos += 1
            items: List[Tuple[int, str, object]] = []
            skip()
            while text[pos:pos + 1] != "}":
                key = scalar()
                if not key or text[pos:pos + 1] != ":":
                    fail("expected 'key: value'")
                pos += 1
                skip()
                value: object = mapping() if text[pos:pos + 1] == "{" else scalar()
                items.append((line, key, value))
                skip()
                if text[pos:pos + 1] == ",":
                    pos += 1
                    skip()
                elif text[pos:pos + 1] != "}":
                    fail("expected ',' or '}'")
            pos += 1
            return items

        skip()
        items = mapping()
        skip()
        if pos != len(text):
            fail("unexpected text after the mapping")
        return items

    def entries(self, line: int, items: List[Tuple[int, str, object]]) -> Overrides:
        out: Overrides = {}
        for item_line, key, value in items:
            self.add(out, item_line, key, value)
        return out

    def add(self, out: Overrides, line: int, key: str, value: object) -> None:
        if not _INT_RE.match(key):
            self.fail(line, f"key {key!r} is not a world size in nodes")
        nodes = int(key)
        if nodes < 1:
            self.fail(line, f"{key}: a world size must be at least 1 node")
        if nodes in out:
            self.fail(line, f"world size {nodes} is given twice")
        if not isinstance(value, list):
            self.fail(line, f"{key}: expected a mapping (learningRate, microBatchSize), got {value!r}")
        entry: Dict[str, Union[float, int]] = {}
        for item_line, name, text in value:
            where = f"{key}.{name}"
            if name not in _OVERRIDE_KEYS:
                self.fail(item_line, f"unknown key {name!r} in {key}; expected one of "
                          + ", ".join(_OVERRIDE_KEYS))
            if name in entry:
                self.fail(item_line, f"{where} is given twice")
            if not isinstance(text, str) or not text:
                self.fail(item_line, f"{where}: expected a number, got {text!r}")
            if name == "microBatchSize":
                if not _INT_RE.match(text):
                    self.fail(item_line, f"{where}: expected an integer, got {text!r}")
                entry[name] = int(text)
                if entry[name] < 1:
                    self.fail(item_line, f"{where}: must be at least 1")
            else:
                if not _FLOAT_RE.match(text):
                    self.fail(item_line, f"{where}: expected a number, got {text!r}")
                entry[name] = float(text)
                if entry[name] < 0:
                    self.fail(item_line, f"{where}: must not be negative")
        out[nodes] = entry


def _strip_comment(line: str) -> str:
    # '#' opens a comment at the start or after a space, outside quotes.
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _unquote(key: str) -> str:
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
        return key[1:-1]
    return key
