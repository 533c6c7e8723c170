"""The node's dataset cache, as a worker sees it (docs/memory-tier.md,
"Dataset cache").

Reading and decoding a dataset shard (decompressing, tokenising, parsing
images into arrays) can take longer than a restarted worker's whole
restore. Under elasticrun each agent owns a directory in shared memory
(tmpfs), named in ELASTICRUN_DATA_CACHE_DIR, that outlives its workers and
goes with the agent (its death watch removes it when the agent is
killed). ``cached(key, make)`` returns what ``make()`` returns, arrays,
putting it there the first time; a later call with the same key on this
node, in this process or in a worker that restarted or re-formed since,
maps it instead (``numpy.load(mmap_mode="r")``): no read from storage, no
decode, no copy until a page is touched, and one copy in memory for every
local rank that maps it.

    from elasticrun.data import cached

    def shard(i):
        return decode(read(paths[i]))        # an array, or a dict of arrays
    tokens = cached(f"train-{i}", lambda: shard(i))

A value is a numpy array or a dict of them (str keys), and comes back as
read-only arrays mapped from shared memory (``torch.from_numpy`` takes
them; copy one to write to it). Outside elasticrun, or with the agent's
``--data-cache-limit 0``, ``cached`` simply calls ``make()``.

The layout: ``<key>/<name>.npy`` per array (``__value__.npy`` for an
array alone), written into ``<key>.partial-<pid>`` and published by a
rename, so a worker killed while writing leaves nothing that maps, and two
local ranks writing one key at once both leave a whole copy (the second
rename finds the first in place and keeps it). ELASTICRUN_DATA_CACHE_LIMIT
caps the bytes held: a value that would not fit beside what is there is
not cached (a warning once), and ``make()``'s own result is returned.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

DATA_CACHE_DIR_ENV = "ELASTICRUN_DATA_CACHE_DIR"
DATA_CACHE_LIMIT_ENV = "ELASTICRUN_DATA_CACHE_LIMIT"
_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
_ALONE = "__value__"
_PARTIAL = ".partial-"


class DataCache:
    """The agent's dataset cache directory (``from_env()``), or any
    directory (tests)."""

    def __init__(self, root: Path, limit: Optional[int] = None):
        self.root, self.limit = Path(root), limit
        self.hits = self.misses = 0
        self._warned = False

    @classmethod
    def from_env(cls) -> Optional["DataCache"]:
        """The agent's cache, or None outside elasticrun (or with it off)."""
        root = os.environ.get(DATA_CACHE_DIR_ENV)
        if not root:
            return None
        limit = os.environ.get(DATA_CACHE_LIMIT_ENV)
        return cls(Path(root), int(limit) if limit else None)

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        """The value cached under `key`, mapped; else make()'s, cached."""
        if not _KEY.match(key):
            raise ValueError(f"elasticrun.data: {key!r} is not a cache key: letters, digits, "
                             "'.', '_' and '-', at most 200, not starting with '.' or '-'")
        found = self._load(self.root / key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        value = make()
        arrays = _arrays_of(value)
        nbytes = sum(a.nbytes for a in arrays.values())
        held = self.held_bytes() if self.limit is not None else 0
        if self.limit is not None and held + nbytes > self.limit:
            if not self._warned:
                warnings.warn(f"elasticrun.data: not caching {key!r} ({nbytes} bytes): the "
                              f"dataset cache holds at most {self.limit} bytes "
                              f"(--data-cache-limit) and has {held}",
                              RuntimeWarning, stacklevel=2)
                self._warned = True
            return value
        self._write(key, arrays)
        mapped = self._load(self.root / key)
        return value if mapped is None else mapped

    def held_bytes(self) -> int:
        total = 0
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                try:
                    total += os.stat(os.path.join(dirpath, f)).st_size
                except OSError:
                    pass  # removed meanwhile
        return total

    def _write(self, key: str, arrays: dict) -> None:
        import numpy as np

        partial = self.root / f"{key}{_PARTIAL}{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            for name, a in arrays.items():
                np.save(partial / f"{name}.npy", np.ascontiguousarray(a), allow_pickle=False)
            try:
                os.rename(partial, self.root / key)
            except OSError:
                pass  # another local rank published it first: theirs is kept
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    @staticmethod
    def _load(directory: Path) -> Any:
        import numpy as np

        try:
            files = sorted(directory.iterdir())
        except FileNotFoundError:
            return None
        out = {f.name[:-4]: np.load(f, mmap_mode="r", allow_pickle=False)
               for f in files if f.name.endswith(".npy")}
        if not out:
            return None  # not a value of ours (a stray directory): get() returns make()'s
        return out[_ALONE] if set(out) == {_ALONE} else out


def _arrays_of(value: Any) -> dict:
    import numpy as np

    if isinstance(value, np.ndarray):
        return {_ALONE: value}
    if isinstance(value, dict) and value and all(
            isinstance(k, str) and _KEY.match(k) and k != _ALONE and isinstance(v, np.ndarray)
            for k, v in value.items()):
        return value
    raise TypeError("elasticrun.data: a cached value is a numpy array or a non-empty dict of "
                    "them (str keys: letters, digits, '.', '_', '-'); got "
                    f"{type(value).__name__}")


_cache: Optional[DataCache] = None
_read = False


def cache() -> Optional[DataCache]:
    """This process's view of the agent's cache (None without one)."""
    global _cache, _read
    if not _read:
        _cache, _read = DataCache.from_env(), True
    return _cache


def cached(key: str, make: Callable[[], Any]) -> Any:
    """make()'s value, from the node's dataset cache when it holds `key`
    (mapped, read-only), else made and put there. Without a cache (outside
    elasticrun, --data-cache-limit 0): make()."""
    c = cache()
    return make() if c is None else c.get(key, make)
