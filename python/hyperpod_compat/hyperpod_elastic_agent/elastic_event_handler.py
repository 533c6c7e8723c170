"""elastic_event_detected(), as hyperpodrun's workers call it.

True once this rank received the scale event's SIGUSR1; with
HYPERPOD_SIGNAL_COORDINATION=distributed, once any rank did (an all-reduce
over the default process group: then every rank must call it at the same
step, as under hyperpodrun). Importing it handles SIGUSR1 and tells the
agent this worker may be signalled (elasticrun.attach()), so a scale event
that comes before the first check does not kill the worker.

A script that also reports its steps through elasticrun.step(n) gets
elasticrun's agreed stop step instead (every rank stops at the same step
without a collective).
"""

import elasticrun

elasticrun.attach()


def elastic_event_detected() -> bool:
    """Whether this worker should save and return now."""
    return elasticrun.elastic_event_detected()
