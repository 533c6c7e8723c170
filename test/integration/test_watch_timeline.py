"""For a person at a terminal: `elasticctl watch` and `elasticctl timeline`
(docs/elasticctl.md) on a real elastic job of SDK workers. The watch runs in
a real terminal (a tmux server of the test's own, 80x24): its frame shows
the job's sizes and a progress bar per rank, redraws in place as a third
node joins, holds no escape sequence that leaked into the text and no line
wider than the terminal, and Ctrl-C ends it with status 0 and the shell's
screen given back. The agents' event logs then make a timeline PNG (a real
PNG of the chart's size) and a self-contained HTML page.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import elasticctl  # noqa: F401 (fixture)
from elastic_job import GEN_TIMEOUT_S, SDK_WORKER, Job, store  # noqa: F401 (fixture)
from launcher_fixtures import elasticrun, marker, wait_for  # noqa: F401 (fixture)

TMUX = shutil.which("tmux")


class Terminal:
    """A tmux server on a socket of the test's own, one 80x24 window."""

    def __init__(self, tmp_path: Path):
        self.socket = str(tmp_path / "tmux.sock")

    def tmux(self, *args: str) -> str:
        # CI has no terminal of its own: say which one the window emulates.
        env = dict(os.environ, TERM="xterm-256color")
        return subprocess.run([TMUX, "-S", self.socket, *args], check=True, capture_output=True,
                              text=True, timeout=30, env=env, stdin=subprocess.DEVNULL).stdout

    def start(self, command: str) -> None:
        self.tmux("new-session", "-d", "-x", "80", "-y", "24", "-s", "w", command)

    def screen(self) -> list[str]:
        return self.tmux("capture-pane", "-p", "-t", "w").splitlines()

    def close(self) -> None:
        subprocess.run([TMUX, "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal(tmp_path):
    if not TMUX:
        pytest.fail("tmux is missing: scripts/setup.sh installs it")
    t = Terminal(tmp_path)
    yield t
    t.close()


def rank_rows(screen: list[str]) -> dict[int, int]:
    """rank -> step, from the watch's progress table."""
    rows = {}
    for line in screen:
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit() and parts[2].startswith("[") \
                and parts[3].isdigit():
            rows[int(parts[0])] = int(parts[3])
    return rows


def test_watch_redraws_a_growing_job_in_place_and_exits_on_ctrl_c_then_the_logs_make_a_timeline(
        procs, marker, elasticrun, elasticctl, tmp_path, store, terminal):  # noqa: F811
    job = Job(procs, marker, elasticrun, tmp_path, "2:3", f"127.0.0.1:{store}", run_id="tv",
              worker=SDK_WORKER)
    logs = [tmp_path / f"agent{n}.jsonl" for n in (1, 2, 3)]
    job.start_agent(1, "--event-log", str(logs[0]))
    job.start_agent(2, "--event-log", str(logs[1]))
    g2 = job.wait_steady(2)

    terminal.start(f"{elasticctl} watch --rdzv-endpoint 127.0.0.1:{store} --rdzv-id tv "
                   f"--interval 0.3; echo WATCH-EXIT=$?; sleep 600")

    def showing(world: int):
        screen = terminal.screen()
        rows = rank_rows(screen)
        text = "\n".join(screen)
        if f"world size {world} " in text and len(rows) == world and min(rows.values()) > 0:
            return screen
        return None

    screen = wait_for(lambda: showing(2), "watch showing 2 stepping ranks", timeout=60)
    assert screen[0].startswith("job 'tv' on 127.0.0.1:"), screen
    assert "running" in screen[0], screen
    first = rank_rows(screen)

    job.start_agent(3, "--event-log", str(logs[2]))
    job.wait_steady(3, after_gen=g2)
    screen = wait_for(lambda: showing(3), "watch showing 3 ranks", timeout=60)
    text = "\n".join(screen)
    assert "ended: scale_up -> 3 nodes" in text, text
    # Redrawn in place: one frame on the screen, its steps moved on.
    assert sum(line.startswith("job 'tv'") for line in screen) == 1, text
    assert min(rank_rows(screen).values()) > max(first.values()), (first, screen)
    for line in screen:
        assert len(line) <= 80, line
        assert "\x1b" not in line and "[?" not in line and "^[" not in line, line
    assert screen[-1].startswith("Ctrl-C quits"), text

    terminal.tmux("send-keys", "-t", "w", "C-c")
    after = wait_for(lambda: (s := terminal.screen()) and any("WATCH-EXIT=" in x for x in s) and s,
                     "watch to exit on Ctrl-C", timeout=30)
    assert any(x.strip() == "WATCH-EXIT=0" for x in after), after
    # The alternate screen was given back: no frame is left on the shell's.
    assert not any(x.startswith("job 'tv'") or "Ctrl-C quits" in x for x in after), after

    job.finish({1: 0, 2: 0, 3: 0})

    png, html = tmp_path / "run.png", tmp_path / "run.html"
    for out in (png, html):
        p = procs.run([elasticctl, "timeline", *logs, "-o", out], "timeline", timeout=60)
        assert p.popen.returncode == 0, p.describe()
        assert "events over" in p.stdout(), p.describe()
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1200 and height > 600, (width, height)
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "scale_up" in page and "agent starts" in page
    assert "http" not in page and "src=" not in page

    # A log that is not one is refused with the reason, and nothing is written.
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    p = procs.run([elasticctl, "timeline", bad, "-o", tmp_path / "bad.png"], "bad", timeout=60)
    assert p.popen.returncode == 1 and "no event in 1 file" in p.stderr(), p.describe()
    assert not (tmp_path / "bad.png").exists()
