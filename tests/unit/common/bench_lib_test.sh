#!/usr/bin/env bash
# The arithmetic the benchmark scripts report with (scripts/bench_lib.sh): medians, ratios,
# the round-by-round ratio of STAT=paired, how WRONG and missing runs come through, and the
# machine's state beside each run.
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

# Values with the machine's state after a colon (f fast, s slow, m mixed, ? unknown): the
# shown values drop it; a round whose runs met different states, or a mixed one, is left
# out of x; an unknown state leaves the round in; each state's x from its rounds alone.
expect "best_of with states" "$(best_of median 3:f 1:s 2:m)" 2.000
expect "WRONG with a state" "$(best_of max 1:f WRONG:s)" WRONG
A=(2:f 3:s 1:m 4:f 5:s); B=(1:f 2:s 1:m 2:f 1:f)
STAT=paired
expect "x_of, states" "$(x_of A B)" 2.00
expect "paired, fast rounds" "$(paired_ratio 5 "${A[@]}" "${B[@]}" f)" 2.00
expect "paired, slow rounds" "$(paired_ratio 5 "${A[@]}" "${B[@]}" s)" 1.50
expect "states_of" "$(states_of A B)" "fast 2.00 (2), slow 1.50 (1)"
A=(2:? 3:f); B=(1:f 2:f)
expect "unknown state kept" "$(x_of A B)" 1.75
A=(1 2); B=(1 1)
expect "states_of without states" "$(states_of A B)" ""
expect "state_of" "$(state_of f f) $(state_of s s) $(state_of f s) $(state_of "?" f)" "f s m m"
dir=$(mktemp -d)
printf '#!/bin/sh\necho 350\n' > "$dir/slow"; printf '#!/bin/sh\necho 80\n' > "$dir/fast"; printf '#!/bin/sh\nexit 2\n' > "$dir/broken"
chmod +x "$dir"/*
expect "state_now" "$(LATENCY_EXE=$dir/slow state_now) $(LATENCY_EXE=$dir/fast state_now) $(LATENCY_EXE=$dir/broken state_now) $(LATENCY_EXE= state_now)" "s f ? ?"
expect "STATE_NS" "$(STATE_NS=400 LATENCY_EXE=$dir/slow state_now)" f
printf '### round 1 x\n1 a\n### round 2 x\n2 a\n2 b\n### round 1 x\n1 c\n' > "$dir/log"
expect "round_table, round 2" "$(ROUND=2 round_table "$dir/log")" "$(printf '2 a\n2 b\n### round 1 x\n1 c')"
expect "round_table, the last round 1" "$(ROUND=1 round_table "$dir/log")" "1 c"
expect "round_table, none" "$(ROUND=3 round_table "$dir/log")" ""
OUT=$dir/out
expect "row, paired" "$(STAT=paired; A=(2.0:f 4.0:f); B=(1.0:f 2.0:f); row 64K 1.0)" \
  "64K           3.000      1.500    2.00  ok     fast 2.00 (2), slow - (0)"
expect "row, no target" "$(STAT=max; A=(1 2); B=(4 4); row 1M)" "1M                2          4    0.50         "
expect "time_row: x = B / A, the lowest time the best" "$(STAT=max; A=(0.5 0.4); B=(2.0 3.0); time_row 8 1.0)" \
  "8             0.4us      2.0us    5.00  ok     "
A=(1 2); B=(4 4); STAT=max; checked=0; misses=0
row 1M 1.0 > /dev/null; row 2M 0.4 > /dev/null; row 4M > /dev/null
expect "rows counted" "$checked $misses" "2 1"
expect "checks_now" "$(CHECK=1 ROUND=1 checks_now)$(CHECK=1 ROUND=2 checks_now)$(CHECK=all ROUND=2 checks_now)$(CHECK=0 ROUND=1 checks_now)" 1010
rm -rf "$dir"

[ "$fails" = 0 ] && echo "bench_lib: every check passed"
exit $((fails > 0))
