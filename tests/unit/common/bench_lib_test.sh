#!/usr/bin/env bash
# The arithmetic the benchmark scripts report with (scripts/bench_lib.sh): medians, ratios,
# the round-by-round ratio of STAT=paired, and how WRONG and missing runs come through.
set -u
source "$(dirname "$0")/../../../scripts/bench_lib.sh"
fails=0
expect() {  # what, got, want
  if [ "$2" != "$3" ]; then echo "FAIL: $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}

expect "median of odd" "$(best_of median 3 1 2)" 2.000
expect "median of even" "$(best_of median 4 1 3 2)" 2.500
expect "max" "$(best_of max 1.5 3.25 2)" 3.25
expect "WRONG wins" "$(best_of median 1 WRONG 2)" WRONG
expect "ratio" "$(ratio 3 2 max)" 1.50

# Each round's own ratio: 2/1, 4/2, 6/2 -> median 2, where the separate medians give 4/2 too.
expect "paired, odd" "$(paired_ratio 3 2 4 6 1 2 2)" 2.00
# Two sides as fast, on a machine fast for two rounds and a half and slow after (round 3's
# first run fast, its second slow): the medians' ratio reads 4/1, the rounds' own ratios
# 1 1 4 1 1 -> 1.
expect "paired, swing" "$(paired_ratio 5 4 4 4 1 1 4 4 1 1 1)" 1.00
expect "medians, swing" "$(ratio "$(best_of median 4 4 4 1 1)" "$(best_of median 4 4 1 1 1)" max)" 4.00
expect "paired, even" "$(paired_ratio 4 1 2 3 4 1 1 1 1)" 2.50
expect "paired, a round missing" "$(paired_ratio 3 2 - 6 1 5 2)" 2.50
expect "paired, a run that printed nothing" "$(paired_ratio 3 "" 2 4 1 1 "")" 2.00
expect "paired, nothing left" "$(paired_ratio 2 - 1 1 -)" -
expect "paired, WRONG" "$(paired_ratio 2 1 WRONG 1 1)" -

# x_of and shown_of follow STAT.
A=(1 2 3 4 5); B=(2 2 2 2 20)
STAT=paired; expect "x_of paired" "$(x_of A B)" 1.00; expect "shown_of paired" "$(shown_of "${A[@]}")" 3.000
STAT=median; expect "x_of median" "$(x_of A B)" 1.50
STAT=max; expect "x_of max" "$(x_of A B)" 0.25
expect "verdict" "$(verdict 0.99 1.0) $(verdict 1.00 1.0) $(verdict - 1.0)" "MISS ok n/a"

[ "$fails" = 0 ] && echo "bench_lib: every check passed"
exit $((fails > 0))
