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
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from ports import free_port  # noqa: E402


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
    cmd = [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), WORKER, "ops"]
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


ELASTIC_STEPS = 80


def run_elastic(cmd, env, timeout=300):
    """Runs hvd_worker.py elastic; returns the launcher's outcome and every finished process's
    record (pid<P>.json), ordered by final rank."""
    out = tempfile.mkdtemp(prefix="braid-hvd-elastic-")
    e = dict(os.environ, BRAID_TEST_OUT=out, OMP_NUM_THREADS="1", ELASTIC_STEPS=str(ELASTIC_STEPS),
             BRAID_TIMEOUT="10", PYTHONUNBUFFERED="1")
    e.update(env)
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
    results = []
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            results.append(json.load(f))
    shutil.rmtree(out, ignore_errors=True)
    return p, sorted(results, key=lambda r: r["rank"])


def assert_elastic_finished(p, results, size):
    """The job succeeded and `size` processes finished every step as ranks 0..size-1 with the
    exact parameters of a run without faults (each committed step applied once)."""
    log = p.stdout[-6000:]
    assert p.returncode == 0, log
    assert [r["rank"] for r in results] == list(range(size)), (results, log)
    for r in results:
        assert r["size"] == size, (r, log)
        assert r["step"] == ELASTIC_STEPS, (r, log)
        assert r["params_exact"], (r, log)
    assert len({r["checksum"] for r in results}) == 1, results


@pytest.mark.parametrize("victim", [1, 0])
def test_elastic_under_braidrun_survives_a_lost_rank_and_admits_its_replacement(victim):
    # hvd.elastic.run on braid's own recovery: braidrun --min-np keeps the job, the survivors
    # agree and shrink (also when the lost rank is rank 0, Horovod's coordinator), and the
    # replacement braidrun starts (--max-np) is admitted at a commit, as new hosts are.
    cmd = [os.environ["BRAIDRUN"], "-np", "3", "--min-np", "2", "--max-np", "3", sys.executable, WORKER, "elastic"]
    # The survivors wait for the replacement after their last step (ELASTIC_FINAL_SIZE): on a
    # busy 2-core machine its Python and torch can take longer to start than the steps left.
    p, results = run_elastic(cmd, {"ELASTIC_KILL": "%d:8" % victim, "ELASTIC_FINAL_SIZE": "3"})
    assert_elastic_finished(p, results, 3)
    assert "going on without rank(s) %d" % victim in p.stdout, p.stdout[-4000:]
    assert "admitted 1 replacement(s): 3 ranks" in p.stdout, p.stdout[-4000:]
    joined = [r for r in results if r["joined"]]
    assert len(joined) == 1 and joined[0]["started_at"] > 8, results
    for r in results:
        if not r["joined"]:
            assert r["resets"] >= 1 and r["first_rank"] != victim, r


def test_elastic_under_horovodrun_grows_and_shrinks_with_its_hosts():
    # horovodrun's own elastic driver (--min-np/--max-np, a host discovery script) renumbers
    # the workers at every reset; braid's core asks it for the new place (rank_and_size).
    # Two names for this machine are two hosts to it: a host is added at step 5, and its
    # worker is killed at step 50, which removes the host again.
    horovodrun = shutil.which("horovodrun")
    if horovodrun is None:
        pytest.skip("horovodrun is not on PATH")
    work = tempfile.mkdtemp(prefix="braid-hvd-hosts-")
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost:2\n")
    with open(hosts + ".add", "w") as f:
        f.write("127.0.0.1:1\n")
    discover = os.path.join(work, "discover.sh")
    with open(discover, "w") as f:
        f.write("#!/bin/sh\ncat '%s'\n" % hosts)
    os.chmod(discover, 0o755)
    cmd = [horovodrun, "--network-interface", "lo", "-np", "2", "--min-np", "2", "--max-np", "3",
           "--host-discovery-script", discover, "--gloo", sys.executable, WORKER, "elastic"]
    try:
        p, results = run_elastic(cmd, {"ELASTIC_ADD": "5:" + hosts, "ELASTIC_KILL_HOST": "127.0.0.1:50"})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert_elastic_finished(p, results, 2)
    assert "exit with status code 137" in p.stdout, p.stdout[-4000:]
    for r in results:
        assert r["sizes"] == [2, 3, 2], r


def test_install_status_reports_the_link():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "braid.horovod", "status"], env=env, stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    status = json.loads(out)
    assert status["installed"] is True, status
    assert status["built_with_torch"], status
