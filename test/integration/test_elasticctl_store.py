"""`elasticctl store` as a command: port reporting, signals, bad flags, busy ports."""

import signal
import socket

import pytest

from conftest import STOP_TIMEOUT_S, handshake, start_our_store


def test_store_started_on_port_0_prints_a_port_that_answers_the_protocol(our_store):
    assert our_store.host == "127.0.0.1"
    assert our_store.port != 0
    with handshake(our_store.host, our_store.port):
        pass
    # A second, independent connection works too.
    with handshake(our_store.host, our_store.port):
        pass


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_store_stops_with_exit_0_on_a_signal_while_a_client_is_connected(procs, elasticctl, sig):
    server = start_our_store(procs, elasticctl)
    # The handshake's reply proves the event loop (and so the signal
    # handlers, installed before it starts) is running.
    with handshake(server.host, server.port) as client:
        rc = server.stop(sig)
        assert rc == 0, f"exit {rc} after {sig.name}\n{server.proc.describe()}"
        # Shutdown closes client connections rather than leaving them hanging.
        client.settimeout(STOP_TIMEOUT_S)
        try:
            assert client.recv(1) == b""
        except ConnectionResetError:
            pass
    assert "listening on 127.0.0.1:" in server.proc.stdout()


@pytest.mark.parametrize(
    "flags, complaint",
    [
        (["--port", "70000"], "--port"),
        (["--port", "abc"], "--port"),
        (["--port", "-1"], "--port"),
        (["--no-such-flag"], "--no-such-flag"),
    ],
    ids=["port-out-of-range", "port-not-a-number", "port-negative", "unknown-flag"],
)
def test_store_rejects_invalid_flags_with_exit_2_and_a_message(procs, elasticctl, flags, complaint):
    proc = procs.spawn([elasticctl, "store", "--host", "127.0.0.1", *flags], "elasticctl-bad-flags")
    rc = proc.wait(STOP_TIMEOUT_S)
    assert rc == 2, proc.describe()
    assert complaint in proc.stderr(), proc.describe()
    assert "listening" not in proc.stdout(), proc.describe()


def test_store_on_a_port_already_in_use_fails_and_names_the_address(procs, elasticctl):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = procs.spawn(
            [elasticctl, "store", "--host", "127.0.0.1", "--port", str(port)], "elasticctl-busy"
        )
        rc = proc.wait(STOP_TIMEOUT_S)
    finally:
        holder.close()
    assert rc not in (0, None), proc.describe()
    assert f"127.0.0.1:{port}" in proc.stderr(), proc.describe()
    assert "listening on" not in proc.stdout(), proc.describe()
