"""`elasticctl store` as a command: port reporting, signals, bad flags, busy
ports, and a standby that takes over."""

import signal
import socket
import struct
import subprocess
import sys

import pytest

from conftest import PING, STOP_TIMEOUT_S, handshake, start_our_store, venv_env
from launcher_fixtures import wait_for


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


def test_a_standby_store_takes_over_with_the_data_when_its_primary_is_killed(procs, elasticctl):
    # `elasticctl store --standby-of`: a copy that serves nobody until the
    # primary is lost (docs/protocol.md, "Standby"); then PyTorch's own
    # TCPStore client reads there what was written to the primary.
    primary = start_our_store(procs, elasticctl)
    standby_proc = procs.spawn([elasticctl, "store", "--host", "127.0.0.1", "--port", "0",
                                "--standby-of", f"127.0.0.1:{primary.port}"], "standby")
    _, standby_port = standby_proc.wait_for_listen_line()
    wait_for(lambda: "attached" in primary.proc.stderr(), "the standby attached")
    with handshake(primary.host, primary.port) as c:
        key, value = b"/written", b"before the loss"
        c.sendall(b"\x01" + struct.pack("<Q", len(key)) + key + struct.pack("<Q", len(value))
                  + value + struct.pack("<BI", PING, 7))
        assert c.recv(4) == struct.pack("<I", 7)  # held until the standby had the SET
    # The standby turns clients away: "STBY" where the PING's echo would be.
    with socket.create_connection(("127.0.0.1", standby_port), timeout=30) as s:
        s.sendall(struct.pack("<BIBI", 0, 0x3C85F7CE, PING, 9))
        answer = b""
        while len(answer) < 4:
            chunk = s.recv(4 - len(answer))
            assert chunk, f"the standby closed after {answer!r}"
            answer += chunk
        assert answer == b"STBY"
    primary.proc.popen.send_signal(signal.SIGKILL)
    primary.proc.wait(STOP_TIMEOUT_S)

    def serving():
        try:
            with handshake("127.0.0.1", standby_port, timeout=2):
                return True
        except (AssertionError, OSError):
            return False

    wait_for(serving, "the standby serving", timeout=30)
    out = subprocess.run(
        [sys.executable, "-c",
         "import datetime, torch.distributed as d; "
         f"s = d.TCPStore('127.0.0.1', {standby_port}, is_master=False, "
         "timeout=datetime.timedelta(seconds=30)); print(s.get('written').decode())"],
        capture_output=True, text=True, timeout=120, env=venv_env())
    assert out.stdout.strip() == "before the loss", out.stderr
    assert "takes over" in standby_proc.stderr()
    standby_proc.popen.send_signal(signal.SIGTERM)
    assert standby_proc.wait(STOP_TIMEOUT_S) == 0, standby_proc.describe()
