"""One replica group of a torchft job whose cross-replica process group is braid
(`braid.torchft.ProcessGroupBraid`), for tests/python/test_torchft.py.

    TFT_LIGHTHOUSE=http://... TFT_REPLICA=1 TFT_STEPS=30 TFT_OUT=dir python torchft_worker.py

A replica group of one process: its own c10d TCPStore for torchft's manager, torchft's DDP
and optimizer wrapper over a bias-free linear layer trained with SGD. Every replica computes
the same gradient at a given step (the data is a function of the step), all integers, and
the learning rate is 1/2, so averaging over any number of participants is exact: the final
weights are -1/2 times the sum of the gradients of steps 0..STEPS-1, whatever replicas died
or healed on the way. A step lost, applied twice or healed from a stale checkpoint shows as
a different weight. Prints one line per committed step and writes its final weights and
step to TFT_OUT/replica<R>.json. With TFT_HOLD=S:F[,S:F...], waits before step S until file F
exists (so a test can start every replica in the first quorum, or bring one back before the
others finish); with
TFT_DIE_AT=S, kills itself (SIGKILL; SIGSTOP with TFT_DIE_HOW=stop) once step S's quorum
has formed, before its allreduce.
"""

import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
from torch import nn, optim
from torch.distributed import TCPStore

from torchft import DistributedDataParallel, Manager
from torchft.optim import OptimizerWrapper

from braid.torchft import ProcessGroupBraid

FEATURES = 8
BATCH = 2


def batch(step):
    """The same integer batch on every replica at `step`."""
    i = torch.arange(BATCH * FEATURES, dtype=torch.float32).reshape(BATCH, FEATURES)
    return torch.remainder(i * 3 + step * 7, 5) - 1


def expected_weights(steps):
    """The weights after `steps` committed SGD steps of lr 1/2 from zero, by formula."""
    w = torch.zeros(1, FEATURES, dtype=torch.float64)
    for s in range(steps):
        w -= 0.5 * batch(s).to(torch.float64).sum(dim=0, keepdim=True)
    return w


def main():
    replica = int(os.environ["TFT_REPLICA"])
    steps = int(os.environ["TFT_STEPS"])
    out = os.environ["TFT_OUT"]
    timeout = timedelta(seconds=float(os.environ.get("TFT_TIMEOUT", "10")))
    torch.set_num_threads(1)

    model = nn.Linear(FEATURES, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    sgd = optim.SGD(model.parameters(), lr=0.5)

    def state_dict():
        return {"model": model.state_dict(), "optim": sgd.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        sgd.load_state_dict(sd["optim"])

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupBraid(timeout=timeout),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        min_replica_size=int(os.environ.get("TFT_MIN_REPLICAS", "2")),
        replica_id=f"braid_{replica}",
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=os.environ["TFT_LIGHTHOUSE"],
        timeout=timeout,
        quorum_timeout=timedelta(seconds=60),
        connect_timeout=timedelta(seconds=30),
        # The quorum (and a heal) completes in zero_grad, so the step read after it is the
        # step this iteration's data belongs to.
        use_async_quorum=False,
    )
    ddp = DistributedDataParallel(manager, model)
    optimizer = OptimizerWrapper(manager, sgd)

    print(f"replica {replica} ready", flush=True)
    holds = dict((int(h.split(":", 1)[0]), h.split(":", 1)[1])
                 for h in os.environ.get("TFT_HOLD", "").split(",") if h)
    die_at = int(os.environ.get("TFT_DIE_AT", "-1"))
    while manager.current_step() < steps:
        hold = holds.get(manager.current_step())
        if hold:
            # Wait here (heartbeating all along) until the test lets the job go on.
            deadline = time.monotonic() + 120
            while not os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.05)
        optimizer.zero_grad()
        step = manager.current_step()
        if step == die_at:
            # In the quorum, its group formed with us in it: the others' allreduce of this
            # step is in flight when we go (or stall: TFT_DIE_HOW=stop).
            how = os.environ.get("TFT_DIE_HOW", "kill")
            print(f"replica {replica} {'dies' if how == 'kill' else 'stops'} at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        ddp(batch(step)).sum().backward()
        optimizer.step()
        if manager.current_step() > step:
            w = model.weight.detach().to(torch.float64)
            good = torch.equal(w, expected_weights(manager.current_step()))
            print(f"replica {replica} committed step {step} with {manager.num_participants()} participants"
                  f"{'' if good else ' WRONG WEIGHTS ' + str(w.flatten().tolist())} grad {model.weight.grad.flatten().tolist()}",
                  flush=True)
        else:
            print(f"replica {replica} step {step} not committed: {manager.errored()}", flush=True)
        # Slow enough that a kill lands in the middle of the run, not after it.
        time.sleep(float(os.environ.get("TFT_STEP_SLEEP", "0.05")))

    result = {"replica": replica, "step": manager.current_step(),
              "weights": model.weight.detach().to(torch.float64).flatten().tolist(),
              "expected": expected_weights(manager.current_step()).flatten().tolist()}
    with open(os.path.join(out, f"replica{replica}.json.tmp"), "w") as f:
        json.dump(result, f)
    os.replace(os.path.join(out, f"replica{replica}.json.tmp"), os.path.join(out, f"replica{replica}.json"))
    print(f"replica {replica} done at step {manager.current_step()}", flush=True)
    manager.shutdown(wait=False)
    sys.stdout.flush()
    # torchft's manager threads and the lighthouse client may linger; the result is written.
    os._exit(0)


if __name__ == "__main__":
    main()
