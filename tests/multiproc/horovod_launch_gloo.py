#!/usr/bin/env python3
"""Starts NP local ranks of a command through Horovod's own gloo launch path.

    python horovod_launch_gloo.py NP CMD [ARGS...]

This is what `horovodrun --gloo -np NP -H localhost:NP CMD` runs (horovod.runner.gloo_run:
its rendezvous server, its per-rank variables, its output forwarding), called directly so
that it also runs where Horovod was installed without its own gloo extension: horovodrun
refuses --gloo there before launching anything, although braid's ranks never use that
extension. The rendezvous server listens on loopback's address, as horovodrun's does when
the only interface the hosts share is lo. Exits 1 if any rank fails.
"""

import os
import sys

from horovod.runner import gloo_run
from horovod.runner.common.util import settings as hvd_settings


def main():
    np = int(sys.argv[1])
    command = sys.argv[2:]
    settings = hvd_settings.Settings(hosts=f'localhost:{np}', num_proc=np, verbose=0)
    try:
        gloo_run.launch_gloo(command, gloo_run._exec_command_fn(settings), settings, {'lo'}, dict(os.environ),
                             '127.0.0.1')
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':  # Horovod's launcher starts workers through multiprocessing
    main()
