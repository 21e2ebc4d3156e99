"""Horovod on braid: braid provides the native core of Horovod's PyTorch front end.

Horovod's Python layer (``horovod.torch``) talks to one native module,
``horovod/torch/mpi_lib_v2<ext>``. braid builds that module from its own code
(``braid/horovod/mpi_lib_v2<ext>``); ``install()`` links it into an installed Horovod front
end and records the torch version it was built against in ``horovod/metadata.json``, which
Horovod checks on import::

    HOROVOD_SKIP_COMPILE=1 pip install horovod==0.28.1   # Horovod's pure-Python front end
    python -m braid.horovod install                     # braid becomes its core
    braidrun -np 4 python train.py                      # an unchanged Horovod script

``python -m braid.horovod install`` alone does both steps: without a Horovod front end it
first installs that (``pip install horovod==0.28.1`` with HOROVOD_SKIP_COMPILE=1, so nothing of
Horovod's C++ is compiled). ``python -m braid.horovod status`` says what is installed where;
``uninstall`` removes the link again.
"""

import glob
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig

__all__ = ["core_module_path", "find_horovod", "install_front_end", "install", "uninstall", "status"]

# The Horovod release whose front end braid's core speaks (its last; the interface is read
# from its Python sources).
HOROVOD_VERSION = "0.28.1"

_HERE = os.path.dirname(os.path.abspath(__file__))
_EXT = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
_MODULE = "mpi_lib_v2"


def core_module_path():
    """The braid-built Horovod core for this Python, or None when it was not built (the
    package was built without torch)."""
    path = os.path.join(_HERE, _MODULE + _EXT)
    if os.path.exists(path):
        return path
    found = glob.glob(os.path.join(_HERE, _MODULE + ".*.so"))
    return found[0] if found else None


def built_with_torch():
    """The torch version the core was compiled against, or None."""
    try:
        from braid.horovod import _build  # written by the package's CMake build
    except ImportError:
        return None
    return _build.TORCH_VERSION


def find_horovod():
    """The folder of the installed ``horovod`` package (found without importing it), or None."""
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def install_front_end():
    """pip-installs Horovod's pure-Python front end into this Python (no compiler runs)."""
    env = dict(os.environ, HOROVOD_SKIP_COMPILE="1", HOROVOD_WITHOUT_TENSORFLOW="1", HOROVOD_WITHOUT_MXNET="1")
    cmd = [sys.executable, "-m", "pip", "install", "horovod==" + HOROVOD_VERSION]
    print("installing Horovod's front end:", "HOROVOD_SKIP_COMPILE=1", " ".join(cmd), flush=True)
    if subprocess.call(cmd, env=env) != 0:
        raise RuntimeError("pip could not install horovod==%s" % HOROVOD_VERSION)
    importlib.invalidate_caches()


def _target(horovod_dir):
    return os.path.join(horovod_dir, "torch", _MODULE + _EXT)


def install(horovod_dir=None, force=False, get_front_end=False):
    """Links braid's core into Horovod's package at ``horovod_dir`` (default: the one Python
    finds; with ``get_front_end``, installed first when there is none) and writes its
    metadata.json. Returns the paths written. Refuses to replace a core Horovod compiled
    itself unless ``force``."""
    core = core_module_path()
    if core is None:
        raise RuntimeError("braid was built without its Horovod core (torch was not importable when the "
                           "package was built); reinstall with: pip install --no-build-isolation ./python")
    horovod_dir = horovod_dir or find_horovod()
    if horovod_dir is None and get_front_end:
        install_front_end()
        horovod_dir = find_horovod()
    if horovod_dir is None:
        raise RuntimeError("Horovod's front end is not installed; install it with: "
                           "HOROVOD_SKIP_COMPILE=1 pip install horovod==%s" % HOROVOD_VERSION)
    if not os.path.isdir(os.path.join(horovod_dir, "torch")):
        raise RuntimeError("%s has no torch/ folder: not a Horovod package with PyTorch support" % horovod_dir)
    target = _target(horovod_dir)
    if os.path.lexists(target):
        if not os.path.islink(target) and not force:
            raise RuntimeError("%s is a Horovod core compiled by Horovod itself; pass force=True "
                               "(--force) to replace it with braid's" % target)
        os.remove(target)
    os.symlink(core, target)
    written = [target]
    # The core finds libbraid through its rpath; the link below keeps that true when Horovod
    # and braid live in different folders (a --target install, a second site-packages).
    lib = os.path.join(os.path.dirname(_HERE), "libbraid.so.0")
    lib_link = os.path.join(horovod_dir, "torch", "libbraid.so.0")
    if os.path.exists(lib):
        if os.path.lexists(lib_link):
            os.remove(lib_link)
        os.symlink(lib, lib_link)
        written.append(lib_link)

    meta_path = os.path.join(horovod_dir, "metadata.json")
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            try:
                meta = json.load(f)
            except ValueError:
                meta = {}
    version = built_with_torch()
    if version is None:
        import torch
        version = torch.__version__
    meta["pytorch"] = version
    meta["core"] = "braid"
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    written.append(meta_path)
    return written


def uninstall(horovod_dir=None):
    """Removes what install() linked; returns the paths removed."""
    horovod_dir = horovod_dir or find_horovod()
    removed = []
    if horovod_dir is None:
        return removed
    for path in (_target(horovod_dir), os.path.join(horovod_dir, "torch", "libbraid.so.0")):
        if os.path.islink(path):
            os.remove(path)
            removed.append(path)
    return removed


def status(horovod_dir=None):
    """A dict describing the core, the Horovod front end and whether they are linked."""
    horovod_dir = horovod_dir or find_horovod()
    core = core_module_path()
    target = _target(horovod_dir) if horovod_dir else None
    linked = bool(target and os.path.islink(target) and core and
                  os.path.realpath(target) == os.path.realpath(core))
    return {"core": core, "built_with_torch": built_with_torch(), "horovod": horovod_dir,
            "installed": linked}
