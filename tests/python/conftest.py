"""Shared launcher for braid's Python tests.

Each test starts N real processes (torchrun-style environment: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) running one scenario of workers.py, and reads back one JSON
result per rank. One launch runs many checks, so that the suite stays within a few minutes
on two cores (starting a process that imports torch costs about a second of CPU).

The package under test comes from BRAID_PYTHON_SITE (a `pip install --target` folder, as
the CTest run builds) when set, else from the environment's installed `braid`.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.environ.get("BRAID_PYTHON_SITE")
if SITE:
    sys.path.insert(0, SITE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launch:
    """The outcome of one multi-process run: per-rank return codes, results and output."""

    def __init__(self, codes, results, output, elapsed):
        self.codes, self.results, self.output, self.elapsed = codes, results, output, elapsed

    def failures(self):
        """Every failed check as 'rank R: check: error', over all ranks that reported."""
        out = []
        for rank, res in enumerate(self.results):
            if res is None:
                continue
            for name, err in res.get("checks", {}).items():
                if err is not None:
                    out.append(f"rank {rank}: {name}: {err}")
        return out

    def assert_all_ok(self, expect_ranks=None):
        expect = range(len(self.codes)) if expect_ranks is None else expect_ranks
        for r in expect:
            assert self.codes[r] == 0, f"rank {r} exited with {self.codes[r]}\n{self.output[r][-4000:]}"
            assert self.results[r] is not None, f"rank {r} wrote no result\n{self.output[r][-4000:]}"
        fails = self.failures()
        assert not fails, "\n".join(fails[:50])
        checks = [len(self.results[r]["checks"]) for r in expect]
        assert min(checks) > 0, "no check ran"


def launch(scenario, nprocs, timeout=120, env=None, args=()):
    """Runs workers.py SCENARIO on `nprocs` local ranks; kills them all after `timeout` s."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="braid-pytest-")
    procs, logs = [], []
    base = dict(os.environ)
    if SITE:
        base["PYTHONPATH"] = SITE + os.pathsep + base.get("PYTHONPATH", "")
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(nprocs),
                OMP_NUM_THREADS="1", BRAID_TEST_OUT=tmp)
    base.update(env or {})
    start = time.monotonic()
    for rank in range(nprocs):
        e = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        log = open(os.path.join(tmp, f"log{rank}.txt"), "w+")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "workers.py"), scenario, *args],
                                      env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = start + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    elapsed = time.monotonic() - start
    results, output = [], []
    for rank in range(nprocs):
        logs[rank].seek(0)
        output.append(logs[rank].read())
        logs[rank].close()
        path = os.path.join(tmp, f"rank{rank}.json")
        results.append(json.load(open(path)) if os.path.exists(path) else None)
    if any(c is None for c in codes):
        pytest.fail(f"{scenario} on {nprocs} ranks did not finish in {timeout} s:\n" +
                    "\n".join(f"--- rank {r}\n{o[-3000:]}" for r, o in enumerate(output)))
    return Launch(codes, results, output, elapsed)


def _torch_backend_available():
    try:
        import braid.torch  # noqa: F401
        return True
    except Exception:
        return False


requires_torch = pytest.mark.skipif(not _torch_backend_available(),
                                    reason="braid.torch not importable (torch missing or backend not built)")
