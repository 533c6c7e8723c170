"""The job secret (ELASTICRUN_SECRET_FILE, --rdzv-conf secret_file; docs/security.md):
agents that hold it form a job on a rendezvous store that asks for it; an
agent without it, or with another one, is refused at connect with a reason,
the store logs the refusal, and the job trains on untouched; elasticctl
needs the secret too, and so does the agents' HTTP API (a request signed
here in Python, as docs/security.md shows, is served once). (The handshake on the wire, a replayed one included,
is in test/unit/store_auth_test.cpp.)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import urllib.error
import urllib.request

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, RDZV_CONF, Job
from launcher_fixtures import elasticrun, free_port, marker, wait_for  # noqa: F401 (fixture)


def http(url: str, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def signed(api: str, secret: bytes, target: str) -> dict:
    """The Authorization header of GET `target` (docs/security.md, "HTTP")."""
    status, nonce = http(f"{api}/auth/nonce")
    assert status == 200, nonce
    data = b"elasticrun http\nGET\n" + target.encode() + b"\n" + nonce.encode() + b"\n"
    mac = hmac.new(secret, data, hashlib.sha256).hexdigest()
    return {"Authorization": f"Elasticrun-HMAC nonce={nonce}, mac={mac}"}


def test_only_agents_with_the_job_secret_join_and_the_others_are_refused_and_logged(
        procs, marker, elasticrun, elasticctl, tmp_path):  # noqa: F811
    assert "ELASTICRUN_SECRET_FILE" not in os.environ
    secret = tmp_path / "job.secret"
    secret.write_text(secrets.token_hex(32) + "\n")
    other = tmp_path / "other.secret"
    other.write_text(secrets.token_hex(32) + "\n")
    endpoint = f"127.0.0.1:{free_port()}"
    # Agent 1 hosts the store, with the secret, and serves the HTTP API (whose
    # requests to the store must not hold it open at the end of the job).
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", endpoint, run_id="secret",
              env={"ELASTICRUN_SECRET_FILE": str(secret)})
    job.start_agent(1, "--metrics-port", "0")
    wait_for(lambda: "hosting the rendezvous store" in job.agents[1].stderr() or None,
             "agent 1 to host the store")
    job.start_agent(2)
    g2 = job.wait_steady(2)

    # Agent 1's HTTP API asks for the secret too: GET /status signed, once.
    m = wait_for(lambda: re.search(r"serving metrics and the HTTP API on (http://[0-9.:]+)",
                                   job.agents[1].stderr()), "agent 1 to serve HTTP")
    api, key = m.group(1), secret.read_bytes().rstrip(b"\n")
    status, body = http(f"{api}/status")
    assert status == 401 and "asks for the job secret" in body, body
    header = signed(api, key, "/status")
    status, body = http(f"{api}/status", header)
    assert status == 200 and '"world_size": 2' in body, body
    status, body = http(f"{api}/status", header)  # replayed
    assert status == 401 and "spent" in body, body
    assert http(f"{api}/metrics")[0] == 200

    # Without a secret, and with another one (named by --rdzv-conf): refused
    # at connect, exit 2, saying why; never a member.
    job.env = {}
    none = job.start_agent(3)
    assert none.wait(GEN_TIMEOUT_S) == 2, none.describe()
    assert "asks for the job's secret, and this client has none" in none.stderr()
    job.rdzv_conf = f"{RDZV_CONF},secret_file={other}"
    wrong = job.start_agent(4)
    assert wrong.wait(GEN_TIMEOUT_S) == 2, wrong.describe()
    assert "refused this client's proof of the job secret" in wrong.stderr()
    for p in (none, wrong):
        assert secret.read_text().strip() not in p.stderr()
        assert other.read_text().strip() not in p.stderr()
    host_log = job.agents[1].stderr() + job.agents[2].stderr()
    assert "refused GET /status from 127.0.0.1" in host_log
    assert "refused: VALIDATE before authenticating" in host_log
    assert "refused: a wrong proof of the job's secret" in host_log

    # elasticctl: refused without the secret, served with it.
    base = [elasticctl, "status", "--json", "--rdzv-endpoint", endpoint, "--rdzv-id", "secret"]
    ctl = procs.run(base, "status-without", timeout=GEN_TIMEOUT_S)
    assert ctl.popen.returncode == 2, ctl.describe()
    assert "ELASTICRUN_SECRET_FILE" in ctl.stderr()
    ctl = procs.run([*base, "--secret-file", str(secret)], "status-with", timeout=GEN_TIMEOUT_S)
    assert ctl.popen.returncode == 0, ctl.describe()
    assert '"world_size": 2' in ctl.stdout()

    # The job never noticed: the same generation trains on and finishes.
    job.finish({1: 0, 2: 0})
    assert max(job.by_gen("start")) == g2
    assert {e["world"] for e in job.by_gen("finish")[g2]} == {2}
    assert secret.read_text().strip() not in host_log
