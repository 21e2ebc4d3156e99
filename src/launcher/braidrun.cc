// braidrun: starts N ranks of a command on this host, or on several hosts over ssh, like
// mpirun.
//
//   braidrun -np N [-x VAR[=VAL]]... [--tag-output] [--timeout SEC] [--bind-to core|none] [--] CMD ARGS...
//   braidrun [-np N] -H host1:4,host2:4 | --hostfile FILE [--ssh CMD] [--store-addr ADDR] ... CMD ARGS...
//
// With hosts, ranks fill them in order (host1's slots first). A rank on this host is started
// as below; a rank on another host through the system's ssh (no daemon of braidrun's),
// under a small shell wrapper there that ends the rank when its ssh connection closes, so
// stopping the local ssh client stops the remote rank. Remote ranks get the job's variables
// and -x's, not braidrun's whole environment, and run in braidrun's working directory when
// it exists there.
//
// braidrun hosts the rendezvous store itself (so the store outlives any rank), gives each
// rank BRAID_RANK/BRAID_WORLD_SIZE/BRAID_LOCAL_RANK/BRAID_LOCAL_SIZE/BRAID_STORE_ADDR and
// BRAID_STORE_EXTERNAL=1, plus the variables horovodrun gives its ranks, which Horovod-style
// front ends read (HOROVOD_RANK/SIZE, HOROVOD_LOCAL_RANK/SIZE, HOROVOD_CROSS_RANK/SIZE = 0/1
// on one host, HOROVOD_HOSTNAME), and supervises them:
//   - exit status 0 if every rank exits 0, else the first failure's status (128+signo for a
//     signal), with one line on stderr per failed rank;
//   - every rank process that ends is marked in the ranks' store (bootstrap::
//     kLauncherExitPrefix), so ranks still joining fail at once naming one that ended
//     before it joined, rather than wait for it;
//   - after a failure the other ranks get BRAIDRUN_GRACE_SEC (default 15 s) to notice the
//     peer failure and exit on their own, then SIGTERM+SIGCONT, then SIGKILL 2 s later;
//   - a rank left stopped (SIGSTOP) after every other rank exited counts as hung: it gets
//     the grace period, then the same termination;
//   - SIGINT/SIGTERM sent to braidrun are forwarded to the ranks;
//   - what a rank starts and leaves running is reparented to braidrun (its subreaper) and
//     killed when the last rank has exited;
//   - --timeout SEC ends everything after SEC seconds, first printing where each rank is
//     (the live view, as braid-info --status prints it), so that a job that hung says which
//     rank held it up;
//   - with --min-np N a rank's failure does not end the job while N ranks still run: the
//     survivors are expected to recover (agree, shrink) and the job succeeds if they finish;
//     --max-np starts replacements, and --host-discovery-script keeps the hosts current
//     (ranks on a host that leaves are stopped; replacements go where slots are free);
//   - like mpirun, each rank is bound to cores of its own when there are at least as many
//     usable cores as ranks (--bind-to none to leave placement to the kernel): two ranks
//     that wake each other otherwise tend to be stacked on one core by the scheduler, and
//     every hand-off then waits for a time slice. The usable cores are shared out in equal
//     consecutive blocks (mpirun's --map-by slot:PE=k), not one core each: a rank runs more
//     than one busy thread (its caller, its progress thread, and on the GPU path a proxy
//     thread and CUDA's own), and on a single core each hand-off between them waits for a
//     time slice too (3-4 ms per staged GPU call, measured on an H200 host with 16 cores).
//     --bind-to core keeps one core per rank. Ranks that outnumber the cores and share
//     them evenly (4 or 8 ranks on 2 cores) are bound too, round robin, k to a core:
//     unbound, the scheduler's wake-ups kept all four of 4 ranks on one of 2 cores most
//     of the time in some runs, and a 64 KiB allreduce took 46-52 us in those against
//     28-32 bound (docs/performance.md, "Ranks that outnumber the cores"). An uneven share
//     (3 ranks on 2 cores) stays unbound: the pair on one core would set the pace.
// The main thread does all supervision in one poll loop over a signalfd and (with
// --tag-output) the ranks' output pipes; the store runs on its own thread.
//
// Every job is authenticated (common/auth.h): braidrun draws a fresh key (or takes the one
// in BRAID_AUTH_KEY / BRAID_AUTH_KEY_FILE, its own or given with -x), its store admits only
// clients that prove it, and each rank gets it as BRAID_AUTH_KEY in its environment. A
// remote rank reads it from the first line of ssh's standard input, so it never appears on
// a command line (ps shows those to every user on both hosts).

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "bootstrap/etcd_store.h"
#include "bootstrap/job_file.h"
#include "bootstrap/tcp_store.h"
#include "bootstrap/unique_id.h"
#include "common/clock.h"
#include "common/local_address.h"
#include "common/shm_names.h"
#include "core/live_status.h"

extern char** environ;

namespace braid::launcher {
namespace {

constexpr double kKillAfterTermSec = 2.0;
constexpr double kDefaultGraceSec = 15.0;
constexpr int kUsageExit = 2;
constexpr int kTimeoutExit = 124;  // as timeout(1)
// How long the live view printed at --timeout waits for the ranks' answers (braid-info
// --status's default).
constexpr double kTimeoutViewWaitSec = 1.0;
// --host-discovery-script: how often it is asked, and how long it may take.
constexpr double kDiscoveryPeriodSec = 1.0;
constexpr double kDiscoveryTimeoutSec = 30.0;

struct HostSlots {
  std::string name;
  int slots = 1;
};

struct Options {
  int np = 0;
  std::vector<HostSlots> hosts;  // -H / --hostfile; empty: every rank on this host
  std::string ssh;               // --ssh or BRAIDRUN_SSH; default "ssh"
  std::string storeAddr;         // --store-addr: the address remote ranks reach the store at
  std::vector<std::pair<std::string, std::string>> env;  // -x
  bool tagOutput = false;
  double timeoutSec = 0;
  int minNp = 0;  // --min-np: the job goes on while at least this many ranks run
  int maxNp = 0;  // --max-np: replacements are started while fewer ranks than this run
  std::string discoveryScript;  // --host-discovery-script: the hosts, asked again every second
  std::string bindTo = "auto";  // auto (a block of cores each when ranks fit the cores), core, none
  std::vector<std::string> cmd;
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: braidrun -np N [-x VAR[=VAL]]... [--tag-output] [--timeout SEC] [--] CMD [ARGS...]\n"
               "       braidrun [-np N] -H HOST[:SLOTS],... | --hostfile FILE [options] CMD [ARGS...]\n"
               "       braidrun --help | --version\n"
               "  -np, -n N        number of ranks (default with hosts: all their slots)\n"
               "  -H, --host LIST  hosts and slots, host1:4,host2:4 (mpirun's and horovodrun's -H;\n"
               "                   a host without :SLOTS has 1); ranks fill host1's slots first\n"
               "  --hostfile FILE  one host per line: 'host', 'host slots=N' (mpirun) or 'host:N'\n"
               "                   (horovodrun); # starts a comment\n"
               "  --ssh CMD        how to reach other hosts (default: $BRAIDRUN_SSH, else ssh),\n"
               "                   e.g. --ssh 'ssh -p 2222 -i key'; braidrun adds -T -o BatchMode=yes\n"
               "  --store-addr A   the address other hosts reach braidrun's store at (default: this\n"
               "                   host's address on the route to each of them)\n"
               "  -x VAR=VAL       set VAR in every rank's environment; -x VAR passes braidrun's value\n"
               "  --tag-output     prefix every output line with [rank]\n"
               "  --timeout SEC    kill every rank after SEC seconds (exit status 124), printing\n"
               "                   first where each rank is (as braid-info --status)\n"
               "  --min-np N       a rank that fails does not end the job while at least N ranks\n"
               "                   still run: the survivors recover (braidCommAgree/Shrink) and\n"
               "                   the job succeeds if they do; a stopped rank left alone at the\n"
               "                   end is terminated as lost\n"
               "  --max-np N       (with --min-np) start a replacement for each lost rank while\n"
               "                   fewer than N run; it waits until the running ranks admit it\n"
               "                   (braidCommGrowJoiners), and is stopped, as not needed, once a\n"
               "                   rank has finished\n"
               "  --host-discovery-script S\n"
               "                   (with --min-np) the hosts come from S, which prints one\n"
               "                   'host:slots' line per host available now (horovodrun's); asked\n"
               "                   again every second: the ranks on a host it no longer lists are\n"
               "                   stopped (the job goes on without them), and replacements\n"
               "                   (--max-np) start on hosts with free slots, wherever they are\n"
               "  --bind-to WHAT   core: bind rank i to the i-th usable core; none: do not bind\n"
               "                   (default: when there are at least as many cores as ranks, each\n"
               "                   rank gets an equal block of consecutive usable cores)\n"
               "environment: BRAIDRUN_GRACE_SEC (default 15): how long the other ranks may run on\n"
               "after one fails before they are terminated\n"
               "each rank gets BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK, BRAID_LOCAL_SIZE,\n"
               "BRAID_STORE_ADDR, BRAID_STORE_EXTERNAL=1 and, for Horovod-style front ends,\n"
               "HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE,\n"
               "HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE and HOROVOD_HOSTNAME (the rank's host);\n"
               "these replace inherited values, and -x replaces these; the local ranks and sizes\n"
               "count the ranks of the rank's host; with --min-np also BRAID_ELASTIC=1\n");
}

bool parseSeconds(const char* s, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (end == s || *end || errno || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

// "a:2,b,c:4" (mpirun's and horovodrun's -H): a host without a count has one slot.
bool parseHostList(const std::string& list, std::vector<HostSlots>* out, std::string* err) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) {
      *err = "an empty host in '" + list + "'";
      return false;
    }
    HostSlots h;
    size_t colon = item.rfind(':');
    h.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long n = std::strtol(item.c_str() + colon + 1, &end, 10);
      if (*end || end == item.c_str() + colon + 1 || n < 1 || n > 4096) {
        *err = "'" + item + "' does not end in a slot count in [1, 4096]";
        return false;
      }
      h.slots = static_cast<int>(n);
    }
    if (h.name.empty()) {
      *err = "'" + item + "' has no host name";
      return false;
    }
    out->push_back(h);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

// mpirun's "host slots=N" and horovodrun's "host:N" lines, one host each.
// Host lines as a hostfile holds them, from `text`; `source` names it in messages.
bool parseHostText(const std::string& text, const std::string& source, std::vector<HostSlots>* out, std::string* err,
                   bool allowEmpty = false) {
  int lineNo = 0;
  bool ok = true;
  size_t pos = 0;
  while (ok && pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++lineNo;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::vector<std::string> words;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    if (words.empty()) continue;
    std::string spec = words[0];
    for (size_t w = 1; w < words.size() && ok; ++w) {
      const std::string& kv = words[w];
      if (kv.rfind("slots=", 0) == 0 || kv.rfind("max_slots=", 0) == 0) {
        if (kv.rfind("slots=", 0) == 0) spec += ":" + kv.substr(6);
      } else {
        *err = source + ":" + std::to_string(lineNo) + ": '" + kv + "' is not slots=N";
        ok = false;
      }
    }
    std::string e;
    if (ok && !parseHostList(spec, out, &e)) {
      *err = source + ":" + std::to_string(lineNo) + ": " + e;
      ok = false;
    }
  }
  if (ok && out->empty() && !allowEmpty) {
    *err = source + " names no host";
    ok = false;
  }
  return ok;
}

// mpirun's and horovodrun's hostfile: one host per line, "host", "host slots=N" or "host:N".
bool parseHostFile(const std::string& path, std::vector<HostSlots>* out, std::string* err) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) {
    *err = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return parseHostText(text, path, out, err);
}

// Runs a host-discovery script (horovodrun's --host-discovery-script: it prints the hosts
// available now, one "host:slots" line each) and parses what it prints. False, saying why,
// when it cannot run, exits non-zero, takes longer than `timeoutSec` (it is killed), or
// prints something that is not a host list.
bool discoverHosts(const std::string& script, double timeoutSec, std::vector<HostSlots>* out, std::string* err,
                   bool allowEmpty) {
  int pipeFd[2];
  if (pipe2(pipeFd, O_CLOEXEC) != 0) {
    *err = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipeFd[1], 1);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    setpgid(0, 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipeFd[1]);
  if (pid < 0) {
    close(pipeFd[0]);
    *err = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  std::string text;
  const int64_t deadline = nowNanos() + static_cast<int64_t>(timeoutSec * 1e9);
  bool timedOut = false;
  for (;;) {
    const int64_t left = deadline - nowNanos();
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{pipeFd[0], POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left / 1000000 + 1, 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[4096];
    ssize_t n = read(pipeFd[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (1u << 20)) {
      *err = "the host-discovery script printed more than 1 MiB";
      timedOut = true;
      break;
    }
  }
  close(pipeFd[0]);
  if (timedOut) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) {
    if (err->empty()) *err = "the host-discovery script did not finish within " + std::to_string(timeoutSec) + " s";
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *err = "the host-discovery script '" + script + "' failed (" +
           (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                              : "signal " + std::to_string(WTERMSIG(status))) +
           ")";
    return false;
  }
  return parseHostText(text, "the host-discovery script's output", out, err, allowEmpty);
}

// Returns -1 to continue, else an exit status.
int parseArgs(int argc, char** argv, Options* o) {
  int i = 1;
  auto need = [&](const char* flag) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "braidrun: %s needs a value\n", flag);
      return nullptr;
    }
    return argv[++i];
  };
  // A number of ranks in [1, 4096] for `flag` (named as `shown`), into *out.
  auto ranks = [&](const char* flag, const char* shown, int* out) -> bool {
    const char* v = need(flag);
    if (!v) return false;
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (end == v || *end || n < 1 || n > 4096) {
      std::fprintf(stderr, "braidrun: %s '%s' is not a number of ranks in [1, 4096]\n", shown, v);
      return false;
    }
    *out = static_cast<int>(n);
    return true;
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--version" || a == "-V") {
      std::printf("braidrun (braid) %d.%d.%d\n", BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH);
      return 0;
    } else if (a == "-np" || a == "-n" || a == "--np") {
      if (!ranks(a.c_str(), "-np", &o->np)) return kUsageExit;
    } else if (a == "-x") {
      const char* v = need("-x");
      if (!v) return kUsageExit;
      std::string kv = v;
      size_t eq = kv.find('=');
      std::string name = kv.substr(0, eq);
      if (name.empty()) {
        std::fprintf(stderr, "braidrun: -x '%s' has no variable name\n", v);
        return kUsageExit;
      }
      if (eq != std::string::npos) {
        o->env.emplace_back(name, kv.substr(eq + 1));
      } else if (const char* cur = std::getenv(name.c_str())) {
        o->env.emplace_back(name, cur);
      } else {
        std::fprintf(stderr, "braidrun: warning: -x %s: %s is not set here; not passed\n", v, v);
      }
    } else if (a == "--bind-to") {
      const char* v = need("--bind-to");
      if (!v) return kUsageExit;
      std::string b = v;
      if (b != "core" && b != "none") {
        std::fprintf(stderr, "braidrun: --bind-to '%s' is not one of core, none\n", v);
        return kUsageExit;
      }
      o->bindTo = b;
    } else if (a == "-H" || a == "--host" || a == "-host") {
      const char* v = need(a.c_str());
      if (!v) return kUsageExit;
      std::string err;
      if (!parseHostList(v, &o->hosts, &err)) {
        std::fprintf(stderr, "braidrun: %s: %s\n", a.c_str(), err.c_str());
        return kUsageExit;
      }
    } else if (a == "--hostfile" || a == "-hostfile" || a == "--machinefile") {
      const char* v = need(a.c_str());
      if (!v) return kUsageExit;
      std::string err;
      if (!parseHostFile(v, &o->hosts, &err)) {
        std::fprintf(stderr, "braidrun: %s: %s\n", a.c_str(), err.c_str());
        return kUsageExit;
      }
    } else if (a == "--host-discovery-script") {
      const char* v = need(a.c_str());
      if (!v) return kUsageExit;
      o->discoveryScript = v;
    } else if (a == "--ssh") {
      const char* v = need("--ssh");
      if (!v) return kUsageExit;
      o->ssh = v;
    } else if (a == "--store-addr") {
      const char* v = need("--store-addr");
      if (!v) return kUsageExit;
      o->storeAddr = v;
    } else if (a == "--tag-output") {
      o->tagOutput = true;
    } else if (a == "--min-np") {
      if (!ranks("--min-np", "--min-np", &o->minNp)) return kUsageExit;
    } else if (a == "--max-np") {
      if (!ranks("--max-np", "--max-np", &o->maxNp)) return kUsageExit;
    } else if (a == "--timeout") {
      const char* v = need("--timeout");
      if (!v) return kUsageExit;
      if (!parseSeconds(v, &o->timeoutSec) || o->timeoutSec <= 0) {
        std::fprintf(stderr, "braidrun: --timeout '%s' is not a positive number of seconds\n", v);
        return kUsageExit;
      }
    } else {
      std::fprintf(stderr, "braidrun: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return kUsageExit;
    }
  }
  for (; i < argc; ++i) o->cmd.push_back(argv[i]);
  if (!o->discoveryScript.empty()) {
    if (!o->hosts.empty()) {
      std::fprintf(stderr, "braidrun: --host-discovery-script replaces -H and --hostfile; give one of them\n");
      return kUsageExit;
    }
    if (o->minNp == 0) {
      std::fprintf(stderr, "braidrun: --host-discovery-script needs --min-np (hosts may go away while the job runs)\n");
      return kUsageExit;
    }
    std::string err;
    if (!discoverHosts(o->discoveryScript, kDiscoveryTimeoutSec, &o->hosts, &err, false)) {
      std::fprintf(stderr, "braidrun: %s\n", err.c_str());
      return kUsageExit;
    }
  }
  int slots = 0;
  for (const auto& h : o->hosts) slots += h.slots;
  if (!o->hosts.empty() && o->np == 0) o->np = std::min(o->maxNp > 0 ? std::min(slots, o->maxNp) : slots, 4096);
  if (o->np == 0) {
    std::fprintf(stderr, "braidrun: -np N is required (or hosts with -H / --hostfile)\n");
    usage(stderr);
    return kUsageExit;
  }
  if (o->maxNp > 0 && o->minNp == 0) {
    std::fprintf(stderr, "braidrun: --max-np needs --min-np (the fewest ranks the job may go on with)\n");
    return kUsageExit;
  }
  if (o->maxNp > 0 && o->maxNp < o->np) {
    std::fprintf(stderr, "braidrun: --max-np %d is less than -np %d\n", o->maxNp, o->np);
    return kUsageExit;
  }
  if (o->minNp > o->np) {
    std::fprintf(stderr, "braidrun: --min-np %d is more than -np %d\n", o->minNp, o->np);
    return kUsageExit;
  }
  if (!o->hosts.empty() && o->np > slots) {
    std::fprintf(stderr, "braidrun: -np %d is more than the %d slot(s) of the hosts given\n", o->np, slots);
    return kUsageExit;
  }
  if (o->ssh.empty()) {
    const char* s = std::getenv("BRAIDRUN_SSH");
    o->ssh = s && *s ? s : "ssh";
  }
  if (o->cmd.empty()) {
    std::fprintf(stderr, "braidrun: no command given\n");
    usage(stderr);
    return kUsageExit;
  }
  return -1;
}

// The parent of process `pid` (field 4 of /proc/PID/stat, after the command name, which may
// hold spaces and parentheses), or -1 when it is gone.
pid_t ppidOf(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return -1;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  char state = 0;
  int ppid = -1;
  if (!close || std::sscanf(close + 1, " %c %d", &state, &ppid) != 2) return -1;
  return static_cast<pid_t>(ppid);
}

std::string signalName(int sig) {
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // our own stdout is gone: nothing useful left to do with the bytes
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// One rank's output stream under --tag-output: bytes are cut into lines and each line is
// written whole with its "[rank] " prefix, so lines from different ranks never interleave.
struct TaggedStream {
  int fd = -1;   // read end; -1 once at EOF
  int outFd = 1; // where tagged lines go
  std::string prefix;
  std::string partial;

  void emit(const char* p, size_t n) {
    std::string line = prefix;
    line.append(p, n);
    line.push_back('\n');
    writeAll(outFd, line.data(), line.size());
  }
  // Reads what is available; false at EOF.
  bool pump() {
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      finish();
      return false;
    }
    partial.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(partial.data() + start, nl - start);
    partial.erase(0, start);
    // A runaway line without newlines is cut rather than buffered without bound.
    if (partial.size() > (1u << 20)) {
      emit(partial.data(), partial.size());
      partial.clear();
    }
    return true;
  }
  void finish() {
    if (!partial.empty()) emit(partial.data(), partial.size());
    partial.clear();
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;  // the rank itself, or the ssh client that runs it on its host
  int stdinFd = -1;  // remote ranks: held open; closing it (or ssh's death) ends the rank
  bool running = false;
  bool stopped = false;  // stopped by a signal (SIGSTOP, SIGTSTP...) and not continued yet
  int stopSignal = 0;
  int status = 0;  // wait status once reaped
};

class Launcher {
 public:
  explicit Launcher(Options o) : opts_(std::move(o)) {}

  int run() {
    // The store must outlast a flood of strangers' connections, which a soft limit of 1024
    // descriptors would cut short: braidrun takes what the hard limit allows, and gives its
    // ranks the limit it was started with.
    if (getrlimit(RLIMIT_NOFILE, &origNofile_) == 0 && origNofile_.rlim_cur < origNofile_.rlim_max) {
      rlimit raised = origNofile_;
      raised.rlim_cur = raised.rlim_max;
      nofileRaised_ = setrlimit(RLIMIT_NOFILE, &raised) == 0;
    }
    const char* g = std::getenv("BRAIDRUN_GRACE_SEC");
    if (g && *g && !parseSeconds(g, &graceSec_)) {
      std::fprintf(stderr, "braidrun: BRAIDRUN_GRACE_SEC='%s' is not a non-negative number of seconds\n", g);
      return kUsageExit;
    }
    // What a rank starts and leaves behind (a wrapper script's child, a helper it forked) is
    // reparented here rather than to init, so that braidrun reaps it and ends it with the job
    // (reapOrphans, killOrphans): nothing a job started outlives braidrun.
    (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Signals are taken synchronously through a signalfd; they are blocked before the store
    // thread starts so that it inherits the mask and never receives them.
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&mask, s);
    sigprocmask(SIG_BLOCK, &mask, &origMask_);
    // Writing tagged output to a closed pipe must give EPIPE, not kill the supervisor.
    signal(SIGPIPE, SIG_IGN);
    sigfd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd_ < 0) {
      std::fprintf(stderr, "braidrun: signalfd failed: %s\n", std::strerror(errno));
      return 1;
    }

    char host[256] = "";
    hostName_ = gethostname(host, sizeof(host) - 1) == 0 && host[0] ? host : "localhost";
    if (!place()) return kUsageExit;
    if (!resolveKey()) return kUsageExit;
    // Other hosts reach the store over the network; a job on this host alone keeps it on
    // the loopback interface.
    // With a discovery script, a host met later may be another machine.
    const bool listenAll = anyRemote_ || !opts_.discoveryScript.empty();
    auto server = bootstrap::TcpStoreServer::start(listenAll ? "0.0.0.0" : "127.0.0.1", 0, 0, key_, tls_);
    if (!server.isOk()) {
      std::fprintf(stderr, "braidrun: cannot start the rendezvous store: %s\n", server.status().toString().c_str());
      return 1;
    }
    store_ = std::move(server).value();
    storeAddr_ = "127.0.0.1:" + std::to_string(store_->port());
    writeJobFile();

    if (anyRemote_ && !remoteStoreAddrs()) {
      if (!jobFile_.empty()) unlink(jobFile_.c_str());
      store_.reset();
      return 1;
    }

    start_ = nowNanos();
    for (int r = 0; r < opts_.np; ++r) {
      if (!spawnRank(r)) {
        // Nothing useful can run with a rank missing: stop the ones already started.
        if (firstFailure_ < 0) firstFailure_ = 127;
        beginShutdown(0);
        break;
      }
    }
    loop();
    if (!jobFile_.empty()) unlink(jobFile_.c_str());
    store_.reset();
    if (lost_ > 0 && firstFailure_ < 0)
      std::fprintf(stderr, "braidrun: the job finished with %d rank(s), %d at its start; %d lost, %d replacement(s) started (--min-np %d)\n",
                   finished_, opts_.np, lost_, replacements_, opts_.minNp);
    return firstFailure_ < 0 ? 0 : firstFailure_;
  }

 private:
  // Where each rank runs: its host (an index into hostNames_), its local rank there, the
  // number of ranks there; and, per local rank, on how many hosts it exists (horovodrun's
  // cross size) and this host's index among them (cross rank).
  struct Where {
    int host = 0;
    int localRank = 0;
    int localSize = 0;
    int crossRank = 0;
    int crossSize = 1;
    bool remote = false;
  };

  // Where `braid-info --status` finds this job's store (bootstrap/job_file.h). A job runs
  // without it when the folder cannot be used, saying why once.
  void writeJobFile() {
    bootstrap::JobFile job;
    job.pid = static_cast<int>(getpid());
    job.store = storeAddr_;
    // Ranks whose store is an etcd cluster answer the live view there, under their run's
    // prefix (as EtcdStore::connectForJob makes it).
    if (const char* url = envOf("BRAID_STORE")) {
      auto u = bootstrap::parseEtcdUrl("BRAID_STORE", url);
      const char* id = xOf("BRAID_JOB_ID");
      const std::string tag = id ? id : jobId_;
      if (u.isOk()) job.store = bootstrap::formatEtcdUrl(u.value()) + (tag.empty() ? "" : "/" + tag);
    }
    job.key = key_;
    job.tls = tls_;
    job.np = opts_.np;
    job.started = static_cast<long long>(time(nullptr));
    for (const std::string& a : opts_.cmd) job.command += (job.command.empty() ? "" : " ") + a;
    auto path = bootstrap::writeJobFile(job);
    if (path.isOk()) {
      jobFile_ = path.value();
    } else {
      std::fprintf(stderr, "braidrun: braid-info --status will not find this job: %s\n", path.status().message().c_str());
    }
  }

  bool isThisHost(const std::string& h) const {
    if (h == "localhost" || h.rfind("127.", 0) == 0 || h == "::1" || h == hostName_) return true;
    const std::string shortName = hostName_.substr(0, hostName_.find('.'));
    if (h == shortName) return true;
    // One of this host's own IPv4 addresses.
    in_addr a{};
    return inet_pton(AF_INET, h.c_str(), &a) == 1 && isLocalIpv4Address(a);
  }

  bool place() {
    std::vector<HostSlots> hosts = opts_.hosts;
    if (hosts.empty()) hosts.push_back(HostSlots{hostName_, opts_.np});
    // A host named twice (a hostfile line per slot, say) is one host with the slots added.
    std::vector<HostSlots> merged;
    for (const auto& h : hosts) {
      auto it = std::find_if(merged.begin(), merged.end(), [&](const HostSlots& m) { return m.name == h.name; });
      if (it == merged.end()) merged.push_back(h);
      else it->slots += h.slots;
    }
    std::vector<int> perHost;
    int r = 0;
    for (const auto& m : merged) slotsOf_.push_back(m.slots);
    for (size_t h = 0; h < merged.size() && r < opts_.np; ++h) {
      hostNames_.push_back(merged[h].name);
      perHost.push_back(0);
      for (int s = 0; s < merged[h].slots && r < opts_.np; ++s, ++r) {
        Where w;
        w.host = static_cast<int>(h);
        w.localRank = perHost[h]++;
        w.remote = !opts_.hosts.empty() && !isThisHost(merged[h].name);
        anyRemote_ |= w.remote;
        where_.push_back(w);
      }
    }
    // Hosts with no rank at the start still count (their slots may take replacements).
    for (size_t h = hostNames_.size(); h < merged.size(); ++h) hostNames_.push_back(merged[h].name);
    for (auto& w : where_) {
      w.localSize = perHost[static_cast<size_t>(w.host)];
      w.crossSize = 0;
      for (size_t h = 0; h < perHost.size(); ++h) {
        if (perHost[h] <= w.localRank) continue;
        if (static_cast<int>(h) == w.host) w.crossRank = w.crossSize;
        ++w.crossSize;
      }
    }
    return true;
  }

  // The address each remote host reaches the store at: --store-addr, else this host's
  // address on the route to that host (a UDP socket connected there, nothing sent).
  bool remoteStoreAddrs() {
    for (size_t h = 0; h < hostNames_.size(); ++h) {
      bool remote = false;
      for (const auto& w : where_) remote |= w.host == static_cast<int>(h) && w.remote;
      if (remote && !storeAddrFor(static_cast<int>(h))) return false;
    }
    return true;
  }

  // Sets storeAddrOf_[h] for remote host h; false after a message when there is none.
  bool storeAddrFor(int h) {
    const std::string port = std::to_string(store_->port());
    if (!opts_.storeAddr.empty()) {
      storeAddrOf_[h] = opts_.storeAddr + ":" + port;
      return true;
    }
    std::string local = localAddressToward(hostNames_[static_cast<size_t>(h)]);
    if (local.empty()) {
      std::fprintf(stderr, "braidrun: cannot find this host's address toward %s (name it with --store-addr)\n",
                   hostNames_[static_cast<size_t>(h)].c_str());
      return false;
    }
    storeAddrOf_[h] = local + ":" + port;
    return true;
  }

  // Ranks running on host h now (not counting those being stopped because it left).
  int runningOn(int h) const {
    int n = 0;
    for (const auto& r : ranks_)
      if (r.running && !leaving_.count(r.rank) && where_[static_cast<size_t>(r.rank)].host == h) ++n;
    return n;
  }
  int freeSlots(int h) const { return slotsOf_[static_cast<size_t>(h)] - runningOn(h); }

  // --host-discovery-script, every second while the job runs: hosts no longer listed (or
  // listed with fewer slots) lose their ranks, which the job goes on without (--min-np);
  // replacements waiting for a slot start where one is free.
  void discover() {
    if (opts_.discoveryScript.empty() || nowNanos() < nextDiscoveryNs_) return;
    nextDiscoveryNs_ = nowNanos() + static_cast<int64_t>(kDiscoveryPeriodSec * 1e9);
    if (closed_ || termAtNs_ != 0 || firstFailure_ >= 0) return;
    std::vector<HostSlots> listed;
    std::string err;
    if (!discoverHosts(opts_.discoveryScript, kDiscoveryTimeoutSec, &listed, &err, true)) {
      if (err != discoveryError_) std::fprintf(stderr, "braidrun: %s; keeping the hosts as they were\n", err.c_str());
      discoveryError_ = err;
      return;
    }
    discoveryError_.clear();
    std::vector<int> slots(hostNames_.size(), 0);
    for (const auto& l : listed) {
      auto it = std::find(hostNames_.begin(), hostNames_.end(), l.name);
      size_t h = static_cast<size_t>(it - hostNames_.begin());
      if (it == hostNames_.end()) {
        hostNames_.push_back(l.name);
        slots.push_back(0);
        std::fprintf(stderr, "braidrun: host %s is available (%d slot(s))\n", l.name.c_str(), l.slots);
      }
      slots[h] += l.slots;
    }
    slotsOf_ = slots;
    for (size_t h = 0; h < hostNames_.size(); ++h) {
      int excess = runningOn(static_cast<int>(h)) - slotsOf_[h];
      // The newest ranks there go first.
      for (auto r = ranks_.rbegin(); excess > 0 && r != ranks_.rend(); ++r) {
        if (!r->running || leaving_.count(r->rank) || where_[static_cast<size_t>(r->rank)].host != static_cast<int>(h))
          continue;
        leaving_.insert(r->rank);
        --excess;
        std::fprintf(stderr, "braidrun: host %s %s; stopping rank %d\n", hostNames_[h].c_str(),
                     slotsOf_[h] == 0 ? "is no longer listed" : "has fewer slots now", r->rank);
        kill(r->pid, SIGTERM);
        kill(r->pid, SIGCONT);
      }
    }
    std::vector<int> waiting;
    waiting.swap(waitingForHost_);
    for (int lost : waiting) startReplacement(lost);
  }

  static std::string localAddressToward(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
    std::string out;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      sockaddr_in me{};
      socklen_t len = sizeof(me);
      char buf[INET_ADDRSTRLEN] = "";
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
          inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)))
        out = buf;
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return out;
  }

  // The job's variables for `rank` (what the launcher decides; -x last, so it may override).
  std::map<std::string, std::string> jobVars(int rank) const {
    const Where& w = where_[static_cast<size_t>(rank)];
    auto addr = storeAddrOf_.find(w.host);
    // A replacement (--max-np) carries the rank it replaces, which keeps every variable in
    // range; its own rank comes when the running ranks admit it.
    const auto replaced = replacedOf_.find(rank);
    const int named = replaced != replacedOf_.end() ? replaced->second : rank;
    std::map<std::string, std::string> set = {
        {"BRAID_RANK", std::to_string(named)},
        {"BRAID_WORLD_SIZE", std::to_string(opts_.np)},
        {"BRAID_LOCAL_RANK", std::to_string(w.localRank)},
        {"BRAID_LOCAL_SIZE", std::to_string(w.localSize)},
        {"BRAID_STORE_ADDR", addr != storeAddrOf_.end() ? addr->second : storeAddr_},
        {"BRAID_STORE_EXTERNAL", "1"},
        // Tells this run's keys from an earlier run's in a store that outlives both
        // (BRAID_STORE=etcd://...).
        {"BRAID_JOB_ID", jobId_},
        // What horovodrun would give the same rank (its cross rank: this host's index among
        // the hosts that have this local rank). They replace inherited values as BRAID_* do:
        // a HOROVOD_RANK left from an enclosing horovodrun would name the wrong rank.
        {"HOROVOD_RANK", std::to_string(named)},
        {"HOROVOD_SIZE", std::to_string(opts_.np)},
        {"HOROVOD_LOCAL_RANK", std::to_string(w.localRank)},
        {"HOROVOD_LOCAL_SIZE", std::to_string(w.localSize)},
        {"HOROVOD_CROSS_RANK", std::to_string(w.crossRank)},
        {"HOROVOD_CROSS_SIZE", std::to_string(w.crossSize)},
        {"HOROVOD_HOSTNAME", w.remote ? hostNames_[static_cast<size_t>(w.host)] : hostName_},
    };
    // The job goes on without lost ranks (--min-np): front ends that recover on their own
    // (Horovod's elastic loop on braid's core) shrink and grow instead of starting afresh.
    if (opts_.minNp > 0) set["BRAID_ELASTIC"] = "1";
    // A replacement (--max-np) joins the running ranks instead of starting a job of its own.
    if (rank >= opts_.np) {
      set["BRAID_ELASTIC_JOIN"] = "1";
      set["BRAID_REPLACEMENT"] = std::to_string(rank);
    }
    // -x may override, e.g. for tests; a key given with -x was read into key_ already.
    for (const auto& [k, v] : opts_.env)
      if (k != "BRAID_AUTH_KEY" && k != "BRAID_AUTH_KEY_FILE") set[k] = v;
    return set;
  }

  // The job's key: BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE from -x (the last one given) or
  // braidrun's environment, else a fresh random one. False (after a message) if the one
  // given cannot be read.
  bool resolveKey() {
    auto lookup = [this](const char* name) { return envOf(name); };
    StatusOr<AuthKey> k = authKeyFromEnv(lookup);
    if (!k.isOk()) {
      std::fprintf(stderr, "braidrun: %s\n", k.status().message().c_str());
      return false;
    }
    key_ = k.value().present ? k.value() : randomAuthKey();
    // BRAID_TLS=1 for the ranks: their store connections are TLS too, so braidrun's store
    // must speak it.
    if (const char* t = lookup("BRAID_TLS")) {
      const std::string v = t;
      tls_ = v == "1" || v == "true";  // what the ranks' config reads as on
    }
    return true;
  }

  // A variable given with -x (the last one), else nullptr.
  const char* xOf(const char* name) const {
    for (auto it = opts_.env.rbegin(); it != opts_.env.rend(); ++it)
      if (it->first == name) return it->second.c_str();
    return nullptr;
  }
  // A variable as the ranks see it: from -x, else braidrun's own.
  const char* envOf(const char* name) const {
    const char* x = xOf(name);
    return x ? x : std::getenv(name);
  }

  std::vector<std::string> childEnv(int rank) const {
    std::map<std::string, std::string> set = jobVars(rank);
    set["BRAID_AUTH_KEY"] = key_.hex();
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      std::string name = eq ? std::string(*e, static_cast<size_t>(eq - *e)) : std::string(*e);
      if (!set.count(name) && name != "BRAID_AUTH_KEY_FILE") env.emplace_back(*e);
    }
    for (const auto& [k, v] : set) env.push_back(k + "=" + v);
    return env;
  }

  // The program to exec: `cmd` itself if it names a path, else the first executable match
  // on braidrun's PATH (as a shell would). Resolved before fork so that the child only has
  // async-signal-safe work left (braidrun is multithreaded: the store has a thread).
  static std::string resolveCommand(const std::string& cmd) {
    if (cmd.find('/') != std::string::npos) return cmd;
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    for (;;) {
      size_t colon = dirs.find(':', start);
      std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + cmd;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      if (colon == std::string::npos) return "";
      start = colon + 1;
    }
  }

  static std::string shellQuote(const std::string& v) {
    std::string out = "'";
    for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }

  // What a remote rank's host runs: the job's variables, then the command under a watcher
  // that ends it (SIGTERM, then SIGKILL 2 s later) when the ssh connection's input closes,
  // which it does when the local ssh client exits or is killed. The job's key is the first
  // line of that input. The command's stdin is /dev/null; its exit status is the wrapper's,
  // which ssh returns.
  std::string remoteCommand(int r) const {
    static const char kWatch[] =
        "IFS= read -r BRAID_AUTH_KEY || exit 126; export BRAID_AUTH_KEY; unset BRAID_AUTH_KEY_FILE; "
        "exec 3<&0; \"$@\" </dev/null & p=$!; "
        "{ cat <&3 >/dev/null; kill -TERM $p 2>/dev/null; sleep 2; kill -KILL $p 2>/dev/null; } >/dev/null 2>&1 & "
        "w=$!; exec 3<&-; wait $p; s=$?; kill $w 2>/dev/null; exit $s";
    std::string c;
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd))) c += "cd " + shellQuote(cwd) + " 2>/dev/null; ";
    c += "exec env";
    for (const auto& [k, v] : jobVars(r)) c += " " + shellQuote(k + "=" + v);
    c += " sh -c " + shellQuote(kWatch) + " braid-rank";
    for (const auto& a : opts_.cmd) c += " " + shellQuote(a);
    return c;
  }

  std::vector<std::string> sshCommand(int r) const {
    std::vector<std::string> argv;
    size_t i = 0;
    const std::string& s = opts_.ssh;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j > i) argv.push_back(s.substr(i, j - i));
      i = j;
    }
    if (argv.empty()) argv.push_back("ssh");
    // No terminal, and never a password prompt that would hang the job.
    for (const char* a : {"-T", "-o", "BatchMode=yes"}) argv.push_back(a);
    argv.push_back(hostNames_[static_cast<size_t>(where_[static_cast<size_t>(r)].host)]);
    argv.push_back(remoteCommand(r));
    return argv;
  }

  bool spawnRank(int r) {
    const Where& where = where_[static_cast<size_t>(r)];
    std::vector<std::string> cmd = where.remote ? sshCommand(r) : opts_.cmd;
    const std::string exe = resolveCommand(cmd[0]);
    if (exe.empty()) {
      std::fprintf(stderr, "braidrun: cannot execute '%s' for rank %d: command not found\n", cmd[0].c_str(), r);
      return false;
    }
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    auto closePipes = [&] {
      for (auto& p : pipes)
        for (int& fd : p)
          if (fd >= 0) close(fd), fd = -1;
    };
    if (opts_.tagOutput) {
      for (auto& p : pipes) {
        if (pipe2(p, O_CLOEXEC) != 0) {
          std::fprintf(stderr, "braidrun: pipe failed: %s\n", std::strerror(errno));
          closePipes();
          return false;
        }
      }
    }
    // A remote rank's ssh client reads a pipe braidrun holds open while the rank runs.
    int inPipe[2] = {-1, -1};
    if (where.remote && pipe2(inPipe, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "braidrun: pipe failed: %s\n", std::strerror(errno));
      closePipes();
      return false;
    }
    // exec failures come back through this pipe; EOF without data means the exec worked.
    int errPipe[2];
    if (pipe2(errPipe, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "braidrun: pipe failed: %s\n", std::strerror(errno));
      closePipes();
      if (inPipe[0] >= 0) close(inPipe[0]), close(inPipe[1]);
      return false;
    }

    // ssh gets braidrun's own environment (its agent, its config); the job's variables
    // travel in the remote command.
    std::vector<std::string> env;
    if (where.remote) {
      for (char** e = environ; *e; ++e) env.emplace_back(*e);
    } else {
      env = childEnv(r);
    }
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    cpu_set_t rankCpus;
    const bool bind = !where.remote && cpusForRank(where.localRank, where.localSize, &rankCpus);

    pid_t pid = fork();
    if (pid == 0) {
      // Child: async-signal-safe calls only from here to exec.
      // A rank must not outlive braidrun: if braidrun is killed outright, nothing would be
      // left to stop it, and the store it rendezvoused through is gone anyway.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      if (opts_.tagOutput) {
        dup2(pipes[0][1], 1);
        dup2(pipes[1][1], 2);
      }
      // Like mpirun, only rank 0 reads braidrun's stdin; N ranks reading one terminal would
      // steal each other's input.
      if (inPipe[0] >= 0) {
        dup2(inPipe[0], 0);
      } else if (r != 0) {
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull >= 0) dup2(devnull, 0);
      }
      if (bind) (void)sched_setaffinity(0, sizeof(rankCpus), &rankCpus);
      if (nofileRaised_) (void)setrlimit(RLIMIT_NOFILE, &origNofile_);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE}) signal(sig, SIG_DFL);
      sigprocmask(SIG_SETMASK, &origMask_, nullptr);
      execve(exe.c_str(), argv.data(), envp.data());
      int err = errno;
      (void)!write(errPipe[1], &err, sizeof(err));
      _exit(127);
    }
    close(errPipe[1]);
    if (inPipe[0] >= 0) close(inPipe[0]);
    if (inPipe[1] >= 0 && pid > 0) {
      // The remote wrapper's first line: 65 bytes into an empty pipe never block.
      const std::string line = key_.hex() + "\n";
      (void)!write(inPipe[1], line.data(), line.size());
    }
    for (auto& p : pipes)
      if (p[1] >= 0) close(p[1]), p[1] = -1;
    if (pid < 0) {
      std::fprintf(stderr, "braidrun: fork failed for rank %d: %s\n", r, std::strerror(errno));
      close(errPipe[0]);
      if (inPipe[1] >= 0) close(inPipe[1]);
      closePipes();
      return false;
    }
    int execErr = 0;
    ssize_t got;
    do {
      got = read(errPipe[0], &execErr, sizeof(execErr));
    } while (got < 0 && errno == EINTR);
    close(errPipe[0]);
    if (got > 0) {
      waitpid(pid, nullptr, 0);
      if (inPipe[1] >= 0) close(inPipe[1]);
      std::fprintf(stderr, "braidrun: cannot execute '%s' for rank %d: %s\n", exe.c_str(), r, std::strerror(execErr));
      closePipes();
      return false;
    }
    Rank rk;
    rk.rank = r;
    rk.pid = pid;
    rk.stdinFd = inPipe[1];
    rk.running = true;
    ranks_.push_back(rk);
    if (opts_.tagOutput) {
      for (int s = 0; s < 2; ++s) {
        fcntl(pipes[s][0], F_SETFL, fcntl(pipes[s][0], F_GETFL) | O_NONBLOCK);
        TaggedStream t;
        t.fd = pipes[s][0];
        t.outFd = s + 1;
        t.prefix = "[" + std::to_string(r) + "] ";
        streams_.push_back(std::move(t));
      }
    }
    return true;
  }

  int running() const {
    int n = 0;
    for (const auto& r : ranks_) n += r.running;
    return n;
  }

  void signalAll(int sig) {
    for (const auto& r : ranks_)
      if (r.running) kill(r.pid, sig);
  }

  // Starts terminating the ranks still running, `afterSec` from now.
  void beginShutdown(double afterSec) {
    int64_t at = nowNanos() + static_cast<int64_t>(afterSec * 1e9);
    if (termAtNs_ == 0 || at < termAtNs_) termAtNs_ = at;
  }

  void recordExit(Rank& r, int status) {
    r.running = false;
    r.status = status;
    if (r.stdinFd >= 0) close(r.stdinFd), r.stdinFd = -1;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    // Whatever the status (a rank that exits 0 without joining holds the others as well),
    // unless braidrun is ending the job itself.
    if (!termSent_) {
      if (leaving_.count(r.rank))
        markExit(r.rank, "was stopped (its host " +
                             hostNames_[static_cast<size_t>(where_[static_cast<size_t>(r.rank)].host)] + " left the job)");
      else if (!WIFEXITED(status))
        markExit(r.rank, "was killed by signal " + signalName(WTERMSIG(status)));
      else if (where_[static_cast<size_t>(r.rank)].remote && code == 255)
        markExit(r.rank, "ended: its ssh failed (status 255)");
      else
        markExit(r.rank, "exited with status " + std::to_string(code));
    }
    if (code == 0) {
      ++finished_;
      // A rank that finished: the job is ending, so replacements still waiting to be
      // admitted are not needed.
      if (opts_.maxNp > 0 && !closed_) {
        closed_ = true;
        dismissWaitingReplacements();
      }
      return;
    }
    if (dismissed_.count(r.rank)) {
      std::fprintf(stderr, "braidrun: replacement %d was not admitted before the job finished; stopped\n", r.rank);
      return;
    }
    // A rank killed (or failing) during init may leave shared-memory segments it created
    // and no peer opened yet: their names carry its pid (common/shm_names.h).
    if (!where_[static_cast<size_t>(r.rank)].remote) {
      int n = removeSegmentsOf(r.pid);
      if (n > 0) std::fprintf(stderr, "braidrun: removed %d shared-memory segment(s) rank %d left\n", n, r.rank);
    }
    // Ranks we terminated ourselves are summarized once, not reported as failures.
    if (termSent_) {
      ++terminated_;
      return;
    }
    const Where& w = where_[static_cast<size_t>(r.rank)];
    if (leaving_.count(r.rank))
      std::fprintf(stderr, "braidrun: rank %d stopped: its host %s left the job\n", r.rank,
                   hostNames_[static_cast<size_t>(w.host)].c_str());
    else if (w.remote && WIFEXITED(status) && code == 255)
      std::fprintf(stderr, "braidrun: rank %d on %s: ssh failed (status 255; its message is above)\n", r.rank,
                   hostNames_[static_cast<size_t>(w.host)].c_str());
    else if (WIFEXITED(status))
      std::fprintf(stderr, "braidrun: rank %d exited with status %d\n", r.rank, code);
    else
      std::fprintf(stderr, "braidrun: rank %d killed by signal %s\n", r.rank, signalName(WTERMSIG(status)).c_str());
    if (firstFailure_ < 0 && opts_.minNp > 0 && running() >= opts_.minNp) {
      // An elastic job: the survivors notice the failure and recover without this rank.
      ++lost_;
      std::fprintf(stderr, "braidrun: %d rank(s) still running (--min-np %d): the job goes on without rank %d\n",
                   running(), opts_.minNp, r.rank);
      replace(r.rank);
      return;
    }
    if (firstFailure_ < 0) {
      firstFailure_ = code;
      // The survivors are expected to notice the failure and report it themselves.
      beginShutdown(graceSec_);
    }
  }

  // --max-np: queues a replacement for lost rank `lost`; reap() starts it once it has
  // walked ranks_ (starting one appends to ranks_).
  void replace(int lost) {
    if (opts_.maxNp > 0) toReplace_.push_back(lost);
  }

  // Starts a replacement for lost rank `lost` (on its host), which waits in the store until
  // the running ranks admit it.
  void startReplacement(int lost) {
    if (opts_.maxNp == 0 || closed_ || termAtNs_ != 0 || running() >= opts_.maxNp) return;
    if (replacements_ >= 2 * opts_.np) {
      std::fprintf(stderr, "braidrun: %d replacements started already; no more\n", replacements_);
      return;
    }
    Where w = where_[static_cast<size_t>(lost)];
    if (!opts_.discoveryScript.empty()) {
      // Where there is a free slot now: the lost rank's host first, else the first listed.
      int host = freeSlots(w.host) > 0 ? w.host : -1;
      for (size_t h = 0; host < 0 && h < hostNames_.size(); ++h)
        if (freeSlots(static_cast<int>(h)) > 0) host = static_cast<int>(h);
      if (host < 0) {
        waitingForHost_.push_back(lost);
        std::fprintf(stderr, "braidrun: no host has a free slot for rank %d's replacement; waiting for one\n", lost);
        return;
      }
      if (host != w.host) {
        w = Where();
        w.host = host;
        w.remote = !isThisHost(hostNames_[static_cast<size_t>(host)]);
      }
      w.localRank = runningOn(host);
      w.localSize = std::max(slotsOf_[static_cast<size_t>(host)], w.localRank + 1);
      if (w.remote && !storeAddrOf_.count(host) && !storeAddrFor(host)) return;
    }
    const int idx = opts_.np + replacements_++;
    where_.push_back(w);
    auto orig = replacedOf_.find(lost);
    replacedOf_[idx] = orig != replacedOf_.end() ? orig->second : lost;
    if (!spawnRank(idx)) return;
    std::fprintf(stderr,
                 "braidrun: started replacement %d for rank %d on %s; it joins when the running ranks admit it\n", idx,
                 lost, w.remote ? hostNames_[static_cast<size_t>(w.host)].c_str() : "this host");
  }

  // Where each rank is, on stderr, as braid-info --status prints it: asked as the job is
  // stopped for its timeout, the rank that held it up is named while it still runs.
  void printLiveView() {
    if (running() == 0) return;
    bootstrap::Store* s = ranksStore();
    if (!s) return;
    auto states = core::askLiveStatus(*s, kTimeoutViewWaitSec);
    if (!states.isOk()) {
      std::fprintf(stderr, "braidrun: no live view of the ranks: %s\n", states.status().message().c_str());
      return;
    }
    std::fprintf(stderr, "braidrun: where the ranks are (as braid-info --status prints it):\n%s",
                 core::renderLiveStatus(states.value(), kTimeoutViewWaitSec).c_str());
  }

  // braidrun's own client of the ranks' store: an etcd cluster when they were given one
  // (BRAID_STORE), else braidrun's own. Null (said once on stderr) when it cannot connect.
  bootstrap::Store* ranksStore() {
    if (storeClient_ || storeUnreachable_) return storeClient_.get();
    const char* url = envOf("BRAID_STORE");
    StatusOr<std::unique_ptr<bootstrap::Store>> c = Status(Code::kInternal, "");
    if (url) {
      const char* job = xOf("BRAID_JOB_ID");  // -x overrides jobId_ for the ranks
      auto e = bootstrap::EtcdStore::connectForJob(url, job ? job : jobId_, Deadline::after(5));
      c = e.isOk() ? StatusOr<std::unique_ptr<bootstrap::Store>>(std::move(e).value())
                   : StatusOr<std::unique_ptr<bootstrap::Store>>(e.status());
    } else {
      auto t = bootstrap::TcpStoreClient::connect("127.0.0.1", store_->port(), 0, Deadline::after(5), 5, key_, tls_);
      c = t.isOk() ? StatusOr<std::unique_ptr<bootstrap::Store>>(std::move(t).value())
                   : StatusOr<std::unique_ptr<bootstrap::Store>>(t.status());
    }
    if (!c.isOk()) {
      storeUnreachable_ = true;
      std::fprintf(stderr, "braidrun: cannot reach the ranks' store: %s\n", c.status().toString().c_str());
      return nullptr;
    }
    storeClient_ = std::move(c).value();
    return storeClient_.get();
  }

  // Marks in the ranks' store that the process started as rank `rank` ended (`how`): a rank
  // still joining and waiting for it fails at once, naming it (bootstrap::kLauncherExitPrefix).
  // Replacements join by growing, where the running ranks watch them otherwise.
  void markExit(int rank, const std::string& how) {
    if (rank >= opts_.np) return;
    bootstrap::Store* s = ranksStore();
    if (!s) return;
    if (!s->set(bootstrap::kLauncherExitPrefix + std::to_string(rank), how, Deadline::after(5)).isOk()) return;
    exitedList_ += (exitedList_.empty() ? "" : " ") + std::to_string(rank);
    if (s->set(bootstrap::kLauncherExitListKey, exitedList_, Deadline::after(5)).isOk())
      (void)s->add(bootstrap::kLauncherExitsKey, 1, Deadline::after(5));
  }

  // Stops the replacements that have not been admitted (no admission record for their
  // pid, or no ticket drawn yet): the job is finishing without them. Admitted ones are
  // members now and finish with the others.
  void dismissWaitingReplacements() {
    if (replacements_ == 0) return;
    if (!ranksStore()) return;
    auto drawn = storeClient_->add("braid-elastic/joiners", 0, Deadline::after(5));
    if (!drawn.isOk()) return;
    // Admitted replacements, by the index braidrun gave them (BRAID_REPLACEMENT; a remote
    // one's pid is not that of the ssh client braidrun holds), else by pid.
    std::set<pid_t> admittedPids;
    std::set<int> admittedIndexes;
    for (int64_t t = 1; t <= drawn.value(); ++t) {
      const std::string k = "braid-elastic/joiner/" + std::to_string(t);
      auto admit = storeClient_->check({k + "/admit"}, Deadline::after(5));
      if (!admit.isOk() || !admit.value()) continue;
      auto how = storeClient_->get(k + "/admit", Deadline::after(1));
      if (!how.isOk() || how.value() == "gone") continue;
      auto rec = storeClient_->get(k, Deadline::after(1));
      if (!rec.isOk()) continue;
      long long pid = 0;
      char host[256] = "", index[32] = "";
      const int n = std::sscanf(rec.value().c_str(), "%lld %255s %31s", &pid, host, index);
      if (n >= 1) admittedPids.insert(static_cast<pid_t>(pid));
      if (n == 3 && std::isdigit(static_cast<unsigned char>(index[0]))) admittedIndexes.insert(std::atoi(index));
    }
    for (auto& r : ranks_) {
      if (!r.running || r.rank < opts_.np || admittedIndexes.count(r.rank) ||
          (!where_[static_cast<size_t>(r.rank)].remote && admittedPids.count(r.pid)))
        continue;
      dismissed_.insert(r.rank);
      kill(r.pid, SIGTERM);
    }
  }

  void reap() {
    for (auto& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      pid_t p;
      // Drain every state change: a rank may have stopped and continued since last time.
      for (;;) {
        do {
          p = waitpid(r.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
        } while (p < 0 && errno == EINTR);
        if (p != r.pid) break;
        if (WIFSTOPPED(status)) {
          r.stopped = true;
          r.stopSignal = WSTOPSIG(status);
        } else if (WIFCONTINUED(status)) {
          r.stopped = false;
        } else {
          recordExit(r, status);
          break;
        }
      }
    }
    reapOrphans();
    std::vector<int> lost;
    lost.swap(toReplace_);
    for (int r : lost) startReplacement(r);
    checkStalled();
  }

  bool isRunningRank(pid_t pid) const {
    for (const auto& r : ranks_)
      if (r.running && r.pid == pid) return true;
    return false;
  }

  // Reaps the exited processes that were reparented here (see run()), leaving the ranks'
  // own exits to reap() above: a peek (WNOWAIT) says whose exit is next.
  void reapOrphans() {
    for (;;) {
      siginfo_t si{};
      if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return;
      if (isRunningRank(si.si_pid)) return;  // reap() takes it on its next pass
      (void)waitpid(si.si_pid, nullptr, WNOHANG);
    }
  }

  // The pids of this process's children that are not ranks: once every rank has exited, what
  // the ranks left running.
  std::vector<pid_t> orphans() const {
    std::vector<pid_t> out;
    DIR* d = opendir("/proc");
    if (!d) return out;
    const pid_t self = getpid();
    while (dirent* e = readdir(d)) {
      if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
      const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      if (ppidOf(pid) == self && !isRunningRank(pid)) out.push_back(pid);
    }
    closedir(d);
    return out;
  }

  // Ends what the ranks left running (killed outright: their rank is gone, and with it whatever
  // would have told them to stop) and says so. A process that dies may leave children of its
  // own, reparented here in turn, hence the rounds.
  void killOrphans() {
    int killed = 0;
    for (int round = 0; round < 16; ++round) {
      std::vector<pid_t> left = orphans();
      if (left.empty()) break;
      for (pid_t pid : left) killed += kill(pid, SIGKILL) == 0;
      for (pid_t pid : left)
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
    if (killed > 0)
      std::fprintf(stderr, "braidrun: killed %d process(es) the ranks had started and left running\n", killed);
  }

  // A stopped rank resumes only if someone continues it. Once every other rank has exited,
  // nobody will: treat it as hung, give it the grace period, then terminate it. (While
  // other ranks still run, a stop may be a debugger or an operator, so it is left alone.)
  void checkStalled() {
    if (stallReported_ || termAtNs_ != 0) return;
    int run = 0, stopped = 0;
    const Rank* victim = nullptr;
    for (const auto& r : ranks_) {
      if (!r.running) continue;
      ++run;
      if (r.stopped) {
        ++stopped;
        if (!victim) victim = &r;
      }
    }
    if (run == 0 || stopped < run || run == static_cast<int>(ranks_.size())) return;
    stallReported_ = true;
    if (opts_.minNp > 0 && firstFailure_ < 0) {
      // The others finished without the stopped ranks (they shrank them away): lost ranks,
      // not a failure of the job.
      lost_ += stopped;
      std::fprintf(stderr,
                   "braidrun: rank %d is stopped (%s) and every other rank has exited; terminating %d stopped "
                   "rank(s), lost to the job (--min-np %d)\n",
                   victim->rank, signalName(victim->stopSignal).c_str(), stopped, opts_.minNp);
      beginShutdown(0);
      return;
    }
    std::fprintf(stderr,
                 "braidrun: rank %d is stopped (%s) and every other rank has exited; terminating %d stopped rank(s) "
                 "in %g s\n",
                 victim->rank, signalName(victim->stopSignal).c_str(), stopped, graceSec_);
    if (firstFailure_ < 0) firstFailure_ = 128 + victim->stopSignal;
    beginShutdown(graceSec_);
  }

  void onSignal() {
    signalfd_siginfo si;
    while (read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
      int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) continue;  // reaped below
      // A terminal's Ctrl-C already reached every rank (same process group); only a signal
      // sent to braidrun alone (kill, a scheduler) is forwarded.
      bool fromTerminal = si.ssi_code == SI_KERNEL;
      if (!fromTerminal) signalAll(sig);
      if (!interrupted_) {
        interrupted_ = true;
        std::fprintf(stderr, "braidrun: received %s; %s the ranks\n", signalName(sig).c_str(),
                     fromTerminal ? "waiting for" : "forwarded it to");
        if (firstFailure_ < 0) firstFailure_ = 128 + sig;
        // Ranks that ignore the signal are not allowed to keep braidrun alive forever.
        beginShutdown(std::min(graceSec_, 5.0));
      }
    }
  }

  void onDeadlines() {
    int64_t now = nowNanos();
    if (opts_.timeoutSec > 0 && !timedOut_ && now - start_ >= static_cast<int64_t>(opts_.timeoutSec * 1e9)) {
      timedOut_ = true;
      std::fprintf(stderr, "braidrun: timeout of %g s reached; terminating %d running rank(s)\n", opts_.timeoutSec,
                   running());
      printLiveView();
      if (firstFailure_ < 0) firstFailure_ = kTimeoutExit;
      beginShutdown(0);
    }
    if (termAtNs_ && !termSent_ && now >= termAtNs_ && running() > 0) {
      termSent_ = true;
      // SIGTERM, then SIGCONT: a stopped rank keeps the SIGTERM pending and acts on it as it
      // resumes, before it runs any more of its own code (continued first, it could still
      // finish its call and report).
      signalAll(SIGTERM);
      signalAll(SIGCONT);
      killAtNs_ = now + static_cast<int64_t>(kKillAfterTermSec * 1e9);
    }
    if (killAtNs_ && !killSent_ && now >= killAtNs_ && running() > 0) {
      killSent_ = true;
      signalAll(SIGKILL);
    }
  }

  int pollTimeoutMs() const {
    int64_t next = INT64_MAX;
    if (opts_.timeoutSec > 0 && !timedOut_) next = start_ + static_cast<int64_t>(opts_.timeoutSec * 1e9);
    if (termAtNs_ && !termSent_) next = std::min(next, termAtNs_);
    if (killAtNs_ && !killSent_) next = std::min(next, killAtNs_);
    if (next == INT64_MAX) return 1000;
    int64_t ms = (next - nowNanos() + 999999) / 1000000;
    return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 1000)));
  }

  void loop() {
    int64_t allExitedAt = 0;
    for (;;) {
      reap();
      discover();
      onDeadlines();
      bool streamsOpen = false;
      for (const auto& s : streams_) streamsOpen |= s.fd >= 0;
      if (running() == 0) {
        if (!streamsOpen) break;
        // A rank's own children may hold its pipe open after it exits: drain briefly, then go.
        if (allExitedAt == 0) allExitedAt = nowNanos();
        if (nowNanos() - allExitedAt > 1000000000LL) break;
      }
      std::vector<pollfd> fds;
      fds.push_back({sigfd_, POLLIN, 0});
      std::vector<size_t> which;
      for (size_t i = 0; i < streams_.size(); ++i) {
        if (streams_[i].fd < 0) continue;
        fds.push_back({streams_[i].fd, POLLIN, 0});
        which.push_back(i);
      }
      int timeout = running() == 0 ? 100 : pollTimeoutMs();
      int n = poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) {
        std::fprintf(stderr, "braidrun: poll failed: %s\n", std::strerror(errno));
        break;
      }
      if (n <= 0) continue;
      if (fds[0].revents) onSignal();
      for (size_t k = 1; k < fds.size(); ++k)
        if (fds[k].revents) streams_[which[k - 1]].pump();
    }
    for (auto& s : streams_)
      if (s.fd >= 0) s.finish();
    if (terminated_ > 0)
      std::fprintf(stderr, "braidrun: terminated %d rank(s) that were still running\n", terminated_);
    // Every rank has been reaped unless poll failed; make sure none outlives braidrun, nor
    // anything they started.
    if (running() > 0) {
      signalAll(SIGKILL);
      for (auto& r : ranks_)
        if (r.running) waitpid(r.pid, nullptr, 0);
    }
    killOrphans();
  }

  // The cores the rank with local rank `r` of `n` on this host is bound to, when binding
  // applies (see the header comment): one with --bind-to core or when the ranks share the
  // cores evenly (rank r on usable core r % cores), else a block of usable / n consecutive
  // usable cores.
  bool cpusForRank(int r, int n, cpu_set_t* out) const {
    if (opts_.bindTo == "none") return false;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (cpus.empty()) return false;
    const bool even = static_cast<size_t>(n) % cpus.size() == 0;
    if (opts_.bindTo == "auto" && static_cast<int>(cpus.size()) < n && !even) return false;
    CPU_ZERO(out);
    if (opts_.bindTo == "core" || static_cast<int>(cpus.size()) < n) {
      CPU_SET(cpus[static_cast<size_t>(r) % cpus.size()], out);
      return true;
    }
    const size_t per = cpus.size() / static_cast<size_t>(n);
    for (size_t i = 0; i < per; ++i) CPU_SET(cpus[static_cast<size_t>(r) * per + i], out);
    return true;
  }

  Options opts_;
  AuthKey key_;  // the job's key (resolveKey)
  bool tls_ = false;  // BRAID_TLS for the job (resolveKey)
  rlimit origNofile_{};  // RLIMIT_NOFILE as braidrun was started, which its ranks get
  bool nofileRaised_ = false;
  double graceSec_ = kDefaultGraceSec;
  sigset_t origMask_;
  int sigfd_ = -1;
  std::unique_ptr<bootstrap::TcpStoreServer> store_;
  std::string storeAddr_;
  std::string jobFile_;  // this job's file for braid-info --status, "" when none
  std::string hostName_;  // HOROVOD_HOSTNAME of the ranks on this host
  std::vector<std::string> hostNames_;  // as given (-H / --hostfile), in placement order
  std::vector<Where> where_;            // by rank
  bool anyRemote_ = false;
  std::map<int, std::string> storeAddrOf_;  // host index -> store address, remote hosts
  std::vector<Rank> ranks_;
  std::vector<TaggedStream> streams_;
  int64_t start_ = 0;
  int firstFailure_ = -1;  // exit status to return; -1 while all is well
  int lost_ = 0;           // ranks lost while --min-np let the job go on
  int replacements_ = 0;   // replacements started (--max-np); process indices np, np+1, ...
  bool closed_ = false;    // a rank has finished: no more replacements
  std::set<int> dismissed_;  // replacements stopped because the job finished first
  std::map<int, int> replacedOf_;  // replacement's process index -> the rank it replaces
  std::vector<int> toReplace_;     // lost ranks whose replacements reap() starts
  // --host-discovery-script: slots per host (index into hostNames_) as last listed; ranks
  // being stopped because their host left; lost ranks whose replacements wait for a slot.
  std::vector<int> slotsOf_;
  std::set<int> leaving_;
  std::vector<int> waitingForHost_;
  int64_t nextDiscoveryNs_ = 0;
  std::string discoveryError_;
  int finished_ = 0;         // ranks (replacements included) that exited 0
  std::unique_ptr<bootstrap::Store> storeClient_;  // braidrun's own view of the ranks' store
  bool storeUnreachable_ = false;                  // ranksStore() failed once: not tried again
  std::string exitedList_;                         // the ranks markExit marked, "3 7"
  // BRAID_JOB_ID: random per braidrun, the same for every rank and replacement.
  std::string jobId_ = [] {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(bootstrap::randomNonce()));
    return std::string(b);
  }();
  int64_t termAtNs_ = 0;   // when to send SIGTERM (0 = not scheduled)
  int64_t killAtNs_ = 0;
  bool termSent_ = false;
  bool killSent_ = false;
  bool timedOut_ = false;
  bool interrupted_ = false;
  bool stallReported_ = false;
  int terminated_ = 0;
};

}  // namespace
}  // namespace braid::launcher

int main(int argc, char** argv) {
  braid::launcher::Options opts;
  int rc = braid::launcher::parseArgs(argc, argv, &opts);
  if (rc >= 0) return rc;
  return braid::launcher::Launcher(std::move(opts)).run();
}
