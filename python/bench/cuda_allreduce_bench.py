"""all_reduce on CUDA tensors: braid's torch backend against gloo (and NCCL where every rank
has a GPU of its own), in the same processes, alternating between the backends.

    python python/bench/cuda_allreduce_bench.py --nprocs 2 --json out.json

Each of --nprocs local ranks (torchrun-style environment) uses GPU rank % device_count, so
several ranks may share one GPU; NCCL refuses ranks that share a GPU and is then left out,
unless --nccl-host-per-rank gives each rank a host id of its own (NCCL_HOSTID): NCCL then
runs them as hosts of their own, through its network path (sockets), and is shown as
"nccl-net".
Per size (float32, SUM) it reports the median time of --iters calls, each timed from the
call to torch.cuda.synchronize() of the calling stream (what a training step waits for),
and busbw = algbw * 2 (n-1) / n as nccl-tests report it. Rank 0 prints a table whose last
columns are the ratios gloo/braid (above 1: braid is faster).
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def worker(args):
    import torch
    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ngpu)
    torch.cuda.set_device(dev)
    backends = []
    try:
        import braid.torch  # noqa: F401
        backends.append("braid")
    except ImportError as e:
        if rank == 0:
            print(f"braid's torch backend is not importable ({e}); gloo alone", flush=True)
    timeout = datetime.timedelta(seconds=300)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timeout)
    groups = {"gloo": dist.group.WORLD}
    if backends:
        groups["braid"] = dist.new_group(backend="braid", timeout=timeout)
    if ngpu >= n:
        groups["nccl"] = dist.new_group(backend="nccl", timeout=timeout)
    elif args.nccl_host_per_rank:
        # Read when NCCL's communicator starts, at the group's first collective.
        os.environ["NCCL_HOSTID"] = f"cuda-allreduce-bench-{os.getppid()}-{rank}"
        groups["nccl-net"] = dist.new_group(backend="nccl", timeout=timeout)
    names = [b for b in ("braid", "gloo", "nccl", "nccl-net") if b in groups]
    res = {"nprocs": n, "device": torch.cuda.get_device_name(dev), "gpus": ngpu, "sizes": {}}
    size = args.min_bytes
    while size <= args.max_bytes:
        t = torch.full((max(1, size // 4),), float(rank + 1), device=dev)
        want = float(n * (n + 1) // 2)
        times = {name: [] for name in names}
        for it in range(args.warmup + args.iters):
            for name in names:
                t.fill_(float(rank + 1))
                torch.cuda.synchronize()
                start = time.perf_counter()
                dist.all_reduce(t, group=groups[name])
                torch.cuda.synchronize()
                elapsed = time.perf_counter() - start
                if it == 0 and not torch.all(t == want).item():
                    raise SystemExit(f"{name}: wrong all_reduce result at {size} B: {t[:4].tolist()}")
                if it >= args.warmup:
                    times[name].append(elapsed)
        res["sizes"][size] = {name: statistics.median(v) for name, v in times.items()}
        size *= args.factor
    dist.barrier()
    if rank == 0:
        print(f"{n} ranks on {ngpu} GPU(s): {res['device']}; all_reduce float32 SUM, median of {args.iters}")
        head = f"{'bytes':>11}" + "".join(f"{name + ' us':>14}{name + ' GB/s':>14}" for name in names)
        head += "".join(f"{other + '/braid':>15}" for other in names if other != "braid" and "braid" in names)
        print(head)
        for size, row in res["sizes"].items():
            line = f"{size:>11}"
            for name in names:
                sec = row[name]
                line += f"{sec * 1e6:>14.1f}{size / sec * 2 * (n - 1) / n / 1e9:>14.2f}"
            if "braid" in row:
                line += "".join(f"{row[o] / row['braid']:>15.2f}" for o in names if o != "braid")
            print(line, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=8)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--nccl-host-per-rank", action="store_true",
                   help="where ranks share a GPU, run NCCL with a host id per rank (its network path)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(args.nprocs), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", *sys.argv[1:]],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(args.nprocs)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
