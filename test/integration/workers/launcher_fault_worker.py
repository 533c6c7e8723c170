"""A worker that fails on request, for the launcher fault tests. No torch
import unless --raise-rank asks for torch's @record.

Every rank writes <dir>/started.rank<R>.attempt<A> (its pid) first, so a test
knows when it runs. A rank that is told to fail waits until every rank of
its attempt has started, so the others are surely running when it fails;
ranks that are not told to fail sleep until a signal ends them.

  --fail-rank R --exit-code C   rank R exits with C
  --fail-until-attempt N        ... but only while TORCHELASTIC_RESTART_COUNT < N;
                                from attempt N on, every rank exits 0
  --sigkill-rank R              rank R kills itself with SIGKILL
  --raise-rank R                rank R raises inside a function decorated with
                                torch's @record (which writes TORCHELASTIC_ERROR_FILE)
  --ignore SIG,...              ignore these signals
  --note SIG,...                on each of these signals append a line to
                                <dir>/got-<SIG>.rank<R> and keep running
  --exit-on SIG,...             on each of these signals write
                                <dir>/got-<SIG>.rank<R>, then die of the signal
  --sigterm-exit C               on SIGTERM exit with status C (a worker whose
                                cleanup fails)
  --grandchild                  fork a child that writes <dir>/grandchild.rank<R>
                                (its pid) and sleeps forever
  --succeed                     every rank exits 0 once all have started
"""

import argparse
import os
import signal
import sys
import time

args = None
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def write(name: str, text: str, append: bool = False) -> None:
    path = os.path.join(args.dir, name)
    if append:
        with open(path, "a") as f:
            f.write(text + "\n")
        return
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def signals(spec: str) -> list:
    return [getattr(signal, s) for s in spec.split(",") if s]


def wait_all_started() -> None:
    names = [f"started.rank{r}.attempt{attempt}" for r in range(world)]
    while not all(os.path.exists(os.path.join(args.dir, n)) for n in names):
        time.sleep(0.02)


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def grandchild() -> None:
    pid = os.fork()
    if pid == 0:
        try:
            write(f"grandchild.rank{rank}", str(os.getpid()))
            sleep_forever()
        finally:
            os._exit(0)


def raise_under_record() -> None:
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def train():
        raise ValueError(f"launcher fault worker: rank {rank} raised on purpose")

    train()


def main() -> None:
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--fail-rank", type=int)
    p.add_argument("--exit-code", type=int, default=1)
    p.add_argument("--fail-until-attempt", type=int)
    p.add_argument("--sigkill-rank", type=int)
    p.add_argument("--raise-rank", type=int)
    p.add_argument("--ignore", default="")
    p.add_argument("--note", default="")
    p.add_argument("--exit-on", default="")
    p.add_argument("--sigterm-exit", type=int)
    p.add_argument("--grandchild", action="store_true")
    p.add_argument("--succeed", action="store_true")
    args = p.parse_args()

    for sig in signals(args.ignore):
        signal.signal(sig, signal.SIG_IGN)
    for sig in signals(args.note):
        signal.signal(
            sig, lambda s, _f: write(f"got-{signal.Signals(s).name}.rank{rank}", "1", append=True)
        )

    def exit_on(s, _f):
        write(f"got-{signal.Signals(s).name}.rank{rank}", str(os.getpid()))
        # Die of the signal itself, as a worker without a handler would.
        signal.signal(s, signal.SIG_DFL)
        os.kill(os.getpid(), s)

    for sig in signals(args.exit_on):
        signal.signal(sig, exit_on)
    if args.sigterm_exit is not None:
        signal.signal(signal.SIGTERM, lambda _s, _f: os._exit(args.sigterm_exit))
    if args.grandchild:
        grandchild()
    write(f"started.rank{rank}.attempt{attempt}", str(os.getpid()))

    if args.raise_rank == rank:
        wait_all_started()
        raise_under_record()
    if args.sigkill_rank == rank:
        wait_all_started()
        os.kill(os.getpid(), signal.SIGKILL)
    if args.fail_rank is not None:
        if args.fail_until_attempt is not None and attempt >= args.fail_until_attempt:
            wait_all_started()
            sys.exit(0)
        if args.fail_rank == rank:
            wait_all_started()
            sys.exit(args.exit_code)
    if args.succeed:
        wait_all_started()
        sys.exit(0)
    sleep_forever()


if __name__ == "__main__":
    main()
