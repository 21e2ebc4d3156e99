#!/usr/bin/env bash
# Chaos trials: N jobs, each a random collective, size, transport, launcher, job size and
# victim; the victim is killed (SIGKILL) or stopped (SIGSTOP) at a random iteration while the
# others keep calling. Every result is checked (MP_CHECK=1). Reported: hangs (a survivor that
# never returned), survivors that reported no error, wrong results, leftover processes and
# /dev/shm entries, and the time from the fault to each survivor's error (p50/p99/max), for
# kills and for stops (a stop is noticed at BRAID_TIMEOUT, so its time is shown past that).
#
#   scripts/chaos.sh [N]          N trials (default 20), build in ./build
#
# Environment: BUILD (build folder; or BRAIDRUN and RANKPROG, the programs themselves), SEED (random seed; default from the clock), COLLS
# (the calls to pick from; default every collective mp_fault runs and sendrecv, a ring exchange of sends and receives in one group), TRANSPORTS
# (default "shm tcp", add ucx when the plugin is built), LAUNCHERS (default "braidrun env":
# env starts ranks as torchrun does, rank 0 serving the store), TIMEOUT (BRAID_TIMEOUT for the
# ranks, default 2), LOG (folder for each trial's output; default a temporary one, removed
# when every trial passed).
# SUMMARIZE_ONLY=1 runs no trials and reports on the ones already in LOG (a run cut short).
# Exits non-zero when any trial hung, lost a survivor's report, returned a wrong result or left
# something behind.
#
# MODE=elastic runs recovery trials instead: each a training loop (tests/multiproc/mp_recover,
# RECOVERPROG) of STEPS steps under braidrun --min-np on a random transport and job size, with
# one or two victims killed or stopped at random steps; the survivors agree, shrink and go on,
# and in half the trials (--max-np) admit the replacements braidrun starts and grow back.
# Reported: hangs, failed jobs, survivors that did not finish every step or whose parameters
# differ from a run without failures (steps lost or repeated), leftovers, and the time from
# each fault to each survivor's new communicator (p50/p99/max). STORE=etcd keeps the ranks'
# store in an etcd the script starts (BRAID_STORE; Debian's etcd-server) instead of
# braidrun's. STORE=rank0 starts the ranks as torchrun does (no braidrun, rank 0 serving the
# store, rank 1 its standby) and kills or stops rank 0 in every trial (a stopped rank 0 keeps
# its connections: the standby takes over when it has heard nothing for half the timeout),
# and in half of them one more rank (killed or stopped): any rank but rank 1, or rank 1 at a
# later step than rank 0 (by then its standby serves, and the survivors' shrink has started
# another), without replacements but in half of them grown first by one or two processes that
# join through a grow id (mp_recover's MP_GROW_AT). STORE=rank0 STANDBY=host places the ranks on two emulated
# hosts (BRAID_HOST_ID; the first half of the ranks on one, tcp between them) with the
# standby on the second (BRAID_STORE_STANDBY=host), and the second victim, when there is one,
# is rank 1 at rank 0's step in half of those trials (rank 0's whole host lost at once), else
# any rank but the standby's.
#
# MODE=netns runs each job across two emulated hosts (network namespaces joined by a bridge,
# tests/netns/netns_run.sh; needs root), one or two ranks per host, shared memory within a
# host and tcp between them, with one fault from FAULTS (default "linkdown kill stop delay"):
# linkdown pulls host 1's cable (its port on the bridge goes down, so both sides see silence,
# not an error) once every rank has completed a call, and every rank must then report an
# error; kill and stop as above, of a random rank; delay adds DELAY (default 2ms) to every
# packet leaving a host for the whole job, which must then finish with correct results and no
# error; delaylater adds the same delay in the middle of a job (every rank waits at a random
# iteration while netem, or else nfq_delay and an NFQUEUE rule, is put in place, then goes on
# for as many iterations again), which must finish just the same. Reported as above, plus the namespaces left behind; exits 77 when no trial could
# make its namespaces (no root, no veth).
set -uo pipefail

# CHAOS_ISOLATE=1: the run in a PID namespace of its own with a private /dev/shm (needs root
# and unshare(1)), so that its census of processes and segments counts its own alone and
# other jobs may run beside it, as CTest runs the samples; without it the run must be alone
# on the machine. Its first process reaps what the trials orphan; killed, it takes every
# process of the run with it.
if [[ ${CHAOS_ISOLATE:-0} == 1 && -z ${CHAOS_IN_NAMESPACE:-} ]]; then
  export CHAOS_IN_NAMESPACE=1
  exec unshare --pid --kill-child --mount-proc --propagation private \
    bash -c 'mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || exit 2; bash "$@"; exit $?' chaos "$0" "$@"
fi

N=${1:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
BRAIDRUN=${BRAIDRUN:-$BUILD/src/launcher/braidrun}
RANKPROG=${RANKPROG:-$BUILD/tests/multiproc/mp_fault}
COLLS=${COLLS:-"allreduce broadcast allgather reduce_scatter alltoall reduce gather scatter sendrecv"}
TRANSPORTS=${TRANSPORTS:-"shm tcp"}
[[ ${STANDBY:-} == host ]] && TRANSPORTS=${TRANSPORTS_HOST:-tcp}  # two emulated hosts: no shared memory between them
LAUNCHERS=${LAUNCHERS:-"braidrun env"}
TIMEOUT=${TIMEOUT:-2}
SEED=${SEED:-$(date +%s)}
ownLog=0
if [[ -z ${LOG:-} ]]; then
  LOG=$(mktemp -d /tmp/braid-chaos-XXXXXX)
  ownLog=1
fi
etcdPid=""
# On exit: stop the etcd this script started; remove a temporary log folder unless something
# failed (its path is in the first line printed).
onExit() {
  local rc=$?
  if [[ -n $etcdPid ]]; then
    kill "$etcdPid" 2>/dev/null
    wait "$etcdPid" 2>/dev/null
  fi
  if [[ $ownLog == 1 && $rc == 0 ]]; then rm -rf "$LOG"; fi
  if [[ -n ${CHAOS_IN_NAMESPACE:-} && -n ${BRAID_RUNTIME_DIR:-} ]]; then rm -rf "$BRAID_RUNTIME_DIR"; fi
}
trap onExit EXIT
# In a PID namespace, braidrun's pids repeat those of other namespaces: its job files (named
# by pid) go to a folder of the run's own.
if [[ -n ${CHAOS_IN_NAMESPACE:-} ]]; then
  export BRAID_RUNTIME_DIR
  BRAID_RUNTIME_DIR=$(mktemp -d /tmp/braid-chaos-run-XXXXXX)
fi
# A trial that takes longer than this has hung.
WALL=$((TIMEOUT * 4 + 30))

for f in "$BRAIDRUN" "$RANKPROG"; do
  [[ -x $f ]] || { echo "chaos: $f is missing; build first (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$LOG"
RANDOM=$SEED
# pick VAR "a b c": one at random (no subshell, so the seed decides every choice).
pick() {
  local -a a=($2)
  printf -v "$1" '%s' "${a[RANDOM % ${#a[@]}]}"
}
shmCount() { find /dev/shm -maxdepth 1 -name 'braid*' 2>/dev/null | wc -l; }
leftovers() { pgrep -f "$RANKPROG" | wc -l; }
# A port for a store to listen on: free now, and below the kernel's ephemeral range, so that
# no outgoing connection takes it before the store binds it (tests/python/ports.py).
freePort() { python3 -B -c "import sys; sys.path.insert(0, '$ROOT/tests/python'); from ports import free_port; print(free_port())"; }

if [[ ${MODE:-fault} == elastic ]]; then
  RECOVERPROG=${RECOVERPROG:-$(dirname "$RANKPROG")/mp_recover}
  STEPS=${STEPS:-30}
  [[ -x $RECOVERPROG ]] || { echo "chaos: $RECOVERPROG is missing; build first" >&2; exit 2; }
  pkill -9 -f "$RECOVERPROG" 2>/dev/null
  storeArgs=()
  if [[ ${STORE:-braidrun} == etcd ]]; then
    command -v etcd >/dev/null || { echo "chaos: STORE=etcd needs etcd (apt-get install etcd-server)" >&2; exit 2; }
    etcdPort=$(freePort)
    etcdPeer=$(freePort)
    while [[ $etcdPeer == "$etcdPort" ]]; do etcdPeer=$(freePort); done
    etcd --data-dir "$LOG/etcd" --listen-client-urls "http://127.0.0.1:$etcdPort" \
      --advertise-client-urls "http://127.0.0.1:$etcdPort" --listen-peer-urls "http://127.0.0.1:$etcdPeer" \
      --log-level error >"$LOG/etcd.log" 2>&1 &
    etcdPid=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$etcdPort") 2>/dev/null && break; sleep 0.1; done
    storeArgs=(-x "BRAID_STORE=etcd://127.0.0.1:$etcdPort/chaos")
  fi
  echo "# chaos (elastic): $N trials of $STEPS steps, seed $SEED, transports '$TRANSPORTS', store ${STORE:-braidrun}${STANDBY:+ (standby: $STANDBY)}, BRAID_TIMEOUT=$TIMEOUT, logs in $LOG"
  start=$(date +%s)
  for ((t = 1; t <= N; ++t)); do
    pick transport "$TRANSPORTS"
    pick np "3 4 5"
    nv=$((1 + RANDOM % 2))
    victims=""
    v1=$((RANDOM % np))
    v2=$(((v1 + 1 + RANDOM % (np - 1)) % np))
    for v in $v1 $v2; do
      [[ $nv == 1 && $v == "$v2" ]] && continue
      pick fault "kill kill stop"
      victims+="${victims:+,}$v:$((1 + RANDOM % (STEPS - 2))):$fault"
    done
    count=$((1 << (10 + RANDOM % 8)))
    # Half the trials run with --max-np: braidrun starts replacements, the ranks grow back.
    pick grow "0 1"
    growArgs=()
    [[ $grow == 1 ]] && growArgs=(--max-np "$np")
    growEnv=()
    if [[ ${STORE:-braidrun} == rank0 ]]; then
      pick fault "kill stop"
      step0=$((1 + RANDOM % (STEPS - 2)))
      victims="0:$step0:$fault"
      # In half of them rank 0 first grows the job by 1 or 2 processes through a grow id
      # (MP_GROW_AT), at rank 0's step or before: those join late and must outlive the
      # store's host as the others do (and keep its next standby in their turn).
      if [[ $grow == 1 ]]; then
        grow="$((1 + RANDOM % step0)):$((1 + RANDOM % 2))"
        growEnv=(MP_GROW_AT=$grow)
      fi
      if [[ ${STANDBY:-} == host ]]; then
        # Ranks r < ceil(np/2) share rank 0's host; the first rank after them keeps the standby.
        keeper=$(((np + 1) / 2))
        if ((nv == 2)); then
          pick same "0 1"
          if [[ $same == 1 ]]; then
            victims+=",1:$step0:$fault"
          else
            pick fault "kill kill stop"
            v=$((1 + RANDOM % (np - 2)))
            ((v >= keeper)) && v=$((v + 1))
            victims+=",$v:$((1 + RANDOM % (STEPS - 2))):$fault"
          fi
        fi
      elif ((nv == 2)); then
        pick fault "kill kill stop"
        # In half of them rank 1, whose standby serves by then, at a later step: the shrink
        # after rank 0's loss gave the store another standby, which takes over in turn.
        pick second "other standby"
        if [[ $second == standby ]] && ((step0 < STEPS - 2)); then
          victims+=",1:$((step0 + 1 + RANDOM % (STEPS - 2 - step0))):$fault"
        else
          victims+=",$((2 + RANDOM % (np - 2))):$((1 + RANDOM % (STEPS - 2))):$fault"
        fi
      fi
    fi
    shm0=$(shmCount)
    out=$LOG/trial-$t.log
    t0=$(date +%s.%N)
    if [[ ${STORE:-braidrun} == rank0 ]]; then
      port=$(freePort)
      survivors=()
      doomed=()
      for ((r = 0; r < np; ++r)); do
        hostEnv=()
        [[ ${STANDBY:-} == host ]] && hostEnv=(BRAID_STORE_STANDBY=host BRAID_HOST_ID=chaos-host-$((r >= (np + 1) / 2)))
        env -u BRAID_RANK -u BRAID_WORLD_SIZE -u BRAID_STORE_ADDR RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r \
          LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port BRAID_TIMEOUT=$TIMEOUT \
          BRAID_TRANSPORT=$transport MP_VICTIMS=$victims "${hostEnv[@]}" "${growEnv[@]}" \
          timeout -s KILL $((WALL * 2)) "$RECOVERPROG" "$STEPS" "$count" >>"$out" 2>&1 &
        if [[ ,$victims, == *",$r:"* ]]; then doomed+=($!); else survivors+=($!); fi
      done
      rc=0
      for p in "${survivors[@]}"; do wait "$p" || rc=1; done
      # A stopped victim stays until told: the rank itself (timeout's child) first, so that it
      # is not orphaned, and continued by the kernel, before it dies.
      for p in "${doomed[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
      wait
    else
      env BRAID_TIMEOUT=$TIMEOUT BRAID_TRANSPORT=$transport MP_VICTIMS=$victims BRAIDRUN_GRACE_SEC=2 \
        timeout -s KILL $((WALL * 2)) "$BRAIDRUN" -np "$np" --min-np $((np - nv)) "${growArgs[@]}" "${storeArgs[@]}" "$RECOVERPROG" "$STEPS" \
        "$count" >"$out" 2>&1
      rc=$?
    fi
    wall=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
    sleep 0.2
    left=$(pgrep -f "$RECOVERPROG" | wc -l)
    [[ $left -gt 0 ]] && pkill -9 -f "$RECOVERPROG"
    shm1=$(shmCount)
    echo "TRIAL $t transport=$transport np=$np victims=$victims grow=$grow count=$count rc=$rc wall_s=$wall" \
      "leftover_procs=$left shm_delta=$((shm1 - shm0))" >>"$out"
  done 2>>"$LOG/shell.log"
  python3 - "$LOG" "$N" "$STEPS" "$(($(date +%s) - start))" <<'EOF2'
import glob, re, sys
def excerpt(text, most=6):
    # The lines that say why, so that a failure in CI explains itself without the log.
    keep = [l.strip() for l in text.splitlines()
            if re.search(r"fail|error|WRONG|timed out|Killed|SKIP|usage", l) and not l.startswith("TRIAL ")]
    return "".join("\n    | " + l[:300] for l in keep[:most])
log, n, steps, took = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lat = {"kill": [], "stop": []}
failed = unfinished = lost = leftover = shm = grown = 0
bad = []
for path in sorted(glob.glob(log + "/trial-*.log"), key=lambda p: int(re.search(r"(\d+)\.log$", p).group(1))):
    text = open(path, errors="replace").read()
    m = re.search(r"TRIAL (\d+) .*np=(\d+) victims=(\S+) .*rc=(\d+) .*leftover_procs=(\d+) shm_delta=(-?\d+)", text)
    if not m:
        continue
    trial, np_, victims, rc, left, dshm = m.groups()
    np_, rc, left, dshm = int(np_), int(rc), int(left), int(dshm)
    faults = {int(r): (int(s), f) for r, s, f in re.findall(r"(\d+):(\d+):(\w+)", victims)}
    problems = []
    fired = {int(r): float(t) for r, t in re.findall(r"FAULT rank=(\d+) step=\d+ mono_ms=([\d.]+)", text)}
    finals = re.findall(r"FINAL rank=(\d+) newrank=\d+ size=(\d+) steps=(\d+) checksum=\S+ match=(\d) same=(\d)", text)
    joined = len(re.findall(r"JOINED rank=\d+", text))
    grown += joined
    want = np_ - len(fired) + joined
    if rc != 0:
        failed += 1; problems.append(f"job exit status {rc}")
    if len(finals) != want:
        unfinished += want - len(finals); problems.append(f"{len(finals)} of {want} survivors finished")
    for r, size, st, match, same in finals:
        if int(st) != steps or match != "1" or same != "1":
            lost += 1; problems.append(f"rank {r}: steps {st}, match {match}, same {same}")
    if left:
        leftover += left; problems.append(f"{left} leftover process(es)")
    if dshm > 0:
        shm += dshm; problems.append(f"{dshm} /dev/shm entries left")
    # Each survivor's shrink handles the faults since its previous one: timed from the
    # earliest of them, as a stop when one of them is (a stop is noticed at the timeout).
    # A rank that joined later (a replacement, a grow) counts the faults since it joined.
    previous = {r: float(m) for r, m in re.findall(r"JOINED rank=(\d+) .*mono_ms=([\d.]+)", text)}
    for r, st, frm, to, fl, mono in re.findall(r"SHRUNK rank=(\d+) step=(\d+) from=(\d+) to=(\d+) failed=(\S+) ms=\d+ mono_ms=([\d.]+)", text):
        at = float(mono)
        since = [v for v in fired if previous.get(r, 0) < fired[v] <= at]
        previous[r] = at
        if not since:
            continue
        stops = [v for v in since if faults.get(v, (0, "kill"))[1] == "stop"]
        kind = "stop" if stops else "kill"
        lat[kind].append(at - min(fired[v] for v in (stops or since)))
    if problems:
        bad.append(f"trial {trial}: " + ", ".join(problems) + f" ({path})" + excerpt(text))
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")
print(f"elastic trials {n} in {took} s; failed jobs {failed}; survivors that did not finish {unfinished}; "
      f"steps lost or repeated {lost}; leftover processes {leftover}; /dev/shm entries left {shm}; "
      f"replacements admitted {grown}")
for kind, v in lat.items():
    if v:
        print(f"fault to new communicator, {kind} ({len(v)} survivor shrinks): p50 {pct(v, 50):.0f} ms, "
              f"p99 {pct(v, 99):.0f} ms, max {max(v):.0f} ms")
for b in bad:
    print(b)
sys.exit(1 if failed or unfinished or lost or leftover or shm else 0)
EOF2
  exit $?
fi

if [[ ${MODE:-fault} == netns ]]; then
  NETNS_RUN=${NETNS_RUN:-$ROOT/tests/netns/netns_run.sh}
  export NFQ_DELAY=${NFQ_DELAY:-$BUILD/tests/netns/nfq_delay}
  FAULTS=${FAULTS:-"linkdown kill stop delay delaylater"}
  DELAY=${DELAY:-2ms}
  pkill -9 -f "$RANKPROG" 2>/dev/null
  echo "# chaos (netns): $N trials, seed $SEED, faults '$FAULTS', delay $DELAY, BRAID_TIMEOUT=$TIMEOUT, logs in $LOG"
  start=$(date +%s)
  for ((t = 1; t <= N; ++t)); do
    pick coll "$COLLS"
    pick count "1 1000 65536"
    pick rph "1 2"
    pick fault "$FAULTS"
    np=$((2 * rph))
    victim=$((RANDOM % np))
    at=$((2 + RANDOM % 20))
    shm0=$(shmCount)
    out=$LOG/trial-$t.log
    envs=(BRAID_TIMEOUT=$TIMEOUT MP_COLL=$coll MP_CHECK=1)
    # The survivors of a kill or stop report within BRAID_TIMEOUT and a second; netns_run
    # gives them that before ending them.
    nr=(--hosts 2 --ranks-per-host "$rph" --timeout "$WALL" --grace $((TIMEOUT + 3)) --tag-output)
    t0=$(date +%s.%N)
    case $fault in
      kill | stop)
        env "${envs[@]}" "$NETNS_RUN" "${nr[@]}" -- "$RANKPROG" "$fault" "$victim" "$at" "$count" >"$out" 2>&1
        rc=$?
        ;;
      delay)
        victim=-1
        env "${envs[@]}" "$NETNS_RUN" "${nr[@]}" --delay "$DELAY" -- "$RANKPROG" none -1 $((at * 3)) "$count" \
          >"$out" 2>&1
        rc=$?
        ;;
      delaylater)
        victim=-1
        # Every rank waits at iteration `at` until the delay is in place, then runs `at` more.
        hold=$(mktemp -u /tmp/chaos-hold.XXXXXX)
        env "${envs[@]}" MP_HOLD_FILE="$hold" "$NETNS_RUN" "${nr[@]}" -- "$RANKPROG" hold -1 "$at" "$count" \
          >"$out" 2>&1 &
        nrpid=$!
        for ((w = 0; w < 600; ++w)); do
          (($(grep -c "HOLD rank=" "$out") >= np)) && break
          kill -0 "$nrpid" 2>/dev/null || break
          sleep 0.05
        done
        nfqpids=()
        hostns=$(ip netns list | awk -v p="bnr-$nrpid-" 'index($1, p) == 1 && $1 ~ /-h[0-9]+$/ { print $1 }')
        if [[ -n $hostns ]] && kill -0 "$nrpid" 2>/dev/null; then
          us=$(awk -v t="$DELAY" 'BEGIN { match(t, /^[0-9.]+/); v = substr(t, 1, RLENGTH); u = substr(t, RLENGTH + 1)
                                          printf "%d", v * (u == "us" ? 1 : u == "s" ? 1000000 : 1000) }')
          for ns in $hostns; do
            if ! ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$DELAY" limit 100000 2>/dev/null; then
              ready=$(mktemp -u /tmp/chaos-nfq.XXXXXX)
              ip netns exec "$ns" "$NFQ_DELAY" --queue 0 --delay-us "$us" --ready-file "$ready" </dev/null >/dev/null 2>&1 &
              nfqpids+=($!)
              for ((w = 0; w < 500; ++w)); do [[ -e $ready ]] && break; sleep 0.01; done
              rm -f "$ready"
              ip netns exec "$ns" iptables-legacy -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass
            fi
          done
          python3 -c 'import time; print("FAULT rank=-1 mono_ms=%.3f" % (time.monotonic() * 1000))' >"$out.fault"
        fi
        touch "$hold"
        wait "$nrpid"
        rc=$?
        ((${#nfqpids[@]})) && kill -9 "${nfqpids[@]}" 2>/dev/null && wait "${nfqpids[@]}" 2>/dev/null
        cat "$out.fault" >>"$out" 2>/dev/null
        rm -f "$out.fault" "$hold"
        ;;
      linkdown)
        victim=-1
        env "${envs[@]}" "$NETNS_RUN" "${nr[@]}" -- "$RANKPROG" external -1 0 "$count" >"$out" 2>&1 &
        nrpid=$!
        for ((w = 0; w < 400; ++w)); do
          (($(grep -c "RUNNING rank=" "$out") >= np)) && break
          kill -0 "$nrpid" 2>/dev/null || break
          sleep 0.05
        done
        sleep "0.$((RANDOM % 10))"
        sw=$(ip netns list | awk -v p="bnr-$nrpid-" 'index($1, p) == 1 && $1 ~ /-sw$/ { print $1 }')
        # The fault's time on the clock the ranks' RESULT lines use (CLOCK_MONOTONIC).
        [[ -n $sw ]] && python3 -c 'import subprocess, sys, time
t = time.monotonic() * 1000
subprocess.run(["ip", "-n", sys.argv[1], "link", "set", "h1", "down"], check=True)
print("FAULT rank=-1 mono_ms=%.3f" % t)' "$sw" >"$out.fault"
        wait "$nrpid"
        rc=$?
        cat "$out.fault" >>"$out" 2>/dev/null
        rm -f "$out.fault"
        ;;
    esac
    wall=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
    hung=0
    [[ $rc == 124 ]] && hung=1
    sleep 0.2
    left=$(leftovers)
    [[ $left -gt 0 ]] && pkill -9 -f "$RANKPROG"
    netns_left=$(ip netns list 2>/dev/null | grep -c "^bnr-")
    shm1=$(shmCount)
    echo "TRIAL $t coll=$coll count=$count transport=netns np=$np victim=$victim fault=$fault at=$at rc=$rc" \
      "hung=$hung wall_s=$wall leftover_procs=$left shm_delta=$((shm1 - shm0)) netns_left=$netns_left" >>"$out"
  done 2>>"$LOG/shell.log"
  python3 - "$LOG" "$N" "$TIMEOUT" "$(($(date +%s) - start))" <<'EOF2'
import glob, re, sys
def excerpt(text, most=6):
    # The lines that say why, so that a failure in CI explains itself without the log.
    keep = [l.strip() for l in text.splitlines()
            if re.search(r"fail|error|WRONG|timed out|Killed|SKIP|usage", l) and not l.startswith("TRIAL ")]
    return "".join("\n    | " + l[:300] for l in keep[:most])
log, n, timeout, took = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
lat = {"linkdown": [], "kill": [], "stop": []}
hangs = unreported = wrong = leftover = shm = netns = spurious = skipped = late = 0
bad = []
for path in sorted(glob.glob(log + "/trial-*.log"), key=lambda p: int(re.search(r"(\d+)\.log$", p).group(1))):
    text = open(path, errors="replace").read()
    m = re.search(r"TRIAL (\d+) .*np=(\d+) victim=(-?\d+) fault=(\w+) .*rc=(\d+) hung=(\d) .*leftover_procs=(\d+) "
                  r"shm_delta=(-?\d+) netns_left=(\d+)", text)
    if not m:
        continue
    trial, np_, victim, fault, rc, hung, left, dshm, nsl = m.groups()
    np_, rc, hung, left, dshm, nsl = int(np_), int(rc), int(hung), int(left), int(dshm), int(nsl)
    if rc == 77:
        skipped += 1
        bad.append(f"trial {trial}: skipped, netns_run cannot run here ({path})")
        continue
    problems = []
    results = {int(r): float(t) for r, t in re.findall(r"RESULT rank=(\d+) code=\d+ failed_rank=-?\d+ elapsed_ms=\d+ mono_ms=([\d.]+)", text)}
    fm = re.search(r"FAULT rank=-?\d+ mono_ms=([\d.]+)", text)
    if "WRONG" in text:
        wrong += 1; problems.append("wrong result")
    if hung:
        hangs += 1; problems.append("hang")
    if fault in ("delay", "delaylater"):
        done = len(re.findall(r"DONE rank=\d+", text))
        if rc != 0 or done != np_ or results:
            spurious += 1; problems.append(f"a job across a slow link failed (exit {rc}, {done} of {np_} done)")
        if fault == "delaylater" and not fm:
            late += 1; problems.append("the delay was not put in place")
    else:
        expect = np_ if fault == "linkdown" else np_ - 1
        missing = expect - len(results)
        if not fm:
            problems.append("no fault injected")
        elif missing > 0:
            unreported += missing; problems.append(f"{missing} rank(s) without an error")
        if fm:
            lat[fault].extend(t - float(fm.group(1)) for t in results.values())
    if left:
        leftover += left; problems.append(f"{left} leftover process(es)")
    if dshm > 0:
        shm += dshm; problems.append(f"{dshm} /dev/shm entries left")
    if nsl:
        netns += nsl; problems.append(f"{nsl} namespaces left")
    if problems:
        bad.append(f"trial {trial} ({fault}): " + ", ".join(problems) + f" ({path})" + excerpt(text))
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")
print(f"netns trials {n} in {took} s; hangs {hangs}; ranks without an error {unreported}; wrong results {wrong}; "
      f"slow-link jobs that failed {spurious}; leftover processes {leftover}; /dev/shm entries left {shm}; "
      f"namespaces left {netns}; skipped {skipped}; delays not put in place {late}")
for fault, v in lat.items():
    if v:
        print(f"fault to error, {fault} ({len(v)} ranks): p50 {pct(v, 50):.0f} ms, p99 {pct(v, 99):.0f} ms, max {max(v):.0f} ms")
for b in bad:
    print(b)
if skipped == n:
    sys.exit(77)  # this machine cannot make the namespaces: nothing was tried
sys.exit(1 if hangs or unreported or wrong or spurious or leftover or shm or netns else 0)
EOF2
  exit $?
fi

if [[ ${SUMMARIZE_ONLY:-0} != 1 ]]; then
pkill -9 -f "$RANKPROG" 2>/dev/null
echo "# chaos: $N trials, seed $SEED, transports '$TRANSPORTS', launchers '$LAUNCHERS', BRAID_TIMEOUT=$TIMEOUT, logs in $LOG"
start=$(date +%s)
for ((t = 1; t <= N; ++t)); do
  pick coll "$COLLS"
  pick count "1 1000 65536 1048576"
  pick transport "$TRANSPORTS"
  pick launcher "$LAUNCHERS"
  pick np "2 3 4"
  victim=$((RANDOM % np))
  pick fault "kill stop"
  at=$((2 + RANDOM % 20))
  shm0=$(shmCount)
  out=$LOG/trial-$t.log
  envs=(BRAID_TIMEOUT=$TIMEOUT BRAID_TRANSPORT=$transport MP_COLL=$coll MP_CHECK=1)
  t0=$(date +%s.%N)
  if [[ $launcher == braidrun ]]; then
    # braidrun's grace after the first failure covers the survivors' reports of a kill
    # (milliseconds); after a stop, the survivors' exits start it and it ends the stopped rank.
    env "${envs[@]}" BRAIDRUN_GRACE_SEC=2 timeout -s KILL $WALL \
      "$BRAIDRUN" -np "$np" "$RANKPROG" "$fault" "$victim" "$at" "$count" >"$out" 2>&1
    rc=$?  # braidrun's: the first failure's (137 for the killed victim)
    hung=0
  else
    # As torchrun starts ranks: rank 0 serves the store. Survivors are bounded by WALL; the
    # victim, stopped or dead, is killed once they are done.
    port=$(freePort)
    pids=()
    for ((r = 0; r < np; ++r)); do
      env "${envs[@]}" RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port timeout -s KILL $WALL "$RANKPROG" "$fault" "$victim" "$at" "$count" >"$out.$r" 2>&1 &
      pids+=($!)
    done
    rc=0
    hung=0
    for ((r = 0; r < np; ++r)); do
      [[ $r == "$victim" ]] && continue
      wait "${pids[r]}"
      rc=$?
      [[ $rc == 137 ]] && hung=1  # survivors exit 1 or 2; 137 is `timeout` ending one
    done
    # `timeout` runs the rank as its child: that goes first, or it would outlive its parent.
    pkill -9 -P "${pids[victim]}" 2>/dev/null
    kill -9 "${pids[victim]}" 2>/dev/null
    wait "${pids[victim]}" 2>/dev/null
    cat "$out".* >"$out"
    rm -f "$out".*
  fi
  wall=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
  awk -v w="$wall" -v lim="$WALL" 'BEGIN { exit !(w >= lim - 0.5) }' && hung=1
  sleep 0.2
  left=$(leftovers)
  [[ $left -gt 0 ]] && pkill -9 -f "$RANKPROG"
  shm1=$(shmCount)
  echo "TRIAL $t coll=$coll count=$count transport=$transport launcher=$launcher np=$np victim=$victim" \
    "fault=$fault at=$at rc=$rc hung=$hung wall_s=$wall leftover_procs=$left shm_delta=$((shm1 - shm0))" >>"$out"
done 2>>"$LOG/shell.log"  # the shell's notices of the victims it killed
fi

python3 - "$LOG" "$TIMEOUT" "$(($(date +%s) - ${start:-$(date +%s)}))" <<'EOF'
import glob, re, sys
def excerpt(text, most=6):
    # The lines that say why, so that a failure in CI explains itself without the log.
    keep = [l.strip() for l in text.splitlines()
            if re.search(r"fail|error|WRONG|timed out|Killed|SKIP|usage", l) and not l.startswith("TRIAL ")]
    return "".join("\n    | " + l[:300] for l in keep[:most])
log, timeout, took = sys.argv[1], float(sys.argv[2]), sys.argv[3]
n = 0
lat = {"kill": [], "stop": []}
hangs = unreported = wrong = leftover = shm = nofault = 0
bad = []
for path in sorted(glob.glob(log + "/trial-*.log"), key=lambda p: int(re.search(r"(\d+)\.log$", p).group(1))):
    text = open(path, errors="replace").read()
    m = re.search(r"TRIAL (\d+) .*np=(\d+) victim=(\d+) fault=(\w+) .* hung=(\d) .*leftover_procs=(\d+) shm_delta=(-?\d+)", text)
    if not m:
        continue  # a trial cut short: nothing recorded
    n += 1
    trial, np_, victim, fault, hung, left, dshm = m.groups()
    np_, hung, left, dshm = int(np_), int(hung), int(left), int(dshm)
    problems = []
    fm = re.search(r"FAULT rank=\d+ mono_ms=([\d.]+)", text)
    results = {int(r): float(t) for r, t in re.findall(r"RESULT rank=(\d+) code=\d+ failed_rank=-?\d+ elapsed_ms=\d+ mono_ms=([\d.]+)", text)}
    if "WRONG" in text:
        wrong += 1; problems.append("wrong result")
    if not fm:
        nofault += 1; problems.append("no fault injected (the job ended first)")
    if hung:
        hangs += 1; problems.append("hang")
    missing = np_ - 1 - len(results)
    if fm and missing > 0:
        unreported += missing; problems.append(f"{missing} survivor(s) without an error")
    if left:
        leftover += left; problems.append(f"{left} leftover process(es)")
    if dshm > 0:
        shm += dshm; problems.append(f"{dshm} /dev/shm entries left")
    if fm:
        for t in results.values():
            lat[fault].append(t - float(fm.group(1)))
    if problems:
        bad.append(f"trial {trial}: " + ", ".join(problems) + f" ({path})" + excerpt(text))
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")
print(f"trials {n} in {took} s; hangs {hangs}; survivors without an error {unreported}; wrong results {wrong}; "
      f"leftover processes {leftover}; /dev/shm entries left {shm}; trials where the job ended before the fault {nofault}")
for fault, v in lat.items():
    if v:
        print(f"fault to error, {fault} ({len(v)} survivors): p50 {pct(v, 50):.0f} ms, p99 {pct(v, 99):.0f} ms, max {max(v):.0f} ms"
              + (f" (BRAID_TIMEOUT {timeout:.0f} s included)" if fault == "stop" else ""))
for b in bad:
    print(b)
sys.exit(1 if hangs or unreported or wrong or leftover or shm else 0)
EOF
