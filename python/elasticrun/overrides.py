"""The per-world-size learning rate and micro-batch (one size, or a range
capped by memory) of the job config file's worldSizeOverrides
(docs/job-config.md): load_overrides(). Re-exported by elasticrun.batch,
whose micro_batch_sizes() turns an entry into the sizes plan_batches may
use. The C++ SDK's twin is src/sdk/overrides.cpp."""

from __future__ import annotations

import os
import re
from typing import Dict, List, Mapping, NoReturn, Optional, Tuple, Union

__all__ = ["load_overrides", "CONFIG_FILE_ENV", "MAX_MICRO_BATCH_RANGE", "Overrides"]

CONFIG_FILE_ENV = "ELASTICRUN_CONFIG_FILE"

# The most a worldSizeOverrides range may reach (maxMicroBatchSize): the
# planners list a range's sizes, so a typo of a few more digits must be
# refused, not materialised. The agent's parser has the same limit
# (cli::kMaxMicroBatchRange).
MAX_MICRO_BATCH_RANGE = 1 << 20

# elasticrun has already checked the whole file with a full YAML parser
# (src/cli/job_config.cpp) before it started this worker. This is a reader
# for the forms that section is written in (block and flow mappings of plain
# scalars, comments), not a YAML parser: PyYAML is not a dependency, and its
# YAML 1.1 would read 1e-4 as a string where elasticrun reads a number.
# Anything else in the section is refused with the line, not guessed at.

MAX_CONFIG_BYTES = 1 << 20
_OVERRIDE_KEYS = ("learningRate", "microBatchSize", "minMicroBatchSize", "maxMicroBatchSize")
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_KEY_RE = re.compile(r"""(?P<key>"[^"]*"|'[^']*'|[^\s:#'"{}\[\],][^:#]*?)\s*:(?:\s+|\Z)(?P<rest>.*)\Z""")

Overrides = Dict[int, Dict[str, Union[float, int]]]


def load_overrides(path: Optional[Union[str, os.PathLike]] = None) -> Overrides:
    """{world size in nodes: {"learningRate": float, "microBatchSize": int,
    "minMicroBatchSize": int, "maxMicroBatchSize": int}} from the
    worldSizeOverrides section of the job config file at path
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
            if name == "learningRate":
                if not _FLOAT_RE.match(text):
                    self.fail(item_line, f"{where}: expected a number, got {text!r}")
                entry[name] = float(text)
                if entry[name] < 0:
                    self.fail(item_line, f"{where}: must not be negative")
                continue
            if not _INT_RE.match(text):
                self.fail(item_line, f"{where}: expected an integer, got {text!r}")
            entry[name] = int(text)
            if entry[name] < 1:
                self.fail(item_line, f"{where}: must be at least 1")
            why = _micro_batch_conflict(entry, name)
            if why:
                self.fail(item_line, f"{where}: {why}")
        if "minMicroBatchSize" in entry and "maxMicroBatchSize" not in entry:
            self.fail(line, f"{key}.minMicroBatchSize: a range needs maxMicroBatchSize")
        out[nodes] = entry


def _micro_batch_conflict(entry: Mapping[str, object], name: str) -> Optional[str]:
    """Why the micro-batch key `name`, just added to entry, does not go with
    what entry held before; None when it does. The agent's parser
    (src/cli/job_config.cpp) refuses the same, at the same key."""
    value = entry[name]
    if name == "maxMicroBatchSize" and value > MAX_MICRO_BATCH_RANGE:  # type: ignore[operator]
        return f"must be at most {MAX_MICRO_BATCH_RANGE}"
    if name == "microBatchSize" and ("minMicroBatchSize" in entry or "maxMicroBatchSize" in entry):
        return "one size, or a range (minMicroBatchSize, maxMicroBatchSize), not both"
    if name != "microBatchSize" and "microBatchSize" in entry:
        return "a range, or one size (microBatchSize), not both"
    low, high = entry.get("minMicroBatchSize"), entry.get("maxMicroBatchSize")
    if low is not None and high is not None and low > high:  # type: ignore[operator]
        return f"the range's minimum {low} is above its maximum {high}"
    return None


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
