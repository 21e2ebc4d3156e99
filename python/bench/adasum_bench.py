"""Horovod's Adasum on braid's core against a plain Sum of the same tensor, in the same run.

    braidrun -np 4 python python/bench/adasum_bench.py            # 1, 16 and 64 MiB of float32
    braidrun -np 2 python python/bench/adasum_bench.py --mib 4 --iters 10

Needs Horovod's front end linked to braid's core (python -m braid.horovod install) and the
braid package on the path; a power-of-two number of ranks. Each size runs the two ops
alternately, each timed call after a one-element allreduce that lines the ranks up, and
reports the best time of each and their ratio (Adasum / Sum). Adasum reads and writes more
than a sum: its dot products and norms, then the combination, at every level.
"""

import argparse
import time

import torch
import horovod.torch as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, nargs="+", default=[1, 16, 64], help="tensor sizes in MiB of float32")
    p.add_argument("--iters", type=int, default=5, help="timed calls of each op per size")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    if hvd.rank() == 0:
        print("# %d ranks, float32, best of %d alternating calls each" % (hvd.size(), args.iters))
        print("%8s %12s %12s %8s" % ("MiB", "sum ms", "adasum ms", "ratio"))
    for mib in args.mib:
        t = torch.randn(mib * (1 << 20) // 4, generator=torch.Generator().manual_seed(hvd.rank())) + hvd.rank()
        ops = ((hvd.Sum, "sum"), (hvd.Adasum, "adasum"))
        for op, name in ops:  # warm-up: buffers, negotiation cache
            hvd.allreduce(t, op=op, name="warm.%s.%d" % (name, mib))
        best = {name: float("inf") for _, name in ops}
        for _ in range(args.iters):
            for op, name in ops:
                hvd.allreduce(torch.zeros(1), name="line-up")
                t0 = time.perf_counter()
                hvd.allreduce(t, op=op, name="timed.%s.%d" % (name, mib))
                best[name] = min(best[name], time.perf_counter() - t0)
        if hvd.rank() == 0:
            print("%8d %12.2f %12.2f %8.2f" % (mib, best["sum"] * 1e3, best["adasum"] * 1e3,
                                               best["adasum"] / best["sum"]))
    hvd.shutdown()


if __name__ == "__main__":
    main()
