"""The rendezvous survives the loss of its host (docs/protocol.md, "Standby").

Three agents on 127.0.0.1-3, one gloo worker each, no `elasticctl store`:
agent 1 hosts the rendezvous store (the endpoint is its address), agent 2
the store's standby (--rdzv-conf standby_endpoint on its address), agent 3
neither. kill -9 of agent 1 takes its worker and the store with it; the
standby takes over, every connection of agents 2 and 3 moves to it, and the
job goes on at two with no operator action; a fourth agent started later
with the same flags joins it there. The generations are right, the agents
exit 0 at the end, and no process is left behind.
"""

from __future__ import annotations

import signal

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import RDZV_CONF, Job
from launcher_fixtures import (
    elasticrun,  # noqa: F401 (fixture)
    free_port,
    marker,  # noqa: F401 (fixture)
    wait_for,
)


def test_killing_the_node_that_hosts_the_store_leaves_a_running_two_node_job(
        procs, marker, elasticrun, tmp_path):  # noqa: F811
    port, standby_port = free_port(), free_port()
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{port}",
              extra=["--faulty-scale-down-timeout", "2"],
              rdzv_conf=f"{RDZV_CONF},standby_endpoint=127.0.0.2:{standby_port}")
    job.start_agent(1)
    wait_for(lambda: "hosting the rendezvous store" in job.agents[1].stderr() or None,
             "agent 1 hosting the store")
    job.start_agent(2)
    wait_for(lambda: "serving the rendezvous store's standby" in job.agents[2].stderr() or None,
             "agent 2 serving the standby")
    job.start_agent(3)
    g3 = job.wait_steady(3)

    job.agents[1].popen.send_signal(signal.SIGKILL)
    job.agents[1].wait(30)
    g2 = job.wait_steady(2, after_gen=g3)
    assert job.agents_in(g2) == {2, 3}
    assert "this node's standby takes over" in job.agents[2].stderr()
    # A replacement started with the same flags could host a second, empty
    # store on the lost endpoint (it is this machine's); it finds the
    # standby serving and joins the job there instead.
    job.start_agent(4)
    g3b = job.wait_steady(3, after_gen=g2)
    assert job.agents_in(g3b) == {2, 3, 4}
    assert "serves the job (it took over): joining it" in job.agents[4].stderr()
    job.finish({2: 0, 3: 0, 4: 0})
    job.check_generations()
