"""elasticrun.info(), heartbeat() and report() outside elasticrun (no control file)."""

import importlib


def test_info_reads_rank_world_size_and_restart_count_from_the_launcher_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    monkeypatch.delenv("ELASTICRUN_CONTROL_FILE", raising=False)
    import elasticrun

    importlib.reload(elasticrun)
    elasticrun.heartbeat(5)
    elasticrun.report(loss=0.5, tokens_per_s=100.0)
    info = elasticrun.info()
    assert (info["rank"], info["world_size"], info["restart_count"]) == (3, 8, 2)
    assert info["last_step"] == 5
    assert info["generation"] is None and info["reason"] is None
    assert elasticrun.elastic_event_detected() is False
