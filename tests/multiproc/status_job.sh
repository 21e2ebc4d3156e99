#!/bin/bash
# Starts a braidrun job of mp_fault in which one rank goes quiet (MODE: compute, its own
# thread busy elsewhere; stop, SIGSTOP), asks braid-info --status where every rank is, and
# prints what it said between STATUS markers, then the job's exit status.
# Usage: status_job.sh BRAIDRUN BRAID_INFO MP_FAULT MODE VICTIM NP
set -u
braidrun=$1 info=$2 prog=$3 mode=$4 victim=$5 np=$6
dir=$(mktemp -d /tmp/braid-status-test-XXXXXX)
chmod 700 "$dir"
trap 'rm -rf "$dir"' EXIT
export BRAID_RUNTIME_DIR=$dir
BRAID_TIMEOUT=${BRAID_TIMEOUT:-60} MP_COMPUTE_MS=${MP_COMPUTE_MS:-6000} BRAIDRUN_GRACE_SEC=2 \
  "$braidrun" -np "$np" "$prog" "$mode" "$victim" 5 > "$dir/job.out" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q FAULT "$dir/job.out" && break; sleep 0.1; done
# Past the health check's 100 ms, so the waits are noted.
sleep 1.5
echo "STATUS auto"
"$info" --status --wait 0.5
echo "STATUS rc=$?"
echo "STATUS by pid"
"$info" --status "$job" --wait 0.5 | tail -n 1
echo "STATUS rc=$?"
store=$(sed -n 's/^store=//p' "$dir/job-$job")
key=$(sed -n 's/^key=//p' "$dir/job-$job")
echo "STATUS by address"
BRAID_AUTH_KEY=$key "$info" --status "$store" --wait 0.5 | tail -n 1
echo "STATUS rc=$?"
echo "STATUS without the key"
env -u BRAID_AUTH_KEY -u BRAID_AUTH_KEY_FILE "$info" --status "$store" --wait 0.5 2>&1
echo "STATUS rc=$?"
wait "$job"
echo "JOB rc=$?"
[ -e "$dir/job-$job" ] && echo "JOB FILE LEFT"
cat "$dir/job.out"
