# shellcheck shell=bash
# ssh_hosts.sh: emulated hosts reachable over ssh, for tests of launching across hosts.
# Source it, then call `ssh_hosts_up N`: N network namespaces on a bridge in this
# namespace (which plays the launching host, at $subnet.1), each with its own sshd
# (Debian's openssh-server) accepting a key made here, and giving its sessions
# BRAID_HOST_ID=sshhost<i> as a real host would differ in its own id. Sets:
#   T        scratch folder (removed on exit with everything else)
#   ns[i]    the namespaces, addr[i] their addresses, subnet (the bridge's /24)
#   SSH      the ssh command that reaches them ("ssh -F $T/ssh_config")
# Skips (exit 77) without root, ip, sshd or ssh, or where namespaces cannot be made.

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

ssh_hosts_up() {
  local count=$1 i
  [[ $(id -u) == 0 ]] || skip "needs root for network namespaces"
  for t in ip ssh ssh-keygen; do command -v "$t" >/dev/null || skip "no $t"; done
  SSHD=$(command -v sshd || echo /usr/sbin/sshd)
  [[ -x $SSHD ]] || skip "no sshd (apt-get install openssh-server)"
  T=$(mktemp -d "${TMPDIR:-/tmp}/braid-ssh.XXXXXX")
  tag=$$
  br="bsh$tag"
  subnet=10.203.$((tag % 250))
  ns=()
  addr=()
  sshd_pids=()
  for ((i = 0; i < count; ++i)); do
    ns+=("bsh-$tag-$i")
    addr+=("$subnet.$((i + 2))")
  done
  trap ssh_hosts_down EXIT

  ip link add "$br" type bridge 2>/dev/null || skip "cannot create a bridge"
  ip addr add "$subnet.1/24" dev "$br" && ip link set "$br" up || skip "cannot address the bridge"
  for ((i = 0; i < count; ++i)); do
    ip netns add "${ns[i]}" || skip "cannot create a network namespace"
    ip link add "v$tag$i" type veth peer name eth0 netns "${ns[i]}" || skip "cannot create a veth pair"
    ip link set "v$tag$i" master "$br" up
    ip -n "${ns[i]}" link set lo up
    ip -n "${ns[i]}" addr add "${addr[i]}/24" dev eth0
    ip -n "${ns[i]}" link set eth0 up
    # Everything else (this namespace's other addresses) through the launching host.
    ip -n "${ns[i]}" route add default via "$subnet.1"
  done

  # Keys: the client's (authorized on every host) and one host key for every sshd.
  ssh-keygen -q -t ed25519 -N '' -f "$T/id" || fail "ssh-keygen"
  ssh-keygen -q -t ed25519 -N '' -f "$T/hostkey" || fail "ssh-keygen"
  cp "$T/id.pub" "$T/authorized_keys"
  mkdir -p /run/sshd  # sshd's privilege separation directory
  for ((i = 0; i < count; ++i)); do
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
  local up
  for ((i = 0; i < count; ++i)); do
    up=0
    for _ in $(seq 50); do
      if $SSH -T -o BatchMode=yes "${addr[i]}" true 2>/dev/null; then up=1; break; fi
      sleep 0.1
    done
    ((up)) || { cat "$T/sshd_$i.log"; fail "sshd on ${addr[i]} does not answer"; }
  done
}

ssh_hosts_down() {
  local p n
  for p in "${sshd_pids[@]}"; do kill "$p" 2>/dev/null; done
  for n in "${ns[@]}"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$n" 2>/dev/null
  done
  ip link del "$br" 2>/dev/null
  rm -rf "$T"
}
