#!/usr/bin/env python3
"""Checks braid's built CUDA kernels without a GPU, from the fatbinary in the library:

  - every kernel, for every architecture, uses at most --max-registers registers per
    thread and no local memory (LOCAL:0) or stack (STACK:0): a spill would show there;
  - the fp16 and bf16 reduce-copy kernels for sm_80 to sm_90 use at most 64, so that two
    512-thread blocks share an SM (cuda/reduce_copy.cuh, kTwoBlocksPerSm);
  - every reduce-copy kernel's SASS contains 128-bit global loads and stores
    (LDG.E.128 / STG.E.128): the 16-byte packs really are single vector accesses.

cuobjdump is looked for in --cuda-bin, then on PATH, then in the NVIDIA PyPI wheels
(nvidia-cuda-cuobjdump, and nvidia-cuda-nvdisasm, which `cuobjdump -sass` needs). If it
cannot be found the check exits 77, which CTest reports as skipped.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

SKIP = 77


def wheel_bin_dirs():
    dirs = []
    # Where scripts/cuda_tools.sh unpacks the wheels, then this interpreter's site-packages.
    tools = os.environ.get("BRAID_CUDA_TOOLS", "/var/cache/braid/cuda-tools")
    dirs += sorted(glob.glob(os.path.join(tools, "nvidia", "cu*", "bin")))
    for key in ("purelib", "platlib"):
        root = sysconfig.get_paths().get(key)
        if root:
            dirs += sorted(glob.glob(os.path.join(root, "nvidia", "cu*", "bin")))
            dirs += sorted(glob.glob(os.path.join(root, "nvidia", "cuda_*", "bin")))
    return dirs


def find_tool(name, cuda_bin):
    for d in [cuda_bin] if cuda_bin else []:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if p:
        return p
    for d in wheel_bin_dirs():
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode != 0:
        print(r.stdout)
        sys.exit("FAILED: %s exited %d" % (" ".join(cmd), r.returncode))
    return r.stdout


def two_blocks_per_sm(arch, fn):
    """An fp16 or bf16 reduce-copy kernel for an architecture from sm_80 to sm_90."""
    m = re.match(r"sm_(\d+)", arch)
    return (m is not None and 80 <= int(m.group(1)) < 100 and "reduceCopyKernel" in fn
            and ("halfToFloat" in fn or "bf16ToFloat" in fn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", required=True)
    ap.add_argument("--cuda-bin", default="")
    ap.add_argument("--max-registers", type=int, required=True)
    args = ap.parse_args()

    cuobjdump = find_tool("cuobjdump", args.cuda_bin)
    if not cuobjdump:
        print("SKIPPED: cuobjdump not found (not in %s, on PATH, or in an nvidia-cuda-cuobjdump wheel)"
              % (args.cuda_bin or "the toolkit"))
        return SKIP

    # ---- registers and spills ---------------------------------------------------------
    out = run([cuobjdump, "--dump-resource-usage", args.library])
    arch = "?"
    kernels = 0
    failures = []
    worst = 0
    fn = None
    for line in out.splitlines():
        m = re.search(r"arch = (sm_\d+\w*)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function (\S+):", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", line)
        if m and fn:
            reg, stack, local = (int(g) for g in m.groups())
            kernels += 1
            worst = max(worst, reg)
            if reg > args.max_registers or stack or local:
                failures.append("%s %s: REG:%d STACK:%d LOCAL:%d" % (arch, fn, reg, stack, local))
            if two_blocks_per_sm(arch, fn) and reg > 64:
                failures.append("%s %s: REG:%d, above the 64 that let two 512-thread blocks share an SM"
                                % (arch, fn, reg))
            fn = None
    if kernels == 0:
        print(out)
        sys.exit("FAILED: no kernel resource usage found in %s" % args.library)
    print("%d kernels (all architectures), at most %d registers (budget %d), no stack or local memory%s"
          % (kernels, worst, args.max_registers, "" if not failures else " EXCEPT:"))
    for f in failures:
        print("  " + f)

    # ---- 128-bit accesses -------------------------------------------------------------
    nvdisasm_dir = None
    if not shutil.which("nvdisasm"):
        nvdisasm = find_tool("nvdisasm", args.cuda_bin or os.path.dirname(cuobjdump))
        if not nvdisasm:
            nvdisasm = find_tool("nvdisasm", os.path.dirname(cuobjdump))
        if not nvdisasm:
            print("SKIPPED: nvdisasm (needed by cuobjdump -sass) not found; register check %s"
                  % ("FAILED" if failures else "passed"))
            return 1 if failures else SKIP
        nvdisasm_dir = os.path.dirname(nvdisasm)
    env = dict(os.environ)
    if nvdisasm_dir:
        env["PATH"] = nvdisasm_dir + os.pathsep + env.get("PATH", "")
    sass = run([cuobjdump, "-sass", args.library], env=env)
    # Split into functions; remember the architecture each belongs to.
    current = None
    body = {}
    arch = "?"
    for line in sass.splitlines():
        m = re.search(r"code for (sm_\d+\w*)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = (arch, m.group(1))
            body[current] = []
            continue
        if current:
            body[current].append(line)
    reduce_kernels = [k for k in body if "reduceCopyKernel" in k[1]]
    if not reduce_kernels:
        sys.exit("FAILED: no reduceCopyKernel in the SASS of %s" % args.library)
    for k in reduce_kernels:
        text = "\n".join(body[k])
        if "LDG.E.128" not in text or "STG.E.128" not in text:
            failures.append("%s %s: no LDG.E.128/STG.E.128 in its SASS" % k)
    print("%d reduce-copy kernels checked for LDG.E.128 and STG.E.128" % len(reduce_kernels))
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
