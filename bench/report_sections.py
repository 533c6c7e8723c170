"""Keeps several generated reports in one markdown file.

Each benchmark script owns one section of docs/benchmarks.md, delimited by
HTML comments, and replaces only that section, so running one benchmark
never erases another's results.
"""

from pathlib import Path


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
