// braidrun as a user sees it: environment given to each rank, tagged output, exit status
// propagation, the grace period and termination escalation, --timeout, signal forwarding,
// and ranks rendezvousing through the store braidrun hosts.

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.h"
#include "support/run_command.h"
#include "test_util.h"


namespace {

using Run = braid::testing::CommandResult;

Run run(const std::string& cmd) { return braid::testing::runCommand(cmd); }

const std::string kBraidrun = BRAIDRUN_PATH;

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// The CPUs this process may run on, as sched_getaffinity reports them.
std::set<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.insert(c);
  return cpus;
}

// Each rank's CPUs, from its "Cpus_allowed_list:" line ("0-3,8") in --tag-output output.
std::vector<std::set<int>> rankCpus(const std::string& out, int n) {
  std::vector<std::set<int>> cpus(static_cast<size_t>(n));
  std::regex line(R"(\[(\d+)\] Cpus_allowed_list:\s*([0-9,\-]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    const int r = std::stoi((*it)[1]);
    if (r < 0 || r >= n) continue;
    std::stringstream ranges((*it)[2]);
    std::string range;
    while (std::getline(ranges, range, ',')) {
      const size_t dash = range.find('-');
      const int lo = std::stoi(range.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
      for (int c = lo; c <= hi; ++c) cpus[static_cast<size_t>(r)].insert(c);
    }
  }
  return cpus;
}

}  // namespace

TEST_CASE("braidrun gives every rank its environment", "[bootstrap][braidrun]") {
  Run r = run("FOO=from-parent " + kBraidrun +
              " -np 3 -x BAR=set-by-x -x FOO --tag-output sh -c "
              "'echo rank=$BRAID_RANK size=$BRAID_WORLD_SIZE local=$BRAID_LOCAL_RANK/$BRAID_LOCAL_SIZE "
              "ext=$BRAID_STORE_EXTERNAL addr=$BRAID_STORE_ADDR bar=$BAR foo=$FOO'");
  INFO(r.out);
  CHECK(r.status == 0);
  std::regex addr(R"(addr=127\.0\.0\.1:(\d+))");
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, addr));
  std::string port = m[1];
  for (int i = 0; i < 3; ++i) {
    std::string want = "[" + std::to_string(i) + "] rank=" + std::to_string(i) + " size=3 local=" +
                       std::to_string(i) + "/3 ext=1 addr=127.0.0.1:" + port + " bar=set-by-x foo=from-parent";
    CHECK(contains(r.out, want));
  }
}

// The variables horovodrun gives its ranks, for Horovod-style front ends: braidrun's values
// replace inherited ones (a stale HOROVOD_RANK from around it), and -x replaces braidrun's.
TEST_CASE("braidrun gives every rank Horovod's variables", "[bootstrap][braidrun]") {
  char host[256] = "";
  REQUIRE(gethostname(host, sizeof(host) - 1) == 0);
  Run r = run("HOROVOD_RANK=7 HOROVOD_SIZE=9 HOROVOD_CROSS_SIZE=4 " + kBraidrun +
              " -np 3 -x HOROVOD_HOSTNAME=chosen --tag-output sh -c "
              "'echo hvd=$HOROVOD_RANK/$HOROVOD_SIZE local=$HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE "
              "cross=$HOROVOD_CROSS_RANK/$HOROVOD_CROSS_SIZE host=$HOROVOD_HOSTNAME'");
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    CHECK(contains(r.out, "[" + n + "] hvd=" + n + "/3 local=" + n + "/3 cross=0/1 host=chosen\n"));
  }
  Run plain = run(kBraidrun + " -np 1 sh -c 'echo host=$HOROVOD_HOSTNAME.'");
  CHECK(plain.out == "host=" + std::string(host) + ".\n");
}

TEST_CASE("braidrun --tag-output tags whole lines of stdout and stderr", "[bootstrap][braidrun]") {
  Run r = run(kBraidrun + " -np 2 --tag-output sh -c 'echo out $BRAID_RANK; echo err $BRAID_RANK >&2; printf tail'");
  INFO(r.out);
  CHECK(r.status == 0);
  for (const char* want : {"[0] out 0\n", "[1] out 1\n", "[0] err 0\n", "[1] err 1\n", "[0] tail\n", "[1] tail\n"})
    CHECK(contains(r.out, want));
  // Without the flag, output passes through untouched.
  Run plain = run(kBraidrun + " -np 2 sh -c 'echo plain'");
  CHECK(plain.out == "plain\nplain\n");
}

TEST_CASE("braidrun ranks rendezvous through its store", "[bootstrap][braidrun]") {
  Run r = run(kBraidrun + " -np 4 " BOOTSTRAP_RANK_PATH);
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 4; ++i)
    CHECK(contains(r.out, "rank " + std::to_string(i) + " of 4 ok (local " + std::to_string(i) + "/4, from braid)"));

  // The store lives in braidrun, so it outlives rank 0.
  Run s = run(kBraidrun + " -np 3 " BOOTSTRAP_RANK_PATH " survive");
  INFO(s.out);
  CHECK(s.status == 0);
  CHECK(contains(s.out, "rank 1 of 3 ok"));
  CHECK(contains(s.out, "rank 2 of 3 ok"));
}

TEST_CASE("braidrun exit status is the first failure's", "[bootstrap][braidrun]") {
  Run ok = run(kBraidrun + " -np 3 true");
  CHECK(ok.status == 0);

  Run r = run(kBraidrun + " -np 3 sh -c '[ $BRAID_RANK = 1 ] && exit 3; exit 0'");
  INFO(r.out);
  CHECK(r.status == 3);
  CHECK(contains(r.out, "braidrun: rank 1 exited with status 3"));

  Run sig = run(kBraidrun + " -np 2 sh -c '[ $BRAID_RANK = 1 ] && kill -SEGV $$; exit 0'");
  INFO(sig.out);
  CHECK(sig.status == 128 + 11);
  CHECK(contains(sig.out, "braidrun: rank 1 killed by signal SIGSEGV"));

  Run missing = run(kBraidrun + " -np 2 /nonexistent/program");
  INFO(missing.out);
  CHECK(missing.status == 127);
  CHECK(contains(missing.out, "/nonexistent/program"));
}

TEST_CASE("braidrun lets survivors finish within the grace period", "[bootstrap][braidrun]") {
  // Rank 0 fails at once; rank 1 finishes on its own 0.5 s later, inside the grace period.
  Run r = run("BRAIDRUN_GRACE_SEC=10 " + kBraidrun +
              " -np 2 sh -c 'if [ $BRAID_RANK = 0 ]; then exit 5; fi; sleep 0.5; echo survivor done'");
  INFO(r.out);
  CHECK(r.status == 5);
  CHECK(contains(r.out, "survivor done"));
  CHECK_FALSE(contains(r.out, "terminated"));
  CHECK(r.seconds < 5);
}

TEST_CASE("braidrun terminates ranks that outlive the grace period", "[bootstrap][braidrun]") {
  SECTION("SIGTERM after the grace period") {
    Run r = run("BRAIDRUN_GRACE_SEC=0.3 " + kBraidrun + " -np 3 sh -c '[ $BRAID_RANK = 2 ] && exit 1; exec sleep 30'");
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(contains(r.out, "terminated 2 rank(s)"));
    CHECK(r.seconds >= 0.25);
    CHECK(r.seconds < 3);
  }
  SECTION("a stopped rank is continued so that SIGTERM reaches it") {
    Run r = run("BRAIDRUN_GRACE_SEC=0.3 " + kBraidrun +
                " -np 2 sh -c 'if [ $BRAID_RANK = 0 ]; then sleep 0.2; exit 2; fi; kill -STOP $$; sleep 30'");
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK(r.seconds < 3);
  }
  SECTION("SIGKILL 2 s after SIGTERM for a rank that ignores it") {
    Run r = run("BRAIDRUN_GRACE_SEC=0.2 " + kBraidrun +
                " -np 2 sh -c 'if [ $BRAID_RANK = 0 ]; then exit 4; fi; trap \"\" TERM; exec sleep 30'");
    INFO(r.out);
    CHECK(r.status == 4);
    CHECK(r.seconds >= 2.0);
    CHECK(r.seconds < 5);
  }
}

TEST_CASE("braidrun ends a rank left stopped after all others exited", "[bootstrap][braidrun]") {
  // Everyone else finished cleanly; rank 1 can never resume on its own.
  Run r = run("BRAIDRUN_GRACE_SEC=0.3 " + kBraidrun + " -np 3 sh -c '[ $BRAID_RANK = 1 ] && kill -STOP $$; exit 0'");
  INFO(r.out);
  CHECK(r.status == 128 + SIGSTOP);
  CHECK(contains(r.out, "rank 1 is stopped (SIGSTOP) and every other rank has exited"));
  CHECK(r.seconds < 3);
  // A stopped rank is left alone while others still run (a debugger, an operator): here
  // rank 0 continues it after a while, and the job ends cleanly.
  char dir[] = "/tmp/braidrun-stop-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string pidFile = std::string(dir) + "/pid1";
  Run resumed = run("BRAIDRUN_GRACE_SEC=0.1 " + kBraidrun + " -np 2 sh -c 'if [ $BRAID_RANK = 1 ]; then echo $$ > " +
                    pidFile + "; kill -STOP $$; echo resumed; exit 0; fi; sleep 0.6; kill -CONT $(cat " + pidFile +
                    "); sleep 0.1; exit 0'");
  INFO(resumed.out);
  CHECK(resumed.status == 0);
  CHECK(contains(resumed.out, "resumed"));
  std::remove(pidFile.c_str());
  rmdir(dir);
}

TEST_CASE("braidrun --timeout kills everything with a message", "[bootstrap][braidrun]") {
  Run r = run(kBraidrun + " -np 2 --timeout 0.5 sleep 30");
  INFO(r.out);
  CHECK(r.status == 124);
  CHECK(contains(r.out, "timeout of 0.5 s"));
  CHECK(r.seconds < 3);
}

TEST_CASE("braidrun forwards SIGTERM to the ranks", "[bootstrap][braidrun]") {
  Run r = run("sh -c '" + kBraidrun +
              " -np 2 sh -c \"trap \\\"echo got TERM \\$BRAID_RANK; exit 7\\\" TERM; while :; do sleep 0.05; done\" & "
              "pid=$!; sleep 0.5; kill -TERM $pid; wait $pid; echo braidrun=$?'");
  INFO(r.out);
  CHECK(contains(r.out, "got TERM 0"));
  CHECK(contains(r.out, "got TERM 1"));
  CHECK(contains(r.out, "braidrun: received SIGTERM"));
  CHECK(contains(r.out, "braidrun=143"));
  CHECK(r.seconds < 4);
}

TEST_CASE("braidrun rejects bad command lines", "[bootstrap][braidrun]") {
  CHECK(run(kBraidrun).status == 2);
  CHECK(run(kBraidrun + " -np 2").status == 2);
  CHECK(run(kBraidrun + " -np zero true").status == 2);
  CHECK(run(kBraidrun + " -np 2 --bogus true").status == 2);
  CHECK(run(kBraidrun + " -np 2 --timeout -1 true").status == 2);
  Run help = run(kBraidrun + " --help");
  CHECK(help.status == 0);
  CHECK(contains(help.out, "usage: braidrun"));
  Run version = run(kBraidrun + " --version");
  CHECK(version.status == 0);
  CHECK(std::regex_search(version.out, std::regex(R"(^braidrun \(braid\) \d+\.\d+\.\d+\n$)")));
  Run grace = run("BRAIDRUN_GRACE_SEC=soon " + kBraidrun + " -np 1 true");
  CHECK(grace.status == 2);
  CHECK(contains(grace.out, "BRAIDRUN_GRACE_SEC='soon'"));
  // Options end at the command: its own flags are left alone.
  Run passthrough = run(kBraidrun + " -np 1 -- sh -c 'echo $0 $1' -np x");
  CHECK(passthrough.out == "-np x\n");
  // A host-discovery script: needs --min-np, replaces -H, must succeed and list hosts.
  Run noMin = run(kBraidrun + " --host-discovery-script 'echo localhost:2' true");
  CHECK(noMin.status == 2);
  CHECK(contains(noMin.out, "needs --min-np"));
  CHECK(run(kBraidrun + " -H localhost:2 --min-np 1 --host-discovery-script 'echo localhost:2' true").status == 2);
  Run failing = run(kBraidrun + " --min-np 1 --host-discovery-script 'exit 3' true");
  CHECK(failing.status == 2);
  CHECK(contains(failing.out, "failed (exit status 3)"));
  Run empty = run(kBraidrun + " --min-np 1 --host-discovery-script true true");
  CHECK(empty.status == 2);
  CHECK(contains(empty.out, "names no host"));
  Run listed = run(kBraidrun + " --min-np 1 --host-discovery-script \"printf 'localhost:2 # here\\n'\" sh -c 'echo $BRAID_WORLD_SIZE'");
  CHECK(listed.status == 0);
  CHECK(listed.out == "2\n2\n");
}

TEST_CASE("braidrun ranks die with braidrun even when it is SIGKILLed", "[bootstrap][braidrun]") {
  char dir[] = "/tmp/braidrun-test-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string d = dir;
  Run r = run("sh -c '" + kBraidrun + " -np 2 sh -c \"echo \\$\\$ > " + d +
              "/pid.\\$BRAID_RANK; exec sleep 30\" >/dev/null 2>&1 & pid=$!; sleep 0.5; kill -KILL $pid; wait $pid; echo killed'");
  INFO(r.out);
  CHECK(contains(r.out, "killed"));
  CHECK(r.seconds < 5);  // the ranks' output went elsewhere, so nothing held the pipe open
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream f(d + "/pid." + std::to_string(rank));
    long pid = 0;
    REQUIRE(f >> pid);
    INFO("rank " << rank << " pid " << pid);
    // Gone, or a zombie waiting for whoever adopted it.
    bool dead = false;
    for (int i = 0; i < 100 && !dead; ++i) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string line;
      dead = !std::getline(stat, line) || line.find(") Z ") != std::string::npos;
      if (!dead) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(dead);
    if (!dead) kill(static_cast<pid_t>(pid), SIGKILL);  // leave no stray process behind
    std::remove((d + "/pid." + std::to_string(rank)).c_str());
  }
  rmdir(dir);
}

// Binding: ranks that fit the usable cores get equal, disjoint blocks of them (a rank runs
// several busy threads, which one core would serialise); --bind-to core gives one core each,
// ranks that outnumber the cores evenly get one core each, round robin; --bind-to none and
// an uneven share leave placement to the kernel.
TEST_CASE("braidrun binds each rank to a block of cores of its own", "[bootstrap][braidrun]") {
  const std::set<int> allowed = allowedCpus();
  const int cores = static_cast<int>(allowed.size());
  REQUIRE(cores >= 1);
  const std::string show = " --tag-output sh -c 'grep Cpus_allowed_list /proc/self/status'";
  for (int n : {1, 2, cores}) {
    if (n > cores) continue;
    Run r = run(kBraidrun + " -np " + std::to_string(n) + show);
    INFO(r.out);
    REQUIRE(r.status == 0);
    std::set<int> seen;
    for (const std::set<int>& mine : rankCpus(r.out, n)) {
      CHECK(static_cast<int>(mine.size()) == cores / n);
      for (int c : mine) {
        CHECK(allowed.count(c) == 1);
        CHECK(seen.insert(c).second);  // no core given to two ranks
      }
    }
  }
  Run one = run(kBraidrun + " -np 1 --bind-to core" + show);
  INFO(one.out);
  REQUIRE(one.status == 0);
  CHECK(rankCpus(one.out, 1)[0].size() == 1);
  if (2 * cores <= 64) {
    const int n = 2 * cores;
    Run r = run(kBraidrun + " -np " + std::to_string(n) + show);
    INFO(r.out);
    REQUIRE(r.status == 0);
    const std::vector<std::set<int>> cpus = rankCpus(r.out, n);
    std::map<int, int> ranksOn;
    for (int i = 0; i < n; ++i) {
      REQUIRE(cpus[i].size() == 1);
      CHECK(allowed.count(*cpus[i].begin()) == 1);
      CHECK(cpus[i] == cpus[(i + cores) % n]);  // rank i and rank i + cores share a core
      ++ranksOn[*cpus[i].begin()];
    }
    CHECK(static_cast<int>(ranksOn.size()) == cores);
  }
  for (int n : {1, cores + 1}) {
    // cores + 1 ranks share the cores unevenly, except on one core
    Run r = run(kBraidrun + " -np " + std::to_string(n) + (n == 1 ? " --bind-to none" : "") + show);
    INFO(r.out);
    REQUIRE(r.status == 0);
    for (const std::set<int>& mine : rankCpus(r.out, n)) CHECK(mine == allowed);
  }
}
