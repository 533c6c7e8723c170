"""--spot-notice-url against a fake instance-metadata server on 127.0.0.1
that behaves as AWS's IMDSv2 does: a token from PUT /latest/api/token must
come with every read, and spot/instance-action answers 404 until the
notice, then 200 with its JSON. The noticed node leaves gracefully at an
agreed step; the job trains on without it."""

from __future__ import annotations

import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import step_log
from elastic_job import PYTHON_SDK
from launcher_fixtures import (
    RUN_TIMEOUT_S,
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    launcher_env,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "python" / "train_elastic.py"
NOTICE_PATH = "/latest/meta-data/spot/instance-action"
TOKEN = "AQAEAtoken=="


class FakeMetadata(ThreadingHTTPServer):
    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.notice = threading.Event()
        self.reads: list[str | None] = []  # the token each read carried
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{NOTICE_PATH}"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, status: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path == "/latest/api/token" and \
                self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._answer(200, TOKEN)
        else:
            self._answer(400)

    def do_GET(self):
        token = self.headers.get("X-aws-ec2-metadata-token")
        self.server.reads.append(token)
        if token != TOKEN:
            self._answer(401)
        elif self.path != NOTICE_PATH or not self.server.notice.is_set():
            self._answer(404, "<html>Not Found</html>")
        else:
            self._answer(200, json.dumps({"action": "terminate", "time": "2026-12-02T22:10:00Z"}))


@pytest.fixture
def metadata():
    server = FakeMetadata()
    yield server
    server.shutdown()
    server.server_close()


def test_a_spot_notice_makes_its_node_leave_gracefully_and_the_job_goes_on(
        procs, marker, elasticrun, metadata, tmp_path):  # noqa: F811
    port = free_port()
    base = [elasticrun, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "spot"]
    train = [TRAIN, "--steps", "40", "--step-s", "0.05", "--ckpt", tmp_path / "ckpt",
             "--log", tmp_path / "log"]
    env = launcher_env(marker, tmp_path / "tmp", PYTHONPATH=str(PYTHON_SDK), OMP_NUM_THREADS="1")
    steady = procs.spawn(base + train, "on-demand", env=env)
    spot = procs.spawn(base + ["--spot-notice-url", metadata.url, "--spot-notice-interval", "0.2"]
                       + train, "spot", env=env)

    def both_trained() -> bool:
        got = step_log.by_rank(tmp_path / "log")
        return len(got) == 2 and all(len(r) >= 5 and r[-1]["world"] == 2 for r in got.values())
    wait_for(both_trained, "five steps at world size 2", others=(steady, spot))
    metadata.notice.set()
    assert spot.wait(RUN_TIMEOUT_S) == 128 + signal.SIGTERM, spot.describe()
    assert steady.wait(RUN_TIMEOUT_S) == 0, steady.describe()
    said = spot.stderr()
    assert f"spot interruption notice from {metadata.url}" in said, said
    stop = int(next(line for line in said.splitlines()
                    if "every worker stops at step" in line).rsplit(" ", 1)[1])
    assert (tmp_path / "ckpt" / f"step_{stop:09d}").is_dir()
    steps = step_log.by_step(tmp_path / "log")
    assert sorted(steps) == list(range(1, 41)), "a step lost or repeated"
    assert {e["world"] for s in range(stop + 1, 41) for e in steps[s]} == {1}
    # IMDSv2: every read carried the token.
    assert metadata.reads and set(metadata.reads) == {TOKEN}, metadata.reads
