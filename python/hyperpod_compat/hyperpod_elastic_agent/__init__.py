"""hyperpod_elastic_agent's worker API on elasticrun (elasticrun-hyperpod).

Only imported where AWS's hyperpod_elastic_agent is not installed: this
copy sits after site-packages on sys.path. A script written for hyperpodrun
imports it unchanged:

    from hyperpod_elastic_agent.elastic_event_handler import elastic_event_detected

and runs under elasticrun (or its `hyperpodrun` name) with elasticrun's
scale events.
"""
