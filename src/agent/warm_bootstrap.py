# elasticrun --warm-start: a Python worker interpreter started ahead of time.
#
# The agent runs this with `python -u -c <this file> MODULES` and fd 3 one end
# of a Unix socket pair. It imports MODULES (comma-separated; "torch" by
# default) at once, then waits for one message on fd 3 saying which training
# script to run, with which sys.argv, environment, working directory and
# standard streams (passed as descriptors), and runs it as `python -u` would
# have: as the real __main__ module, with sys.path[0] the script's directory.
# Once the imports are done it writes one byte, "R", on fd 3 (the agent may
# wait for that before it offers this node to a job). EOF on fd 3 means the
# agent no longer needs this interpreter: exit 0.
#
# Message: 4-byte little-endian length, then that many bytes: NUL-separated
# fields "elasticrun-warm-1", mode ("script", "module" or "run_path"), the
# working directory ("" keeps it), the streams whose descriptors come with
# the message ("stdout,stderr", "stdout", "stderr" or ""), argc, the index in
# argv where sys.argv begins, the worker's whole command line as the agent
# would have exec'd it (argc entries), then every "NAME=value" of the
# environment. Bytes, not text: an
# argument or variable that is not UTF-8 arrives as it would through execve.
# The descriptors ride on the message's first bytes (SCM_RIGHTS).
# docs/warm-start.md describes the protocol.
import os
import sys


def _elasticrun_warm_start():
    import socket

    for name in (sys.argv[1] if len(sys.argv) > 1 else "").split(","):
        if name:
            try:
                __import__(name)
            except BaseException:  # noqa: BLE001 - the script's own import reports it
                pass
    channel = socket.socket(fileno=3)
    try:
        channel.sendall(b"R")
    except OSError:
        # The agent has closed its end: after sending a worker (then the
        # message is waiting below) or to let this interpreter go (EOF).
        pass
    data, fds = b"", []
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "little"):
        chunk, got, _, _ = socket.recv_fds(channel, 1 << 16, 2)
        fds += got
        if not chunk:
            os._exit(0)  # the agent let this interpreter go
        data += chunk
    channel.close()
    fields = data[4:].split(b"\0")
    if fields[0] != b"elasticrun-warm-1":
        sys.stderr.write("elasticrun warm start: unknown message from the agent\n")
        os._exit(1)
    mode, cwd, streams = fields[1].decode(), fields[2], fields[3].decode()
    argc, offset = int(fields[4]), int(fields[5])
    argv = fields[6:6 + argc]
    for stream, fd in zip([s for s in streams.split(",") if s], fds):
        os.dup2(fd, 1 if stream == "stdout" else 2)
        os.close(fd)
    os.environb.clear()
    for entry in fields[6 + argc:]:
        name, _, value = entry.partition(b"=")
        os.environb[name] = value
    if cwd:
        os.chdir(cwd)
    # What the interpreter would have seen had the agent exec'd the command.
    sys.orig_argv = [os.fsdecode(a) for a in argv]
    sys.argv = sys.orig_argv[offset:]
    _elasticrun_set_cmdline(argv)
    return mode


def _elasticrun_set_cmdline(argv):
    # ps, top and pgrep -f show the worker's command, not this bootstrap:
    # the command line is rewritten in place (what setproctitle does), in
    # the space the bootstrap's own arguments took, cut short if it is longer.
    try:
        import ctypes

        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end
        text = b"\0".join(argv)[:end - start - 1]
        ctypes.memmove(start, text.ljust(end - start, b"\0"), end - start)
    except Exception:  # noqa: BLE001 - cosmetic: a kernel without these fields
        pass


def _elasticrun_run(mode):
    # Everything this needs is local: the module's globals, where the
    # bootstrap lives, are emptied first so the script starts with what
    # `python -u` gives it.
    import builtins
    import importlib.machinery
    import os
    import runpy
    import sys

    g = sys.modules["__main__"].__dict__
    argv0, script = sys.argv[0], _elasticrun_script
    g.clear()
    g.update(__name__="__main__", __doc__=None, __package__=None, __spec__=None,
             __loader__=None, __builtins__=builtins, __annotations__={})
    if mode == "module":
        sys.path[0] = os.getcwd()
        script(runpy._run_module_as_main, argv0)
        return
    if mode == "run_path":
        script(runpy.run_path, argv0, run_name="__main__")
        return
    # Python 3.9+ gives the main script an absolute __file__ and compiles it so.
    file = os.path.abspath(argv0) if sys.version_info >= (3, 9) else argv0
    try:
        with open(argv0, "rb") as f:
            code = compile(f.read(), file, "exec")
    except OSError as e:
        sys.stderr.write(f"{sys.executable}: can't open file {argv0!r}: "
                         f"[Errno {e.errno}] {e.strerror}\n")
        sys.exit(2)
    sys.path[0] = os.path.dirname(os.path.realpath(argv0))
    g.update(__loader__=importlib.machinery.SourceFileLoader("__main__", argv0),
             __file__=file, __cached__=None)
    script(exec, code, g)


def _elasticrun_script(run, *args, **kwargs):
    # An uncaught exception is reported as under `python -u script.py`:
    # sys.excepthook (the script's own, if it set one) gets a traceback
    # without this bootstrap's frames (runpy's stay, as under -m); the exit is the
    # interpreter's (1, or SIGINT for KeyboardInterrupt) with its cleanup.
    import sys

    try:
        run(*args, **kwargs)
    except SystemExit:
        raise
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next  # what the report prints
        sys.excepthook(type(e), e, e.__traceback__)
        sys.excepthook = lambda *_: None  # reported already; the script is over
        raise


_elasticrun_run(_elasticrun_warm_start())
