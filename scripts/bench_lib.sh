# Helpers shared by the benchmark scripts (sourced): sizes, iteration counts, reading the
# perf tables braid's tools and the peer harnesses print, and best-of / ratio arithmetic.

# A program of the build tree $BUILD_DIR: the tree's own, never the copy the Python package
# ships (tests/python/site/.../bin, linked to the package's libbraid, which is only as new
# as the last python_build).
find_exe() {
  find "$BUILD_DIR" -name "$1" -type f -perm -u+x -not -path '*/CMakeFiles/*' -not -path '*/site/*' 2>/dev/null | head -1
}
bytes() {  # 1M -> 1048576
  awk -v s="$1" 'BEGIN { n = s + 0; u = toupper(substr(s, length(s)));
    if (u == "K") n *= 1024; else if (u == "M") n *= 1048576; else if (u == "G") n *= 1073741824;
    printf "%d\n", n }'
}
# Iterations and warmups by size: every run lasts roughly the same, whatever the size.
# ITERS_X=k runs k times as many iterations and warmups (default 1): a run of 20 iterations
# at 1 MiB lasts a few ms, shorter than the scheduler's slice, which decides it alone when
# ranks outnumber cores. Calls up to 64 KiB take a few µs: 1,000 of them after 20 warmups
# (200 after 3 before 2026-12-04, whose runs of about a millisecond read far apart
# between rounds at 64 KiB (1.65x), the first calls' page faults and FIFO set-up included).
iters() { local b=$1 n; if [ "$b" -le 65536 ]; then n=1000; elif [ "$b" -le 1048576 ]; then n=20;
  elif [ "$b" -le 4194304 ]; then n=10; elif [ "$b" -le 16777216 ]; then n=5;
  elif [ "$b" -le 67108864 ]; then n=3; else n=2; fi; echo $(( n * ${ITERS_X:-1} )); }
warm() { local b=$1 n; if [ "$b" -le 65536 ]; then n=20; elif [ "$b" -le 4194304 ]; then n=3;
  elif [ "$b" -le 16777216 ]; then n=2; else n=1; fi; echo $(( n * ${ITERS_X:-1} )); }

# The kernel's default tcp congestion control, for the host line: over loopback a pacing one
# (bbr) changes how UCX's tcp and OpenMPI's compare with braid's own (docs/performance.md).
tcp_cc() { cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown; }

# Reads a table on stdin (braid's tools and the peer harnesses print the same columns: 1 size,
# 6 time in us, 9 #wrong). With $1 = bw:FACTOR prints the best busbw over the data rows,
# recomputed from size and time (size / time * FACTOR; the table's own busbw column has only two
# decimals); with $1 = lat the lowest time. "WRONG" if any row's #wrong is not 0 / N/A,
# nothing if there are no rows (the run failed or timed out).
pick_col() {
  awk -v what="$1" '
    /^#/ || NF < 9 || $1 !~ /^[0-9]+$/ || $6 + 0 <= 0 { next }
    { if ($9 != "0" && $9 != "N/A") bad = 1
      if (what == "lat") v = $6 + 0; else v = $1 / ($6 * 1e3) * substr(what, 4)
      if (!have || (what == "lat" ? v < best : v > best)) { best = v; have = 1 } }
    END { if (bad) print "WRONG"; else if (have) printf(what == "lat" ? "%.2f\n" : "%.3f\n", best) }'
}
# What round $ROUND wrote into a run's log ($1): the lines after the last line that starts
# "### round $ROUND " (a log holds every round of one implementation, collective and size).
round_table() {
  awk -v r="### round $ROUND " 'index($0, r) == 1 { keep = 1; buf = ""; next } keep { buf = buf $0 "\n" }
    END { printf "%s", buf }' "$1"
}
bus_factor() {  # collective, ranks: nccl-tests' busbw / algbw
  case $1 in
    allreduce) awk -v n="$2" 'BEGIN { print 2 * (n - 1) / n }' ;;
    broadcast|reduce|sendrecv) echo 1 ;;
    *) awk -v n="$2" 'BEGIN { print (n - 1) / n }' ;;
  esac
}

# The median of the numbers on stdin, one per line (the middle value, the mean of the two
# middle ones), printed with the printf format $1; nothing when there are none.
median_of() {
  sort -g | awk -v f="$1" '{ x[NR] = $1 } END { if (NR) printf f "\n", NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2 }'
}
# The machine's state around a run. core_latency (perf/core_latency.cc) times a cache
# line's round trip between two CPUs: under STATE_NS (default 200 ns) the state is f (fast),
# else s (slow); ? where it cannot tell (no core_latency in the build, one CPU). The 2-core
# VM these scripts ran on moved between 50-100 ns and 320-350 ns every few tens of seconds,
# and every shared-memory transfer with it (a 64 KiB allgather of two ranks 6 -> 20 us), so
# a run pair that straddles a move compares two machines. The scripts probe before and after
# each run and give its value with its state after a colon: 5.076:f, 5.1:s, and 5.2:m (mixed:
# the two probes differ) or 5.3:? ; the statistics below read both.
LATENCY_EXE=${LATENCY_EXE:-$([ -n "${BUILD_DIR:-}" ] && find_exe core_latency)}
state_now() {
  local ns=""
  [ -n "$LATENCY_EXE" ] && ns=$("$LATENCY_EXE" -q 2>/dev/null || true)
  if ! [[ $ns =~ ^[0-9]+$ ]]; then echo "?"; elif [ "$ns" -lt "${STATE_NS:-200}" ]; then echo f; else echo s; fi
}
state_of() { [ "$1" = "$2" ] && echo "$1" || echo m; }  # a run's state from the probes before and after it

# Best over rounds: max busbw / min time; WRONG wins over numbers, empty cells become "-".
best_of() {  # mode (max, min, or median: the middle value, the mean of the two middle ones), values
  local mode=$1; shift
  set -- "${@%%:*}"  # the values without their states
  if printf '%s\n' "$@" | grep -qx WRONG; then echo WRONG; return; fi
  local v
  if [ "$mode" = median ]; then
    v=$(printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | median_of %.3f)
  else
    v=$(printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g | { [ "$mode" = min ] && head -1 || tail -1; })
  fi
  echo "${v:--}"
}
ratio() {  # braid value, peer value, mode (max: braid/peer; min: peer/braid)
  awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN { if (a !~ /^[0-9.eE+-]+$/ || b !~ /^[0-9.eE+-]+$/ || a + 0 == 0 || b + 0 == 0) print "-";
    else printf "%.2f", m == "min" ? b / a : a / b }'
}
# The median over rounds of a_i / b_i, the two sides' values of the same round (STAT=paired).
# The two runs of a round are seconds apart; on a shared VM that swings between a fast and a
# slow state (2-3x at 64 KiB), a ratio of medians taken side by side compares one side's
# fast runs with the other's slow ones whenever the swing splits the rounds. A round with a
# missing value is left out, and one whose two runs met the machine in different states (or
# either in a mixed one); a state that is unknown (?) leaves the round in. "-" when none is
# left or either side was WRONG. With `want` f or s, only rounds of that state on both sides.
# usage: paired_ratio n a_1 .. a_n b_1 .. b_n [want]
paired_ratio() {
  local n=$1 i x; shift
  local v=("${@:1:2*n}") want=${*:2*n+1:1}
  if printf '%s\n' "${v[@]%%:*}" | grep -qx WRONG; then echo -; return; fi
  x=$(for ((i = 0; i < n; i++)); do echo "${v[i]:--} ${v[i + n]:--}"; done | awk -v want="${want:-all}" '
    { na = split($1, a, ":"); nb = split($2, b, ":"); sa = na > 1 ? a[2] : "?"; sb = nb > 1 ? b[2] : "?"
      if (a[1] !~ /^[0-9.eE+-]+$/ || b[1] !~ /^[0-9.eE+-]+$/ || a[1] + 0 <= 0 || b[1] + 0 <= 0) next
      if (want == "all") { if (sa != "?" && sb != "?" && (sa != sb || sa == "m")) next }
      else if (sa != want || sb != want) next
      printf "%.6f\n", a[1] / b[1] }' | median_of %.2f)
  echo "${x:--}"
}
# How many rounds of arrays named by $1 and $2 met the machine in state $3 on both sides.
pairs_in() {
  local -n pa=$1 pb=$2
  local i k=0
  for ((i = 0; i < ${#pa[@]}; i++)); do [[ ${pa[i]} == *:$3 && ${pb[i]} == *:$3 ]] && k=$((k + 1)); done
  echo "$k"
}
# The rounds by state for STAT=paired, arrays named by $1 and $2: "fast X (k), slow Y (m)",
# each x from the rounds of that state alone and how many there were; "" when no run's
# state is known.
states_of() {
  local -n sa_=$1 sb_=$2
  local f s
  f=$(pairs_in "$1" "$2" f); s=$(pairs_in "$1" "$2" s)
  if [ "$f" = 0 ] && [ "$s" = 0 ] && ! printf '%s\n' "${sa_[@]}" "${sb_[@]}" | grep -q ':m$'; then echo ""; return; fi
  echo "fast $(paired_ratio "${#sa_[@]}" "${sa_[@]}" "${sb_[@]}" f) ($f), slow $(paired_ratio "${#sa_[@]}" "${sa_[@]}" "${sb_[@]}" s) ($s)"
}
# The values shown for one side's rounds under $STAT (paired shows medians).
shown_of() { best_of "$([ "$STAT" = paired ] && echo median || echo "$STAT")" "$@"; }
# x = a / b for the rounds of arrays named by $1 and $2 under $STAT: the ratio of the shown
# values, or with STAT=paired the median of the round-by-round ratios.
x_of() {
  local -n xa=$1 xb=$2
  if [ "$STAT" = paired ]; then paired_ratio "${#xa[@]}" "${xa[@]}" "${xb[@]}"
  else ratio "$(shown_of "${xa[@]}")" "$(shown_of "${xb[@]}")" max; fi
}
verdict() {  # ratio, threshold
  awk -v x="$1" -v t="$2" 'BEGIN { if (x == "-") print "n/a"; else print (x + 0 >= t ? "ok" : "MISS") }'
}

# ---- a summary of braid against one peer, a row per size (bench_ucx.sh, bench_ccl.sh) ----

# Where a run's results go: $RAW (every run's output) and $OUT (the summary, which say
# appends to), under $RESULTS, named by the time and $1.
results_init() {
  local stamp
  stamp=$(date +%Y%m%d-%H%M%S)
  RAW=$RESULTS/$stamp-$1-raw; mkdir -p "$RAW"
  OUT=$RESULTS/$stamp-$1.txt
}
say() { echo "$*" | tee -a "$OUT"; }
fmt_pair() { printf '%-8s %10s %10s %7s  %-6s %s\n' "$@"; }
# Whether this round's runs check their results (CHECK=1: round 1, all: every round, 0: none).
checks_now() { if [ "$CHECK" = all ] || { [ "$CHECK" != 0 ] && [ "$ROUND" = 1 ]; }; then echo 1; else echo 0; fi; }
# STAT=paired: the heading of the last column, and x from the rounds of each state of the
# machine alone (states_of), for the rounds in arrays A and B.
state_head() { [ "$STAT" = paired ] && echo "x by state of the machine (rounds)"; }
by_state() { [ "$STAT" = paired ] && states_of A B; }
misses=0; checked=0
# Prints a row for the rounds in A (braid) and B (the peer), x = A / B, and counts its verdict
# against the threshold (none: no target): size, threshold.
row() {
  local x v=""
  x=$(x_of A B)
  if [ -n "${2:-}" ]; then
    v=$(verdict "$x" "$2")
    [ "$v" = n/a ] || checked=$((checked + 1))
    [ "$v" = MISS ] && misses=$((misses + 1))
  fi
  say "$(fmt_pair "$1" "$(shown_of "${A[@]}")" "$(shown_of "${B[@]}")" "$x" "$v" "$(by_state)")"
}
# The same for times (us) in A and B: x = B / A, the best of rounds the lowest.
time_row() {
  local x v a b
  if [ "$STAT" = max ]; then a=$(best_of min "${A[@]}"); b=$(best_of min "${B[@]}")
  else a=$(shown_of "${A[@]}"); b=$(shown_of "${B[@]}"); fi
  if [ "$STAT" = paired ]; then x=$(x_of B A); else x=$(ratio "$a" "$b" min); fi
  v=$(verdict "$x" "$2")
  [ "$v" = n/a ] || checked=$((checked + 1))
  [ "$v" = MISS ] && misses=$((misses + 1))
  say "$(fmt_pair "$1" "${a}us" "${b}us" "$x" "$v" "$([ "$STAT" = paired ] && states_of B A)")"
}

