"""How many of the live view's requests torch's own store can answer, to size what braid's
live view costs a torch job (docs/reliability.md, "A live view").

    python python/bench/store_load_bench.py                 # 1 and 4 client processes, 5 s each
    python python/bench/store_load_bench.py --clients 8 --seconds 10

A TCPStore server (torch's default, libuv) in this process; each client process makes the
two requests a live-view thread makes every 100 ms (check for the next question, read the
view's closing counter) as fast as it can. Prints the requests a second the server answered.
Each process of a braid torch job makes 20 a second while the job runs.
"""

import argparse
import datetime
import multiprocessing as mp
import time

import torch.distributed as dist


def client(port, seconds, q):
    s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.check(["braid-status/req/1"])
        s.add("braid-status/closed", 0)
        n += 2
    q.put(n)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    # Spawned, not forked: a fork copies the server's threads' locks in whatever state they are.
    ctx = mp.get_context("spawn")
    for n in a.clients:
        q = ctx.Queue()
        ps = [ctx.Process(target=client, args=(server.port, a.seconds, q)) for _ in range(n)]
        for proc in ps:
            proc.start()
        total = sum(q.get() for _ in ps)
        for proc in ps:
            proc.join()
        rate = total / a.seconds
        print(f"{n} client process(es): {rate:.0f} requests/s answered; the live view of "
              f"{int(rate / 20)} processes would use all of it")


if __name__ == "__main__":
    main()
