"""Where every rank of a running torch.distributed job on braid is, asked from outside it:

    python -m braid.torch.status MASTER_ADDR:MASTER_PORT [--wait SECONDS]

connects to the job's TCPStore (as a client; torch's store has no key to show) and prints
braid.torch.live_status's report. Exits 1 saying why when the store cannot be reached.
"""

import argparse
import datetime
import sys


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m braid.torch.status", description=__doc__.splitlines()[0])
    p.add_argument("address", help="the job's store, HOST:PORT (torchrun's MASTER_ADDR:MASTER_PORT)")
    p.add_argument("--wait", type=float, default=1.0, help="seconds to wait for the answers (default 1; 2 for a job of 1,000 processes or more, "
                        "whose processes check for the question once a second)")
    a = p.parse_args(argv)
    host, sep, port = a.address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        p.error(f"address {a.address!r} is not HOST:PORT")
    if not 0 <= a.wait <= 3600:
        p.error(f"--wait {a.wait} is not within [0, 3600]")

    import torch.distributed as dist
    import braid.torch

    try:
        store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=10),
                              wait_for_workers=False)
    except Exception as e:  # noqa: BLE001 - torch raises several kinds
        print(f"braid.torch.status: cannot reach the job's store at {a.address}: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(braid.torch.live_status(store, a.wait))
    return 0


if __name__ == "__main__":
    sys.exit(main())
