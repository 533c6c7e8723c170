"""--host-discovery-script with real agents and gloo SDK workers.

Three agents run on 127.0.0.1-3 (--local-addr), each with the same script:
`cat` of a hosts file that the test rewrites (atomically, as a cloud API's
answer changes all at once). The list, not the agents that are up, decides
who trains: an agent on an unlisted host waits as a spare, joins when its
host is listed, and leaves at an agreed step (no step lost or repeated)
when its host drops out. Every agent exits 0 when the job finishes.
"""

from __future__ import annotations

import time
from pathlib import Path

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, SDK_WORKER, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    marker,  # noqa: F401 (fixture)
    wait_for,
)


def write_hosts(path: Path, *lines: str) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def discovery_job(procs, marker, elasticrun, tmp_path, store, hosts: Path) -> Job:  # noqa: F811
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nexec cat '{hosts}'\n")
    script.chmod(0o755)
    return Job(procs, marker, elasticrun, tmp_path, "1:3", f"127.0.0.1:{store}",
               worker=SDK_WORKER,
               extra=["--host-discovery-script", str(script),
                      "--host-discovery-interval", "0.2"])


def test_the_listed_hosts_train_and_the_job_follows_the_list_as_it_changes(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, "# the job's instances", "127.0.0.1:1", "127.0.0.2")
    job = discovery_job(procs, marker, elasticrun, tmp_path, store, hosts)
    for n in (1, 2, 3):
        job.start_agent(n)
    g2 = job.wait_steady(2)
    assert job.agents_in(g2) == {1, 2}
    # It waits as a spare of round 1 (the closer says it is not listed) or,
    # when it joined after round 1 closed, of round 2.
    wait_for(lambda: "spare" in job.agents[3].stderr(), "127.0.0.3 to wait as a spare",
             timeout=GEN_TIMEOUT_S)
    time.sleep(1.5)  # past the scaling timeout (1 s): an unlisted spare is no capacity
    assert max(job.by_gen("start")) == g2

    # A new instance appears in the list: the job grows onto it.
    write_hosts(hosts, "127.0.0.1:1", "127.0.0.2", "127.0.0.3")
    g3 = job.wait_steady(3, after_gen=g2)
    job.stopped_together(g2, 2, g3, 3)

    # One is about to be scaled in: it leaves the list and the job at one
    # agreed step, and waits as a spare.
    write_hosts(hosts, "127.0.0.1", "127.0.0.3")
    g2b = job.wait_steady(2, after_gen=g3)
    job.stopped_together(g3, 3, g2b, 2)
    assert job.agents_in(g2b) == {1, 3}
    leader_err = "".join(job.agents[n].stderr() for n in (1, 2, 3))
    assert "the host discovery script no longer lists 127.0.0.2" in leader_err, leader_err
    assert job.agents[2].popen.poll() is None, job.agents[2].describe()

    job.finish({1: 0, 2: 0, 3: 0})
    job.check_generations()


def test_a_failing_script_keeps_the_last_list_and_a_bad_line_is_named(
        procs, marker, elasticrun, tmp_path, store):  # noqa: F811
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, "127.0.0.1", "127.0.0.2")
    job = discovery_job(procs, marker, elasticrun, tmp_path, store, hosts)
    for n in (1, 2):
        job.start_agent(n)
    g2 = job.wait_steady(2)
    # The cloud API answers garbage: the agents say so and keep training on
    # the last good list rather than stopping the job.
    write_hosts(hosts, "127.0.0.1", "127.0.0.2:many")
    wait_for(lambda: "127.0.0.2:many" in job.agents[1].stderr() + job.agents[2].stderr(),
             "an agent to name the bad line", timeout=GEN_TIMEOUT_S)
    time.sleep(1.5)
    assert max(job.by_gen("start")) == g2
    job.finish({1: 0, 2: 0})
    job.check_generations()
