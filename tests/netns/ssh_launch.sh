#!/usr/bin/env bash
# braidrun across hosts over ssh: two emulated hosts (network namespaces on a bridge in this
# namespace, which plays the launching host), each with its own sshd (Debian's
# openssh-server) accepting a key made here. braidrun runs here and starts every rank over
# ssh; sshd gives each host's sessions BRAID_HOST_ID, as a real host would differ in its
# own id.
#
# Checks: the variables each rank gets (ranks, local ranks and sizes, cross ranks, the
# store's address on the bridge); every collective across the hosts (mp_collectives) and
# allreduce_perf with zero wrong; a hostfile in mpirun's format with a local host beside a
# remote one; a rank failing on one host stops the ranks on every host (none left behind).
#
# Skips (77) without root, ip, sshd or ssh, or where namespaces cannot be made.
# Needs BRAIDRUN, MP_COLLECTIVES and ALLREDUCE_PERF.
set -uo pipefail

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || skip "needs root for network namespaces"
for t in ip ssh ssh-keygen; do command -v "$t" >/dev/null || skip "no $t"; done
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
[[ -x $SSHD ]] || skip "no sshd (apt-get install openssh-server)"
: "${BRAIDRUN:?}" "${MP_COLLECTIVES:?}" "${ALLREDUCE_PERF:?}"

T=$(mktemp -d "${TMPDIR:-/tmp}/braid-ssh.XXXXXX")
tag=$$
br="bsh$tag"
subnet=10.203.$((tag % 250))
ns=("bsh-$tag-a" "bsh-$tag-b")
addr=("$subnet.2" "$subnet.3")
sshd_pids=()

cleanup() {
  for p in "${sshd_pids[@]}"; do kill "$p" 2>/dev/null; done
  for n in "${ns[@]}"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$n" 2>/dev/null
  done
  ip link del "$br" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

ip link add "$br" type bridge 2>/dev/null || skip "cannot create a bridge"
ip addr add "$subnet.1/24" dev "$br" && ip link set "$br" up || skip "cannot address the bridge"
for i in 0 1; do
  ip netns add "${ns[i]}" || skip "cannot create a network namespace"
  ip link add "v$tag$i" type veth peer name eth0 netns "${ns[i]}" || skip "cannot create a veth pair"
  ip link set "v$tag$i" master "$br" up
  ip -n "${ns[i]}" link set lo up
  ip -n "${ns[i]}" addr add "${addr[i]}/24" dev eth0
  ip -n "${ns[i]}" link set eth0 up
  # Everything else (this namespace's other addresses) through the launching host.
  ip -n "${ns[i]}" route add default via "$subnet.1"
done

# Keys: the client's (authorized on both hosts) and one host key for both sshds.
ssh-keygen -q -t ed25519 -N '' -f "$T/id" || fail "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -f "$T/hostkey" || fail "ssh-keygen"
cp "$T/id.pub" "$T/authorized_keys"
mkdir -p /run/sshd  # sshd's privilege separation directory
for i in 0 1; do
  cat >"$T/sshd_$i" <<EOF
ListenAddress ${addr[i]}
Port 22
HostKey $T/hostkey
AuthorizedKeysFile $T/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile $T/sshd_$i.pid
SetEnv BRAID_HOST_ID=sshhost$i
EOF
  ip netns exec "${ns[i]}" "$SSHD" -D -e -f "$T/sshd_$i" 2>"$T/sshd_$i.log" &
  sshd_pids+=($!)
done
cat >"$T/ssh_config" <<EOF
Host *
  User root
  IdentityFile $T/id
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 5
EOF
SSH="ssh -F $T/ssh_config"
for i in 0 1; do
  up=0
  for _ in $(seq 50); do
    if $SSH -T -o BatchMode=yes "${addr[i]}" true 2>/dev/null; then up=1; break; fi
    sleep 0.1
  done
  ((up)) || { cat "$T/sshd_$i.log"; fail "sshd on ${addr[i]} does not answer"; }
done

run() {  # braidrun with the test's ssh; output to $T/out (echoed)
  "$BRAIDRUN" --ssh "$SSH" --timeout 60 "$@" >"$T/out" 2>&1
  local s=$?
  cat "$T/out"
  return $s
}

echo "== the variables every rank gets: -H a:2,b:1"
run -H "${addr[0]}:2,${addr[1]}:1" sh -c \
  'echo VARS $BRAID_RANK $BRAID_WORLD_SIZE $BRAID_LOCAL_RANK $BRAID_LOCAL_SIZE $HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $BRAID_HOST_ID $BRAID_STORE_ADDR $HOROVOD_HOSTNAME' ||
  fail "braidrun -H failed"
got=$(grep '^VARS' "$T/out" | sed 's/:[0-9]* / /' | sort)
want=$(printf '%s\n' \
  "VARS 0 3 0 2 0 2 sshhost0 $subnet.1 ${addr[0]}" \
  "VARS 1 3 1 2 0 1 sshhost0 $subnet.1 ${addr[0]}" \
  "VARS 2 3 0 1 1 2 sshhost1 $subnet.1 ${addr[1]}")
[[ $got == "$want" ]] || fail "variables: got
$got
want
$want"

echo "== every collective across the two hosts, 2 ranks each"
run -H "${addr[0]}:2,${addr[1]}:2" --tag-output "$MP_COLLECTIVES" || fail "mp_collectives over ssh failed"
for r in 0 1 2 3; do grep -q "collectives ok rank $r" "$T/out" || fail "no 'collectives ok rank $r'"; done

echo "== allreduce_perf across the hosts checks its results"
run -H "${addr[0]}:2,${addr[1]}:2" "$ALLREDUCE_PERF" -b 8 -e 4M -f 16 -n 3 -w 1 -c 1 ||
  fail "allreduce_perf over ssh failed"
grep -q "Out of bounds values : 0 OK" "$T/out" || fail "allreduce_perf found wrong values"

echo "== a hostfile (mpirun's format) with this host beside a remote one"
printf '# this host, then one emulated host\nlocalhost slots=1\n%s slots=2\n' "${addr[1]}" >"$T/hosts"
run --hostfile "$T/hosts" "$MP_COLLECTIVES" || fail "mp_collectives with a hostfile failed"
for r in 0 1 2; do grep -q "collectives ok rank $r" "$T/out" || fail "no 'collectives ok rank $r' (hostfile)"; done

echo "== a rank failing on one host stops the ranks on every host"
start=$(date +%s)
BRAIDRUN_GRACE_SEC=1 run -H "${addr[0]}:2,${addr[1]}:2" sh -c \
  'if [ "$BRAID_RANK" = 3 ]; then exit 7; fi; exec sleep 300'
status=$?
((status == 7)) || fail "braidrun's status is $status, not the failed rank's 7"
grep -q "rank 3 exited with status 7" "$T/out" || fail "the failed rank is not named"
(($(date +%s) - start < 30)) || fail "braidrun took more than 30 s to stop the others"
sleep 3  # the remote watchers' SIGTERM, then SIGKILL 2 s later
for i in 0 1; do
  left=$(ip netns pids "${ns[i]}" | xargs -r ps -o args= -p 2>/dev/null | grep -c 'sleep 300')
  ((left == 0)) || fail "$left rank(s) left running on ${addr[i]}"
done

echo "PASS"
