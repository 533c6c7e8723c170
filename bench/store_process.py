"""`elasticctl store` on 127.0.0.1 for the benchmarks: one helper for all."""

from __future__ import annotations

import subprocess


class StoreProcess:
    """`elasticctl store` on 127.0.0.1, a free port, with `extra` flags
    (--secret-file, --standby-of); its port once it listens. A context
    manager, or stop() it."""

    def __init__(self, elasticctl: str, *extra: str):
        args = [elasticctl, "--log-level", "warn", "store", "--host", "127.0.0.1", "--port", "0",
                *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        line = self.proc.stdout.readline()
        if "listening on " not in line:
            self.proc.kill()
            raise SystemExit(f"elasticctl store did not start: {line!r}")
        self.endpoint = line.split("listening on ", 1)[1].split()[0]
        self.port = self.endpoint.rsplit(":", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
