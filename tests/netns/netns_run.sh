#!/usr/bin/env bash
# netns_run.sh: run a command as the ranks of one braid job spread over several emulated
# hosts on this machine, so that braid sees a multi-host job: shared memory between the
# ranks of one host, TCP between hosts.
#
#   netns_run.sh --hosts H --ranks-per-host R [--delay 1ms] [--rate 1gbit]
#                [--timeout SEC] [--grace SEC] [--port P] [--tag-output] -- CMD [ARGS...]
#   netns_run.sh --cleanup-stale
#
# Each host is a network namespace with one interface, eth0 (10.200.0.<h+1>/24), joined to
# the others by a veth pair into a bridge. The bridge lives in a namespace of its own, so
# that the run adds nothing to the root namespace: deleting the run's namespaces removes
# every interface it made, and parallel runs cannot collide on interface names, addresses
# or ports (each namespace has its own IP stack). Only the namespace names are global;
# they carry the runner's pid and start time, which no two live runs share.
#
# Rank r = h*R + l runs in host h's namespace with BRAID_RANK, BRAID_WORLD_SIZE,
# BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE, BRAID_HOST_ID=<namespace name> and
# BRAID_STORE_ADDR=10.200.0.1:<port>. BRAID_STORE_EXTERNAL is not set, so rank 0 serves the
# rendezvous store itself (src/api/session.cc listens on 0.0.0.0:<port>); the others retry
# until it is up. Every other variable of this script's environment reaches the ranks
# (BRAID_DEBUG, BRAID_ALGO, ...).
#
# Shaping applies to each host's egress (eth0 inside its namespace): --delay D delays every
# packet leaving a host by D (so a round trip between two hosts gains 2*D); --rate R caps
# what each host sends. Traffic inside a host (shared memory, loopback) is never shaped.
# --delay needs the kernel's netem qdisc, or else NFQUEUE with nfq_delay (built from
# nfq_delay.c when libnetfilter-queue-dev is installed; path in $NFQ_DELAY) and
# iptables-legacy; --rate alone uses tbf, which more kernels have.
#
# Exit status: 0 when every rank exits 0; otherwise that of the first rank to fail
# (128+signo if killed by a signal), with one line per failed rank on stderr; 124 on
# --timeout; 77 when this machine cannot run it (no permission for `ip netns`, no veth or
# bridge, or neither netem nor NFQUEUE for --delay), with a "SKIP:" line saying why; 2 on
# bad usage.
# After a failure the other ranks get --grace seconds (default 5) to notice and exit on
# their own, then SIGTERM, then SIGKILL 2 s later.
#
# Cleanup happens on every exit path: an EXIT trap (normal exit, failure, timeout, SIGINT,
# SIGTERM) and, for SIGKILL (which is how CTest ends a test that runs past its TIMEOUT), a
# detached watchdog that deletes the namespaces once this script is gone. Ranks also carry
# PR_SET_PDEATHSIG=SIGKILL, and the watchdog kills whatever still runs inside the
# namespaces. Every start also sweeps namespaces left by runs whose owner has died (say, a
# machine crash); --cleanup-stale does only that.

set -u
set -o pipefail
# NETNS_RUN_TRACE=FILE: an xtrace of this script appended to FILE (for debugging hangs).
if [[ -n ${NETNS_RUN_TRACE:-} ]]; then
  exec 19>>"$NETNS_RUN_TRACE"
  BASH_XTRACEFD=19
  PS4='+ $$ ${EPOCHREALTIME} ${LINENO}: '
  set -x
fi

readonly kSkip=77
readonly kUsage=2
readonly kTimeout=124
readonly kPrefix=bnr          # every namespace this script makes starts with "bnr-"
readonly kSubnet=10.200.0     # private to the run's bridge: no address in the root namespace
readonly kKillAfterTermSec=2
SELF=$(readlink -f "${BASH_SOURCE[0]}")

die_usage() {
  echo "netns_run: $*" >&2
  echo "usage: netns_run.sh --hosts H --ranks-per-host R [--delay D] [--rate R] [--timeout SEC] [--grace SEC]" \
       "[--port P] [--tag-output] -- CMD [ARGS...]" >&2
  exit "$kUsage"
}

skip() {
  echo "SKIP: netns_run: $*" >&2
  exit "$kSkip"
}

# The 22nd field of /proc/PID/stat: the process's start time in clock ticks since boot.
# With the pid it names one process for good, even after the pid is reused.
start_time_of() {
  local line
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  line=${line##*) }  # the command name may hold spaces and parentheses; skip past it
  local -a f
  read -r -a f <<<"$line"
  echo "${f[19]}"
}

# True while the process that made run id "bnr-PID-START-..." is still alive.
owner_alive() {
  local pid=$1 start=$2 now
  now=$(start_time_of "$pid") || return 1
  [[ $now == "$start" ]]
}

# Our namespaces whose name starts with $1 (a run id followed by '-').
namespaces_with_prefix() {
  ip netns list 2>/dev/null | awk -v p="$1" 'index($1, p) == 1 { print $1 }'
}

# Kills everything still inside the run's namespaces, then deletes them. A namespace whose
# name is deleted lives on while a process is inside it, hence the kill first. Safe to run
# twice and concurrently (trap and watchdog): failures of `ip` are ignored.
delete_run() {
  local id=$1 ns pids
  for ns in $(namespaces_with_prefix "$id-"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086  # a list of pids
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}

# Deletes the namespaces of runs whose owner is gone (killed before its watchdog could act,
# or a crash). Names are bnr-<pid>-<starttime>-<rand>-<suffix>.
sweep_stale() {
  local ns pid start rand
  declare -A seen=()
  for ns in $(namespaces_with_prefix "$kPrefix-"); do
    IFS=- read -r _ pid start rand _ <<<"$ns"
    [[ $pid =~ ^[0-9]+$ && $start =~ ^[0-9]+$ ]] || continue
    local id="$kPrefix-$pid-$start-$rand"
    [[ -n ${seen[$id]:-} ]] && continue
    seen[$id]=1
    if ! owner_alive "$pid" "$start"; then
      echo "netns_run: removing namespaces left by a dead run ($id)" >&2
      delete_run "$id"
    fi
  done
}

# --- hidden mode: the watchdog -------------------------------------------------------
# Started detached (double fork, own session, no stdio) so that it is not in the process
# tree that CTest kills on timeout and does not hold the test's output pipe open.
if [[ ${1:-} == --_watch ]]; then
  owner=$2 start=$3 id=$4
  while owner_alive "$owner" "$start"; do sleep 0.5; done
  delete_run "$id"
  exit 0
fi

if [[ ${1:-} == --cleanup-stale ]]; then
  sweep_stale
  exit 0
fi

# --- arguments ---------------------------------------------------------------------------
hosts=0 rph=0 delay="" rate="" timeout_sec=120 grace_sec=5 port=29500 tag=0
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_secs() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
while (($#)); do
  case $1 in
    --hosts) (($# >= 2)) || die_usage "$1 needs a value"; hosts=$2; shift 2 ;;
    --ranks-per-host) (($# >= 2)) || die_usage "$1 needs a value"; rph=$2; shift 2 ;;
    --delay) (($# >= 2)) || die_usage "$1 needs a value"; delay=$2; shift 2 ;;
    --rate) (($# >= 2)) || die_usage "$1 needs a value"; rate=$2; shift 2 ;;
    --timeout) (($# >= 2)) || die_usage "$1 needs a value"; timeout_sec=$2; shift 2 ;;
    --grace) (($# >= 2)) || die_usage "$1 needs a value"; grace_sec=$2; shift 2 ;;
    --port) (($# >= 2)) || die_usage "$1 needs a value"; port=$2; shift 2 ;;
    --tag-output) tag=1; shift ;;
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$SELF"; exit 0 ;;
    --) shift; break ;;
    -*) die_usage "unknown option '$1'" ;;
    *) break ;;
  esac
done
(($# > 0)) || die_usage "no command given"
in_range() { is_uint "$1" && (($1 >= $2 && $1 <= $3)); }
in_range "$hosts" 1 16 || die_usage "--hosts '$hosts' is not in [1, 16]"
in_range "$rph" 1 64 || die_usage "--ranks-per-host '$rph' is not in [1, 64]"
in_range "$port" 1 65535 || die_usage "--port '$port' is not in [1, 65535]"
if ! is_secs "$timeout_sec" || [[ $timeout_sec =~ ^0*([.]0*)?$ ]]; then
  die_usage "--timeout '$timeout_sec' is not a positive number of seconds"
fi
is_secs "$grace_sec" || die_usage "--grace '$grace_sec' is not a number of seconds"
# tc takes units (1ms, 500us, 1gbit, 100mbit); it reports a bad one itself, but a value
# that starts with '-' would be read as an option.
[[ -z $delay || $delay =~ ^[0-9] ]] || die_usage "--delay '$delay' is not a time such as 1ms"
[[ -z $rate || $rate =~ ^[0-9] ]] || die_usage "--rate '$rate' is not a rate such as 1gbit"
cmd=("$@")
nranks=$((hosts * rph))

((EUID == 0)) || skip "needs root for 'ip netns' (running as uid $EUID)"
command -v ip >/dev/null || skip "'ip' (iproute2) is not installed"
if [[ -n $delay || -n $rate ]]; then command -v tc >/dev/null || skip "'tc' (iproute2) is not installed"; fi
command -v setpriv >/dev/null && have_setpriv=1 || have_setpriv=0

# --- setup -------------------------------------------------------------------------------
my_start=$(start_time_of $$)
run_id="$kPrefix-$$-$my_start-$RANDOM"
sw_ns="$run_id-sw"
host_ns=()
for ((h = 0; h < hosts; ++h)); do host_ns+=("$run_id-h$h"); done

declare -A rank_of=()   # pid -> rank, while running
cleaned=0

cleanup() {
  ((cleaned)) && return
  cleaned=1
  local pid
  # Reaped here, with stderr closed, so that bash does not print a "Killed" job notice
  # for every rank we end on purpose.
  {
    for pid in "${!rank_of[@]}"; do kill -KILL "$pid"; done
    for pid in "${!rank_of[@]}"; do wait "$pid"; done
  } 2>/dev/null
  delete_run "$run_id"
}
trap cleanup EXIT
# On SIGINT/SIGTERM/SIGHUP the main loop forwards the signal and winds down; before the
# loop starts there is nothing to wind down, so those traps just exit (running cleanup).
interrupted=""
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

sweep_stale

# The watchdog, detached: double fork (the subshell exits at once, so it is reparented
# away from us) and a session of its own.
( setsid "$BASH" "$SELF" --_watch "$$" "$my_start" "$run_id" </dev/null >/dev/null 2>&1 & )

# Runs `ip ARGS`; on failure, skips (exit 77) saying what this machine refused. Setup steps
# fail only where the kernel or the sandbox forbids them (no CAP_SYS_ADMIN for namespaces,
# no veth or bridge driver), which is a property of the machine, not a bug to report.
ip_or_skip() {
  local what=$1 err
  shift
  if ! err=$(ip "$@" 2>&1); then
    skip "$what is not permitted here: 'ip $*' failed: ${err:-no message}"
  fi
}

ip_or_skip "creating a network namespace" netns add "$sw_ns"
ip_or_skip "creating a bridge" -n "$sw_ns" link add br0 type bridge
ip_or_skip "bringing up a bridge" -n "$sw_ns" link set br0 up
for ((h = 0; h < hosts; ++h)); do
  ns=${host_ns[h]}
  ip_or_skip "creating a network namespace" netns add "$ns"
  # The veth pair is made inside the switch namespace, its far end moved straight into the
  # host: names like h0/eth0 are private to each namespace, so they never collide.
  ip_or_skip "creating a veth pair" -n "$sw_ns" link add "h$h" type veth peer name eth0 netns "$ns"
  ip_or_skip "attaching a veth to a bridge" -n "$sw_ns" link set "h$h" master br0 up
  ip_or_skip "configuring an address" -n "$ns" addr add "$kSubnet.$((h + 1))/24" dev eth0
  ip_or_skip "bringing up an interface" -n "$ns" link set eth0 up
  ip_or_skip "bringing up loopback" -n "$ns" link set lo up
done

# Shaping. netem's queue limit is raised from its default of 1000 packets so that it
# never drops at the rates and delays used here (a drop would add a retransmit timeout
# and turn a latency measurement into noise).
#
# Kernels built without netem still have NFQUEUE on many machines: then --delay runs
# nfq_delay (nfq_delay.c, $NFQ_DELAY or next to this script's build) inside each host,
# which holds every packet leaving eth0 for the delay, and --rate keeps using tbf.
# Converts a tc-style time (1ms, 500us, 1s, 0.5ms) to whole microseconds.
to_us() {
  awk -v t="$1" 'BEGIN {
    if (match(t, /^[0-9.]+/) == 0) exit 1
    v = substr(t, 1, RLENGTH); u = substr(t, RLENGTH + 1)
    f = (u == "us" || u == "usec") ? 1 : (u == "ms" || u == "msec") ? 1000 : (u == "s" || u == "sec" || u == "") ? 1000000 : -1
    if (f < 0) exit 1
    printf "%d", v * f }'
}
nfq_why=""
nfq_usable() {
  NFQ_DELAY=${NFQ_DELAY:-}
  [[ -x $NFQ_DELAY ]] || { nfq_why="nfq_delay was not built (needs libnetfilter-queue-dev; NFQ_DELAY='$NFQ_DELAY')"; return 1; }
  command -v iptables-legacy >/dev/null || { nfq_why="iptables-legacy is not installed"; return 1; }
  return 0  # whether the kernel takes the NFQUEUE target shows when the rule is added
}
# Starts nfq_delay in host namespace $1 and steers its eth0 output to it; skips (77) when the
# kernel refuses the NFQUEUE target.
start_nfq_delay() {
  local ns=$1 us=$2 ready err
  ready=$(mktemp -u "${TMPDIR:-/tmp}/bnr-nfq.XXXXXX")
  ip netns exec "$ns" "$NFQ_DELAY" --queue 0 --delay-us "$us" --ready-file "$ready" </dev/null >/dev/null 2>&1 &
  local i
  for ((i = 0; i < 500; ++i)); do [[ -e $ready ]] && break; sleep 0.01; done
  [[ -e $ready ]] || skip "nfq_delay did not bind a netfilter queue in 5 s (no nfnetlink_queue?), so --delay cannot be emulated"
  rm -f "$ready"
  if ! err=$(ip netns exec "$ns" iptables-legacy -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass 2>&1); then
    skip "the kernel refused the NFQUEUE target ($err), so --delay cannot be emulated without netem"
  fi
}
use_nfq=0
qdisc=()
if [[ -n $delay ]]; then
  qdisc=(netem delay "$delay" limit 100000)
  [[ -n $rate ]] && qdisc+=(rate "$rate")
  # Does this kernel have netem? Try it on the first host; it is removed again below.
  if ! err=$(ip netns exec "${host_ns[0]}" tc qdisc add dev eth0 root netem delay "$delay" 2>&1); then
    if [[ $err == *"qdisc kind is unknown"* || $err == *"No such file"* || $err == *"not supported"* ]]; then
      nfq_usable || skip "this kernel has no 'netem' qdisc (CONFIG_NET_SCH_NETEM) and the NFQUEUE fallback is unavailable ($nfq_why), so --delay cannot be emulated: $err"
      use_nfq=1
      delay_us=$(to_us "$delay") || die_usage "--delay '$delay' is not a time such as 1ms"
      qdisc=()
      [[ -n $rate ]] && qdisc=(tbf rate "$rate" burst 256kb latency 100ms)
    else
      echo "netns_run: tc qdisc add dev eth0 root netem delay $delay failed: $err" >&2
      exit 1
    fi
  else
    ip netns exec "${host_ns[0]}" tc qdisc del dev eth0 root 2>/dev/null
  fi
elif [[ -n $rate ]]; then
  # Burst of 256 KiB: enough that TSO-sized packets pass at full rate, small enough that
  # the average rate holds over a millisecond or two.
  qdisc=(tbf rate "$rate" burst 256kb latency 100ms)
fi
if ((${#qdisc[@]})); then
  for ns in "${host_ns[@]}"; do
    if ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root "${qdisc[@]}" 2>&1); then
      if [[ $err == *"qdisc kind is unknown"* || $err == *"No such file"* || $err == *"not supported"* ]]; then
        what=--rate
        [[ -n $delay && $use_nfq == 0 ]] && what=--delay
        skip "this kernel has no '${qdisc[0]}' qdisc (CONFIG_NET_SCH_${qdisc[0]^^}), so $what cannot be emulated: $err"
      fi
      echo "netns_run: tc qdisc add dev eth0 root ${qdisc[*]} failed: $err" >&2
      exit 1
    fi
  done
fi
if ((use_nfq)); then
  for ns in "${host_ns[@]}"; do start_nfq_delay "$ns" "$delay_us"; done
  echo "netns_run: no netem in this kernel; --delay $delay by nfq_delay (NFQUEUE) on each host's eth0" >&2
fi

# --- ranks -------------------------------------------------------------------------------
# Prefixes each line; sed -u so that lines from different ranks interleave as written.
tagger() { sed -u "s/^/$1/"; }

start_rank() {
  local r=$1 h=$2 l=$3
  local -a launch=()
  # PR_SET_PDEATHSIG survives exec: if this script is SIGKILLed the rank dies with it.
  ((have_setpriv)) && launch=(setpriv --pdeathsig KILL --)
  # env(1) because `ip netns exec` takes no assignments. BRAID_STORE_EXTERNAL is dropped:
  # inherited from an outer launcher it would stop rank 0 from serving the store, and
  # nothing else would.
  launch+=(ip netns exec "${host_ns[h]}" env -u BRAID_STORE_EXTERNAL
    "BRAID_RANK=$r" "BRAID_WORLD_SIZE=$nranks" "BRAID_LOCAL_RANK=$l" "BRAID_LOCAL_SIZE=$rph"
    "BRAID_HOST_ID=${host_ns[h]}" "BRAID_STORE_ADDR=$kSubnet.1:$port" "${cmd[@]}")
  # Rank 0 alone keeps our stdin, as with mpirun and braidrun.
  if ((tag)); then
    (
      trap - INT TERM HUP ALRM
      ((r == 0)) || exec </dev/null
      exec "${launch[@]}"
    ) > >(tagger "[$r] ") 2> >(tagger "[$r] " >&2) &
  else
    (
      trap - INT TERM HUP ALRM
      ((r == 0)) || exec </dev/null
      exec "${launch[@]}"
    ) &
  fi
  rank_of[$!]=$r
}

for ((h = 0; h < hosts; ++h)); do
  for ((l = 0; l < rph; ++l)); do
    start_rank $((h * rph + l)) "$h" "$l"
  done
done

# --- supervision -------------------------------------------------------------------------
# A polling loop, twenty times a second: a rank that has exited is reaped with `wait PID`
# (it returns at once for a process that is gone or a zombie), and deadlines (timeout,
# grace, kill) are checked on every round. An earlier version slept in `wait -n`, woken by
# a SIGALRM ticker; in loaded runs bash 5.2 lost the status of a rank whose exit coincided
# with an interrupted `wait -n`, and a later `wait PID` for it then blocked until another
# child changed state (a test's other ranks sleeping for a minute). The pause is a `read`
# with a timeout on a FIFO nobody writes, so no process is started per round, and a
# trapped signal (INT, TERM, HUP) ends it early.
to_ms() { awk -v s="$1" 'BEGIN { printf "%d", s * 1000 }'; }
timeout_ms=$(to_ms "$timeout_sec")
grace_ms=$(to_ms "$grace_sec")
pause_fifo=$(mktemp -u "${TMPDIR:-/tmp}/bnr-pause.XXXXXX")
mkfifo -m 600 "$pause_fifo" || { echo "netns_run: cannot make a FIFO at $pause_fifo" >&2; exit 1; }
exec {pause_fd}<>"$pause_fifo"
rm -f "$pause_fifo"
t0=$((${EPOCHREALTIME/./} / 1000))
deadline_ms=$((t0 + timeout_ms))
first_fail=-1
term_at=0 kill_at=0 term_sent=0 kill_sent=0 timed_out=0 forwarded=""

trap 'interrupted=INT' INT
trap 'interrupted=TERM' TERM
trap 'interrupted=HUP' HUP

signal_all() {
  local pid
  for pid in "${!rank_of[@]}"; do kill "-$1" "$pid" 2>/dev/null; done
}

# Whether the rank with `pid` has exited: gone (bash reaped it) or a zombie.
has_exited() {
  local line
  read -r line 2>/dev/null <"/proc/$1/stat" || return 0
  line=${line##*) }
  [[ ${line:0:1} == Z ]]
}

# Records that the rank with `pid` exited with `status`.
rank_exited() {
  local pid=$1 status=$2 r=${rank_of[$1]}
  unset "rank_of[$pid]"
  ((status == 0 || term_sent)) && return  # ranks we end ourselves are not failures
  echo "netns_run: rank $r (host ${host_ns[r / rph]}) exited with status $status" >&2
  if ((first_fail < 0)); then
    first_fail=$status
    # The survivors are expected to notice the failure and report it themselves.
    term_at=$((now + grace_ms))
  fi
}

while ((${#rank_of[@]} > 0)); do
  now=$((${EPOCHREALTIME/./} / 1000))
  for pid in "${!rank_of[@]}"; do
    if has_exited "$pid"; then
      wait "$pid" 2>/dev/null
      rank_exited "$pid" $?
    fi
  done
  if [[ -n $interrupted && -z $forwarded ]]; then
    forwarded=$interrupted
    echo "netns_run: received SIG$interrupted; forwarding it to the ranks" >&2
    signal_all "$interrupted"
    case $interrupted in INT) code=130 ;; TERM) code=143 ;; *) code=129 ;; esac
    ((first_fail < 0)) && first_fail=$code
    # Ranks that ignore the signal must not keep us alive.
    ((term_at == 0 || term_at > now + 2000)) && term_at=$((now + 2000))
  fi
  if ((!timed_out && now >= deadline_ms && ${#rank_of[@]} > 0)); then
    timed_out=1
    echo "netns_run: timeout of ${timeout_sec} s reached; terminating ${#rank_of[@]} running rank(s)" >&2
    first_fail=$kTimeout
    term_at=$now
  fi
  if ((term_at && !term_sent && now >= term_at && ${#rank_of[@]} > 0)); then
    term_sent=1
    echo "netns_run: terminating ${#rank_of[@]} rank(s) still running: ranks ${rank_of[*]}" >&2
    signal_all TERM
    signal_all CONT  # a stopped rank acts on the pending SIGTERM as it resumes
    kill_at=$((now + kKillAfterTermSec * 1000))
  fi
  if ((kill_at && !kill_sent && now >= kill_at && ${#rank_of[@]} > 0)); then
    kill_sent=1
    signal_all KILL
  fi
  ((${#rank_of[@]} > 0)) && read -r -t 0.05 -u "$pause_fd" _
done

cleanup
((first_fail < 0)) && exit 0
exit "$first_fail"
