"""The agents' HTTP server (--metrics-port, --server-port; docs/metrics.md,
docs/api.md) in a real elastic job: a real Prometheus server (Debian's
`prometheus`, started here on loopback) scrapes two agents, then three
after a join, then two after a release made through POST /release; its
HTTP API must answer what the job did. Malformed and oversized requests
get a 4xx and the job trains on; POST /drain makes a node leave as on
SIGTERM; GET /status answers what `elasticctl status` does.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    marker,  # noqa: F401 (fixture)
    wait_for,
)

SERVING = re.compile(rb"serving metrics and the HTTP API on http://([0-9.]+):(\d+)")
PROMETHEUS = shutil.which("prometheus")


def serving_port(proc) -> int:
    def found():
        m = SERVING.search(proc.stderr_path.read_bytes())
        return int(m.group(2)) if m else None

    return wait_for(found, f"{proc.name} to serve HTTP", timeout=60)


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, dict | str]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, data = e.code, e.read()
    text = data.decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def promql(port: int, query: str) -> dict[str, float]:
    """Instant query: {host label: value}."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    status, body = http("GET", url)
    assert status == 200 and body["status"] == "success", body
    return {r["metric"].get("host", ""): float(r["value"][1]) for r in body["data"]["result"]}


@pytest.fixture
def prometheus(procs, tmp_path):
    """Starts Prometheus on loopback with a file of scrape targets the test
    rewrites; yields (port, set_targets)."""
    if not PROMETHEUS:
        pytest.fail("no prometheus binary: scripts/setup.sh installs Debian's prometheus")
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: elasticrun\n"
        "    file_sd_configs: [{files: ['" + str(targets) + "'], refresh_interval: 1s}]\n")
    port = free_port()
    proc = procs.spawn([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], "prometheus")

    def ready():
        try:
            return http("GET", f"http://127.0.0.1:{port}/-/ready")[0] == 200 or None
        except OSError:
            return None

    wait_for(ready, "Prometheus to be ready", timeout=60, proc=proc)

    def set_targets(ports: list[int]) -> None:
        tmp = targets.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports]}]))
        tmp.rename(targets)

    yield port, set_targets
    proc.popen.send_signal(signal.SIGTERM)
    proc.wait(30)


def test_prometheus_scrapes_the_agents_through_a_join_and_a_release_made_over_http(
        procs, marker, elasticrun, elasticctl, tmp_path, store, prometheus):  # noqa: F811
    prom, set_targets = prometheus
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id="api")
    ports = {}
    for n in (1, 2):
        ports[n] = serving_port(job.start_agent(n, "--metrics-port", "0"))
    set_targets(list(ports.values()))
    g2 = job.wait_steady(2)

    def seen(query: str, want: dict[str, float]):
        return wait_for(lambda: promql(prom, query) == want or None,
                        f"Prometheus to answer {query} = {want}", timeout=GEN_TIMEOUT_S)

    hosts = {n: f"127.0.0.{n}" for n in (1, 2, 3)}
    seen("elasticrun_world_size", {hosts[1]: 2, hosts[2]: 2})

    ports[3] = serving_port(job.start_agent(3, "--server-port", "0"))
    set_targets(list(ports.values()))
    g3 = job.wait_steady(3, after_gen=g2)
    seen("elasticrun_world_size", {h: 3 for h in hosts.values()})
    seen("elasticrun_nodes", {h: 3 for h in hosts.values()})
    # The newcomer saw no round end yet.
    seen('elasticrun_scale_events_total{reason="scale_up"}', {hosts[1]: 1, hosts[2]: 1})
    leader = job.agent_of(g3, 0)
    api = f"http://127.0.0.1:{ports[leader]}"

    # GET /status answers what elasticctl status does.
    status, body = http("GET", f"{api}/status")
    assert status == 200, body
    ctl = procs.run([elasticctl, "status", "--json", "--rdzv-endpoint", f"127.0.0.1:{store}",
                     "--rdzv-id", "api"], "status", timeout=GEN_TIMEOUT_S)
    theirs = json.loads(ctl.stdout())
    assert [m["host"] for m in body["job"]["members"]] == [m["host"] for m in theirs["members"]]
    assert body["job"]["world_size"] == theirs["world_size"] == 3
    assert body["node"]["round"]["group_rank"] == 0
    assert [r["local_rank"] for r in body["node"]["ranks"]] == [0]

    # Bad requests change nothing and say why.
    for method, path, data, code in [
            ("POST", "/release", b"{not json", 400), ("POST", "/release", b'{"nodes": 0}', 400),
            ("POST", "/release", b'{"nodes": 1, "now": 1}', 400),
            ("POST", "/release", b" " * 5000, 413), ("GET", "/release", None, 405),
            ("GET", "/nowhere", None, 404)]:
        status, reply = http(method, api + path, data)
        assert status == code, (path, data[:20] if data else None, status, reply)
        assert isinstance(reply, dict) and reply["error"], reply
    # A body far over the limit: the server answers 413 and closes without
    # reading it, so the client may see only the connection end.
    try:
        status, _ = http("POST", api + "/release", b" " * 4_000_000)
        assert status == 413
    except (ConnectionError, urllib.error.URLError):
        pass
    assert http("GET", f"{api}/status")[0] == 200
    assert max(job.by_gen("start")) == g3, "a bad request changed the job"

    # POST /release does what `elasticctl release` does.
    status, body = http("POST", f"{api}/release", b'{"nodes": 1}')
    assert status == 200 and body["handled"] is True, body
    g2b = job.wait_steady(2, after_gen=g3)
    released = job.agent_of(g3, 2)
    assert released not in job.agents_in(g2b)
    members = {h for n, h in hosts.items() if n != released}
    # The released node waits as a spare: in no round, so 0.
    seen("elasticrun_world_size", {**{h: 2 for h in members}, hosts[released]: 0})
    seen('elasticrun_scale_events_total{reason="scale_down"}', {h: 1 for h in hosts.values()})
    seen("elasticrun_spare_nodes", {h: (1 if h == hosts[leader] else 0) for h in hosts.values()})

    # POST /drain: the released spare leaves as on SIGTERM.
    status, body = http("POST", f"http://127.0.0.1:{ports[released]}/drain")
    assert status == 200 and body["draining"] is True, body
    code = job.agents[released].wait(GEN_TIMEOUT_S)
    assert code in (0, 128 + signal.SIGTERM, -signal.SIGTERM), job.agents[released].describe()
    job.finish({n: 0 for n in hosts if n != released})
    job.check_generations()


def test_a_port_in_use_fails_the_agent_before_any_worker_starts(procs, elasticrun, tmp_path):  # noqa: F811
    # The server binds on a thread of its own while the node sets up; the
    # agent waits for its answer before it starts anything.
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        ran = tmp_path / "ran"
        p = procs.run([elasticrun, "--standalone", "--nproc-per-node", "2", "--metrics-port",
                       str(port), "--no-python", "/bin/sh", "-c", f"touch {ran}"],
                      "agent", timeout=60)
    assert p.popen.returncode != 0
    assert f"--server-port/--metrics-port: cannot serve HTTP on 127.0.0.1:{port}" in p.stderr()
    assert not ran.exists()
    assert not list(Path("/dev/shm").glob(f"elasticrun-*{p.pid}-*")), "the agent left /dev/shm files"
