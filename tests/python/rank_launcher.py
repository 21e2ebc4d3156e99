"""Starts the ranks of one conftest.launch from a single process that has imported the
expensive modules (torch) once.

    python rank_launcher.py OUT NPROCS PRELOAD SCRIPT ARG...

Importing torch and torch.distributed costs two to three seconds of CPU per process, which
was most of this suite's CPU time on two cores. So this process imports the modules named
in PRELOAD (comma-separated) once, then forks one child per rank. Each child is a rank as a
freshly started `python SCRIPT ARG...` would be, with RANK and LOCAL_RANK set and its output
in OUT/log<R>.txt, except that those modules are already imported: braid, the backend and
every communicator are loaded and made after the fork, in the child. The parent does nothing
but import, fork and wait: no tensor operation runs in it, so no thread pool exists to be
lost by the fork. Each child ends as an interpreter ends (atexit handlers, non-daemon
threads joined).

The parent writes every rank's exit code (negative: the signal that ended it, as
subprocess reports it) to OUT/codes.json once all have ended. The ranks stay in the
parent's process group, so conftest ends them all with one killpg on a timeout.

Ranks started by real launchers (torchrun, braidrun, horovodrun) are tested elsewhere in
the suite with fresh interpreters.
"""

import importlib
import json
import os
import runpy
import sys
import traceback


def run_rank(out, rank, script, args):
    """In the child: becomes rank `rank` and runs SCRIPT as __main__; returns its exit code."""
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
    fd = os.open(os.path.join(out, f"log{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - reported as the interpreter would
        traceback.print_exc()
        return 1
    return 0


def main():
    out, nprocs, preload, script, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
    for module in filter(None, preload.split(",")):
        importlib.import_module(module)  # the cost paid once

    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for rank in range(nprocs):
        pid = os.fork()
        if pid == 0:
            sys.exit(run_rank(out, rank, script, args))
        pids.append(pid)
    codes = []
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    with open(os.path.join(out, "codes.json.tmp"), "w") as f:
        json.dump(codes, f)
    os.replace(os.path.join(out, "codes.json.tmp"), os.path.join(out, "codes.json"))


if __name__ == "__main__":
    main()
