"""elasticrun._release on real loopback TCP connections: a failed round's
release shuts down the connections of a join of that round, leaves alone
those opened before the join, and does nothing to a later round's join
(a failure the releaser sees late, after the process parked and went on)."""

from __future__ import annotations

import socket

import pytest

from elasticrun import _release


@pytest.fixture
def joining(monkeypatch):
    fresh = _release.Join()
    monkeypatch.setattr(_release, "joining", fresh)
    return fresh


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s
    s.close()


def connect(listener) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    return client, server


def alive(pair) -> bool:
    """Whether bytes still cross the connection both ways."""
    client, server = pair
    try:
        client.sendall(b"x")
        server.settimeout(2)
        if server.recv(1) != b"x":
            return False
        server.sendall(b"y")
        client.settimeout(2)
        return client.recv(1) == b"y"
    except OSError:
        return False


def close(*pairs) -> None:
    for pair in pairs:
        for s in pair:
            s.close()


def test_a_failed_rounds_release_cuts_its_joins_connections_and_not_older_ones(joining,
                                                                               listener):
    before = connect(listener)
    joining.begin(2)
    joined = connect(listener)
    what = _release.release_collectives(2)
    assert "shut down 2 connection(s) of the round being joined" in what  # both ends are ours
    assert not alive(joined)
    assert alive(before)
    close(before, joined)


def test_a_failure_of_an_earlier_round_seen_late_leaves_the_new_join_alone(joining, listener):
    joining.begin(1)
    joining.end()
    joining.begin(2)
    joined = connect(listener)
    assert _release.release_collectives(1) is None
    assert joining.cut(1) is None
    assert alive(joined)
    # After the join, the round is the process's: its failure is still released.
    joining.end()
    assert not joining.moved_past(2)
    close(joined)


def test_no_join_under_way_no_connection_is_cut(joining, listener):
    pair = connect(listener)
    assert _release.release_collectives(3) is None  # no process group, no join
    assert alive(pair)
    close(pair)
