"""Horovod's PyTorch front end on braid: hvd_worker.py's scenarios under braidrun and under
Horovod's own launcher (horovodrun --gloo), checked per rank.

Needs PYTHONPATH with a Horovod front end linked to braid's core and braid's package (what
run_horovod.sh sets up) and BRAIDRUN, the launcher to test.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "hvd_worker.py")


def run(cmd, nprocs, timeout, env=None):
    out = tempfile.mkdtemp(prefix="braid-hvd-")
    e = dict(os.environ, BRAID_TEST_OUT=out, OMP_NUM_THREADS="1", EXPECT_SIZE=str(nprocs))
    e.update(env or {})
    start = time.monotonic()
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
    elapsed = time.monotonic() - start
    results = []
    for r in range(nprocs):
        path = os.path.join(out, "rank%d.json" % r)
        results.append(json.load(open(path)) if os.path.exists(path) else None)
    shutil.rmtree(out, ignore_errors=True)
    return p, results, elapsed


def assert_all_passed(p, results):
    assert all(r is not None for r in results), "ranks without a result (exit %d):\n%s" % (p.returncode,
                                                                                        p.stdout[-6000:])
    fails = ["rank %d: %s:\n%s" % (rank, name, err) for rank, res in enumerate(results)
             for name, err in res["checks"].items() if err is not None]
    assert not fails, "\n".join(fails)[:8000]
    assert p.returncode == 0, p.stdout[-4000:]
    assert min(len(r["checks"]) for r in results) >= 15


@pytest.mark.parametrize("nprocs", [2, 3, 4])
def test_ops_under_braidrun(nprocs):
    p, results, _ = run([os.environ["BRAIDRUN"], "-np", str(nprocs), sys.executable, WORKER, "ops"], nprocs, 400)
    assert_all_passed(p, results)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_ops_under_horovodrun_gloo(nprocs):
    horovodrun = shutil.which("horovodrun")
    if horovodrun is None:
        pytest.skip("horovodrun is not on PATH")
    cmd = [horovodrun, "-np", str(nprocs), "-H", "localhost:%d" % nprocs, "--gloo", sys.executable, WORKER, "ops"]
    p, results, _ = run(cmd, nprocs, 400)
    assert_all_passed(p, results)


def test_ops_under_torchrun():
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [torchrun, "--nproc_per_node", "2", "--master_port", str(port), WORKER, "ops"]
    p, results, _ = run(cmd, 2, 400)
    assert_all_passed(p, results)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_dead_or_stopped_rank_raises_horovod_internal_error_on_every_survivor(how):
    # A killed rank is noticed at once; a stopped one (alive, silent) within BRAID_TIMEOUT.
    # braidrun ends the stopped rank once the survivors have exited with their error.
    timeout = 5
    p, results, _ = run([os.environ["BRAIDRUN"], "-np", "3", sys.executable, WORKER, how], 3, 120,
                        env={"BRAID_TIMEOUT": str(timeout), "BRAIDRUN_GRACE_SEC": "2"})
    assert results[2] is None, "the %s rank wrote a result" % how
    for rank in (0, 1):
        res = results[rank]
        assert res is not None, "survivor %d wrote nothing:\n%s" % (rank, p.stdout[-4000:])
        assert res["checks"]["survivor raised HorovodInternalError"] is None, res
        assert "rank 2" in res["error"], res["error"]
        assert res["elapsed"] < timeout + 5, res


def test_install_status_reports_the_link():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "braid.horovod", "status"], env=env, stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    status = json.loads(out)
    assert status["installed"] is True, status
    assert status["built_with_torch"], status
