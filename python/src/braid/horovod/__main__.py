"""python -m braid.horovod {install,uninstall,status} [--horovod-dir DIR] [--force]"""

import argparse
import json
import sys

from braid import horovod


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m braid.horovod",
                                description="Make braid the native core of Horovod's PyTorch front end.")
    p.add_argument("action", choices=["install", "uninstall", "status"])
    p.add_argument("--horovod-dir", help="the horovod package folder (default: the one this Python imports)")
    p.add_argument("--force", action="store_true", help="replace a core that Horovod compiled itself")
    p.add_argument("--no-pip", action="store_true",
                   help="install: fail instead of pip-installing Horovod's front end when it is missing")
    a = p.parse_args(argv)
    try:
        if a.action == "install":
            for path in horovod.install(a.horovod_dir, a.force, get_front_end=not a.no_pip and not a.horovod_dir):
                print("wrote", path)
        elif a.action == "uninstall":
            for path in horovod.uninstall(a.horovod_dir):
                print("removed", path)
        else:
            print(json.dumps(horovod.status(a.horovod_dir), indent=2))
    except RuntimeError as e:
        print("braid.horovod: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
