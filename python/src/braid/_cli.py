"""Console scripts of the braid package: braidrun, braid-info, braid-doctor and the *_perf
tools, each the program of that name shipped in braid/bin (built with the package's
libbraid), run in place of this process with the same arguments."""

import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _run(name):
    path = os.path.join(_BIN, name)
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"{name}: this braid package has no {path} (it was built without its programs; "
                         "`pip install ./python` from braid's sources builds them)\n")
        sys.exit(127)
    os.execv(path, [name] + sys.argv[1:])


def braidrun():
    _run("braidrun")


def braid_info():
    _run("braid-info")


def braid_doctor():
    _run("braid-doctor")


def _tool(name):
    return lambda: _run(name)


allreduce_perf = _tool("allreduce_perf")
broadcast_perf = _tool("broadcast_perf")
reduce_perf = _tool("reduce_perf")
allgather_perf = _tool("allgather_perf")
reduce_scatter_perf = _tool("reduce_scatter_perf")
alltoall_perf = _tool("alltoall_perf")
gather_perf = _tool("gather_perf")
scatter_perf = _tool("scatter_perf")
sendrecv_perf = _tool("sendrecv_perf")
