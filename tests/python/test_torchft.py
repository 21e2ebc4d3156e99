"""torchft's fault-tolerant DDP with braid as its process group (braid.torchft).

Three replica groups (torchft_worker.py, one process each) train under a torchft lighthouse.
One is killed with SIGKILL (or stopped with SIGSTOP) in the middle of a step (its quorum
formed, the others' allreduce in flight) and started again a few steps later: the survivors'
braid allreduce fails, naming it (at once for a kill, at braid's timeout for a stop),
torchft drops that step and forms a quorum of two, the
restarted replica heals from a survivor's checkpoint and joins, and every replica ends at
the same global step with the exact weights a run without failures computes.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import HERE, SITE

torchft = pytest.importorskip("torchft", reason="torchft is not installed (scripts/python_env.sh installs it)")

STEPS = 40
# The victim kills itself once this step's quorum has formed with it, before its allreduce.
DIE_AT = 8
# The survivors wait before this step until the killed replica is back.
HOLD_AT = 24


class Replica:
    def __init__(self, idx, env, tmp):
        self.idx, self.env, self.tmp = idx, env, tmp
        self.starts = 0
        self.proc = None
        self.log_path = None

    def start(self, **env):
        self.starts += 1
        self.log_path = os.path.join(self.tmp, f"replica{self.idx}.{self.starts}.log")
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "torchft_worker.py")],
                                     env=dict(self.env, TFT_REPLICA=str(self.idx), **env), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def committed(self):
        """The highest step this start of the replica has committed, or -1."""
        steps = [int(line.split()[4]) for line in self.output().splitlines()
                 if line.startswith(f"replica {self.idx} committed step ")]
        return max(steps, default=-1)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def wait_for(cond, seconds, what, replicas):
    deadline = time.monotonic() + seconds
    while not cond():
        dead = [r for r in replicas if r.proc.poll() not in (None, 0, -signal.SIGKILL)]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- replica {r.idx} (start {r.starts}):\n{r.output()[-3000:]}" for r in replicas)
            why = f"replica {dead[0].idx} exited with {dead[0].proc.returncode}" if dead else "timed out"
            pytest.fail(f"{why} waiting for {what}\n{logs}")
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_torchft_ddp_survives_a_lost_replica_and_heals_it_exactly(how):
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=1000)
    tmp = tempfile.mkdtemp(prefix="braid-torchft-")
    env = dict(os.environ, TFT_LIGHTHOUSE=lighthouse.address(), TFT_STEPS=str(STEPS), TFT_OUT=tmp,
               TFT_TIMEOUT="10", TFT_HOLD=f"0:{tmp}/start,{HOLD_AT}:{tmp}/back",
               OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "BRAID_RANK", "BRAID_WORLD_SIZE"):
        env.pop(k, None)
    if SITE:
        env["PYTHONPATH"] = SITE + os.pathsep + env.get("PYTHONPATH", "")
    replicas = [Replica(i, env, tmp) for i in range(3)]
    try:
        victim = replicas[1]
        for r in replicas:
            r.start(**({"TFT_DIE_AT": str(DIE_AT), "TFT_DIE_HOW": how} if r is victim else {}))
        # All three in the first quorum (each waits before step 0 until all are up).
        wait_for(lambda: all(f"replica {r.idx} ready" in r.output() for r in replicas), 120, "the replicas", replicas)
        open(os.path.join(tmp, "start"), "w").close()
        if how == "kill":
            wait_for(lambda: victim.proc.poll() is not None, 180, "replica 1 to die", replicas)
            assert victim.proc.returncode == -signal.SIGKILL, victim.output()[-3000:]
        else:
            wait_for(lambda: f"replica 1 stops at step {DIE_AT}" in victim.output(), 180, "replica 1 to stop", replicas)
        killed_at = DIE_AT
        # The survivors go on without it ...
        wait_for(lambda: min(replicas[0].committed(), replicas[2].committed()) >= killed_at + 5, 120,
                 "the survivors to commit 5 more steps", replicas)
        assert killed_at + 5 < HOLD_AT, killed_at
        for r in (replicas[0], replicas[2]):
            out = r.output()
            # The step the victim died in failed on braid (its allreduce named the lost rank,
            # at once for a kill, at braid's timeout for a stop), was not committed, and was
            # done again by the two that were left.
            assert f"replica {r.idx} step {DIE_AT} not committed" in out, out[-3000:]
            assert "braid ALLREDUCE" in out and "rank 1" in out, out[-3000:]
            assert f"replica {r.idx} committed step {DIE_AT} with 2 participants" in out, out[-3000:]
        # ... and take it back when it returns: it heals from a survivor and trains on.
        victim.kill()  # the stopped one
        victim.start()
        wait_for(lambda: f"replica {victim.idx} ready" in victim.output(), 120, "the restarted replica", replicas)
        open(os.path.join(tmp, "back"), "w").close()
        for r in replicas:
            try:
                r.proc.wait(timeout=240)
            except subprocess.TimeoutExpired:
                pytest.fail(f"replica {r.idx} did not finish\n{r.output()[-3000:]}")
        for r in replicas:
            assert r.proc.returncode == 0, f"replica {r.idx} exited with {r.proc.returncode}\n{r.output()[-3000:]}"
            with open(os.path.join(tmp, f"replica{r.idx}.json")) as f:
                res = json.load(f)
            assert res["step"] == STEPS, res
            assert res["weights"] == res["expected"], f"replica {r.idx}: {res}"
        back = replicas[1].output()
        assert "with 3 participants" in back, back[-3000:]
    finally:
        for r in replicas:
            r.kill()
        lighthouse.shutdown()
