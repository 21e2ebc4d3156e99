"""Horovod on braid against DDP on braid and DDP on gloo, in the same processes and run.

    python python/bench/horovod_bench.py --braidrun build/src/launcher/braidrun   # 2 and 4 processes
    python python/bench/horovod_bench.py --nprocs 2 --steps 10 --json out.json

Needs Horovod's front end linked to braid's core (python -m braid.horovod install) and the
braid package on the path. Started by braidrun; each rank runs, alternating step by step,
three copies of one MLP of >= 25 M parameters (Horovod's synthetic benchmark pattern):

  * hvd        horovod.torch DistributedOptimizer (tensor fusion on, HOROVOD_FUSION_THRESHOLD
               default), gradients all-reduced as backward produces them;
  * ddp-braid  torch DistributedDataParallel on process group backend "braid";
  * ddp-gloo   the same on a "gloo" process group.

For each it reports the median step time (forward + backward + optimizer step) and the
communication time: the same gradient bytes all-reduced the way that framework sends them
(one named allreduce per parameter, fused by Horovod's core; DDP's 25 MiB buckets) with no
compute to hide behind. Ranks > cores oversubscribe the CPU for all three alike.
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

from ddp_bench import build_model  # the same MLP as the DDP benchmark (this script's folder)

MiB = 1 << 20


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import braid.torch  # noqa: F401
    import horovod.torch as hvd

    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
    dist.init_process_group("braid", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=600))
    groups = {"ddp-braid": dist.group.WORLD, "ddp-gloo": dist.new_group(backend="gloo")}

    models, opts = {}, {}
    m = build_model(torch, args.width)
    models["hvd"] = m
    opts["hvd"] = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1e-4),
                                           named_parameters=m.named_parameters())
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    for name, g in groups.items():
        models[name] = DDP(build_model(torch, args.width), process_group=g)
        opts[name] = torch.optim.SGD(models[name].parameters(), lr=1e-4)
    nparams = sum(p.numel() for p in m.parameters())
    x = torch.randn(args.batch, 2 * args.width)
    y = torch.randn(args.batch, 2 * args.width)

    def sync(name):
        if name == "hvd":
            hvd.barrier()
        else:
            dist.barrier(group=groups[name])

    step_times = {k: [] for k in models}
    for step in range(args.warmup + args.steps):
        for name, model in models.items():
            sync(name)
            t0 = time.perf_counter()
            opts[name].zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opts[name].step()
            if step >= args.warmup:
                step_times[name].append(time.perf_counter() - t0)

    # The gradient bytes, sent as each framework sends them, with no compute to hide behind.
    grads = [torch.randn(p.numel()) for p in m.parameters()]
    bucket_elems = 25 * MiB // 4
    buckets, left = [], nparams
    while left > 0:
        buckets.append(torch.randn(min(bucket_elems, left)))
        left -= buckets[-1].numel()
    comm_times = {k: [] for k in models}
    for it in range(1 + args.steps):
        for name in models:
            sync(name)
            t0 = time.perf_counter()
            if name == "hvd":
                hs = [hvd.allreduce_async_(g, name="grad.%d" % i, op=hvd.Average) for i, g in enumerate(grads)]
                for h in hs:
                    hvd.synchronize(h)
            else:
                works = [dist.all_reduce(b, group=groups[name], async_op=True) for b in buckets]
                for w in works:
                    w.wait()
            if it > 0:
                comm_times[name].append(time.perf_counter() - t0)

    res = {"nprocs": n, "params": nparams,
           "modes": {k: {"step_ms": 1e3 * statistics.median(step_times[k]),
                         "comm_ms": 1e3 * statistics.median(comm_times[k])} for k in models}}
    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()
    hvd.shutdown()


def launch(braidrun, n, argv):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [braidrun, "-np", str(n), sys.executable, os.path.abspath(__file__), "--worker", "--port", str(port),
           *argv]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode:
        raise SystemExit("benchmark on %d ranks failed (exit %d):\n%s" % (n, p.returncode, p.stdout[-3000:]))
    line = [l for l in p.stdout.splitlines() if "RESULT " in l][-1]
    return json.loads(line[line.index("RESULT ") + len("RESULT "):])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    p.add_argument("--width", type=int, default=1024, help="model width w (32 w^2 parameters)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--braidrun", default=shutil.which("braidrun") or "build/src/launcher/braidrun")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    argv = ["--width", str(args.width), "--batch", str(args.batch), "--steps", str(args.steps),
            "--warmup", str(args.warmup)]
    results = []
    for n in args.nprocs:
        r = launch(args.braidrun, n, argv)
        results.append(r)
        print("\n== %d processes, MLP of %.1f M parameters, batch %d, median of %d steps (load %.1f, %d cores)"
              % (n, r["params"] / 1e6, args.batch, args.steps, os.getloadavg()[0], os.cpu_count()))
        print("%-10s %10s %10s" % ("", "step ms", "comm ms"))
        for name in ("hvd", "ddp-braid", "ddp-gloo"):
            d = r["modes"][name]
            print("%-10s %10.1f %10.1f" % (name, d["step_ms"], d["comm_ms"]))
        h, b, g = (r["modes"][k] for k in ("hvd", "ddp-braid", "ddp-gloo"))
        print("hvd step / ddp-braid step: %.2f (target <= 1.10)" % (h["step_ms"] / b["step_ms"]))
        print("ddp-gloo comm / hvd comm:  %.2f (target >= 2)" % (g["comm_ms"] / h["comm_ms"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
