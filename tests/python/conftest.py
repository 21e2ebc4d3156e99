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
import subprocess
import sys
import tempfile
import time

import pytest

from ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.environ.get("BRAID_PYTHON_SITE")
if SITE:
    sys.path.insert(0, SITE)


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


TORCH = ("torch", "torch.distributed")


def launch(scenario, nprocs, timeout=120, env=None, args=(), preload=TORCH):
    """Runs workers.py SCENARIO on `nprocs` local ranks; kills them all after `timeout` s.

    The ranks are forked by one rank_launcher.py process, which imports the modules in
    `preload` once for all of them (see there): torch for the scenarios that use it."""
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="braid-pytest-")
    base = dict(os.environ)
    if SITE:
        base["PYTHONPATH"] = SITE + os.pathsep + base.get("PYTHONPATH", "")
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(nprocs),
                OMP_NUM_THREADS="1", BRAID_TEST_OUT=tmp)
    base.update(env or {})
    start = time.monotonic()
    launcher = subprocess.Popen([sys.executable, os.path.join(HERE, "rank_launcher.py"), tmp, str(nprocs),
                                 ",".join(preload), os.path.join(HERE, "workers.py"), scenario, *args],
                                env=base, start_new_session=True)
    timed_out = False
    try:
        launcher.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The launcher's process group holds every rank.
        timed_out = True
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    codes_path = os.path.join(tmp, "codes.json")
    codes = json.load(open(codes_path)) if os.path.exists(codes_path) else [None] * nprocs
    elapsed = time.monotonic() - start
    results, output = [], []
    for rank in range(nprocs):
        log = os.path.join(tmp, f"log{rank}.txt")
        output.append(open(log, errors="replace").read() if os.path.exists(log) else "")
        path = os.path.join(tmp, f"rank{rank}.json")
        results.append(json.load(open(path)) if os.path.exists(path) else None)
    if not timed_out and launcher.returncode != 0:
        pytest.fail(f"the launcher of {scenario} on {nprocs} ranks failed with exit code {launcher.returncode}")
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
