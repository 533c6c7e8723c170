"""Keeps several generated reports in one markdown file, and says what
each report was measured on.

Each benchmark script owns one section of docs/benchmarks.md, delimited by
HTML comments, and replaces only that section, so running one benchmark
never erases another's results.
"""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def source_state() -> str:
    """The commit measured, in backticks, and whether the tree had changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True).stdout.strip()
        return f"`{rev}`" + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_section(path: Path, name: str, body: str, title: str = "# Benchmarks") -> None:
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        if not text.strip():
            text = (f"{title}\n\nEach section below is written by a script under bench/; "
                    f"the command that reproduces it is in the section.\n\n")
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)
