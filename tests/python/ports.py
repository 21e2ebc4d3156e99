"""A free port for a test's rank 0 (or launcher) to listen on; shared by tests/python and
tests/horovod."""

import random
import socket


def free_port():
    """A port for rank 0 to listen on, free now and below the kernel's ephemeral range.

    A port from that range (what binding port 0 gives) is also what the kernel hands to any
    process's outgoing connections: between this call and rank 0's listen, one of the other
    tests running at the same time took it (EADDRINUSE) on a busy machine. Below the range
    only another listener can take it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
