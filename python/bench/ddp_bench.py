"""DDP on the CPU, braid against gloo in the same run.

    python python/bench/ddp_bench.py                   # 2 and 4 processes, defaults below
    python python/bench/ddp_bench.py --nprocs 2 --steps 10 --json out.json

For each process count it starts that many local ranks (torchrun-style environment), each
with two process groups over the same store: the default one on backend "braid" and a
"gloo" one. In the same processes, alternating between the two backends, it measures

  * DDP step time: forward + backward (with DDP's overlapped bucket all-reduces, default
    25 MiB buckets) + SGD step, on an MLP of >= 25 M parameters;
  * all-reduce time per step: the same gradient bytes all-reduced in DDP's bucket sizes
    with no compute to hide behind (the communication a step must do);
  * torch.distributed.all_reduce bus bandwidth, float32 SUM, 1 MiB .. 256 MiB
    (busbw = algbw * 2 (n-1) / n, as nccl-tests report it).

Ranks > cores (4 ranks on a 2-core machine) oversubscribe the CPU for both backends alike.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

MiB = 1 << 20


def build_model(torch, width):
    # 3 linear layers: 2w*4w + 4w*4w + 4w*2w weights = 32 w^2 (+ biases); w=1024 -> 33.6 M.
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(2 * width, 4 * width), torch.nn.ReLU(),
        torch.nn.Linear(4 * width, 4 * width), torch.nn.ReLU(),
        torch.nn.Linear(4 * width, 2 * width))


def worker(args):
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import braid.torch  # noqa: F401

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
    dist.init_process_group("braid", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=600))
    groups = {"braid": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    res = {"nprocs": n, "ddp": {}, "busbw": {}}

    # ---- DDP step ----
    models = {}
    for name, g in groups.items():
        models[name] = DDP(build_model(torch, args.width), process_group=g)
    nparams = sum(p.numel() for p in models["braid"].parameters())
    res["params"] = nparams
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-4) for k, m in models.items()}
    x = torch.randn(args.batch, 2 * args.width)
    y = torch.randn(args.batch, 2 * args.width)
    times = {k: [] for k in models}
    for step in range(args.warmup + args.steps):
        for name, m in models.items():
            dist.barrier(group=groups[name])
            t0 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(m(x), y)
            opts[name].zero_grad()
            loss.backward()
            opts[name].step()
            if step >= args.warmup:
                times[name].append(time.perf_counter() - t0)

    # ---- the same gradient bytes all-reduced in DDP's bucket sizes, no compute ----
    bucket_elems = 25 * MiB // 4
    sizes, left = [], nparams
    while left > 0:
        sizes.append(min(bucket_elems, left))
        left -= sizes[-1]
    bufs = [torch.randn(s) for s in sizes]
    ar_times = {k: [] for k in groups}
    for it in range(1 + args.steps):
        for name, g in groups.items():
            dist.barrier(group=g)
            t0 = time.perf_counter()
            works = [dist.all_reduce(b, group=g, async_op=True) for b in bufs]
            for w in works:
                w.wait()
            if it > 0:
                ar_times[name].append(time.perf_counter() - t0)
    for name in groups:
        res["ddp"][name] = {"step_ms": 1e3 * statistics.median(times[name]),
                            "allreduce_ms": 1e3 * statistics.median(ar_times[name])}

    # ---- all_reduce busbw ----
    size = args.min_bytes
    while size <= args.max_bytes:
        t = torch.ones(size // 4)
        iters = max(3, min(20, (64 * MiB) // size * 2))
        res["busbw"][size] = {}
        for name, g in groups.items():
            dist.all_reduce(t, group=g)  # warm up (connections, buffers)
            dist.barrier(group=g)
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=g)
            el = (time.perf_counter() - t0) / iters
            # The slowest rank's time is the collective's time.
            el_t = torch.tensor([el], dtype=torch.float64)
            dist.all_reduce(el_t, op=dist.ReduceOp.MAX, group=g)
            el = el_t.item()
            res["busbw"][size][name] = {"time_us": el * 1e6, "busbw_GBs": size / el * 2 * (n - 1) / n / 1e9}
        size *= 4

    if rank == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()


def launch(n, argv):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", *argv], env=env,
                                      stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, text=True))
    out, _ = procs[0].communicate()
    for p in procs[1:]:
        p.wait()
    if any(p.returncode for p in procs):
        raise SystemExit(f"benchmark on {n} ranks failed: exit codes {[p.returncode for p in procs]}")
    line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    p.add_argument("--width", type=int, default=1024, help="model width w (32 w^2 parameters)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=1 * MiB)
    p.add_argument("--max-bytes", type=int, default=256 * MiB)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    argv = [a for a in sys.argv[1:] if a not in ("--worker",)]
    results = []
    for n in args.nprocs:
        r = launch(n, argv)
        results.append(r)
        print(f"\n== {n} processes, MLP of {r['params'] / 1e6:.1f} M parameters, batch {args.batch}, "
              f"median of {args.steps} steps (load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)")
        print(f"{'':8} {'DDP step ms':>12} {'allreduce ms':>13}")
        for name in ("braid", "gloo"):
            d = r["ddp"][name]
            print(f"{name:8} {d['step_ms']:12.1f} {d['allreduce_ms']:13.1f}")
        b, g = r["ddp"]["braid"], r["ddp"]["gloo"]
        print(f"{'gloo/braid':8} {g['step_ms'] / b['step_ms']:12.2f}x {g['allreduce_ms'] / b['allreduce_ms']:12.2f}x")
        print(f"\n{'size':>10} {'braid us':>11} {'braid GB/s':>11} {'gloo us':>11} {'gloo GB/s':>10} {'braid/gloo':>11}")
        for size, v in r["busbw"].items():
            bb, gg = v["braid"], v["gloo"]
            print(f"{int(size) // MiB:>7}MiB {bb['time_us']:11.0f} {bb['busbw_GBs']:11.2f} {gg['time_us']:11.0f} "
                  f"{gg['busbw_GBs']:10.2f} {bb['busbw_GBs'] / gg['busbw_GBs']:10.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
