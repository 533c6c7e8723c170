"""elasticrun.data: the node's dataset cache (python/elasticrun/data.py), on
a directory of its own (no agent here; test/integration/test_data_cache.py
runs it under one)."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

from elasticrun import data


def test_a_value_is_made_once_and_then_mapped_read_only(tmp_path):
    c = data.DataCache(tmp_path)
    made = []

    def make():
        made.append(1)
        return np.arange(1000, dtype=np.int32)

    first = c.get("shard-0", make)
    again = c.get("shard-0", make)
    assert made == [1]
    assert (c.hits, c.misses) == (1, 1)
    assert np.array_equal(first, np.arange(1000)) and np.array_equal(again, first)
    assert isinstance(again, np.memmap) and not again.flags.writeable
    # Another process's view (a restarted worker): mapped, never made.
    later = data.DataCache(tmp_path).get("shard-0", lambda: pytest.fail("made again"))
    assert np.array_equal(later, first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0"]


def test_a_dict_of_arrays_comes_back_whole(tmp_path):
    value = {"tokens": np.arange(12, dtype=np.int64).reshape(3, 4),
             "labels": np.array([1.5, -2.0], dtype=np.float32)}
    data.DataCache(tmp_path).get("train.part-7", lambda: value)
    got = data.DataCache(tmp_path).get("train.part-7", lambda: pytest.fail("made again"))
    assert set(got) == {"tokens", "labels"}
    for k in value:
        assert got[k].dtype == value[k].dtype and np.array_equal(got[k], value[k])


def test_over_the_limit_a_value_is_returned_but_not_cached(tmp_path):
    c = data.DataCache(tmp_path, limit=4096)
    c.get("small", lambda: np.zeros(100, dtype=np.uint8))
    with pytest.warns(RuntimeWarning, match="holds at most 4096 bytes"):
        big = c.get("big", lambda: np.ones(8192, dtype=np.uint8))
    assert big.sum() == 8192 and not isinstance(big, np.memmap)
    assert not (tmp_path / "big").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_bad_keys_and_values_are_errors_that_leave_nothing(tmp_path):
    c = data.DataCache(tmp_path)
    for key in ("", ".hidden", "-x", "a/b", "../up", "x" * 201):
        with pytest.raises(ValueError, match="is not a cache key"):
            c.get(key, lambda: np.zeros(1))
    with pytest.raises(TypeError, match="a numpy array or a non-empty dict"):
        c.get("obj", lambda: [1, 2, 3])
    with pytest.raises(TypeError):
        c.get("obj", lambda: {"a/b": np.zeros(1)})
    assert list(tmp_path.iterdir()) == []


def _write_same_key(root: str, start, out) -> None:
    start.wait()
    value = data.DataCache(root).get("shared", lambda: np.full(200_000, os.getpid() % 7, np.int16))
    out.put(int(value[0]))


def test_two_ranks_writing_one_key_at_once_leave_one_whole_copy(tmp_path):
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_write_same_key, args=(str(tmp_path), start, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    got = [out.get(timeout=5), out.get(timeout=5)]
    kept = np.load(tmp_path / "shared" / "__value__.npy")
    assert (kept == kept[0]).all() and len(kept) == 200_000
    # Each saw a whole copy: its own, or the one published first.
    assert all(0 <= g < 7 for g in got)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared"]


def test_without_an_agents_cache_cached_makes_the_value(monkeypatch):
    monkeypatch.delenv(data.DATA_CACHE_DIR_ENV, raising=False)
    monkeypatch.setattr(data, "_read", False)
    assert data.cache() is None
    assert data.cached("k", lambda: 42) == 42
