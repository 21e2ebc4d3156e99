#!/usr/bin/env python3
"""Plots bus bandwidth against message size, one PNG per collective.

Inputs, any number and mixed:
  - the JSON files braid's perf tools write with -J (the tool's name gives the collective);
  - text logs with an nccl-tests table: braid's tools, nccl-tests, and the peer harnesses
    the benchmark scripts build (their "# collective: NAME" line, or the file's name, gives
    the collective). A log holding several runs (rounds) keeps the best busbw per size.

Each input is one line on its collective's plot, labelled with --label (once per input, in
order; or once for all inputs) or else the file's name; inputs with the same label are one
line (the benchmark scripts' logs hold one size each). Out-of-place busbw by default;
--in-place for the other.

    perf/plot.py -o plots/ braid.json mpi.log
    perf/plot.py -o plots/ -l "OpenMPI" bench-results/*-raw/allreduce-*-np2-mpi-*.log
    allreduce_perf -b 1K -e 256M -f 4 -J ar.json && perf/plot.py -o . ar.json

With --doctor FILE (braid-doctor's -J output) it draws the bandwidth and latency matrices
as heatmaps instead, slow links outlined: doctor-bandwidth.png, doctor-latency.png.

Needs matplotlib (Debian's python3-matplotlib). Exit status: 0, 1 when an input holds no
result, 2 for bad arguments.
"""

import argparse
import json
import math
import os
import re
import sys
from collections import OrderedDict

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "gather",
               "scatter", "sendrecv")


def collective_from_name(name):
    """'allreduce_perf' / 'all_reduce_perf' / 'allreduce-1M-np2-braid.log' -> 'allreduce'."""
    base = os.path.basename(name).lower().replace("all_reduce", "allreduce").replace("all_gather", "allgather")
    for c in sorted(COLLECTIVES, key=len, reverse=True):
        if base.startswith(c) or ("_" + c) in base or ("-" + c) in base:
            return c
    return None


def read_json(path, in_place):
    with open(path) as f:
        doc = json.load(f)
    coll = collective_from_name(doc.get("tool", "")) or collective_from_name(path)
    key = "in_place" if in_place else "out_of_place"
    points = {}
    for row in doc.get("results", []):
        bw = (row.get(key) or {}).get("busbw")
        size = row.get("size")
        if bw is None or not size:
            continue
        points[size] = max(points.get(size, 0.0), float(bw))
    return coll, points, doc.get("nranks")


ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\S+)"
                 r"(?:\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\S+))?")


def read_table(path, in_place):
    coll = None
    points = {}
    nranks = None
    with open(path, errors="replace") as f:
        for line in f:
            # "# collective: allgather (MPI)" (peer harnesses), "# allreduce_perf: minBytes"
            # (braid), "# Collective test starting: all_reduce_perf" (nccl-tests).
            m = (re.match(r"#\s*collective:\s*(\w+)", line) or re.match(r"#\s*(\w+_perf):", line) or
                 re.match(r"#\s*Collective test starting:\s*(\w+)", line))
            if m and coll is None:
                coll = collective_from_name(m.group(1))  # None for a harness's own name
            m = re.search(r"(\d+) ranks?\b", line)
            if line.startswith("#") and m and nranks is None:
                nranks = int(m.group(1))
            m = ROW.match(line)
            if not m:
                continue
            size = int(m.group(1))
            if size == 0:
                continue
            if in_place:
                if m.group(9) is None:
                    continue
                bw = float(m.group(9))
            else:
                bw = float(m.group(5))
            points[size] = max(points.get(size, 0.0), bw)
    return coll or collective_from_name(path), points, nranks


def read_input(path, in_place):
    with open(path, errors="replace") as f:
        head = f.read(1).strip()
    if head == "{":
        return read_json(path, in_place)
    return read_table(path, in_place)


def size_label(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return "%d%s" % (b // div, unit)
    return str(b)


def doctor_heatmaps(plt, path, out_dir):
    try:
        with open(path) as f:
            doc = json.load(f)
        n = int(doc["nranks"])
        mats = {"bandwidth": doc["bandwidth_gbs"], "latency": doc["latency_us"]}
    except (OSError, ValueError, KeyError) as e:
        print("plot.py: %s: not braid-doctor's JSON: %s" % (path, e), file=sys.stderr)
        return 2
    slow = {(l["from"], l["to"]) for l in doc.get("slow_links", [])}
    for r in doc.get("slow_ranks", []):
        slow |= {(r, j) for j in range(n) if j != r} | {(j, r) for j in range(n) if j != r}
    os.makedirs(out_dir, exist_ok=True)
    hosts = doc.get("hosts", [""] * n)
    for name, m in mats.items():
        vals = [[float("nan") if v is None else v for v in row] for row in m]
        fig, ax = plt.subplots(figsize=(1.2 + 0.55 * n, 1.0 + 0.5 * n), dpi=110)
        cmap = "viridis" if name == "bandwidth" else "viridis_r"
        im = ax.imshow(vals, cmap=cmap)
        fig.colorbar(im, ax=ax, label="GB/s" if name == "bandwidth" else "us, one way")
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                ax.text(j, i, ("%.2f" if name == "bandwidth" else "%.0f") % vals[i][j], ha="center", va="center",
                        fontsize=7, color="white")
                if (i, j) in slow:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_yticklabels(["%d %s" % (i, hosts[i]) for i in range(n)], fontsize=7)
        ax.set_xlabel("to rank")
        ax.set_ylabel("from rank")
        ax.set_title("braid-doctor: %s (slow in red)" % name)
        fig.tight_layout()
        out = os.path.join(out_dir, "doctor-%s.png" % name)
        fig.savefig(out)
        plt.close(fig)
        print(out)
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="-J JSON files or logs with an nccl-tests table")
    ap.add_argument("--doctor", metavar="FILE", help="braid-doctor's JSON: heatmaps of its matrices")
    ap.add_argument("-o", "--out-dir", default=".", help="where the PNGs go (default: .)")
    ap.add_argument("-l", "--label", action="append", default=[],
                    help="the line's label, once per input in order (default: the file's name)")
    ap.add_argument("--in-place", action="store_true", help="plot the in-place busbw")
    ap.add_argument("--title", default="", help="text added to every plot's title")
    args = ap.parse_intermixed_args(argv)  # -l LABEL FILE -l LABEL FILE ...
    if not args.inputs and not args.doctor:
        ap.error("give -J files or logs to plot, or --doctor FILE")
    if len(args.label) == 1:
        args.label = args.label * len(args.inputs)
    if args.label and len(args.label) != len(args.inputs):
        ap.error("--label given %d times for %d inputs (give it once, or once per input)" %
                 (len(args.label), len(args.inputs)))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("plot.py: matplotlib is needed (apt-get install python3-matplotlib): %s" % e, file=sys.stderr)
        return 2

    if args.doctor:
        return doctor_heatmaps(plt, args.doctor, args.out_dir)

    by_coll = OrderedDict()
    status = 0
    for i, path in enumerate(args.inputs):
        try:
            coll, points, nranks = read_input(path, args.in_place)
        except (OSError, ValueError) as e:
            print("plot.py: %s: %s" % (path, e), file=sys.stderr)
            return 2
        if not points:
            print("plot.py: %s: no results in it" % path, file=sys.stderr)
            status = 1
            continue
        if coll is None:
            print("plot.py: %s: cannot tell which collective it measures (name the file after it)" % path,
                  file=sys.stderr)
            return 2
        label = args.label[i] if args.label else os.path.splitext(os.path.basename(path))[0]
        if nranks:
            label += " (%d ranks)" % nranks
        series = by_coll.setdefault(coll, OrderedDict())
        merged = series.setdefault(label, {})
        for size, bw in points.items():
            merged[size] = max(merged.get(size, 0.0), bw)

    os.makedirs(args.out_dir, exist_ok=True)
    for coll, series in by_coll.items():
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        sizes = sorted({s for pts in series.values() for s in pts})
        for label, pts in series.items():
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", markersize=3, linewidth=1.4, label=label)
        ax.set_xscale("log", base=2)
        ticks = [s for s in sizes if math.log2(s) % 2 == 0] or sizes
        ax.set_xticks(ticks)
        ax.set_xticklabels([size_label(s) for s in ticks], rotation=45, fontsize=8)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s, 1e9 B/s)")
        placement = "in place" if args.in_place else "out of place"
        ax.set_title("%s, %s%s" % (coll, placement, (", " + args.title) if args.title else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        out = os.path.join(args.out_dir, "%s.png" % coll)
        fig.savefig(out)
        plt.close(fig)
        print(out)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
