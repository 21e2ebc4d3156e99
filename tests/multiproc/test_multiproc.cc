// Real processes launched with braidrun: collectives over shm and forced tcp, the perf tool's
// own result check, bad input, init through a unique id, and peers that die or stall.

#include "common/tcp_pacing.h"
#include "support/catch.h"
#include "support/etcd_server.h"
#include "support/run_command.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Run = braid::testing::CommandResult;

Run run(const std::string& cmd) { return braid::testing::runCommand(cmd); }

// A port free a moment ago on every interface (a job's rank 0 binds 0.0.0.0), below the
// kernel's ephemeral range (32768 and up by default): a port from that range may be taken
// meanwhile as the local end of any connection another test opens.
bool portIsFree(uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(port);
  const bool ok = bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  close(s);
  return ok;
}

std::string freeLoopbackPort() {
  static unsigned seed = static_cast<unsigned>(getpid()) * 2654435761u;
  for (int attempt = 0; attempt < 200; ++attempt) {
    seed = seed * 1103515245u + 12345u;
    const uint16_t port = static_cast<uint16_t>(20000 + (seed >> 8) % 12000);
    if (portIsFree(port)) return std::to_string(port);
  }
  FAIL("no free port in [20000, 32000)");
  return "";
}

// A free port kept bound on every interface, never listened on, until it goes out of scope:
// a connection to it is refused, and no other test's server can take it meanwhile (a port
// that is merely free may become another test's store or key-value server).
class RefusingPort {
 public:
  RefusingPort() {
    for (int attempt = 0; attempt < 200 && fd_ < 0; ++attempt) {
      const std::string p = freeLoopbackPort();
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_addr.s_addr = htonl(INADDR_ANY);
      sa.sin_port = htons(static_cast<uint16_t>(std::stoi(p)));
      if (s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
        fd_ = s;
        port_ = p;
      } else if (s >= 0) {
        close(s);
      }
    }
    REQUIRE(fd_ >= 0);
  }
  ~RefusingPort() {
    if (fd_ >= 0) close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  const std::string& port() const { return port_; }

 private:
  int fd_ = -1;
  std::string port_;
};

std::string braidrun(int np, const std::string& env = "") {
  return env + " " BRAIDRUN " -np " + std::to_string(np) + " --timeout 120 ";
}

// `n` ranks started as torchrun starts them: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR and a free MASTER_PORT, none of braidrun's variables. Each runs `program` with
// `env` (which may use $r, the rank; no single quotes); the output comes back with each line
// tagged "[r] ". The status is non-zero if any rank failed. `worldSize` (a shell word that
// may use $r too) replaces `n` as the WORLD_SIZE the ranks are told.
Run torchrunJob(int n, const std::string& env, const std::string& program, const std::string& worldSize = "") {
  const std::string port = freeLoopbackPort();
  const std::string size = worldSize.empty() ? std::to_string(n) : worldSize;
  std::string ranks;
  for (int r = 0; r < n; ++r) ranks += (r ? " " : "") + std::to_string(r);
  return run("bash -c 'set -o pipefail; pids=; for r in " + ranks +
             "; do ( env -u BRAID_RANK -u BRAID_WORLD_SIZE -u BRAID_STORE_ADDR " + env + " RANK=$r WORLD_SIZE=" + size +
             " LOCAL_RANK=$r LOCAL_WORLD_SIZE=" + std::to_string(n) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + program +
             " 2>&1 | sed \"s/^/[$r] /\" ) & pids=\"$pids $!\"; done; rc=0; for p in $pids; do wait $p || rc=1; done; "
             "exit $rc' 2>&1");
}

// The lines of `out` that contain `word`, joined (the first 4,000 characters): checked
// against "" so that a failure's expansion shows those lines themselves, first, where the
// whole output that follows it may be cut.
std::string linesWith(const std::string& out, const std::string& word) {
  std::string found;
  for (size_t at = out.find(word); at != std::string::npos && found.size() < 4000; at = out.find(word, at)) {
    const size_t nl = out.rfind('\n', at);
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    const size_t end = std::min(out.find('\n', at), out.size());
    found.append(out, begin, end - begin).push_back('\n');
    at = end;
  }
  return found.substr(0, 4000);
}

// How many times `re` matches in `out`.
long countMatches(const std::string& out, const std::string& re) {
  std::regex x(re);
  return static_cast<long>(std::distance(std::sregex_iterator(out.begin(), out.end(), x), std::sregex_iterator()));
}

// The distinct values of group 2 of `re` ("FINAL ... checksum=(\S+)") in `out`: one when
// every survivor ended with the same parameters.
std::set<std::string> checksumsOf(const std::string& out, const std::string& re) {
  std::regex x(re);
  std::set<std::string> values;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), x); it != std::sregex_iterator(); ++it)
    values.insert((*it)[2]);
  return values;
}

// Checks that every line of `out` matching `re` (a rank in group 1, milliseconds in group
// 2) took under `limitMs`; returns how many lines matched.
int checkEachUnder(const std::string& out, const std::string& re, long limitMs) {
  std::regex x(re);
  int lines = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), x); it != std::sregex_iterator(); ++it) {
    ++lines;
    INFO("rank " << (*it)[1]);
    CHECK(std::stol((*it)[2]) < limitMs);
  }
  return lines;
}

struct Result {
  int code, failedRank;
  double elapsedMs;
};

std::map<int, Result> results(const std::string& out) {
  std::map<int, Result> m;
  std::regex re(R"(RESULT rank=(\d+) code=(\d+) failed_rank=(-?\d+) elapsed_ms=(\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    m[std::stoi((*it)[1])] = Result{std::stoi((*it)[2]), std::stoi((*it)[3]), std::stod((*it)[4])};
  return m;
}

// Every one of `survivors` ranks reported `code`, naming `failed`, within [minMs, maxMs).
void checkSurvivors(const std::string& out, size_t survivors, int code, int failed, double minMs, double maxMs) {
  auto res = results(out);
  CHECK(res.size() == survivors);
  for (const auto& [rank, x] : res) {
    INFO("survivor " << rank);
    CHECK(x.code == code);
    CHECK(x.failedRank == failed);
    CHECK(x.elapsedMs >= minMs);
    CHECK(x.elapsedMs < maxMs);
  }
}

constexpr int kRemoteError = 3;  // braidRemoteError
constexpr int kTimeout = 4;      // braidTimeout
constexpr int kAborted = 5;      // braidAborted

}  // namespace

TEST_CASE("collectives across processes over shm and tcp", "[multiproc]") {
  for (const char* transport : {"", "BRAID_TRANSPORT=tcp"}) {
    for (int np : {2, 3, 4}) {
      INFO("np " << np << " " << transport);
      Run r = run(braidrun(np, transport) + MP_DIR "/mp_collectives");
      INFO(r.out);
      CHECK(r.status == 0);
      for (int i = 0; i < np; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
    }
  }
}

TEST_CASE("allreduce_perf checks its results with zero wrong", "[multiproc]") {
  for (const char* transport : {"", "BRAID_TRANSPORT=tcp"}) {
    for (int np : {2, 4}) {
      INFO("np " << np << " " << transport);
      Run r = run(braidrun(np, transport) + ALLREDUCE_PERF " -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 -d all -o sum");
      INFO(r.out);
      CHECK(r.status == 0);
      CHECK(r.out.find("Avg bus bandwidth") != std::string::npos);
      CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
    }
  }
}

// As MPI's singleton init: started by hand, with no launcher's variables, a program is a
// world of one rank.
TEST_CASE("a program started with no launcher runs as a world of size 1", "[multiproc]") {
  const std::string clean =
      "env -u BRAID_RANK -u BRAID_WORLD_SIZE -u HOROVOD_RANK -u HOROVOD_SIZE -u RANK -u WORLD_SIZE "
      "-u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS ";
  for (const char* tool : {ALLREDUCE_PERF, BROADCAST_PERF}) {
    Run r = run(clean + tool + " -b 8 -e 1M -f 32 -n 2 -w 1 -c 1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find(", 1 rank\n") != std::string::npos);
    CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  }
}

TEST_CASE("the perf tools take nccl-tests' flags with their meaning, and write CSV", "[multiproc]") {
  char dir[] = "/tmp/braid-perf-flags-XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string csv = std::string(dir) + "/r.csv";
  const std::string json = std::string(dir) + "/r.json";
  Run r = run(braidrun(2) + ALLREDUCE_PERF " -b 1K -e 64K -f 8 -n 3 -w 1 -c 1 -z 1 -m 4 -N 2 -T 60 -C 1 -p 1 -G 2 "
                            "-R 1 -r 0 --csv " + csv + " -J " + json);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("# blocking: 1 agg iters: 4 run cycles: 2 timeout: 60 s cputime: 1") != std::string::npos);
  CHECK(r.out.find("# -G 2: CUDA graphs capture calls on GPU buffers (-D 1) only") != std::string::npos);
  CHECK(r.out.find("# -R 1: nothing to register") != std::string::npos);
  CHECK(r.out.find("cputime") != std::string::npos);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  // Two cycles of three sizes: six rows in the table, the CSV and the JSON.
  std::ifstream in(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  REQUIRE(lines.size() == 7);
  CHECK(lines[0].rfind("tool,nranks,size,count,type,redop,root,oop_time_us,", 0) == 0);
  CHECK(lines[1].rfind("allreduce_perf,2,1024,256,float,sum,-1,", 0) == 0);
  CHECK(lines[4].rfind("allreduce_perf,2,1024,256,float,sum,-1,", 0) == 0);
  CHECK(lines[6].rfind("allreduce_perf,2,65536,16384,float,sum,-1,", 0) == 0);
  for (size_t i = 1; i < lines.size(); ++i) CHECK(lines[i].substr(lines[i].size() - 2) == ",0");
  std::ifstream js(json);
  std::string all((std::istreambuf_iterator<char>(js)), std::istreambuf_iterator<char>());
  CHECK(all.find("\"agg_iters\": 4") != std::string::npos);
  CHECK(all.find("\"cpu_time_us\": ") != std::string::npos);
  std::remove(csv.c_str());
  std::remove(json.c_str());
  rmdir(dir);

  // Values out of range name the flag.
  for (const char* bad : {"-z 3", "-m 0", "-N -1", "-T x", "-C 2", "-R 3", "-p 2"}) {
    Run b = run(braidrun(1) + ALLREDUCE_PERF " " + bad);
    INFO(bad << ": " << b.out);
    CHECK(b.status != 0);
    CHECK(b.out.find(std::string("for ") + std::string(bad).substr(0, 2)) != std::string::npos);
  }
}

// The machine's state the benchmark scripts record beside each run (scripts/bench_lib.sh).
TEST_CASE("core_latency times a cache line's round trip between two CPUs", "[multiproc]") {
  if (std::thread::hardware_concurrency() < 2) {
    WARN("one CPU: core_latency needs two");
    return;
  }
  Run q = run(PERF_DIR "/core_latency -q -n 500 -r 3");
  INFO(q.out);
  CHECK(q.status == 0);
  CHECK(std::regex_match(q.out, std::regex(R"([1-9][0-9]*\n)")));
  Run l = run(PERF_DIR "/core_latency -n 500 -r 3");
  INFO(l.out);
  CHECK(l.status == 0);
  CHECK(std::regex_search(l.out, std::regex(R"(CPUs \d+ and \d+: \d+ ns per round trip \(median of 3 bursts of 500)")));
  for (const char* bad : {"-c 0,0", "-n 0", "-r x", "-z"}) {
    Run b = run(std::string(PERF_DIR "/core_latency ") + bad);
    INFO(bad << ": " << b.out);
    CHECK(b.status == 2);
    CHECK(b.out.find("usage: core_latency") != std::string::npos);
  }
  Run one = run("taskset -c 0 " PERF_DIR "/core_latency");
  INFO(one.out);
  CHECK(one.status == 2);
  CHECK(one.out.find("one CPU only: two are needed") != std::string::npos);
}

// nccl-tests' -t: N ranks per process, each a thread with its communicator, rank = process
// rank x N + thread. Threads of one process reach each other over loopback, processes over
// shared memory or tcp.
TEST_CASE("perf tools: -t N runs N ranks in each process", "[multiproc]") {
  char dir[] = "/tmp/braid-perf-threads-XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string json = std::string(dir) + "/r.json";
  Run r = run(braidrun(2) + ALLREDUCE_PERF " -t 2 -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 -d all -J " + json);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find(", 4 ranks (2 processes x 2 threads, -t)") != std::string::npos);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  // Ranks 0 and 1 are threads of one process, 2 and 3 of another.
  std::regex line(R"(#  Rank +(\d+) Pid +(\d+))");
  std::map<int, std::string> pid;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), line); it != std::sregex_iterator(); ++it)
    pid[std::stoi((*it)[1])] = (*it)[2];
  REQUIRE(pid.size() == 4);
  CHECK(pid[0] == pid[1]);
  CHECK(pid[2] == pid[3]);
  CHECK(pid[0] != pid[2]);
  std::ifstream js(json);
  std::string all((std::istreambuf_iterator<char>(js)), std::istreambuf_iterator<char>());
  CHECK(all.find("\"nranks\": 4") != std::string::npos);
  std::remove(json.c_str());
  rmdir(dir);

  // Every tool, over shared memory and tcp between the processes, and threads alone.
  const std::pair<std::string, std::string> runs[] = {
      {braidrun(2), "allgather_perf -t 2"},
      {braidrun(2, "BRAID_TRANSPORT=tcp"), "reduce_scatter_perf -t 2"},
      {braidrun(2), "alltoall_perf -t 2"},
      {braidrun(2), "broadcast_perf -t 2 -r all"},
      {braidrun(2), "reduce_perf -t 2 -r 3"},
      {braidrun(2), "gather_perf -t 2 -r 1"},
      {braidrun(2), "scatter_perf -t 2 -r 2"},
      {braidrun(2), "sendrecv_perf -t 2"},
      {braidrun(1), "allreduce_perf -t 3"},
  };
  for (const auto& [launch, cmd] : runs) {
    Run t = run(launch + PERF_DIR "/" + cmd + " -b 8 -e 256K -f 64 -n 2 -w 1 -c 1");
    INFO(cmd << ": " << t.out);
    CHECK(t.status == 0);
    CHECK(t.out.find("Out of bounds values : 0 OK") != std::string::npos);
  }

  // A process killed mid-run: the other fails, a thread of it naming a rank the killed one
  // held (the first thread to fail ends its process).
  const auto start = std::chrono::steady_clock::now();
  Run k = run(braidrun(2) + "sh -c 'if [ \"$BRAID_RANK\" = 1 ]; then (sleep 2; kill -9 $$) & fi; exec " ALLREDUCE_PERF
                            " -t 2 -b 64K -e 64K -n 100000000 -w 0 -c 0'");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(k.out);
  CHECK(k.status != 0);
  CHECK(std::regex_search(k.out, std::regex(R"(braidAllReduce failed on rank [01]: remote error.*rank [23] )")));
  CHECK(secs < 60);

  for (const char* bad : {"-t 0", "-t 65", "-g 2"}) {
    Run b = run(braidrun(1) + ALLREDUCE_PERF " " + bad);
    INFO(bad << ": " << b.out);
    CHECK(b.status != 0);
    CHECK(b.out.find(std::string("for ") + std::string(bad).substr(0, 2)) != std::string::npos);
  }
}

// Only the launcher's own variables, as srun and mpirun set them: no BRAID_STORE_ADDR, no
// MASTER_ADDR. (srun's environment is reproduced here by hand: one host named localhost.)
TEST_CASE("ranks started as srun or a one-host mpirun start them need no store address", "[multiproc]") {
  const std::string clean =
      "env -u BRAID_RANK -u BRAID_WORLD_SIZE -u BRAID_STORE_ADDR -u HOROVOD_RANK -u HOROVOD_SIZE -u RANK "
      "-u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE ";
  // A job id whose store port (20000 + job * 8 % 12768 for step 0, launch_env.h) is free now:
  // another test's server may hold a given port meanwhile.
  uint64_t id = 100000 + getpid() % 50000;
  while (!portIsFree(static_cast<uint16_t>(20000 + id * 8 % 12768))) ++id;
  const std::string job = std::to_string(id);
  std::string both;
  for (int r = 0; r < 2; ++r) {
    both += clean + "SLURM_PROCID=" + std::to_string(r) + " SLURM_LOCALID=" + std::to_string(r) +
            " SLURM_NTASKS=2 SLURM_JOB_ID=" + job + " SLURM_STEP_ID=0 SLURM_JOB_NODELIST=localhost " ALLREDUCE_PERF
            " -b 8 -e 64K -f 32 -n 2 -w 1 -c 1" + (r == 0 ? " > /tmp/braid-srun-" + job + ".out 2>&1 & " : "; wait");
  }
  Run r = run("timeout 120 sh -c '" + both + "'; s=$?; cat /tmp/braid-srun-" + job + ".out; rm -f /tmp/braid-srun-" +
              job + ".out; exit $s");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  CHECK(r.out.find(", 2 ranks") != std::string::npos);

  if (run("command -v mpirun >/dev/null").status != 0) {
    WARN("mpirun not found: the mpirun half is skipped");
    return;
  }
  Run m = run(clean + "timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 " ALLREDUCE_PERF
                      " -b 8 -e 64K -f 32 -n 2 -w 1 -c 1");
  INFO(m.out);
  CHECK(m.status == 0);
  CHECK(m.out.find("Out of bounds values : 0 OK") != std::string::npos);
}

// nccl-tests' -T: a size that does not finish in time ends the run with an error naming it,
// on every rank, instead of hanging.
TEST_CASE("perf tools: -T aborts a size that runs past it", "[multiproc]") {
  const auto start = std::chrono::steady_clock::now();
  Run r = run(braidrun(2) + ALLREDUCE_PERF " -b 8 -e 8 -n 50000000 -w 0 -c 0 -T 1");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("size 8 did not finish within -T 1 s; aborting the run") != std::string::npos);
  CHECK(secs < 60);
}

// perf/plot.py needs matplotlib: Debian's python3-matplotlib, which scripts/setup.sh installs
// for /usr/bin/python3.
TEST_CASE("perf/plot.py draws busbw from -J files and from table logs, a PNG per collective", "[multiproc]") {
  std::string python;
  for (const char* p : {"/usr/bin/python3", "python3"}) {
    if (run(std::string(p) + " -c 'import matplotlib' 2>/dev/null").status == 0) {
      python = p;
      break;
    }
  }
  if (python.empty()) {
    WARN("skipped: no python3 with matplotlib (apt-get install python3-matplotlib)");
    return;
  }
  char dir[] = "/tmp/braid-plot-XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string d = dir;
  Run a = run(braidrun(2) + ALLREDUCE_PERF " -b 1K -e 1M -f 4 -n 2 -w 1 -J " + d + "/ar.json > " + d + "/ar.log");
  REQUIRE(a.status == 0);
  Run g = run(braidrun(2) + PERF_DIR "/allgather_perf -b 1K -e 1M -f 4 -n 2 -w 1 > " + d + "/gather.log");
  REQUIRE(g.status == 0);
  Run p = run(python + " " PLOT_PY " -o " + d + "/png -l json -l log -l log2 " + d + "/ar.json " + d + "/ar.log " +
              d + "/gather.log");
  INFO(p.out);
  CHECK(p.status == 0);
  for (const char* png : {"/png/allreduce.png", "/png/allgather.png"}) {
    std::ifstream f(d + png, std::ios::binary);
    char magic[8] = {};
    f.read(magic, 8);
    INFO(png);
    CHECK(std::string(magic + 1, 3) == "PNG");
  }
  // An input with no results is an error naming it.
  Run empty = run("echo '# nothing' > " + d + "/none.log && " + python + " " PLOT_PY " -o " + d + "/png " + d +
                  "/none.log");
  CHECK(empty.status == 1);
  CHECK(empty.out.find("none.log: no results in it") != std::string::npos);
  run("rm -rf " + d);
}

TEST_CASE("BRAID_TIMELINE writes a Chrome trace per rank and braid-info --timeline merges them", "[multiproc]") {
  char dir[] = "/tmp/braid-timeline-XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string d = dir;
  Run r = run(braidrun(2, "BRAID_TIMELINE=" + d) + ALLREDUCE_PERF " -b 8 -e 1M -f 32 -n 2 -w 1 -c 1");
  INFO(r.out);
  REQUIRE(r.status == 0);
  Run m = run(BRAID_INFO " --timeline " + d);
  INFO(m.out);
  REQUIRE(m.status == 0);
  // Every call, channel run and step of both ranks, in one valid trace.
  Run check = run("python3 -c '\nimport json, sys\nev = json.load(open(sys.argv[1]))[\"traceEvents\"]\n"
                  "for pid in (0, 1):\n"
                  "    cats = [e.get(\"cat\") for e in ev if e.get(\"pid\") == pid and e.get(\"ph\") == \"X\"]\n"
                  "    for c in (\"call\", \"channel\", \"step\"):\n"
                  "        assert cats.count(c) > 0, (pid, c)\n"
                  "    assert all(e[\"dur\"] >= 0 for e in ev if e.get(\"ph\") == \"X\")\n"
                  "print(\"trace ok\", len(ev))\n' " + d + "/timeline.json");
  INFO(check.out);
  CHECK(check.status == 0);
  CHECK(check.out.find("trace ok") != std::string::npos);
  // braidrun (which joins no communicator) wrote no file of its own.
  Run empty = run("ls " + d + " | grep -c json");
  CHECK(empty.out == "3\n");  // two ranks and the merge; braidrun itself wrote none
  run("rm -rf " + d);
}

TEST_CASE("braid-info --help and --version exit 0, a bad flag exits 2, and it shows the GPU path", "[multiproc]") {
  Run help = run(BRAID_INFO " --help");
  CHECK(help.status == 0);
  CHECK(help.out.find("usage: braid-info") != std::string::npos);
  Run version = run(BRAID_INFO " --version");
  CHECK(version.status == 0);
  CHECK(version.out.rfind("braid-info (braid) ", 0) == 0);
  CHECK(run(BRAID_INFO " --bogus").status == 2);
  // The GPU path's line: its state here, and without a GPU why device buffers cannot be used.
  Run info = run(BRAID_INFO);
  INFO(info.out);
  CHECK(info.status == 0);
  const size_t gpu = info.out.find("GPU path: ");
  REQUIRE(gpu != std::string::npos);
  const std::string line = info.out.substr(gpu, info.out.find('\n', gpu) - gpu);
  CHECK((line.find("CUDA runtime ") != std::string::npos || line.find("not built: ") != std::string::npos));
  if (line.find(" GPU") == std::string::npos || line.find("unavailable") != std::string::npos)
    CHECK((line.find("unavailable: ") != std::string::npos || line.find("not built: ") != std::string::npos));
  else
    CHECK(line.find("stream wait: ") != std::string::npos);
}

TEST_CASE("broadcast_perf checks its results with zero wrong", "[multiproc]") {
  Run r = run(braidrun(3) + BROADCAST_PERF " -b 8 -e 1M -f 16 -n 3 -w 1 -c 1 -r 1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  // Above 8 MiB the root writes its own copy of the input with streaming stores; an odd
  // count leaves a tail past the last whole cache line.
  for (const char* transport : {"", "BRAID_TRANSPORT=tcp"}) {
    INFO(transport);
    Run big = run(braidrun(3, transport) + BROADCAST_PERF " -b 12582916 -e 12582916 -n 2 -w 1 -c 1 -r 1");
    INFO(big.out);
    CHECK(big.status == 0);
    CHECK(big.out.find("Out of bounds values : 0 OK") != std::string::npos);
  }
}

// Every collective of the full set, point-to-point groups, split, pre-multiplied sums,
// bitwise ops and bad input (mp_full_set.c), each section reported by every rank.
TEST_CASE("the full collective set across processes over shm and tcp", "[multiproc]") {
  const char* sections[] = {"reduce",     "allgather",       "reduce_scatter", "alltoall", "gather",
                            "scatter",    "allgatherv",      "reduce_scatterv", "alltoallv", "barrier",
                            "p2p",        "split",           "premulsum",      "bitwise",  "bad_input"};
  for (const char* transport : {"", "BRAID_TRANSPORT=tcp"}) {
    for (int np : {3, 4}) {
      INFO("np " << np << " " << transport);
      Run r = run(braidrun(np, transport) + MP_DIR "/mp_full_set");
      INFO(r.out);
      CHECK(r.status == 0);
      for (const char* sec : sections) {
        for (int i = 0; i < np; ++i) {
          INFO("section " << sec << " rank " << i);
          CHECK(r.out.find(std::string("section ") + sec + " ok rank " + std::to_string(i) + "\n") !=
                std::string::npos);
        }
      }
      for (int i = 0; i < np; ++i) CHECK(r.out.find("child after parent ok rank " + std::to_string(i)) != std::string::npos);
    }
  }
}

// A random program of calls (mp_random.cc): every collective with random types, ops
// (pre-multiplied sums too), counts, roots and in-place use, groups of collectives, groups of
// sends and receives between random pairs, on the world, a reordered copy and halves, checked
// element by element, with guard bytes and the gaps of v-collectives left untouched.
struct RandomRun {
  const char* env;
  int np;
  int seed;
};
void runRandomPrograms(const std::vector<RandomRun>& runs) {
  for (const RandomRun& rr : runs) {
    INFO("np " << rr.np << " seed " << rr.seed << " " << rr.env);
    Run r = run(braidrun(rr.np, std::string(rr.env) + " BRAID_TIMEOUT=60") + MP_DIR "/mp_random " +
                std::to_string(rr.seed) + " 150");
    INFO(r.out);
    CHECK(r.status == 0);
    for (int i = 0; i < rr.np; ++i)
      CHECK(r.out.find("150 steps ok rank " + std::to_string(i) + "\n") != std::string::npos);
  }
}

TEST_CASE("random programs of calls give the right element everywhere over shm and tcp", "[multiproc]") {
  runRandomPrograms({
      {"", 2, 1},
      {"", 5, 2},
      {"BRAID_TRANSPORT=tcp", 3, 3},
      {"BRAID_TRANSPORT=tcp BRAID_NSLOTS=2 BRAID_SLOT_BYTES=4096", 4, 4},
      // The halves' program on a thread of its own, beside the world's.
      {"MP_RANDOM_THREADS=1", 4, 5},
      // Non-blocking: calls return at once and several steps stay in flight.
      {"MP_RANDOM_NONBLOCKING=1", 3, 6},
      {"MP_RANDOM_NONBLOCKING=1 MP_RANDOM_THREADS=1 BRAID_TRANSPORT=tcp", 4, 7},
      {"BRAID_ALGO='allreduce:recursive_doubling;allgather:bruck;reduce_scatter:recursive_halving;"
       "alltoall:bruck;gather:tree;scatter:tree;broadcast:tree;reduce:tree'",
       5, 8},
  });
}

TEST_CASE("random programs of calls give the right element everywhere over ucx", "[multiproc][ucx]") {
  runRandomPrograms({
      {"BRAID_TRANSPORT=ucx", 3, 11},
      {"BRAID_TRANSPORT=ucx MP_RANDOM_NONBLOCKING=1 MP_RANDOM_THREADS=1", 4, 12},
      {"BRAID_TRANSPORT=ucx BRAID_WHOLE_BLOCKS=0", 2, 13},
  });
}

// The same programs with a peer killed (or stopped) at a given step: every survivor's program
// ends at an error, each within the timeout (plus the stall records' share for a stop), and
// nothing that returned success holds a wrong element.
TEST_CASE("a peer that dies or stops inside a random program fails every survivor, with no wrong result",
          "[multiproc]") {
  struct FaultRun {
    const char* env;
    int np;
    int seed;
    const char* kill;  // STEP:RANK
  };
  const FaultRun runs[] = {
      {"", 4, 21, "40:1"},
      {"MP_RANDOM_THREADS=1 MP_RANDOM_NONBLOCKING=1", 5, 22, "25:0"},
      {"BRAID_TRANSPORT=tcp MP_RANDOM_THREADS=1", 3, 23, "60:2"},
      {"MP_RANDOM_FAULT=stop MP_RANDOM_THREADS=1 MP_RANDOM_NONBLOCKING=1", 4, 24, "30:3"},
  };
  for (const FaultRun& fr : runs) {
    INFO("np " << fr.np << " seed " << fr.seed << " fault " << fr.kill << " " << fr.env);
    const int timeout = 3;
    Run r = run(braidrun(fr.np, std::string(fr.env) + " BRAIDRUN_GRACE_SEC=5 BRAID_TIMEOUT=" + std::to_string(timeout) +
                                    " MP_RANDOM_KILL=" + fr.kill) +
                MP_DIR "/mp_random " + std::to_string(fr.seed) + " 200");
    INFO(r.out);
    CHECK(r.status != 0);
    auto monoOf = [&](const std::string& line) {
      size_t at = line.find("mono_ms=");
      return at == std::string::npos ? -1L : std::stol(line.substr(at + 8));
    };
    long faultMs = -1;
    int survivors = 0;
    std::istringstream lines(r.out);
    std::vector<long> stops;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("FAULT ", 0) == 0) faultMs = monoOf(line);
      if (line.rfind("STOPPED ", 0) == 0) {
        ++survivors;
        CHECK(line.find("wrong=0 ") != std::string::npos);
        stops.push_back(monoOf(line));
      }
    }
    REQUIRE(faultMs > 0);
    CHECK(survivors == fr.np - 1);
    // A death is seen at once; a stop at the timeout plus up to half of it (docs/reliability.md).
    for (long at : stops) CHECK(at - faultMs < (timeout * 1500 + 1000));
  }
}

// Each new perf tool, with its own element check (-c 1): zero wrong elements, in and out of
// place, over a few sizes (and every type and op where that stays quick).
TEST_CASE("every perf tool checks its results with zero wrong", "[multiproc]") {
  struct ToolRun {
    const char* env;
    int np;
    const char* cmd;
  };
  const ToolRun runs[] = {
      {"", 3, "reduce_perf -b 8 -e 1M -f 32 -r 1"},
      {"", 4, "reduce_perf -b 8 -e 16K -f 64 -d all -o all -r all"},
      {"", 3, "allgather_perf -b 8 -e 1M -f 32"},
      {"", 3, "reduce_scatter_perf -b 8 -e 1M -f 32 -o max"},
      {"", 4, "reduce_scatter_perf -b 8 -e 16K -f 64 -d all -o all"},
      {"", 3, "alltoall_perf -b 8 -e 1M -f 32"},
      {"", 3, "gather_perf -b 8 -e 1M -f 32 -r all"},
      {"", 3, "scatter_perf -b 8 -e 1M -f 32 -r all"},
      {"", 3, "sendrecv_perf -b 8 -e 4M -f 16 -d all"},
      {"", 4, "sendrecv_perf -b 8 -e 4M -f 16 --one-way"},
      {"BRAID_TRANSPORT=tcp", 4, "sendrecv_perf -b 8 -e 4M -f 64"},
      {"BRAID_TRANSPORT=tcp", 4, "alltoall_perf -b 8 -e 1M -f 64"},
      // The mesh over tcp inside one host: 64 KiB slices up to 512 KiB a call, its 128 KiB
      // slots above (plan::kLocalTcpSmallMeshCallBytes), two slices to a round either way.
      {"BRAID_TRANSPORT=tcp", 3, "alltoall_perf -b 256K -e 4M -f 4"},
      {"BRAID_TRANSPORT=tcp", 3, "scatter_perf -b 256K -e 4M -f 4 -r all"},
      {"BRAID_TRANSPORT=tcp", 3, "gather_perf -b 256K -e 4M -f 4 -r all"},
      // Buffers off a page boundary, as malloc's are: copies into and out of page-aligned
      // slots at short distances modulo 4 KiB (copyBytes' vector loop), and back.
      {"", 2, "sendrecv_perf -b 8 -e 4M -f 16 --misalign 16"},
      {"BRAID_SHM_CMA=0", 3, "allreduce_perf -b 8 -e 1M -f 32 --misalign 16"},
      {"BRAID_SHM_CMA=0", 3, "allgather_perf -b 8 -e 1M -f 32 --misalign 4000"},
  };
  for (const ToolRun& t : runs) {
    INFO("np " << t.np << " " << t.env << " " << t.cmd);
    Run r = run(braidrun(t.np, t.env) + PERF_DIR "/" + t.cmd + " -n 2 -w 1 -c 1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("Avg bus bandwidth") != std::string::npos);
    CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  }
}

TEST_CASE("bad input is rejected with a message naming the argument", "[multiproc]") {
  Run r = run(braidrun(2) + MP_DIR "/mp_bad_input");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("bad input ok rank 1") != std::string::npos);
}

TEST_CASE("braidGetUniqueId and braidCommInitRank without a launcher", "[multiproc]") {
  Run r = run(MP_DIR "/mp_unique_id 3");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("unique id ok") != std::string::npos);
}

// The process that made the id serves its store; when its own init fails and it exits at
// once, the other ranks still read why (the store stays up until they hang up).
TEST_CASE("a unique id's store outlives its maker's failed init until the other ranks read why", "[multiproc][plugin]") {
  Run r = run("BRAID_TIMEOUT=30 BRAID_TRANSPORT_PLUGIN=" FAILING_PLUGIN " BRAID_TRANSPORT=failing BRAID_TEST_FAIL_RANK=0 "
              "BRAID_TEST_FAIL_MODE=init " MP_DIR "/mp_unique_id 3 rank0-joins");
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("rank 0 init: braidCommInitRank: rank 0 could not join the communicator: BRAID_TRANSPORT=failing: "
                   "failing: init refused") != std::string::npos);
  for (int i = 1; i < 3; ++i)
    CHECK(r.out.find("rank " + std::to_string(i) + " init: braidCommInitRank: rank " + std::to_string(i) +
                     " could not join the communicator: rank 0 reported: BRAID_TRANSPORT=failing: failing: init "
                     "refused") != std::string::npos);
  CHECK(r.out.find("is unreachable") == std::string::npos);
}

// A rank that dies mid-collective: every survivor's call fails with braidRemoteError naming
// it, within a few seconds, over shm and over tcp.
TEST_CASE("a killed rank is reported by every survivor", "[multiproc][chaos]") {
  struct Scenario {
    const char* env;
    const char* mode;
    int np, victim;
  };
  for (Scenario sc : {Scenario{"", "kill", 4, 2}, Scenario{"", "kill", 3, 0}, Scenario{"", "exit", 3, 1},
                      Scenario{"BRAID_TRANSPORT=tcp", "kill", 4, 1}, Scenario{"BRAID_TRANSPORT=tcp", "exit", 2, 0}}) {
    INFO(sc.env << " " << sc.mode << " np " << sc.np << " victim " << sc.victim);
    Run r = run(braidrun(sc.np, std::string("BRAIDRUN_GRACE_SEC=20 ") + sc.env) + MP_DIR "/mp_fault " + sc.mode + " " +
                std::to_string(sc.victim) + " 5");
    INFO(r.out);
    CHECK(r.status != 0);  // braidrun propagates the victim's failure
    auto res = results(r.out);
    CHECK(res.size() == static_cast<size_t>(sc.np - 1));
    for (const auto& [rank, x] : res) {
      INFO("survivor " << rank);
      CHECK(rank != sc.victim);
      CHECK(x.code == kRemoteError);
      CHECK(x.failedRank == sc.victim);
      CHECK(x.elapsedMs < 5000);
    }
  }
}

// A rank that dies before a split: every survivor's braidCommSplit fails with
// braidRemoteError naming it, at once, on one host (its pid) and with a host per rank (the
// store's mark of its closed connection), not at BRAID_TIMEOUT (20 s here) as before the
// split watched its members.
TEST_CASE("a rank killed before a split fails every survivor's split at once", "[multiproc][chaos]") {
  for (bool hosts : {false, true}) {
    INFO((hosts ? "a host per rank" : "one host"));
    const std::string prog = hosts ? "sh -c 'BRAID_HOST_ID=fakehost$BRAID_RANK exec " MP_DIR "/mp_fault kill 2 5'"
                                   : MP_DIR "/mp_fault kill 2 5";
    Run r = run(braidrun(4, "BRAIDRUN_GRACE_SEC=20 BRAID_TIMEOUT=20 MP_COLL=split") + prog);
    INFO(r.out);
    CHECK(r.status != 0);
    checkSurvivors(r.out, 3, kRemoteError, 2, 0, 5000);
    CHECK(r.out.find(hosts ? "rank 2 (host fakehost2) left the job's store before it joined the split"
                           : "exited before it joined the split") != std::string::npos);
  }
}

// A rank killed during init may leave shared-memory segments that no peer mapped yet; their
// names carry the creator's pid and pid namespace, and braidrun removes them when the rank
// exits abnormally. A segment with the same pid from another pid namespace (a process in a
// container sharing /dev/shm) stays.
TEST_CASE("braidrun removes the shared-memory segments a killed rank left", "[multiproc][chaos]") {
  const std::string dir = "/dev/shm";
  Run r = run(braidrun(2, "BRAIDRUN_GRACE_SEC=1") +
              "sh -c 'if [ $BRAID_RANK = 1 ]; then i=$(stat -L -c %i /proc/$$/ns/pid); "
              "f=" + dir + "/braid-$$-$(printf %08x $((i & 0xffffffff)))-00000000feedf00d; "
              "g=" + dir + "/braid-$$-$(printf %08x $(((i ^ 1) & 0xffffffff)))-00000000feedf00d; "
              ": > $f; : > $g; echo LEFT $f; echo OTHER $g; kill -9 $$; fi; sleep 30'");
  INFO(r.out);
  CHECK(r.status != 0);
  std::smatch m, o;
  REQUIRE(std::regex_search(r.out, m, std::regex(R"(LEFT (\S+))")));
  REQUIRE(std::regex_search(r.out, o, std::regex(R"(OTHER (\S+))")));
  CHECK(access(m[1].str().c_str(), F_OK) != 0);
  CHECK(access(o[1].str().c_str(), F_OK) == 0);
  unlink(o[1].str().c_str());
  CHECK(r.out.find("removed 1 shared-memory segment(s) rank 1 left") != std::string::npos);
}

// The shared-memory FIFOs are allocated when a connection is made, so a /dev/shm too small
// for them (docker's 64 MiB default with many ranks) fails the communicator's init on every
// rank, naming /dev/shm and the knobs, instead of a SIGBUS in the first call that reaches
// an unallocated page. Run in a mount namespace of its own with a 2 MiB /dev/shm; the same
// job fits with smaller FIFOs.
TEST_CASE("a /dev/shm too small for the FIFOs fails init on every rank and says so", "[multiproc][chaos]") {
  if (run("unshare -m true").status != 0) {
    WARN("skipped: unshare -m (a mount namespace of its own) is not allowed here");
    return;
  }
  const std::string inSmallShm = "unshare -m sh -c 'mount -t tmpfs -o size=2M tmpfs /dev/shm && ";
  const std::string job = " " PERF_DIR "/allreduce_perf -b 8 -e 1M -f 4 -n 2 -w 1 -c 1'";
  Run r = run(inSmallShm + braidrun(2, "BRAID_TRANSPORT=shm") + job);
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("SIGBUS") == std::string::npos);
  for (int rank : {0, 1})
    CHECK(r.out.find("rank " + std::to_string(rank) + " could not join the communicator: receiving from rank " +
                     std::to_string(1 - rank) + " over shm: /dev/shm has no room for the") != std::string::npos);
  CHECK(r.out.find("BRAID_NSLOTS x BRAID_SLOT_BYTES") != std::string::npos);
  Run small = run(inSmallShm + braidrun(2, "BRAID_TRANSPORT=shm BRAID_NSLOTS=2 BRAID_SLOT_BYTES=64K") + job);
  INFO(small.out);
  CHECK(small.status == 0);
  CHECK(small.out.find("Out of bounds values : 0 OK") != std::string::npos);
}

// A command prefix that runs a rank in a pid namespace of its own (as pid 2), as containers
// that share the host's name and IPC run; "" with a warning where that is not allowed.
std::string ownPidNamespace() {
  if (run("unshare --pid --fork --mount-proc true").status != 0) {
    WARN("skipped: unshare --pid --fork --mount-proc (a pid namespace of its own) is not allowed here");
    return "";
  }
  return " unshare --pid --fork --mount-proc sh -c '\"$0\" \"$@\"; exit $?' ";
}

// Containers that share a host's name and /dev/shm but not its pids (docker's --network=host
// --ipc=host without --pid=host) number their processes apart, every rank often with the same
// pid. Here each rank runs in a pid namespace of its own, as pid 2 under a shell as pid 1
// (the first process of a namespace ignores a SIGKILL sent from inside it). Before, the equal
// pids made the ranks take each other for threads of one process: they chose the loopback
// transport, and every result was wrong, silently; a rank's pid was watched as if it meant
// the same process here.
TEST_CASE("ranks in pid namespaces of their own on one host: right results, a killed rank reported", "[multiproc][chaos]") {
  const std::string ns = ownPidNamespace();
  if (ns.empty()) return;
  Run r = run(braidrun(3, "BRAID_DEBUG=INFO") + ns + PERF_DIR "/allreduce_perf -b 8 -e 1M -f 32 -n 3 -w 1 -c 1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  CHECK(r.out.find("transports [self,shm,shm]") != std::string::npos);
  CHECK(r.out.find("loopback") == std::string::npos);
  Run c = run(braidrun(3) + ns + MP_DIR "/mp_collectives");
  INFO(c.out);
  CHECK(c.status == 0);
  CHECK(countMatches(c.out, "collectives ok rank") == 3);
  // No pidfd can watch a peer of another pid namespace: the store says its process ended.
  Run k = run(braidrun(3, "BRAIDRUN_GRACE_SEC=20") + ns + MP_DIR "/mp_fault kill 1 5");
  INFO(k.out);
  checkSurvivors(k.out, 2, kRemoteError, 1, 0, 5000);
  CHECK(countMatches(k.out, "rank 1 \\(host [^,]+, another pid namespace\\) left the job's store: its process ended") >= 2);
}

// A container started with the host's network but not its IPC (docker's default) has a
// /dev/shm of its own under the host's name. Here each rank mounts one of its own. Before,
// braid chose shared memory between them and every rank's init failed on shm_open; now they
// meet over tcp, and BRAID_TRANSPORT=shm says why it cannot.
TEST_CASE("ranks on one host with a /dev/shm each meet over tcp", "[multiproc][chaos]") {
  if (run("unshare --ipc --mount true").status != 0) {
    WARN("skipped: unshare --ipc --mount (IPC and mounts of its own) is not allowed here");
    return;
  }
  const std::string own = " unshare --ipc --mount sh -c 'mount -t tmpfs -o size=64M tmpfs /dev/shm && exec \"$0\" \"$@\"' ";
  const std::string job = PERF_DIR "/allreduce_perf -b 8 -e 1M -f 32 -n 3 -w 1 -c 1";
  Run r = run(braidrun(2, "BRAID_DEBUG=INFO") + own + job);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  CHECK(r.out.find("transports [self,tcp]") != std::string::npos);
  Run forced = run(braidrun(2, "BRAID_TRANSPORT=shm") + own + job);
  INFO(forced.out);
  CHECK(forced.status != 0);
  CHECK(countMatches(forced.out, "no transport can reach rank [01] with BRAID_TRANSPORT=shm \\(it runs on this host but "
                                 "sees another /dev/shm") == 2);
}

// What a rank starts and leaves running (a wrapper's child, a background helper) does not
// outlive braidrun, whether the rank exits cleanly or is killed: braidrun is its subreaper,
// kills it as the job ends and says so. Before, the leftover kept running (and held the job's
// output open until it ended).
TEST_CASE("processes the ranks started and left running do not outlive braidrun", "[multiproc][chaos]") {
  for (const char* how : {"exit 0", "kill -9 $$"}) {
    INFO(how);
    const auto t0 = std::chrono::steady_clock::now();
    Run r = run(braidrun(2, "BRAIDRUN_GRACE_SEC=1") + "sh -c 'sleep 300 & echo CHILD $!; sleep 0.2; " + how + "'");
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.out);
    CHECK(sec < 20);
    CHECK(r.out.find("braidrun: killed 2 process(es) the ranks had started and left running") != std::string::npos);
    std::smatch m;
    std::string rest = r.out;
    int children = 0;
    while (std::regex_search(rest, m, std::regex(R"(CHILD (\d+))"))) {
      ++children;
      const pid_t pid = static_cast<pid_t>(std::stol(m[1].str()));
      CHECK(kill(pid, 0) != 0);
      rest = m.suffix();
    }
    CHECK(children == 2);
  }
}

// A stalled rank (SIGSTOP): survivors fail with braidTimeout naming it after BRAID_TIMEOUT.
TEST_CASE("a stopped rank makes survivors time out", "[multiproc][chaos]") {
  for (const char* transport : {"", "BRAID_TRANSPORT=tcp"}) {
    INFO(transport);
    Run r = run(braidrun(3, std::string("BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3 ") + transport) + MP_DIR "/mp_fault stop 1 5");
    INFO(r.out);
    auto res = results(r.out);
    CHECK(res.size() == 2u);
    for (const auto& [rank, x] : res) {
      INFO("survivor " << rank);
      CHECK(x.code == kTimeout);
      CHECK(x.failedRank == 1);
      CHECK(x.elapsedMs >= 2900);
      CHECK(x.elapsedMs < 9000);
    }
  }
}

// A survivor that times out on a live rank held in another communicator (waiting there for
// the stopped rank, or failed there on it) names the stopped rank and the trail, not the
// live one; and the held rank names the stopped one in its own communicator. Over shared
// memory and tcp, with the held rank still waiting, failing at the same time, and failed
// already; and with each rank on a host of its own, where the stopped one is known only by
// not answering.
TEST_CASE("a rank held in another communicator by a stopped one: the survivor names the stopped one",
          "[multiproc][chaos]") {
  for (const char* env : {"", "BRAID_TRANSPORT=tcp", "hosts"}) {
    const bool hosts = std::string(env) == "hosts";
    for (const char* late : {"1", "0", "2"}) {
      INFO(env << " late " << late);
      const std::string prog = hosts ? std::string("sh -c 'BRAID_HOST_ID=fakehost$BRAID_RANK exec " MP_DIR
                                                   "/mp_held ") + late + "'"
                                     : std::string(MP_DIR "/mp_held ") + late;
      Run r = run(braidrun(3, std::string("BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3 ") + (hosts ? "" : env)) + prog);
      INFO(r.out);
      CHECK(r.out.find(hosts ? "rank 0 made no progress for 3 s (BRAID_TIMEOUT): it does not answer"
                             : "rank 0 made no progress for 3 s (BRAID_TIMEOUT): it is stopped") != std::string::npos);
      CHECK(r.out.find("RESULT rank=1 comm=split code=" + std::to_string(kTimeout) + " failed_rank=0") !=
            std::string::npos);
      CHECK(r.out.find("RESULT rank=2 comm=world code=" + std::to_string(kTimeout) + " failed_rank=0") !=
            std::string::npos);
      CHECK(r.out.find("rank 0 made no progress") != std::string::npos);
      CHECK(r.out.find(std::string(late) == "1" ? "rank 1 waits for rank 0 in communicator 'braid/split0/c0'"
                                                : "rank 1 gave up waiting for rank 0 in communicator 'braid/split0/c0'") !=
            std::string::npos);
    }
  }
}

// Rank 0 calls the world's collective where the others expect the split communicator's
// first: each rank's timeout follows the holds round the cycle and says so.
TEST_CASE("a deadlock across communicators is reported as such", "[multiproc][chaos]") {
  Run r = run(braidrun(3, "BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3") + MP_DIR "/mp_held swap");
  INFO(r.out);
  const std::string order = "must call them in the same order";
  for (const char* who : {"rank 0 (world): ", "rank 1 (split): ", "rank 2 (world): "}) {
    INFO(who);
    const size_t at = r.out.find(who);
    REQUIRE(at != std::string::npos);
    CHECK(r.out.substr(at, r.out.find('\n', at) - at).find(order) != std::string::npos);
  }
  CHECK(r.out.find("rank 1 (split): allreduce: rank 0 made no progress") != std::string::npos);
}

// Ranks 1 and 2 deadlock each other across two communicators of their own while rank 0 waits
// for them on the world: rank 0, which times out first, follows the holds round their cycle
// and calls it a deadlock among other ranks, naming both waits; ranks 1 and 2 report the
// deadlock they are in.
TEST_CASE("a deadlock among other ranks is reported as such by a rank that waits for them", "[multiproc][chaos]") {
  Run r = run(braidrun(3, "BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3") + MP_DIR "/mp_held cycle");
  INFO(r.out);
  const size_t at = r.out.find("rank 0 (world): ");
  REQUIRE(at != std::string::npos);
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  CHECK(line.find("a deadlock across communicators among other ranks") != std::string::npos);
  CHECK(std::regex_search(line, std::regex(R"(rank (1|2) waits for rank (1|2) in communicator '[^']+', rank (1|2) waits for rank (1|2) in communicator)")));
  for (const char* who : {"rank 1 (A): ", "rank 2 (B): "}) {
    INFO(who);
    const size_t w = r.out.find(who);
    REQUIRE(w != std::string::npos);
    CHECK(r.out.substr(w, r.out.find('\n', w) - w).find("must call them in the same order") != std::string::npos);
  }
}

// The same two diagnoses with each rank in a pid namespace of its own on one host, as
// containers that share the host's name and IPC run: every rank is pid 2 there, and the
// holds are followed by the processes' tokens. The stopped rank's state cannot be read
// through /proc across namespaces, so it is named as one that does not answer. Before, the
// survivor named the live rank held by it, and no deadlock was seen.
TEST_CASE("ranks in pid namespaces of their own: holds across communicators followed", "[multiproc][chaos]") {
  const std::string ns = ownPidNamespace();
  if (ns.empty()) return;
  Run h = run(braidrun(3, "BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3") + ns + MP_DIR "/mp_held 1");
  INFO(h.out);
  CHECK(h.out.find("RESULT rank=2 comm=world code=" + std::to_string(kTimeout) + " failed_rank=0") != std::string::npos);
  CHECK(h.out.find("rank 0 made no progress for 3 s (BRAID_TIMEOUT): it does not answer (stopped, hung, or cut off "
                   "from the store); rank 1 waits for rank 0 in communicator 'braid/split0/c0'") != std::string::npos);
  Run c = run(braidrun(3, "BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3") + ns + MP_DIR "/mp_held cycle");
  INFO(c.out);
  const size_t at = c.out.find("rank 0 (world): ");
  REQUIRE(at != std::string::npos);
  CHECK(c.out.substr(at, c.out.find('\n', at) - at).find("a deadlock across communicators among other ranks") !=
        std::string::npos);
  for (const char* who : {"rank 1 (A): ", "rank 2 (B): "}) {
    INFO(who);
    const size_t w = c.out.find(who);
    REQUIRE(w != std::string::npos);
    CHECK(c.out.substr(w, c.out.find('\n', w) - w).find("must call them in the same order") != std::string::npos);
  }
}

TEST_CASE("braid-info --status shows where every rank is and which rank holds the others up", "[multiproc][status]") {
  const std::string script = "bash " STATUS_JOB " " BRAIDRUN " " BRAID_INFO " " MP_DIR "/mp_fault ";
  SECTION("a rank whose own thread is away: not in a collective, the others waiting on it") {
    Run r = run(script + "compute 2 3");
    INFO(r.out);
    CHECK(r.out.find("communicator 'braid' (3 ranks, epoch 0): 3 of 3 answered") != std::string::npos);
    CHECK(std::regex_search(r.out, std::regex(R"(rank 2  pid \d+ on \S+ +not in a collective; last completed #4 allreduce)")));
    CHECK(std::regex_search(r.out, std::regex(R"(rank 0  pid \d+ on \S+ +in #5 allreduce count=\d+ float sum for [\d.]+ s; waiting [\d.]+ s to \w+)")));
    CHECK(r.out.find("=> rank 2 holds up ranks 0, 1: it is not in a collective") != std::string::npos);
    // Found by braidrun's pid and by the store's address with the job's key alike; refused without it.
    CHECK(r.out.find("STATUS by pid\n  => rank 2 holds up ranks 0, 1") != std::string::npos);
    CHECK(r.out.find("STATUS by address\n  => rank 2 holds up ranks 0, 1") != std::string::npos);
    CHECK(r.out.find("authentication failed") != std::string::npos);
    CHECK(r.out.find("JOB rc=0") != std::string::npos);  // the job goes on and ends well
    CHECK(r.out.find("JOB FILE LEFT") == std::string::npos);
  }
  SECTION("a stopped rank: no answer, and the chain of waits ends at it") {
    Run r = run("BRAID_TIMEOUT=6 " + script + "stop 1 4");
    INFO(r.out);
    CHECK(r.out.find("3 of 4 answered") != std::string::npos);
    CHECK(r.out.find("  rank 1  no answer") != std::string::npos);
    CHECK(r.out.find("=> rank 1 holds up ranks 0, 2, 3: it does not answer") != std::string::npos);
    CHECK(r.out.find("JOB FILE LEFT") == std::string::npos);
  }
  SECTION("braidrun --timeout prints the view before it stops a job that hangs") {
    // Rank 1 stops at step 3; the others wait for it well past braidrun's timeout.
    Run r = run("BRAID_TIMEOUT=60 MP_VICTIMS=1:3:stop " BRAIDRUN " -np 3 --timeout 4 " MP_DIR "/mp_recover 20 2>&1");
    INFO(r.out);
    CHECK(r.status == 124);
    CHECK(r.out.find("braidrun: where the ranks are") != std::string::npos);
    CHECK(r.out.find("2 of 3 answered") != std::string::npos);
    CHECK(std::regex_search(r.out, std::regex(R"(rank 0  pid \d+ on \S+ +in #3 allreduce count=\d+ float avg)")));
    CHECK(r.out.find("=> rank 1 holds up ranks 0, 2: it does not answer") != std::string::npos);
  }
  SECTION("ranks in an agreement: the call, and the rank whose vote they wait for") {
    // Rank 1 stops after step 3's allreduce, before it votes; the others wait in braidCommAgree.
    Run r = run("BRAID_TIMEOUT=60 MP_VICTIMS=1:3:stopvote " BRAIDRUN " -np 3 --timeout 4 " MP_DIR
                "/mp_recover 20 2>&1");
    INFO(r.out);
    CHECK(r.status == 124);
    CHECK(std::regex_search(
        r.out, std::regex(R"(rank 0  pid \d+ on \S+ +in braidCommAgree \(agreement 3\) for [\d.]+ s; waiting [\d.]+ s to receive the vote of rank 1\n)")));
    CHECK(r.out.find("=> rank 1 holds up ranks 0, 2: it does not answer") != std::string::npos);
  }
}

// An etcd server of its own for a test, on free loopback ports; null, said as a warning,
// where etcd is not installed (the test is then skipped).
std::unique_ptr<braid::testing::EtcdServer> startEtcd() {
  if (braid::testing::EtcdServer::binary().empty()) {
    WARN("skipped: " << braid::testing::EtcdServer::missing());
    return nullptr;
  }
  auto etcd = std::make_unique<braid::testing::EtcdServer>();
  REQUIRE(etcd->ok());
  return etcd;
}

// With the store in etcd the processes answer the live view as they do through braid's own
// store, watching for requests on connections of their own: braid-info --status asks at the
// job's etcd prefix, and a timeout follows a held rank to the stopped one.
TEST_CASE("with an etcd store, braid-info --status answers and a timeout follows a held rank",
          "[multiproc][status][etcd]") {
  auto etcd = startEtcd();
  if (!etcd) return;
  const std::string store = "BRAID_STORE=" + etcd->endpoint() + "/jobs";
  SECTION("braid-info --status etcd://HOST:PORT/PREFIX") {
    // Ranks started by hand, as torchrun would: their keys are under /jobs/<run id>. The
    // question comes well past the responders' first second (they watch by then).
    Run r = run("for r in 0 1 2; do " + store +
                " RANK=$r WORLD_SIZE=3 TORCHELASTIC_RUN_ID=live BRAID_TIMEOUT=60 MP_COMPUTE_MS=6000 timeout 60 " MP_DIR
                "/mp_fault compute 2 5 > /tmp/braid-etcd-status-$$-$r.out 2>&1 & done; "
                "for i in $(seq 300); do grep -q FAULT /tmp/braid-etcd-status-$$-*.out && break; sleep 0.1; done; "
                "sleep 2.5; " BRAID_INFO " --status " + etcd->endpoint() + "/jobs/live --wait 0.5; echo STATUS rc=$?; "
                "wait; cat /tmp/braid-etcd-status-$$-*.out; rm -f /tmp/braid-etcd-status-$$-*.out");
    INFO(r.out);
    CHECK(r.out.find("job at etcd://127.0.0.1:") != std::string::npos);
    CHECK(r.out.find("communicator 'braid' (3 ranks, epoch 0): 3 of 3 answered") != std::string::npos);
    CHECK(std::regex_search(r.out, std::regex(R"(rank 2  pid \d+ on \S+ +not in a collective; last completed #4 allreduce)")));
    CHECK(r.out.find("=> rank 2 holds up ranks 0, 1: it is not in a collective") != std::string::npos);
    CHECK(r.out.find("STATUS rc=0") != std::string::npos);
    CHECK(countMatches(r.out, "DONE rank=\\d") == 3);  // and the job goes on and ends well
  }
  SECTION("a braidrun job, found by braidrun's pid") {
    Run r = run(store + " bash " STATUS_JOB " " BRAIDRUN " " BRAID_INFO " " MP_DIR "/mp_fault compute 2 3");
    INFO(r.out);
    CHECK(r.out.find("communicator 'braid' (3 ranks, epoch 0): 3 of 3 answered") != std::string::npos);
    CHECK(r.out.find("STATUS by pid\n  => rank 2 holds up ranks 0, 1: it is not in a collective") != std::string::npos);
    CHECK(r.out.find("JOB rc=0") != std::string::npos);
  }
  SECTION("braidrun --timeout asks the ranks at their etcd prefix") {
    Run r = run(store + " BRAID_TIMEOUT=60 MP_VICTIMS=1:3:stop " BRAIDRUN " -x BRAID_STORE -np 3 --timeout 4 " MP_DIR
                "/mp_recover 20 2>&1");
    INFO(r.out);
    CHECK(r.status == 124);
    CHECK(r.out.find("2 of 3 answered") != std::string::npos);
    CHECK(r.out.find("=> rank 1 holds up ranks 0, 2: it does not answer") != std::string::npos);
  }
  SECTION("a rank held in another communicator by a stopped one") {
    for (const bool hosts : {false, true}) {
      INFO("hosts " << hosts);
      const std::string prog = hosts ? "sh -c 'BRAID_HOST_ID=fakehost$BRAID_RANK exec " MP_DIR "/mp_held 1'"
                                     : MP_DIR "/mp_held 1";
      Run r = run(braidrun(3, store + " BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3") + prog);
      INFO(r.out);
      CHECK(r.out.find(hosts ? "rank 0 made no progress for 3 s (BRAID_TIMEOUT): it does not answer"
                             : "rank 0 made no progress for 3 s (BRAID_TIMEOUT): it is stopped") != std::string::npos);
      CHECK(r.out.find("rank 1 waits for rank 0 in communicator 'braid/split0/c0'") != std::string::npos);
      CHECK(r.out.find("RESULT rank=2 comm=world code=" + std::to_string(kTimeout) + " failed_rank=0") !=
            std::string::npos);
    }
  }
}

// How long each survivor's braidCommDestroy took ("DESTROYED rank=R ms=T" from mp_fault).
std::map<int, double> destroyTimes(const std::string& out) {
  std::map<int, double> m;
  std::regex re(R"(DESTROYED rank=(\d+) ms=(\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    m[std::stoi((*it)[1])] = std::stod((*it)[2]);
  return m;
}

// Rank 0 serves the store (torchrun's layout) and a stopped rank keeps its connections, so
// its count of sessions: rank 0 waits for it at the end only while its communicators could
// still be in use. Here the failure breaks a communicator derived from the world (seed 3404
// on 3 ranks stops rank 2 in a group of sends and receives on the reversed communicator);
// the world, last to go, ran nothing since, and rank 0 leaves within the 2 s a broken
// communicator waits, not the 30 s of a job that finished (the stopped rank is killed at
// 10 s, which ended the wait at about 5.5 s before).
TEST_CASE("rank 0 serving the store leaves soon after a split child fails on a stopped rank",
          "[multiproc][chaos]") {
  Run r = torchrunJob(3, "BRAID_TIMEOUT=3 MP_RANDOM_KILL=59:2 MP_RANDOM_FAULT=stop",
                      "timeout -s KILL 10 " MP_DIR "/mp_random 3404 200");
  INFO(r.out);
  REQUIRE(r.out.find("[2] FAULT rank=2 step=59") != std::string::npos);
  CHECK(r.out.find("rank 0 made no progress for 3 s") != std::string::npos);  // rank 2 there
  std::smatch m;
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    const std::regex re("\\[" + std::to_string(rank) + "\\] STOPPED rank=" + std::to_string(rank) +
                        " wrong=0 mono_ms=\\d+ destroy_ms=(\\d+)");
    REQUIRE(std::regex_search(r.out, m, re));
    CHECK(std::stol(m[1]) < 4000);
  }
}

// Rank 0 serves the store (torchrun's layout) and stalls: every wait on the store is bounded
// by the operation's deadline, the stopped rank is named, and destroy does not wait on the
// stalled store again. Rank 1's standby takes over once rank 0 has sent it nothing for half
// the timeout, before the survivors' operations fail: they find the stopped rank through the
// store as they find any other. Without a standby the error names rank 0 as the store's host.
TEST_CASE("a stopped rank 0 that serves the store: survivors fail within the timeout, naming it", "[multiproc][chaos]") {
  struct Case {
    const char* env;
    const char* says;
  };
  for (const Case& c : {Case{"", "rank 0 made no progress for 3 s"},
                        Case{"BRAID_STORE_STANDBY=0 ", "rank 0, which serves the job's store, does not answer"},
                        Case{"BRAID_STORE_STANDBY=0 BRAID_TRANSPORT=tcp ",
                             "rank 0, which serves the job's store, does not answer"}}) {
    INFO(c.env);
    // The stopped rank is killed by `timeout` once the survivors are long done.
    Run r = torchrunJob(3, std::string("BRAID_TIMEOUT=3 ") + c.env, "timeout -s KILL 6 " MP_DIR "/mp_fault stop 0 5");
    INFO(r.out);
    auto res = results(r.out);
    auto destroyed = destroyTimes(r.out);
    CHECK(res.size() == 2u);
    for (const auto& [rank, x] : res) {
      INFO("survivor " << rank);
      CHECK(x.code == kTimeout);
      CHECK(x.failedRank == 0);
      CHECK(x.elapsedMs >= 2900);
      CHECK(x.elapsedMs < 9000);
      REQUIRE(destroyed.count(rank));
      CHECK(destroyed[rank] < 3000);
    }
    CHECK(std::regex_search(r.out, std::regex(std::string("(") + c.says + ")")));
  }
}

// Rank 1 keeps the standby of rank 0's store. Stopped, it must not stop the store: rank 0's
// store does not wait for its heartbeats' answers, and drops it at its first write that it
// does not take in time, so the survivors find the stopped rank as they find any other, as
// soon: the timeout and half of it to follow the records (4.5 s; 5.5 s while the client's
// questions to the stopped standby held the store's answers).
TEST_CASE("a stopped rank 1 that keeps the store's standby is named, and the store serves on", "[multiproc][chaos]") {
  Run r = torchrunJob(3, "BRAID_TIMEOUT=3", "timeout -s KILL 8 " MP_DIR "/mp_fault stop 1 5");
  INFO(r.out);
  checkSurvivors(r.out, 2, kTimeout, 1, 2900, 5300);
  CHECK(r.out.find("which serves the job's store") == std::string::npos);
}

TEST_CASE("a killed rank 0 that serves the store is named as the store's host", "[multiproc][chaos]") {
  for (const char* transport : {"", "BRAID_TRANSPORT=tcp"}) {
    INFO(transport);
    Run r = torchrunJob(3, std::string("BRAID_TIMEOUT=10 ") + transport, MP_DIR "/mp_fault kill 0 5");
    INFO(r.out);
    auto res = results(r.out);
    CHECK(res.size() == 2u);
    for (const auto& [rank, x] : res) {
      INFO("survivor " << rank);
      CHECK(x.failedRank == 0);
      CHECK(x.elapsedMs < 5000);
    }
  }
}

// A rank that dies while the others wait inside the join (rank 2 starts late, rank 1 dies
// 400 ms in): its neighbours on the host notice its pid is gone and fail at once, and the
// record they leave fails the late rank too, long before BRAID_TIMEOUT. On a host of its own,
// where no pid can be watched, the store saw its connection end.
TEST_CASE("a rank that dies while joining fails the others' join, naming it", "[multiproc][chaos]") {
  struct Case {
    const char* transport;
    const char* prog;
    const char* says;
  };
  // On one host the store may see the connection end before a poll sees the pid gone, and
  // braidrun's mark of its end may come first where its record was not yet out.
  const char* local = "rank 1 \\(pid |rank 1 exited during init: its connection to the job's store ended|"
                      "rank 1 was killed by signal SIGKILL before it joined";
  for (const Case& c : {Case{"", MP_DIR "/mp_fault initkill 1 400", local},
                        Case{"BRAID_TRANSPORT=tcp", MP_DIR "/mp_fault initkill 1 400", local},
                        Case{"", "sh -c 'BRAID_HOST_ID=mp-initkill-$((BRAID_RANK % 2)) exec " MP_DIR
                                 "/mp_fault initkill 1 400'",
                             "rank 1 exited during init: its connection to the job's store ended|"
                             "rank 1 was killed by signal SIGKILL before it joined"}}) {
    INFO(c.transport << " " << c.prog);
    Run r = run(braidrun(3, std::string("BRAIDRUN_GRACE_SEC=20 BRAID_TIMEOUT=30 MP_LATE_RANK=2 MP_LATE_MS=1500 ") +
                                c.transport) +
                c.prog);
    INFO(r.out);
    auto res = results(r.out);
    CHECK(res.size() == 2u);
    for (const auto& [rank, x] : res) {
      INFO("survivor " << rank);
      CHECK(x.code == kRemoteError);
      CHECK(x.failedRank == 1);
      CHECK(x.elapsedMs < 5000);
    }
    CHECK(std::regex_search(r.out, std::regex(std::string("(") + c.says + ")")));
  }
  // Rank 0 serving the store notices the same; the late rank, which finds no store at all
  // (it left with rank 0), can only wait for its timeout: not checked here.
  Run r = torchrunJob(3, "BRAID_TIMEOUT=4 MP_LATE_RANK=2 MP_LATE_MS=1500", MP_DIR "/mp_fault initkill 1 400");
  INFO(r.out);
  auto res = results(r.out);
  REQUIRE(res.count(0));
  CHECK(res[0].code == kRemoteError);
  CHECK(res[0].failedRank == 1);
  CHECK(res[0].elapsedMs < 5000);
}

// A rank whose process ends before it reaches the store (its own BRAID_RANK malformed, a
// crash before init, a script that exits early) can tell nobody; braidrun, which started it,
// marks its end in the store, and the others fail their join at once naming it, instead of
// waiting for the timeout (30 s here; braidrun's grace, 60 s, is no bound either).
TEST_CASE("under braidrun, a rank that ends before it joins fails the others' init at once, naming it",
          "[multiproc][chaos]") {
  struct Case {
    int bad;
    const char* instead;  // what rank `bad` runs instead of mp_collectives
    const char* says;
  };
  for (const Case& c : {Case{1, "env BRAID_RANK=abc " MP_DIR "/mp_collectives", "exited with status 1"},
                        Case{0, "sh -c \"kill -SEGV \\$\\$\"", "was killed by signal SIGSEGV"},
                        Case{2, "true", "exited with status 0"}}) {
    INFO("rank " << c.bad << " runs " << c.instead);
    const auto start = std::chrono::steady_clock::now();
    Run r = run(braidrun(3, "BRAIDRUN_GRACE_SEC=60 BRAID_TIMEOUT=30") + "sh -c 'if [ $BRAID_RANK = " +
                std::to_string(c.bad) + " ]; then exec " + c.instead + "; fi; exec " MP_DIR "/mp_collectives'");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(secs < 10);
    const std::string says = "rank " + std::to_string(c.bad) + " " + c.says + " before it joined";
    for (int i = 0; i < 3; ++i) {
      if (i == c.bad) continue;
      // Each read the mark itself, or a peer's report of it.
      CHECK(countMatches(r.out, "rank " + std::to_string(i) + " could not join the communicator: (rank [0-2] reported: )?" +
                                    says) == 1);
    }
  }
}

TEST_CASE("braidCommAbort on one rank fails the others", "[multiproc][chaos]") {
  Run r = run(braidrun(3, "BRAIDRUN_GRACE_SEC=20") + MP_DIR "/mp_fault abort 2 5");
  INFO(r.out);
  auto res = results(r.out);
  CHECK(res.size() == 2u);
  for (const auto& [rank, x] : res) {
    CHECK(x.code == kAborted);
    CHECK(x.failedRank == 2);
    CHECK(x.elapsedMs < 5000);
  }
}

// A training loop under braidrun --min-np that loses ranks (killed or stopped) at given
// steps: the survivors agree on who failed, shrink, redo the step and finish every step with
// the parameters of a run without failures (mp_recover checks them), and the job succeeds.
TEST_CASE("survivors agree, shrink and finish every step after ranks are killed or stopped", "[multiproc][recovery]") {
  struct Scenario {
    const char* env;
    int np, minNp;
    const char* victims;
    int survivors;
    std::vector<std::string> shrinks;  // "step from to failed"
  };
  const Scenario scenarios[] = {
      {"", 4, 2, "2:5,0:12", 2, {"5 4 3 2", "12 3 2 0"}},
      {"BRAID_TRANSPORT=tcp", 3, 2, "1:7", 2, {"7 3 2 1"}},
      {"BRAID_TIMEOUT=3", 3, 2, "2:4:stop", 2, {"4 3 2 2"}},
  };
  for (const Scenario& sc : scenarios) {
    INFO(sc.env << " np " << sc.np << " victims " << sc.victims);
    Run r = run(std::string(sc.env) + " MP_VICTIMS=" + sc.victims + " BRAIDRUN_GRACE_SEC=5 " BRAIDRUN " -np " +
                std::to_string(sc.np) + " --min-np " + std::to_string(sc.minNp) + " --timeout 120 " MP_DIR
                "/mp_recover 20 2>&1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(linesWith(r.out, "ERROR") == "");
    std::regex fin(R"(FINAL rank=(\d+) newrank=(\d+) size=(\d+) steps=(\d+) checksum=(\S+) match=1 same=1)");
    int finals = 0;
    std::string checksum;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), fin); it != std::sregex_iterator(); ++it) {
      ++finals;
      CHECK(std::stoi((*it)[3]) == sc.survivors);
      CHECK(std::stoi((*it)[4]) == 20);
      if (checksum.empty()) checksum = (*it)[5];
      CHECK((*it)[5] == checksum);
    }
    CHECK(finals == sc.survivors);
    for (const std::string& shrink : sc.shrinks) {
      std::istringstream in(shrink);
      std::string step, from, to, failed;
      in >> step >> from >> to >> failed;
      std::regex line("SHRUNK rank=\\d+ step=" + step + " from=" + from + " to=" + to + " failed=" + failed + " ms=");
      // Every rank still alive at that point prints it.
      CHECK(std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), line), std::sregex_iterator()) ==
            std::stol(to));
    }
    CHECK(r.out.find("the job finished with " + std::to_string(sc.survivors) + " rank(s), " + std::to_string(sc.np) +
                     " at its start") !=
          std::string::npos);
  }
}

// Two ranks of one host stopped at the same step: each survivor's call times out on the rank
// it waited for and names that one, so one of the two may be named by nobody. The agreement
// counts a rank of this host whose process stays stopped for BRAID_TIMEOUT while it waits
// for its vote; before, it waited for that vote until twice BRAID_TIMEOUT plus 3 s (7.0 s
// here, against 2.1 s now).
TEST_CASE("an agreement counts a rank of this host that stays stopped for the timeout, named or not",
          "[multiproc][recovery]") {
  Run r = run(braidrun(4, "BRAID_TIMEOUT=2 BRAID_DEBUG=INFO MP_VICTIMS=1:5:stop,2:5:stop BRAIDRUN_GRACE_SEC=5") +
              "--min-np 2 " MP_DIR "/mp_recover 10 2>&1");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(checkEachUnder(r.out, R"(SHRUNK rank=(\d+) step=5 from=4 to=2 failed=1,2 ms=(\d+))", 4500) == 2);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(0|3) newrank=\d size=2 steps=10 checksum=(\S+) match=1 same=1)").size() == 1u);
}

// The same across hosts, where no process state can be read: the agreement asks every
// process at the store where it is (the live view, which a thread of each process answers),
// and counts a rank whose vote is still missing after BRAID_TIMEOUT and whose process gives
// no answer. Before, it waited until twice BRAID_TIMEOUT plus 3 s (9.0 s here, against 5.1 s
// now).
TEST_CASE("an agreement counts a rank of another host that stays stopped for the timeout, named or not",
          "[multiproc][recovery]") {
  Run r = run(braidrun(4, "MP_HOST_PER_RANK=1 BRAID_TIMEOUT=3 BRAID_DEBUG=INFO MP_VICTIMS=1:5:stop,2:5:stop "
                          "BRAIDRUN_GRACE_SEC=5") +
              "--min-np 2 " MP_DIR "/mp_recover 10 2>&1");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(checkEachUnder(r.out, R"(SHRUNK rank=(\d+) step=5 from=4 to=2 failed=1,2 ms=(\d+))", 7500) == 2);
  // Usually one stopped rank is named by a survivor's own timeout and the agreement asks after
  // the other. Under load each survivor's timeout may name a different one (rank 0 rank 2,
  // rank 3 rank 1): the agreement then knows both from the votes and asks after none.
  const bool bothNamed = countMatches(r.out, R"(timeout: rank 1 made no progress)") >= 1 &&
                         countMatches(r.out, R"(timeout: rank 2 made no progress)") >= 1;
  if (!bothNamed) {
    CHECK(countMatches(r.out, R"(agreement: rank [12] had not voted after 3.0 s, and its process \(pid \d+ on host )"
                              R"(mp-host-[12]\) did not answer)") >= 1);
  }
  CHECK(checksumsOf(r.out, R"(FINAL rank=(0|3) newrank=\d size=2 steps=10 checksum=(\S+) match=1 same=1)").size() == 1u);
}

// A rank on another host that dies between two collectives, after its allreduce and before
// its vote: no survivor's call sees it go and there is no pidfd to watch across hosts, so
// only the store can tell. braidrun's store marks it gone when its connection ends, and the
// survivors' agreement counts it as failed at once, not at the agreement's deadline (twice
// BRAID_TIMEOUT plus 3 s, 23 s here).
TEST_CASE("an agreement counts a remote rank that died outside any collective as failed at once",
          "[multiproc][recovery]") {
  Run r = run("MP_HOST_PER_RANK=1 MP_VICTIMS=2:4:novote BRAID_TIMEOUT=10 BRAIDRUN_GRACE_SEC=5 " BRAIDRUN
              " -np 3 --min-np 2 --timeout 120 " MP_DIR "/mp_recover 10 2>&1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(linesWith(r.out, "ERROR") == "");
  std::regex shrunk(R"(SHRUNK rank=\d+ step=4 from=3 to=2 failed=2 ms=(\d+))");
  int n = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), shrunk); it != std::sregex_iterator(); ++it) {
    ++n;
    CHECK(std::stol((*it)[1]) < 5000);
  }
  CHECK(n == 2);
  std::regex fin(R"(FINAL rank=\d+ newrank=\d+ size=2 steps=10 checksum=\S+ match=1 same=1)");
  CHECK(std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), fin), std::sregex_iterator()) == 2);
}

// Two ranks on other hosts die a moment apart: rank 3 before its step, rank 2 after the vote
// that counted only rank 3, before it joins the shrink. The survivors' shrink waits for rank
// 2's list; with no pidfd across hosts, the store's mark of its closed connection fails the
// shrink at once, naming rank 2, and the survivors vote again and shrink without both. Before
// the shrink read that mark it waited out BRAID_TIMEOUT (10 s) and failed every survivor.
TEST_CASE("a rank that dies between the vote and the shrink fails the shrink at once, and a second vote drops it",
          "[multiproc][recovery]") {
  Run r = run("MP_HOST_PER_RANK=1 MP_VICTIMS=3:4,2:4:noshrink BRAID_TIMEOUT=10 BRAIDRUN_GRACE_SEC=5 " BRAIDRUN
              " -np 4 --min-np 2 --timeout 120 " MP_DIR "/mp_recover 10 2>&1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, R"(SHRINKFAIL rank=[01] step=4: .*rank 2 \(host mp-host-2\) left the job's store during shrink)") ==
        2);
  CHECK(checkEachUnder(r.out, R"(SHRUNK rank=([01]) step=4 from=4 to=2 failed=2,3 ms=(\d+))", 5000) == 2);
  CHECK(countMatches(r.out, R"(FINAL rank=[01] newrank=[01] size=2 steps=10 checksum=\S+ match=1 same=1)") == 2);
}

// A rank on another host that dies after the vote that admits a replacement, before it joins
// the grown communicator: the others' grow fails at once, naming it (the communicator they
// grow from has its gone/ mark), not at BRAID_TIMEOUT (15 s here) as before; they shrink it
// away, admit the replacements and finish every step at full size. The replacement being
// admitted waits to be admitted again instead of ending: two ranks lost, two replacements.
TEST_CASE("a rank that dies before a grow fails the grow at once, and the job still ends at full size",
          "[multiproc][recovery]") {
  Run r = run("MP_HOST_PER_RANK=1 MP_STEP_MS=50 MP_VICTIMS=3:2,2:2:nogrow BRAID_TIMEOUT=15 BRAIDRUN_GRACE_SEC=5 " BRAIDRUN
              " -np 4 --min-np 2 --max-np 4 --timeout 120 " MP_DIR "/mp_recover 40 2>&1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(countMatches(r.out, R"(GROWFAIL rank=[01] step=\d+: .*rank 2 \(host mp-host-2\) left the job's store before it )"
                            R"(joined the grown communicator)") == 2);
  CHECK(r.out.find("timed out") == std::string::npos);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(r.out.find("2 lost, 2 replacement(s) started") != std::string::npos);
  CHECK(countMatches(r.out, R"(FINAL rank=\d+ newrank=\d+ size=4 steps=40 checksum=\S+ match=1 same=1)") == 4);
}

// Replacement `rank` joined as new rank 3 of 4 in epoch `epoch` exactly once, at a step from
// `first` to `last`, and the 3 survivors grew at that same step. braidrun starts it once it
// sees the lost rank end, and the survivors admit it at the first step that finds it
// waiting: usually the one after their shrink, later when its start is slow (a loaded
// machine).
static void checkJoined(const std::string& out, int rank, int epoch, int first, int last) {
  INFO("replacement " << rank << ", epoch " << epoch);
  const std::regex joined("JOINED rank=" + std::to_string(rank) + " newrank=3 size=4 step=(\\d+) epoch=" +
                          std::to_string(epoch) + " ");
  std::vector<int> steps;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), joined); it != std::sregex_iterator(); ++it)
    steps.push_back(std::stoi((*it)[1]));
  REQUIRE(steps.size() == 1u);
  CHECK(steps[0] >= first);
  CHECK(steps[0] <= last);
  CHECK(countMatches(out, "GROWN rank=\\d+ step=" + std::to_string(steps[0]) + " from=3 to=4 epoch=" +
                              std::to_string(epoch) + " ") == 3);
}

// braidrun --max-np starts a replacement for each lost rank; the running ranks admit it at
// the next step (braidCommGrowJoiners) and hand it the step and the parameters, so the job
// ends at full size, every step done once, every rank with the failure-free parameters.
TEST_CASE("replacements join the survivors, who grow back and finish every step", "[multiproc][recovery]") {
  for (const char* env : {"", "BRAID_TRANSPORT=tcp"}) {
    INFO(env);
    Run r = run(std::string(env) + " MP_VICTIMS=2:5,0:12 BRAIDRUN_GRACE_SEC=5 " BRAIDRUN
                " -np 4 --min-np 2 --max-np 4 --timeout 120 " MP_DIR "/mp_recover 20 2>&1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(linesWith(r.out, "ERROR") == "");
    std::regex fin(R"(FINAL rank=(\d+) newrank=\d+ size=4 steps=20 checksum=(\S+) match=1 same=1)");
    std::set<std::string> checksums;
    int finals = 0;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), fin); it != std::sregex_iterator(); ++it) {
      ++finals;
      checksums.insert((*it)[2]);
    }
    CHECK(finals == 4);
    CHECK(checksums.size() == 1u);
    // Two shrinks and two grows, each seen by every rank taking part; the replacements say
    // where they joined.
    auto count = [&](const std::string& re) {
      std::regex x(re);
      return std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), x), std::sregex_iterator());
    };
    CHECK(count("SHRUNK rank=\\d+ step=5 from=4 to=3 failed=2 ") == 3);
    checkJoined(r.out, 4, 2, 6, 11);
    CHECK(count("SHRUNK rank=\\d+ step=12 from=4 to=3 failed=0 ") == 3);
    checkJoined(r.out, 5, 4, 13, 20);
    CHECK(r.out.find("the job finished with 4 rank(s), 4 at its start; 2 lost, 2 replacement(s) started") !=
          std::string::npos);
  }
}

// With the store in etcd (BRAID_STORE), recovery does not depend on any one rank: ranks
// started as torchrun starts them, where rank 0 would otherwise serve the store, lose rank 2
// and then rank 0, and the survivors still agree, shrink and finish every step; and under
// braidrun --max-np, replacements join through etcd. A run that loses no rank leaves no
// keys behind.
TEST_CASE("with an etcd store, survivors recover from losing rank 0 and replacements join through it",
          "[multiproc][recovery][etcd]") {
  auto etcd = startEtcd();
  if (!etcd) return;
  const std::string store = "BRAID_STORE=" + etcd->endpoint() + "/jobs";
  const auto count = countMatches;
  SECTION("ranks started by hand, as torchrun would, lose rank 0") {
    // MASTER_ADDR is deliberately absent: nobody in the job serves a store.
    Run r = run("for r in 0 1 2 3; do " + store +
                " RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 TORCHELASTIC_RUN_ID=lose0 "
                "BRAID_TIMEOUT=20 MP_VICTIMS=2:5,0:12 timeout 120 " MP_DIR "/mp_recover 20 & done; wait");
    INFO(r.out);
    CHECK(linesWith(r.out, "ERROR") == "");
    CHECK(count(r.out, "SHRUNK rank=\\d+ step=5 from=4 to=3 failed=2 ") == 3);
    CHECK(count(r.out, "SHRUNK rank=\\d+ step=12 from=3 to=2 failed=0 ") == 2);
    CHECK(count(r.out, "FINAL rank=") == 2);
    CHECK(checksumsOf(r.out, R"(FINAL rank=(1|3) newrank=\d size=2 steps=20 checksum=(\S+) match=1 same=1)").size() == 1u);
  }
  SECTION("a rank on another host that dies between collectives is counted when its lease runs out") {
    // As "an agreement counts a remote rank that died outside any collective*", through etcd:
    // the agreement learns of the death from the rank's lease (2 s), not at its deadline (30 s).
    Run r = run("for r in 0 1 2; do " + store +
                " RANK=$r WORLD_SIZE=3 TORCHELASTIC_RUN_ID=lease MP_HOST_PER_RANK=1 BRAID_ETCD_LEASE_TTL=2 "
                "BRAID_TIMEOUT=30 MP_VICTIMS=2:4:novote timeout 120 " MP_DIR "/mp_recover 10 2>&1 & done; wait");
    INFO(r.out);
    CHECK(linesWith(r.out, "ERROR") == "");
    std::regex shrunk(R"(SHRUNK rank=\d+ step=4 from=3 to=2 failed=2 ms=(\d+))");
    int n = 0;
    for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), shrunk); it != std::sregex_iterator(); ++it) {
      ++n;
      CHECK(std::stol((*it)[1]) < 8000);
    }
    CHECK(n == 2);
    CHECK(count(r.out, "FINAL rank=\\d newrank=\\d size=2 steps=10 checksum=\\S+ match=1 same=1") == 2);
  }
  SECTION("a rank on another host that dies while joining fails the others' join when its lease runs out") {
    // As "a rank that dies while joining fails the others' join*", through etcd: its end is
    // counted (addOnClose) when its lease (2 s) runs out, not at BRAID_TIMEOUT (30 s).
    Run r = run("for r in 0 1 2; do " + store +
                " RANK=$r WORLD_SIZE=3 TORCHELASTIC_RUN_ID=initkill BRAID_HOST_ID=mp-etcd-initkill-$r "
                "BRAID_ETCD_LEASE_TTL=2 BRAID_TIMEOUT=30 MP_LATE_RANK=2 MP_LATE_MS=1500 timeout 60 " MP_DIR
                "/mp_fault initkill 1 400 2>&1 & done; wait");
    INFO(r.out);
    checkSurvivors(r.out, 2, kRemoteError, 1, 0, 8000);
    CHECK(r.out.find("rank 1 exited during init: its connection to the job's store ended") != std::string::npos);
  }
  SECTION("braidrun --max-np: replacements are admitted through etcd") {
    Run r = run("MP_VICTIMS=2:5,0:12 BRAIDRUN_GRACE_SEC=5 " BRAIDRUN " -x " + store +
                " -np 4 --min-np 2 --max-np 4 --timeout 120 " MP_DIR "/mp_recover 20 2>&1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(count(r.out, "FINAL rank=\\d+ newrank=\\d+ size=4 steps=20 checksum=\\S+ match=1 same=1") == 4);
    checkJoined(r.out, 4, 2, 6, 11);
    checkJoined(r.out, 5, 4, 13, 20);
  }
  SECTION("a run that loses no rank takes its keys away") {
    Run r = run("for r in 0 1 2; do " + store +
                " RANK=$r WORLD_SIZE=3 TORCHELASTIC_RUN_ID=clean timeout 60 " MP_DIR "/mp_recover 5 & done; wait");
    INFO(r.out);
    CHECK(count(r.out, "FINAL rank=\\d newrank=\\d size=3 steps=5 checksum=\\S+ match=1 same=1") == 3);
    auto u = braid::bootstrap::parseEtcdUrl("url", etcd->endpoint() + "/jobs/clean");
    REQUIRE(u.isOk());
    auto c = braid::bootstrap::EtcdStore::connect(u.value(), braid::Deadline::after(10));
    REQUIRE(c.isOk());
    CHECK_FALSE(c.value()->check({"braid/live"}).value());
    CHECK(c.value()->deletePrefix("braid/").value() == 0);
  }
}

// Where rank 0 serves the store (torchrun's layout, no etcd), rank 1 keeps a standby that
// mirrors every write: the job loses rank 2, then rank 0 with its store, and ranks 1 and 3
// agree, shrink and finish every step through the standby.
TEST_CASE("where rank 0 serves the store, survivors recover from losing rank 0 through rank 1's standby",
          "[multiproc][recovery]") {
  Run r = torchrunJob(4, "BRAID_TIMEOUT=20 MP_VICTIMS=2:5,0:12", "timeout 120 " MP_DIR "/mp_recover 20");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=5 from=4 to=3 failed=2 ") == 3);
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=12 from=3 to=2 failed=0 ") == 2);
  CHECK(countMatches(r.out, "FINAL rank=") == 2);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(1|3) newrank=\d size=2 steps=20 checksum=(\S+) match=1 same=1)").size() == 1u);
  // Without the standby the same loss ends the job: the survivors lose the store.
  Run off = torchrunJob(3, "BRAID_STORE_STANDBY=0 BRAID_TIMEOUT=20 MP_VICTIMS=0:3", "timeout 120 " MP_DIR "/mp_recover 8");
  INFO(off.out);
  CHECK(off.out.find("which serves the job's store") != std::string::npos);
  CHECK(off.out.find("FINAL rank=") == std::string::npos);
}

// Launchers number ranks host by host, so rank 1, which keeps the standby, usually shares rank
// 0's host. With BRAID_STORE_STANDBY=host the first rank of another host keeps it: losing
// rank 0's whole host (ranks 0 and 1 at once) leaves it, and ranks 2 and 3 agree, shrink
// and finish every step. With the standby in rank 1 the same loss takes the store with it.
TEST_CASE("BRAID_STORE_STANDBY=host: survivors recover from losing rank 0's host through a standby on another",
          "[multiproc][recovery]") {
  const std::string twoHosts = "BRAID_HOST_ID=mp-host-$((r / 2)) BRAID_DEBUG=INFO BRAID_TIMEOUT=20 ";
  Run r = torchrunJob(4, twoHosts + "BRAID_STORE_STANDBY=host MP_VICTIMS=0:5,1:5", "timeout 120 " MP_DIR "/mp_recover 12");
  INFO(r.out);
  CHECK(r.out.find("the store's standby is in rank 2") != std::string::npos);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=5 from=4 to=2 failed=0,1 ") == 2);
  CHECK(countMatches(r.out, "FINAL rank=") == 2);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(2|3) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() == 1u);
  // By default rank 1 keeps it, on rank 0's host, and the loss of that host ends the job.
  Run same = torchrunJob(4, twoHosts + "MP_VICTIMS=0:3,1:3", "timeout 120 " MP_DIR "/mp_recover 6");
  INFO(same.out);
  CHECK(same.out.find("the store's standby is in rank 1") != std::string::npos);
  CHECK(same.out.find("its standby at") != std::string::npos);
  CHECK(same.out.find("FINAL rank=") == std::string::npos);
}

// Ranks 0 and 1 of a job on two hosts (rank 0 serving the store, its standby on the other
// host) killed at step 5, three times over `transport`: each survivor's shrink must come
// within `limitMs`.
namespace {
void storeHostLoss(const std::string& transport, int timeoutSec, long limitMs) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    INFO(transport << ", run " << attempt);
    Run r = torchrunJob(4, transport + " BRAID_HOST_ID=mp-host-$((r / 2)) BRAID_TIMEOUT=" + std::to_string(timeoutSec) +
                               " BRAID_STORE_STANDBY=host MP_VICTIMS=0:5,1:5",
                        "timeout 120 " MP_DIR "/mp_recover 12");
    INFO(r.out);
    CHECK(linesWith(r.out, "ERROR") == "");
    CHECK(checkEachUnder(r.out, R"(SHRUNK rank=(\d+) step=5 from=4 to=2 failed=0,1 ms=(\d+))", limitMs) == 2);
    CHECK(checksumsOf(r.out, R"(FINAL rank=(2|3) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() ==
          1u);
  }
}
}  // namespace

// The same loss with every rank on a network transport. Ranks 2 and 3 learn rank 0's death
// from their connections, or the one from the other's report, but the store cannot tell them
// of rank 1's: its store connection went with rank 0's store, and the promoted standby marks
// only the old store's process gone. The agreement now asks the survivors' own connections
// (Transport::sawPeerFail), where rank 1's sockets or UCX endpoints have ended. Before, a
// survivor that had met no error from rank 1 waited for its vote until twice the timeout
// plus 3 s (23 s here), in 3 of 6 runs over tcp and 1 of 6 over UCX. Over UCX's tcp the
// survivors' old endpoints also printed UCX's own "connect(...) failed" ERRORs as they were
// driven and closed; braid reports those endpoints' failures itself, and logs them as INFO.
TEST_CASE("survivors of a store host's loss over tcp and ucx agree at once on the ranks their connections saw go",
          "[multiproc][recovery]") {
  storeHostLoss("BRAID_TRANSPORT=tcp", 10, 3000);
#ifdef UCX_PLUGIN
  storeHostLoss("BRAID_TRANSPORT=ucx UCX_TLS=tcp,self", 10, 3000);
#endif
}

// The same loss over a transport that cannot say whether it saw a rank fail (a plugin of
// ABI version 1, as verbs before version 8): a survivor whose call ended on another's
// report, naming rank 0, never met rank 1's end, and the store's standby does not mark rank 1
// gone. The agreement counts rank 1 when its vote is still missing after BRAID_TIMEOUT and
// its process does not answer the live view: about 6 s here, where it waited 11 s (twice the
// timeout plus 3 s) before.
TEST_CASE("survivors of a store host's loss over a transport that cannot tell agree after the timeout",
          "[multiproc][recovery]") {
  storeHostLoss("BRAID_TRANSPORT_PLUGIN=" FAILING_PLUGIN " BRAID_TRANSPORT=failing", 4, 9000);
}

// Losses one after another: rank 0 dies, rank 1's standby takes over and the survivors'
// shrink starts another standby in a rank that does not host the store (rank 2); then rank
// 1, which now serves the store, dies too, rank 2's standby takes over, and ranks 2 and 3
// finish every step. Before, the second loss took the store with it.
TEST_CASE("after a shrink the store has a standby again: survivors outlive rank 0 and then the standby's rank",
          "[multiproc][recovery]") {
  Run r = torchrunJob(4, "BRAID_DEBUG=INFO BRAID_TIMEOUT=20 MP_VICTIMS=0:3,1:7", "timeout 120 " MP_DIR "/mp_recover 12");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, "\\[1\\] .* has a standby in this rank") == 1);  // at init
  CHECK(countMatches(r.out, "\\[2\\] .* has a standby in this rank") == 1);  // after the first shrink
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=3 from=4 to=3 failed=0 ") == 3);
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=7 from=3 to=2 failed=0 ") == 2);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(2|3) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() == 1u);
  CHECK(countMatches(r.out, "FINAL rank=") == 2);
  // Rank 1, serving the store by then, stopped rather than killed: rank 2's standby takes
  // over after the silence. (The stopped rank is killed by its `timeout` once they are done.)
  Run stop = torchrunJob(4, "BRAID_TIMEOUT=4 MP_VICTIMS=0:3,1:7:stop",
                         "timeout -s KILL $([ $r = 1 ] && echo 15 || echo 120) " MP_DIR "/mp_recover 12");
  INFO(stop.out);
  CHECK(linesWith(stop.out, "ERROR") == "");
  CHECK(countMatches(stop.out, "SHRUNK rank=\\d+ step=7 from=3 to=2 failed=0 ") == 2);
  CHECK(checksumsOf(stop.out, R"(FINAL rank=(2|3) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() == 1u);
}

// Processes that join through a grow id learn of the store's standby as the first ranks
// did, and take their turn keeping one: a job of 2 started as torchrun starts it grows to 4
// (ranks 2 and 3 started by rank 0 with a grow id), then loses rank 0, which served the
// store (the survivors go to rank 1's standby; rank 2 keeps the next), then rank 1 (ranks 2
// and 3 go to rank 2's), and they finish every step.
TEST_CASE("ranks that joined through a grow id outlive the store's host and keep its next standby",
          "[multiproc][recovery]") {
  Run r = torchrunJob(2, "BRAID_DEBUG=INFO BRAID_TIMEOUT=20 MP_GROW_AT=2:2 MP_VICTIMS=0:5,1:8",
                      "timeout 120 " MP_DIR "/mp_recover 12");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, "GROWN rank=\\d+ step=2 from=2 to=4 ") == 2);
  CHECK(countMatches(r.out, "JOINED rank=(2|3) newrank=(2|3) size=4 step=2 ") == 2);
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=5 from=4 to=3 failed=0 ") == 3);
  // Rank 1 keeps one at init, rank 2 (rank 1 after the first shrink) the next, rank 3 (rank
  // 1 after the second) the last.
  CHECK(countMatches(r.out, ":\\d+:1 \\[braid\\] INFO the store at \\S+ has a standby in this rank") == 3);
  CHECK(countMatches(r.out, "SHRUNK rank=(2|3) step=8 from=3 to=2 failed=0 ") == 2);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(2|3) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() == 1u);
  CHECK(countMatches(r.out, "FINAL rank=") == 2);
}

// The same with rank 0 stopped rather than killed: its connections stay open, so nobody sees
// it go; rank 1's standby takes over when rank 0 has sent it nothing for half the timeout,
// and the survivors agree, shrink and finish every step. (The stopped rank is killed by its
// `timeout` once they are done.)
TEST_CASE("where rank 0 serves the store, survivors recover from a stopped rank 0 through rank 1's standby",
          "[multiproc][recovery]") {
  Run r = torchrunJob(3, "BRAID_TIMEOUT=4 MP_VICTIMS=0:5:stop",
                      "timeout -s KILL $([ $r = 0 ] && echo 14 || echo 120) " MP_DIR "/mp_recover 12");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=5 from=3 to=2 failed=0 ") == 2);
  CHECK(countMatches(r.out, "FINAL rank=") == 2);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(1|2) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() == 1u);
}

// A stopped rank keeps its connection to the store, and with it its share of the live
// sessions that rank 0, serving the store, waits for before it leaves: rank 0 waited until
// the stopped process was killed (here at 20 s), up to 30 s. The survivors' shrink shuts the
// stopped process out of the store, so rank 0 leaves as soon as the other survivor has.
TEST_CASE("where rank 0 serves the store, it leaves at once after a job that shrank away a stopped rank",
          "[multiproc][recovery]") {
  Run r = torchrunJob(3, "BRAID_DEBUG=INFO BRAID_TIMEOUT=4 MP_VICTIMS=2:5:stop",
                      "timeout -s KILL $([ $r = 2 ] && echo 20 || echo 120) " MP_DIR "/mp_recover 12");
  INFO(r.out);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(countMatches(r.out, "SHRUNK rank=\\d+ step=5 from=3 to=2 failed=2 ") == 2);
  CHECK(r.out.find("shut rank 2 out of the job's store, closing 1 connection") != std::string::npos);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(0|1) newrank=\d size=2 steps=12 checksum=(\S+) match=1 same=1)").size() == 1u);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("\\[0\\] DESTROYED rank=0 ms=(\\d+)")));
  CHECK(std::stol(m[1]) < 3000);
  // Rank 0 stopped, and rank 2 killed while rank 0's store was stopped, before rank 1's
  // standby took over: the standby never saw rank 2's connection end. Rank 1, serving the
  // store by then, shuts rank 2 out there, which sets what rank 2 left (it waited the 30 s).
  Run lost = torchrunJob(4, "BRAID_TIMEOUT=2 MP_VICTIMS=0:3:stop,2:3:late",
                         "timeout -s KILL $([ $r = 0 ] && echo 20 || echo 120) " MP_DIR "/mp_recover 12");
  INFO(lost.out);
  CHECK(linesWith(lost.out, "ERROR") == "");
  CHECK(countMatches(lost.out, "SHRUNK rank=\\d+ step=3 from=4 to=2 failed=0,2 ") == 2);
  REQUIRE(std::regex_search(lost.out, m, std::regex("\\[1\\] DESTROYED rank=1 ms=(\\d+)")));
  CHECK(std::stol(m[1]) < 3000);
}

TEST_CASE("braidCommGetGrowId and braidCommGrow: new processes join a running communicator once", "[multiproc][recovery]") {
  Run r = run("timeout 120 " MP_DIR "/mp_grow 2 2 2>&1");
  INFO(r.out);
  CHECK(r.status == 0);
  std::regex ok(R"(GROWN rank=\d size=4 epoch=1 ok=1)");
  CHECK(std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), ok), std::sregex_iterator()) == 4);
  CHECK(r.out.find("LATE rc=1 refused=1") != std::string::npos);
  CHECK(r.out.find("KINDS plain_refused=1 grow_refused=1") != std::string::npos);
}

// A new process whose own setting is malformed joins the grow only to say so: the running
// ranks and the other new one fail the grow at once, naming it, instead of at the timeout.
TEST_CASE("a new rank with a malformed setting fails the grow on every rank at once, naming it",
          "[multiproc][recovery]") {
  const auto start = std::chrono::steady_clock::now();
  Run r = run("BRAID_TIMEOUT=30 timeout 120 " MP_DIR "/mp_grow 2 2 badsetting 2>&1");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(secs < 10);
  CHECK(r.out.find("GROWFAILURES 4 of 4") != std::string::npos);
  const std::string why = "BRAID_NSLOTS='abc' is not an integer in [2, 1024]";
  CHECK(r.out.find("GROWFAIL new rank 2: braidCommGrow (new rank 2): rank 2 could not join the communicator: " + why) !=
        std::string::npos);
  CHECK(r.out.find("GROWFAIL new rank 3: braidCommGrow (new rank 3): rank 3 could not join the communicator: rank 2 "
                   "reported: " + why) != std::string::npos);
  for (int i = 0; i < 2; ++i)
    CHECK(r.out.find("GROWFAIL rank " + std::to_string(i) + ": braidCommGrow on rank " + std::to_string(i) + ": rank " +
                     std::to_string(i) + " could not join the communicator: rank 2 reported: " + why) !=
          std::string::npos);
}

// braidConfig_t.blocking = 0: init and calls return braidInProgress and finish in the
// background; braidCommGetAsyncError polls them, and reports a stalled peer within the
// config's timeout (mp_nonblocking checks the results itself).
TEST_CASE("non-blocking communicators: init, calls and groups complete in the background", "[multiproc][recovery]") {
  Run ok = run(braidrun(3, "BRAIDRUN_GRACE_SEC=5") + MP_DIR "/mp_nonblocking ok 2>&1");
  INFO(ok.out);
  CHECK(ok.status == 0);
  CHECK(ok.out.find("BAD") == std::string::npos);
  std::regex okLine(R"(OK rank=\d+ polls=\d+ in_progress=(\d+))");
  int oks = 0, background = 0;
  for (auto it = std::sregex_iterator(ok.out.begin(), ok.out.end(), okLine); it != std::sregex_iterator(); ++it) {
    ++oks;
    background += std::stoi((*it)[1]);
  }
  CHECK(oks == 3);
  CHECK(background > 0);  // at least some calls really returned before they were done

  Run stop = run(braidrun(3, "BRAIDRUN_GRACE_SEC=3") + MP_DIR "/mp_nonblocking stop 2>&1");
  INFO(stop.out);
  CHECK(stop.out.find("BAD") == std::string::npos);
  std::regex async(R"(ASYNC rank=(\d+) code=(\d+) failed_rank=(-?\d+) ms=(\d+))");
  int survivors = 0;
  for (auto it = std::sregex_iterator(stop.out.begin(), stop.out.end(), async); it != std::sregex_iterator(); ++it) {
    ++survivors;
    CHECK(std::stoi((*it)[2]) == kTimeout);
    CHECK(std::stoi((*it)[3]) == 1);
    CHECK(std::stod((*it)[4]) >= 1900);
    CHECK(std::stod((*it)[4]) < 9000);  // the config's 2 s, not BRAID_TIMEOUT's default 300
  }
  CHECK(survivors == 2);
}

TEST_CASE("BRAID_TOPO_DUMP_FILE writes the topology and BRAID_TOPO_FILE reads it back", "[multiproc]") {
  std::string dump = std::string(MP_DIR) + "/topo-dump.json";
  std::remove(dump.c_str());
  Run r = run(braidrun(2, "BRAID_TOPO_DUMP_FILE=" + dump) + MP_DIR "/mp_collectives");
  INFO(r.out);
  CHECK(r.status == 0);
  FILE* f = std::fopen(dump.c_str(), "r");
  REQUIRE(f != nullptr);
  std::fclose(f);
  Run again = run(braidrun(2, "BRAID_TOPO_FILE=" + dump) + MP_DIR "/mp_collectives");
  INFO(again.out);
  CHECK(again.status == 0);
  Run nccl = run(braidrun(2, "BRAID_TOPO_FILE=" FIXTURE_DIR "/nccl-azure-ndv5.xml") + MP_DIR "/mp_collectives");
  INFO(nccl.out);
  CHECK(nccl.status == 0);
  Run bad = run(braidrun(2, "BRAID_TOPO_FILE=" FIXTURE_DIR "/bad/does-not-exist.xml") + MP_DIR "/mp_collectives");
  CHECK(bad.status != 0);
  CHECK(bad.out.find("BRAID_TOPO_FILE") != std::string::npos);
}

// Topology across ranks: 4 ranks on 2 fake hosts (BRAID_HOST_ID from the rank, hosts
// interleaved) load a topology file; rank 0 publishes the ring, every rank logs its GPU and
// the NIC per channel, and tcp listens on a channel's NIC interface where it exists here. A
// malformed file fails init on every rank with the file's own message.
TEST_CASE("ranks on several hosts plan rings and NICs from the published topology", "[multiproc][topology]") {
  const std::string perRankHost = "sh -c 'BRAID_HOST_ID=fakehost$((BRAID_RANK % 2)) exec " MP_DIR "/mp_collectives'";
  const std::string info = "BRAID_DEBUG=INFO BRAID_NCHANNELS=2 ";

  SECTION("DGX-like fixture: ring grouped per host, rail NICs, BRAID_IB_HCA exclusion") {
    Run r = run(braidrun(4, info + "BRAID_GPU=local BRAID_IB_HCA='^=mlx5_0' BRAID_TOPO_FILE=" FIXTURE_DIR
                                   "/nccl-dgx-h100-like.xml") +
                perRankHost);
    INFO(r.out);
    CHECK(r.status == 0);
    for (int i = 0; i < 4; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
    CHECK(r.out.find("topology: ring (channel 0, odd channels reversed): 0 2 | 1 3; trees from the topology; network 48 GB/s") !=
          std::string::npos);
    // GPU 0's own NIC is excluded: its channels rotate over the next nearest (same socket).
    CHECK(r.out.find("topology: rank 0 host 0 GPU 0 NUMA") != std::string::npos);
    CHECK(r.out.find("NICs: ch0 NIC1 mlx5_1 ch1 NIC2 mlx5_2") != std::string::npos);
    CHECK(r.out.find("topology: rank 3 host 1 GPU 1 NUMA") != std::string::npos);
    CHECK(r.out.find("NICs: ch0 NIC1 mlx5_1 ch1 NIC1 mlx5_1") != std::string::npos);
  }

  SECTION("the tree allreduce runs on the topology's trees; channels follow the NVLinks") {
    // No BRAID_NCHANNELS: each GPU has 18 NVLinks, so every rank asks for as many channels
    // as its cores allow (twice its share, at least 2).
    Run r = run(braidrun(4, "BRAID_DEBUG=INFO BRAID_ALGO=allreduce:tree BRAID_GPU=local BRAID_TOPO_FILE=" FIXTURE_DIR
                            "/nccl-dgx-h100-like.xml ") +
                perRankHost);
    INFO(r.out);
    CHECK(r.status == 0);
    for (int i = 0; i < 4; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
    CHECK(r.out.find("trees from the topology") != std::string::npos);
    // The job spans hosts, so rank 0 timed the link to rank 1 for the planner.
    CHECK(std::regex_search(r.out, std::regex(R"(probe: rank 0 <-> rank 1 \(another host\): latency [0-9.]+ us)")));
    int cores = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
    int want = std::max(std::min(std::max(1, cores / 2), 4), std::min(18, std::min(2 * std::max(1, cores / 2), 16)));
    CHECK(r.out.find("4 ranks on 2 hosts, " + std::to_string(want) + " channels") != std::string::npos);
  }

  SECTION("BRAID_PROBE=0 skips the link probe; one host never probes") {
    Run off = run(braidrun(4, "BRAID_DEBUG=INFO BRAID_PROBE=0 BRAID_TOPO=0 ") + perRankHost);
    INFO(off.out);
    CHECK(off.status == 0);
    CHECK(off.out.find("probe:") == std::string::npos);
    Run one = run(braidrun(2, "BRAID_DEBUG=INFO ") + MP_DIR "/mp_collectives");
    INFO(one.out);
    CHECK(one.status == 0);
    CHECK(one.out.find("probe:") == std::string::npos);
    Run bad = run(braidrun(2, "BRAID_PROBE=maybe ") + MP_DIR "/mp_collectives");
    CHECK(bad.status != 0);
    CHECK(bad.out.find("BRAID_PROBE") != std::string::npos);
  }

  SECTION("a NIC whose interface exists here (lo) carries its channel; one that does not falls back") {
    std::string file = std::string(MP_DIR) + "/topo-lo-nics.json";
    FILE* f = std::fopen(file.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(R"({"format": "braid-topology", "version": 1, "nodes": [
      {"type": "cpu", "name": "NUMA0", "numa": 0, "cpus": "0-1"},
      {"type": "nic", "name": "NIC0", "busId": "0000:01:00.0", "numa": 0, "ifName": "lo", "linkLayer": "Ethernet"},
      {"type": "nic", "name": "NIC1", "busId": "0000:02:00.0", "numa": 0, "ifName": "nosuch0", "linkLayer": "Ethernet"}],
      "links": [{"a": 0, "b": 1, "type": "PCI", "bw": 24}, {"a": 0, "b": 2, "type": "PCI", "bw": 24}]})",
               f);
    std::fclose(f);
    Run r = run(braidrun(4, info + "BRAID_TOPO_FILE=" + file) + perRankHost);
    INFO(r.out);
    CHECK(r.status == 0);
    for (int i = 0; i < 4; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
    CHECK(r.out.find("NICs: ch0 NIC0 lo ch1 NIC1 nosuch0") != std::string::npos);
    CHECK(std::regex_search(r.out, std::regex(R"(tcp: rank \d listening on 127\.0\.0\.1:\d+ for lo)")));
    CHECK(r.out.find("topology NIC interface nosuch0 has no IPv4 address here") != std::string::npos);
    // Excluding the missing interface leaves lo for both channels.
    Run x = run(braidrun(4, info + "BRAID_NET_IF='^=nosuch0' BRAID_TOPO_FILE=" + file) + perRankHost);
    INFO(x.out);
    CHECK(x.status == 0);
    CHECK(x.out.find("NICs: ch0 NIC0 lo ch1 NIC0 lo") != std::string::npos);
  }

  SECTION("a malformed BRAID_TOPO_FILE is reported by every rank") {
    Run r = run(braidrun(4, "BRAID_TOPO_FILE=" FIXTURE_DIR "/bad/nccl-unclosed.xml") + perRankHost);
    INFO(r.out);
    CHECK(r.status != 0);
    for (int i = 0; i < 4; ++i) {
      INFO("rank " << i);
      // Read from the published topology or, when a rank that read it first has failed
      // already, from that rank's report: the file's error either way.
      CHECK(std::regex_search(r.out, std::regex("rank " + std::to_string(i) +
                                                " could not join the communicator: (rank \\d+ reported: )?"
                                                "BRAID_TOPO_FILE=")));
    }
    CHECK(r.out.find("nccl-unclosed.xml:7:3: </cpu> does not match <pci> opened at line 3") != std::string::npos);
  }
}

// ---- transport plugins -------------------------------------------------------------------

// The UCX plugin across processes, with UCX choosing its own transports (shared memory
// here) and restricted to tcp: every collective, the perf tool's check, and faults. Built
// only where pkg-config found UCX; otherwise each case says so and passes.
#ifdef UCX_PLUGIN
const char* const kUcxEnvs[] = {"BRAID_TRANSPORT=ucx", "BRAID_TRANSPORT=ucx UCX_TLS=tcp"};

TEST_CASE("collectives and the full set across processes over ucx", "[multiproc][ucx]") {
  for (const char* env : kUcxEnvs) {
    for (int np : {2, 4}) {
      INFO("np " << np << " " << env);
      Run r = run(braidrun(np, env) + MP_DIR "/mp_collectives");
      INFO(r.out);
      CHECK(r.status == 0);
      for (int i = 0; i < np; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
    }
    INFO(env);
    Run r = run(braidrun(3, env) + MP_DIR "/mp_full_set");
    INFO(r.out);
    CHECK(r.status == 0);
    for (int i = 0; i < 3; ++i) CHECK(r.out.find("full set ok rank " + std::to_string(i)) != std::string::npos);
  }
}

// The survivors of a random program agree on who failed, shrink the world, split it again
// and run a new program on it (MP_RANDOM_RECOVER), checked as the first.
TEST_CASE("survivors of a random program agree, shrink and run a new one with every element right",
          "[multiproc][recovery]") {
  struct RecoverRun {
    const char* env;
    int np;
    int seed;
    const char* kill;
  };
  const RecoverRun runs[] = {
      {"MP_RANDOM_THREADS=1", 4, 31, "35:2"},
      {"BRAID_TRANSPORT=tcp MP_RANDOM_NONBLOCKING=1", 3, 32, "20:0"},
  };
  for (const RecoverRun& rr : runs) {
    INFO("np " << rr.np << " seed " << rr.seed << " fault " << rr.kill << " " << rr.env);
    Run r = run(braidrun(rr.np, std::string(rr.env) + " BRAIDRUN_GRACE_SEC=60 BRAID_TIMEOUT=4 MP_RANDOM_RECOVER=1 "
                                    "MP_RANDOM_KILL=" + rr.kill) +
                MP_DIR "/mp_random " + std::to_string(rr.seed) + " 150");
    INFO(r.out);
    for (int i = 0; i < rr.np - 1; ++i)
      CHECK(r.out.find("as rank " + std::to_string(i) + " of " + std::to_string(rr.np - 1) +
                       ": every step ok, wrong=0\n") != std::string::npos);
  }
}

// Over UCX a stopped peer leaves rendezvous sends that never complete on the survivors'
// endpoints. Their teardown closes by force what does not flush (a graceful close left the
// sends on the endpoint, and UCX aborted the process when the worker went with them). The
// communicator tells the transport which peer failed (plugin ABI v6, peer_failed), so no
// endpoint waits for the stopped one: none logs that it had to learn it by waiting.
TEST_CASE("over ucx a survivor of a stopped peer tears down without aborting, and soon", "[multiproc][ucx]") {
  Run r = run(braidrun(3, "BRAID_TRANSPORT=ucx MP_RANDOM_THREADS=1 MP_RANDOM_FAULT=stop MP_RANDOM_KILL=29:0 "
                          "BRAID_TIMEOUT=4 BRAIDRUN_GRACE_SEC=8 BRAID_DEBUG=INFO") +
              MP_DIR "/mp_random 6771 200");
  INFO(r.out);
  CHECK(r.out.find("Assertion") == std::string::npos);
  CHECK(r.out.find("at teardown; closing to it by force") == std::string::npos);
  std::regex re(R"(STOPPED rank=(\d+) wrong=0 mono_ms=\d+ destroy_ms=(\d+))");
  int survivors = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), re); it != std::sregex_iterator(); ++it) {
    ++survivors;
    CHECK(std::stol((*it)[2]) < 4000);
  }
  CHECK(survivors == 2);
}

// A grow (or a shrink) makes the new communicator, then each rank destroys the old one
// when it gets to it. Over UCX a rank's teardown flushes its endpoints, which waits for the
// peer's side: torn down on the caller's thread, a rank that came first waited a second
// for each peer not there yet, while its new peers waited for it (with BRAID_TIMEOUT=2, a
// grow by a grow id failed at its first broadcast in a fifth of the runs). The teardown
// runs on a thread of its own: rank 1 destroys the old communicator 1.5 s after the
// others, and theirs returns at once.
TEST_CASE("over ucx destroying the communicator a grow started from keeps nobody waiting", "[multiproc][ucx]") {
  Run r = run(braidrun(3, "BRAID_TRANSPORT=ucx BRAID_TIMEOUT=5 BRAID_DEBUG=INFO MP_VICTIMS= MP_GROW_AT=3:1 "
                          "MP_LATE_DESTROY_MS=1500") +
              MP_DIR "/mp_recover 8");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(linesWith(r.out, "ERROR") == "");
  CHECK(checkEachUnder(r.out, R"(GROWN rank=(\d+) step=3 from=3 to=4 epoch=1 mono_ms=\S+ old_destroy_ms=(\d+))", 500) ==
        3);
  CHECK(checksumsOf(r.out, R"(FINAL rank=(\d) newrank=\d size=4 steps=8 checksum=(\S+) match=1 same=1)").size() == 1u);
  CHECK(countMatches(r.out, "FINAL rank=") == 4);
}

// After a failed collective over UCX, a rendezvous send whose receive the peer cancelled
// stays with UCX until the peer's worker goes. Each connection's teardown used to wait 2 s
// for its own on the caller's thread, peer after peer, so destroying the communicator a
// shrink came from took 2 s per such peer (2.2 to 11 s with 5 to 7 ranks and 512 KiB
// allreduces; then the survivors that got through first timed out in the shrunk
// communicator's first allreduce, waiting for the others, and shrank again, and again).
// What a connection leaves with UCX is now waited for on the transport's teardown thread,
// for all peers at once, and the shrink (the vote, the new communicator, the old one's
// destroy) takes a tenth of a second on every survivor.
TEST_CASE("over ucx a shrink after a kill in a large allreduce keeps nobody waiting", "[multiproc][ucx][recovery]") {
  for (const char* victim : {"0:5:kill", "2:5:kill"}) {
    INFO("victim " << victim);
    Run r = run(std::string("BRAID_TRANSPORT=ucx BRAID_TIMEOUT=5 MP_VICTIMS=") + victim +
                " " BRAIDRUN " -np 5 --min-np 2 --timeout 120 " MP_DIR "/mp_recover 10 131072 2>&1");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("ERROR rank=") == std::string::npos);  // mp_recover's, not UCX's own
    CHECK(checkEachUnder(r.out, R"(SHRUNK rank=(\d+) step=5 from=5 to=4 failed=\d ms=(\d+))", 1500) == 4);
    CHECK(checksumsOf(r.out, R"(FINAL rank=(\d) newrank=\d size=4 steps=10 checksum=(\S+) match=1 same=1)").size() == 1u);
    CHECK(countMatches(r.out, "FINAL rank=") == 4);
  }
}

TEST_CASE("allreduce_perf over ucx checks its results with zero wrong", "[multiproc][ucx]") {
  for (const char* env : kUcxEnvs) {
    for (int np : {2, 4}) {
      INFO("np " << np << " " << env);
      Run r = run(braidrun(np, env) + ALLREDUCE_PERF " -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 -d all -o sum");
      INFO(r.out);
      CHECK(r.status == 0);
      CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
    }
  }
  // Several channels: one UCX worker per channel, each driven by its own progress thread.
  Run r = run(braidrun(3, "BRAID_TRANSPORT=ucx BRAID_NCHANNELS=3") + ALLREDUCE_PERF " -b 8 -e 16M -f 16 -n 2 -w 1 -c 1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
}

// Over UCX every connection carries messages larger than a slot, so the ranks agree at init
// to send the steps of allgather, alltoall and point-to-point groups whole (BRAID_WHOLE_BLOCKS,
// on by default): the job says so, and every result checks, up to blocks of 8 MiB; with
// BRAID_WHOLE_BLOCKS=0 the same runs go in slices. Over tcp the kernel paces (BBR) where this
// process cannot take UCX's sockets off it, UCX on one host keeps whole blocks for alltoall
// and point-to-point groups only, and says so.
TEST_CASE("whole blocks over ucx: allgather, alltoall and sendrecv check with zero wrong", "[multiproc][ucx]") {
  const bool paced = braid::congestionControlPaces(braid::tcpCongestionControl()) && !braid::canUnpaceSockets();
  for (const char* env : kUcxEnvs) {
    const bool overTcp = std::string(env).find("UCX_TLS=tcp") != std::string::npos;
    for (const char* whole : {"", " BRAID_WHOLE_BLOCKS=0"}) {
      for (const char* cmd : {"allgather_perf -b 8 -e 16M -f 64", "alltoall_perf -b 8 -e 16M -f 64",
                              "sendrecv_perf -b 8 -e 8M -f 32", "sendrecv_perf -b 8 -e 8M -f 32 --one-way"}) {
        const std::string e = std::string(env) + whole + " BRAID_DEBUG=INFO";
        INFO(e << " " << cmd);
        Run r = run(braidrun(3, e) + PERF_DIR "/" + cmd + " -n 2 -w 1 -c 1");
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
        CHECK(r.out.find(*whole                ? "whole blocks off"
                         : paced && overTcp ? "whole blocks 64 MiB (alltoall and point-to-point only: UCX over paced tcp)"
                                            : "whole blocks 64 MiB") != std::string::npos);
      }
    }
  }
}

TEST_CASE("a killed or stopped rank over ucx is reported by every survivor", "[multiproc][chaos][ucx]") {
  for (const char* env : kUcxEnvs) {
    INFO(env);
    Run k = run(braidrun(4, std::string("BRAIDRUN_GRACE_SEC=20 ") + env) + MP_DIR "/mp_fault kill 1 5");
    INFO(k.out);
    auto killed = results(k.out);
    CHECK(killed.size() == 3u);
    for (const auto& [rank, x] : killed) {
      INFO("survivor " << rank);
      CHECK(x.code == kRemoteError);
      CHECK(x.failedRank == 1);
      CHECK(x.elapsedMs < 5000);
    }
    Run s = run(braidrun(3, std::string("BRAIDRUN_GRACE_SEC=3 BRAID_TIMEOUT=3 ") + env) + MP_DIR "/mp_fault stop 1 5");
    INFO(s.out);
    checkSurvivors(s.out, 2, kTimeout, 1, 2900, 9000);
  }
}

TEST_CASE("UCX_TLS naming nothing usable fails init quoting UCX's reason", "[multiproc][ucx]") {
  Run r = run(braidrun(2, "BRAID_TRANSPORT=ucx UCX_TLS=bogus") + MP_DIR "/mp_collectives");
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("ucx: ucp_init: No such device (UCX_TLS=bogus)") != std::string::npos);
  // UCX's own reason, from its log, and what it offers instead.
  CHECK(r.out.find("UCX said: transport 'bogus' is not available, please use one or more of: ") != std::string::npos);
  // A device that does not exist the same way, naming the devices that do.
  Run d = run(braidrun(2, "BRAID_TRANSPORT=ucx UCX_TLS=tcp UCX_NET_DEVICES=nosuchdev0") + MP_DIR "/mp_collectives");
  INFO(d.out);
  CHECK(d.status != 0);
  CHECK(d.out.find("UCX said: network device 'nosuchdev0' is not available") != std::string::npos);
}
// One case of the slot tests below: 3 ranks run allreduces of 8 B-2 MiB with `env`, each
// rank under `host` (BRAID_HOST_ID by rank, or nothing: one host); rank 0's INFO line must
// name `slots` and every result must check.
struct SlotCase {
  const char* env;
  const char* slots;
  const char* host;
};
static void checkSlots(const SlotCase& c) {
  INFO(c.env << " " << c.host);
  Run r = run(braidrun(3, std::string(c.env) + " BRAID_DEBUG=INFO") + "sh -c '" + c.host + "exec " ALLREDUCE_PERF
              " -b 8 -e 4M -f 8 -n 2 -w 1 -c 1'");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find(c.slots) != std::string::npos);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
}

// UCX on one host takes 256 KiB x 16 slots through shared memory (UCX_TLS unset, whatever the
// caller's environment says) and 1 MiB x 4 over tcp alone (each message above UCX's eager
// limit then goes by rendezvous); a user's BRAID_SLOT_BYTES and BRAID_NSLOTS win, and across
// hosts a stream's 64 KiB x 8 apply.
TEST_CASE("slots over ucx on one host follow UCX_TLS", "[multiproc][ucx]") {
  for (const SlotCase& c : {SlotCase{"env -u UCX_TLS BRAID_TRANSPORT=ucx", "slots 262144 x 16,", ""},
                            SlotCase{"BRAID_TRANSPORT=ucx UCX_TLS=tcp", "slots 1048576 x 4,", ""},
                            SlotCase{"BRAID_TRANSPORT=ucx UCX_TLS=tcp,self", "slots 1048576 x 4,", ""},
                            SlotCase{"BRAID_TRANSPORT=ucx UCX_TLS=tcp BRAID_SLOT_BYTES=128K BRAID_NSLOTS=6",
                                     "slots 131072 x 6,", ""},
                            SlotCase{"BRAID_TRANSPORT=ucx UCX_TLS=tcp", "slots 65536 x 8,",
                                     "BRAID_HOST_ID=mp-slots-$((BRAID_RANK % 2)) "}})
    checkSlots(c);
}

// Ring slots by transport: shared memory 512 KiB, tcp inside one host 128 KiB (calls of at
// most 1 MiB cut into 64 KiB slices in them, the rest whole: the sizes cross that line), tcp
// across hosts 64 KiB (a host id per rank), each x 8; a user's BRAID_SLOT_BYTES wins.
TEST_CASE("ring slots follow the transport and the hosts", "[multiproc]") {
  for (const SlotCase& c : {SlotCase{"BRAID_TRANSPORT=shm", "slots 524288 x 8,", ""},
                            SlotCase{"BRAID_TRANSPORT=tcp", "slots 131072 x 8,", ""},
                            SlotCase{"BRAID_TRANSPORT=tcp BRAID_SLOT_BYTES=64K", "slots 65536 x 8,", ""},
                            SlotCase{"BRAID_TRANSPORT=tcp", "slots 65536 x 8,", "BRAID_HOST_ID=mp-slots-$((BRAID_RANK % 2)) "}})
    checkSlots(c);
}

// Through shared memory, over tcp and over tcp the kernel paces (BBR, where this process
// cannot take UCX's sockets off it), UCX on one host cuts messages differently; both ends of a connection must cut the same, so ranks of one host
// whose UCX_TLS puts them on different sides fail init, each naming a rank that differs. On
// another host id each, the slots follow the hosts and the difference does not matter.
TEST_CASE("ranks on one host whose UCX_TLS decides other slots fail init, naming them", "[multiproc][ucx]") {
  const std::string cc = braid::tcpCongestionControl();
  const std::string overTcp = braid::congestionControlPaces(cc) && !braid::canUnpaceSockets() ? "paced tcp" : "tcp";
  INFO("tcp congestion control " << cc);
  const std::string tls = "BRAID_TRANSPORT=ucx BRAID_TIMEOUT=30 UCX_TLS=$([ $r = 1 ] && echo tcp,sm,self || echo tcp,self)";
  Run r = torchrunJob(2, tls, MP_DIR "/mp_collectives");
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("rank 0 could not join the communicator: UCX on one host differs between ranks: rank 1 has shared "
                   "memory (UCX_TLS=tcp,sm,self, tcp congestion control " + cc + "), rank 0 has " + overTcp +
                   " (UCX_TLS=tcp,self, tcp congestion control " + cc + "); on one host it decides how messages are "
                   "cut, so every rank needs the same") != std::string::npos);
  CHECK(r.out.find("rank 1 could not join the communicator: UCX on one host differs between ranks: rank 0 has " +
                   overTcp + " (") != std::string::npos);
  Run hosts = torchrunJob(2, tls + " BRAID_HOST_ID=host$r", MP_DIR "/mp_collectives");
  INFO(hosts.out);
  CHECK(hosts.status == 0);
  for (int i = 0; i < 2; ++i) CHECK(hosts.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
}
#else
TEST_CASE("collectives across processes over ucx", "[multiproc][ucx]") {
  WARN("skipped: braid was configured without UCX (pkg-config found no ucx), so there is no ucx plugin");
}
#endif

TEST_CASE("an unknown BRAID_TRANSPORT lists the transports that exist, plugins included", "[multiproc]") {
  Run r = run(braidrun(2, "BRAID_TRANSPORT=carrier-pigeon") + MP_DIR "/mp_collectives");
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(r.out.find("BRAID_TRANSPORT='carrier-pigeon' is not one of loopback, shm, tcp") != std::string::npos);
#ifdef UCX_PLUGIN
  CHECK(r.out.find("ucx (plugin)") != std::string::npos);
#endif
}

// A plugin that fails on one rank (its init, its receive side, or the blob it hands out)
// fails the communicator's init on every rank, quickly, naming that rank and the plugin.
TEST_CASE("a failing transport plugin fails init on every rank, naming the rank", "[multiproc][plugin]") {
  for (const char* mode : {"init", "recv", "blob"}) {
    INFO("mode " << mode);
    const auto start = std::chrono::steady_clock::now();
    Run r = run(braidrun(3, std::string("BRAID_TRANSPORT_PLUGIN=" FAILING_PLUGIN " BRAID_TRANSPORT=failing "
                                        "BRAID_TEST_FAIL_RANK=1 BRAID_TEST_FAIL_MODE=") +
                               mode) +
                MP_DIR "/mp_collectives");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(secs < 10);
    for (int i = 0; i < 3; ++i)
      CHECK(r.out.find("rank " + std::to_string(i) + " could not join the communicator") != std::string::npos);
    const std::string why = std::string(mode) == "init"   ? "rank 1 reported: BRAID_TRANSPORT=failing: failing: init refused"
                            : std::string(mode) == "recv" ? "rank 1 reported: receiving from rank 0 over failing: failing: create_recv refused"
                                                          : "failing: tcp: malformed address '\x01garbage' from rank 1";
    CHECK(r.out.find(why) != std::string::npos);
    CHECK(r.out.find("braidrun: terminated") == std::string::npos);  // nobody had to be killed
  }
}

// Each step of joining waits at most the timeout for the others: a rank whose transport
// took most of it to start (rank 1 here: 0.9 s for each of its two instances, the rings'
// and the mesh's, of 2 s) does not shorten the transports' last step on every rank, which
// here needs 0.9 s more (as UCX's hellos do, which wait for every peer to drive its
// worker). Before, one deadline covered the whole connection, and every rank failed at its
// last step.
TEST_CASE("a rank whose transport is slow to start leaves every rank a whole timeout to finish connecting",
          "[multiproc][plugin]") {
  Run r = run(braidrun(3, "BRAID_TIMEOUT=2 BRAID_TRANSPORT_PLUGIN=" FAILING_PLUGIN " BRAID_TRANSPORT=failing "
                          "BRAID_TEST_FAIL_RANK=1 BRAID_TEST_FAIL_MODE=slow BRAID_TEST_SLOW_MS=900") +
              MP_DIR "/mp_collectives");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("its deadline came first") == std::string::npos);
}

// Where rank 0 serves the store (torchrun's environment) and its own init fails, the store
// stays up until the others have read why: each names rank 0's reason, not a store that
// vanished under it.
TEST_CASE("where rank 0 serves the store and its init fails, every rank gives rank 0's reason", "[multiproc][plugin]") {
  const auto start = std::chrono::steady_clock::now();
  Run r = torchrunJob(3,
                      "BRAID_TIMEOUT=30 BRAID_TRANSPORT_PLUGIN=" FAILING_PLUGIN " BRAID_TRANSPORT=failing "
                      "BRAID_TEST_FAIL_RANK=0 BRAID_TEST_FAIL_MODE=init",
                      MP_DIR "/mp_collectives");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(secs < 15);
  CHECK(r.out.find("rank 0 could not join the communicator: BRAID_TRANSPORT=failing: failing: init refused") !=
        std::string::npos);
  for (int i = 1; i < 3; ++i)
    CHECK(r.out.find("rank " + std::to_string(i) +
                     " could not join the communicator: rank 0 reported: BRAID_TRANSPORT=failing: failing: init "
                     "refused") != std::string::npos);
  CHECK(r.out.find("is unreachable") == std::string::npos);
}

// Runs `program` (mp_collectives, perhaps behind `env VAR=...`) as a 3-rank torchrun-style
// job with `env` and a 30 s timeout, in which rank `bad` alone is misconfigured, and checks
// that every rank's init fails within 10 s: rank `bad` with `why`, the others with "rank
// <bad> reported: <why>".
static void checkOneRankFailsEveryInit(const std::string& env, const std::string& program, int bad, const std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  Run r = torchrunJob(3, "BRAID_TIMEOUT=30 " + env, program);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(secs < 10);
  for (int i = 0; i < 3; ++i) {
    const std::string line = "rank " + std::to_string(i) + " could not join the communicator: " +
                             (i == bad ? why : "rank " + std::to_string(bad) + " reported: " + why);
    CHECK(r.out.find(line) != std::string::npos);
  }
}

// A rank whose own setting is malformed joins only far enough to say so: every other rank
// fails at once with its reason, naming it, instead of waiting for it until the timeout.
// Rank 0 serves the store (torchrun's environment), so both its failing and another's do.
TEST_CASE("a rank with a malformed setting fails every rank's init at once, naming it", "[multiproc]") {
  for (int bad : {0, 2}) {
    INFO("malformed on rank " << bad);
    checkOneRankFailsEveryInit("BRAID_NSLOTS=$([ $r = " + std::to_string(bad) + " ] && echo abc || echo 8)",
                               MP_DIR "/mp_collectives", bad, "BRAID_NSLOTS='abc' is not an integer in [2, 1024]");
  }
}

// So does a rank whose launcher variables place it wrongly on its host (a local size above
// the world size, a malformed local rank): its rank and the store are sound, so it joins
// only to tell the others, who fail at once instead of at the timeout.
TEST_CASE("a rank with a malformed local placement fails every rank's init at once, naming it", "[multiproc]") {
  struct Case {
    int bad;
    const char* var;
    const char* value;
    const char* why;
  };
  for (const Case& c : {Case{0, "LOCAL_WORLD_SIZE", "5", "LOCAL_WORLD_SIZE=5 exceeds WORLD_SIZE=3"},
                        Case{2, "LOCAL_RANK", "nine", "LOCAL_RANK='nine' is not an integer"}}) {
    INFO(c.var << " on rank " << c.bad);
    const std::string normal = std::string(c.var) == "LOCAL_RANK" ? "$r" : "3";
    checkOneRankFailsEveryInit("",
                               std::string("env ") + c.var + "=$([ $r = " + std::to_string(c.bad) + " ] && echo " +
                                   c.value + " || echo " + normal + ") " MP_DIR "/mp_collectives",
                               c.bad, c.why);
  }
}

// Two processes given the same rank (rank 2's told 1): before, every rank waited for rank 2
// until the timeout and then named it, never the cause. The second to claim rank 1 fails at
// once naming both processes, and its record fails the others, under torchrun's variables
// (rank 0 serves the store) and braidrun's (its own store).
TEST_CASE("two processes given the same rank fail every rank's init at once, naming both", "[multiproc]") {
  const std::string says = "rank 1 was given to two processes, pid [0-9]+ on host \\S+ and pid [0-9]+ on host \\S+: "
                           "is the same rank \\(RANK, BRAID_RANK, the rank argument\\) set on two of them\\?";
  for (const bool underBraidrun : {false, true}) {
    INFO((underBraidrun ? "braidrun" : "torchrun's variables"));
    const auto start = std::chrono::steady_clock::now();
    Run r = underBraidrun
                ? run(braidrun(3, "BRAIDRUN_GRACE_SEC=60 BRAID_TIMEOUT=30") +
                      "sh -c 'if [ $BRAID_RANK = 2 ]; then export BRAID_RANK=1; fi; exec " MP_DIR "/mp_collectives'")
                : torchrunJob(3, "BRAID_TIMEOUT=30", "env RANK=$((r == 2 ? 1 : r)) " MP_DIR "/mp_collectives");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(secs < 10);
    // The second claimant says it; the first rank 1 and rank 0 give its report.
    CHECK(countMatches(r.out, "rank 1 could not join the communicator: " + says) == 1);
    CHECK(countMatches(r.out, "rank 1 could not join the communicator: rank 1 reported: " + says) == 1);
    CHECK(countMatches(r.out, "rank 0 could not join the communicator: rank 1 reported: " + says) == 1);
  }
  // Each process in a pid namespace of its own, as containers that share the host's name run:
  // both claimants are pid 2 on the same host. Before, their claims read alike, neither was
  // caught, and every rank waited out the timeout for rank 2.
  const std::string ns = ownPidNamespace();
  if (ns.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  Run r = run(braidrun(3, "BRAIDRUN_GRACE_SEC=60 BRAID_TIMEOUT=30") + ns +
              "sh -c 'if [ $BRAID_RANK = 2 ]; then export BRAID_RANK=1; fi; exec " MP_DIR "/mp_collectives'");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(secs < 10);
  CHECK(countMatches(r.out, "rank 1 could not join the communicator: rank 1 was given to two processes, pid 2 on host "
                            "\\S+ \\(pid namespace [0-9]+\\) and pid 2 on host \\S+ \\(pid namespace [0-9]+\\)") == 1);
  CHECK(countMatches(r.out, "rank 0 could not join the communicator: rank 1 reported: rank 1 was given to two") == 1);
}

// A process whose own RANK is refused (RANK=7 of 3, RANK=abc: a launch script's slip) has no
// rank to join with, and the others used to wait the whole timeout for the rank it should
// have been. Where it knows the store it leaves its reason as the job's abort record: every
// rank fails its init at once, naming it.
TEST_CASE("a process whose RANK is refused fails every rank's init at once, naming it", "[multiproc]") {
  for (const std::string bad : {"7", "abc"}) {
    INFO("RANK=" + bad + " for the third process");
    const auto start = std::chrono::steady_clock::now();
    Run r = torchrunJob(3, "BRAID_TIMEOUT=30", "env RANK=$([ $r = 2 ] && echo " + bad + " || echo $r) " MP_DIR
                                                "/mp_collectives");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(secs < 10);
    const std::string why = bad == "7" ? "RANK=7 must be less than WORLD_SIZE=3" : "RANK='abc' is not an integer";
    // The process itself, then each rank with its report (the pid and host it came from).
    CHECK(countMatches(r.out, "\\[2\\] .*" + why) >= 1);
    for (int i = 0; i < 2; ++i)
      CHECK(countMatches(r.out, "\\[" + std::to_string(i) + "\\] .*rank " + std::to_string(i) +
                                    " could not join the communicator: a process given no rank of this job reported: .*" +
                                    why + " \\(pid [0-9]+ on host \\S+\\)") == 1);
  }
}

// A rank told another world size than its peers (WORLD_SIZE, nranks) would wait for ranks
// that never come: the world size travels with the settings every rank must share, and every
// rank fails at once, the one that differs through the others' abort record.
TEST_CASE("a rank told another world size fails every rank's init at once, naming it", "[multiproc]") {
  const auto start = std::chrono::steady_clock::now();
  Run r = torchrunJob(3, "BRAID_TIMEOUT=30", MP_DIR "/mp_collectives", "$([ $r = 2 ] && echo 4 || echo 3)");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(secs < 10);
  for (int i = 0; i < 2; ++i)
    CHECK(r.out.find("rank " + std::to_string(i) + " could not join the communicator: the world size differs between "
                     "ranks: rank 2 has 4, rank " + std::to_string(i) + " has 3") != std::string::npos);
  CHECK(r.out.find("rank 2 could not join the communicator: rank ") != std::string::npos);
  CHECK(r.out.find("reported: the world size differs between ranks: rank 2 has 4") != std::string::npos);
}

// A rank that never comes (started with a setting that keeps it off the store, or not at
// all) leaves the others the timeout, and then their error names it: not the store that
// rank 0 serves, which a check issued as the deadline ran out would otherwise blame.
TEST_CASE("a rank that never joins is named at the timeout, not the store", "[multiproc]") {
  Run r = torchrunJob(2, "BRAID_TIMEOUT=2", MP_DIR "/mp_collectives", "3");
  INFO(r.out);
  CHECK(r.status != 0);
  // Each names rank 2 itself, or gives the other's report that did.
  for (int i = 0; i < 2; ++i)
    CHECK(countMatches(r.out, "rank " + std::to_string(i) +
                                  " could not join the communicator: (rank [01] reported: )?allGather 'braid/peer' "
                                  "timed out waiting for rank\\(s\\) 2 of 3") == 1);
  CHECK(r.out.find("does not answer") == std::string::npos);
}

// Settings that decide how calls are cut into slots and rounds must agree: rank 2 with
// another BRAID_NSLOTS cut other rounds than its peers (wrong results over shared memory)
// until init compared them. Every rank fails init at once, naming the variable and a rank
// that differs, long before the timeout.
TEST_CASE("a rank whose BRAID_NSLOTS differs fails init on every rank, naming it", "[multiproc]") {
  const auto start = std::chrono::steady_clock::now();
  Run r = torchrunJob(3, "BRAID_TIMEOUT=30 BRAID_NSLOTS=$((r == 2 ? 16 : 8))", MP_DIR "/mp_bad_input");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status != 0);
  CHECK(secs < 15);
  CHECK(r.out.find("[0] init failed: braidCommInitFromEnv: rank 0 could not join the communicator: "
                   "BRAID_NSLOTS differs between ranks: rank 2 has 16, rank 0 has 8") != std::string::npos);
  CHECK(r.out.find("[1] init failed") != std::string::npos);
  CHECK(r.out.find("rank 0 has 8, rank 2 has 16; every rank of a job must set it the same") != std::string::npos);
  CHECK(r.out.find("bad input ok") == std::string::npos);
}

// A plugin the user named that does not load is worth a line even without BRAID_DEBUG, and
// the job goes on with the other transports.
TEST_CASE("a named plugin that does not load is one warning line per rank, and the job goes on", "[multiproc][plugin]") {
  const std::string file = "/nonexistent/libbraid-net-nothere.so";
  Run r = run(braidrun(2, "BRAID_DEBUG= BRAID_TRANSPORT_PLUGIN=" + file) + MP_DIR "/mp_bad_input");
  INFO(r.out);
  CHECK(r.status == 0);
  const std::string line = "WARN transport plugin " + file + " (named in BRAID_TRANSPORT_PLUGIN) not loaded, going on without it";
  size_t lines = 0;
  for (size_t at = r.out.find(line); at != std::string::npos; at = r.out.find(line, at + 1)) ++lines;
  CHECK(lines == 2);
  CHECK(r.out.find("No such file or directory") != std::string::npos);
  CHECK(r.out.find("bad input ok rank 1") != std::string::npos);
}

namespace {

// What horovodrun would give as HOROVOD_GLOO_RENDEZVOUS_ADDR on a host with a network: the
// first up, non-loopback IPv4 address; "" when there is none.
std::string hostAddress() {
  std::string found;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return found;
  for (ifaddrs* i = ifs; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    found = buf;
  }
  freeifaddrs(ifs);
  return found;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string horovodRun(const std::string& flags, int np, const std::string& env = "") {
  return env + " " HOROVOD_ENV_RUN " " + flags + " -t 120 " + std::to_string(np) + " ";
}

}  // namespace

// horovodrun --gloo names no store, only its own HTTP key-value server: rank 0 serves
// braid's store on a port it picks and publishes it there under scope "braid", and the
// others read it back. Run with the server on loopback and, where the host has one, on its
// network address (horovodrun gives the address of an interface, so rank 0 must publish
// the address it reaches that interface from, not "localhost").
TEST_CASE("ranks started as horovodrun --gloo starts them meet through its key-value server", "[multiproc][horovod]") {
  std::vector<std::string> addrs = {"127.0.0.1"};
  if (!hostAddress().empty()) addrs.push_back(hostAddress());
  for (const std::string& addr : addrs) {
    INFO("HOROVOD_GLOO_RENDEZVOUS_ADDR " << addr);
    char logPath[] = "/tmp/braid_hvd_log_XXXXXX";
    int fd = mkstemp(logPath);
    REQUIRE(fd >= 0);
    close(fd);
    Run r = run(horovodRun("-a " + addr + " -l " + logPath, 3, "BRAID_DEBUG=TRACE") + MP_DIR "/mp_collectives");
    const std::string log = slurp(logPath);
    unlink(logPath);
    INFO(r.out);
    INFO("requests:\n" << log);
    CHECK(r.status == 0);
    for (int i = 0; i < 3; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
    CHECK(log.find("PUT /braid/store.n3.i0 200") != std::string::npos);
    CHECK(log.find("GET /braid/store.n3.i0 200") != std::string::npos);
    // Rank 0 published the address it reaches the server from.
    CHECK(r.out.find("publishing store " + addr + ":") != std::string::npos);
  }
  Run perf = run(horovodRun("", 2) + ALLREDUCE_PERF " -b 8 -e 1M -f 32 -n 2 -w 1 -c 1");
  INFO(perf.out);
  CHECK(perf.status == 0);
  CHECK(perf.out.find("Out of bounds values : 0 OK") != std::string::npos);
}

// hvd.shutdown() then hvd.init() in the same processes rendezvous again through the same
// server, where the first init's address (of a store now gone) is still stored: every init
// must meet on a key of its own.
TEST_CASE("under horovodrun, a communicator made again in the same processes meets on a new key", "[multiproc][horovod]") {
  char logPath[] = "/tmp/braid_hvd_log_XXXXXX";
  int fd = mkstemp(logPath);
  REQUIRE(fd >= 0);
  close(fd);
  Run r = run(horovodRun(std::string("-l ") + logPath, 3) + MP_DIR "/mp_reinit 4");
  const std::string log = slurp(logPath);
  unlink(logPath);
  INFO(r.out);
  INFO("requests:\n" << log);
  CHECK(r.status == 0);
  for (int i = 0; i < 3; ++i)
    CHECK(r.out.find("reinit ok rank " + std::to_string(i) + " rounds 4") != std::string::npos);
  for (int g = 0; g < 4; ++g) CHECK(log.find("PUT /braid/store.n3.i" + std::to_string(g) + " 200") != std::string::npos);
}

// A rank whose key-value server is not there fails within BRAID_TIMEOUT, naming the
// server's address and the variables it came from.
TEST_CASE("under horovodrun, an unreachable key-value server fails init naming it", "[multiproc][horovod]") {
  const RefusingPort refusing;  // nothing listens on it, and nothing can while this runs
  const std::string& port = refusing.port();
  for (const char* rank : {"0", "1"}) {
    INFO("HOROVOD_RANK " << rank);
    Run r = run(std::string("env -u BRAID_RANK -u BRAID_WORLD_SIZE BRAID_TIMEOUT=2 HOROVOD_RANK=") + rank +
                " HOROVOD_SIZE=2 HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 HOROVOD_GLOO_RENDEZVOUS_PORT=" + port + " " +
                MP_DIR "/mp_collectives");
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(r.seconds < 10);
    CHECK(r.out.find("127.0.0.1:" + port) != std::string::npos);
    CHECK(r.out.find("HOROVOD_GLOO_RENDEZVOUS_ADDR") != std::string::npos);
    CHECK(r.out.find("refused") != std::string::npos);
  }
}

// Horovod's own launcher, where Horovod is installed in the Python environment: its real
// rendezvous server and the variables it really sets, nothing else.
TEST_CASE("Horovod's gloo launcher starts braid ranks with no other variables", "[multiproc][horovod]") {
  const std::string python = HOROVOD_PYENV "/bin/python";
  if (run(python + " -c 'import horovod.runner.gloo_run'").status != 0) {
    WARN("skipped: Horovod is not installed in " HOROVOD_PYENV);
    return;
  }
  const std::string clean = "env -u BRAID_RANK -u BRAID_WORLD_SIZE -u BRAID_STORE_ADDR ";
  std::string launch = clean + HOROVOD_PYENV "/bin/horovodrun --gloo -H localhost:3 -np ";
  Run r = run(launch + "3 " MP_DIR "/mp_collectives");
  if (r.status != 0 && r.out.find("Gloo support has not been built") != std::string::npos) {
    // horovodrun refuses --gloo when Horovod's own gloo extension is missing, which braid's
    // ranks never use: drive the same launch path without that check.
    WARN("horovodrun --gloo refused (Horovod was built without gloo); using its gloo launch path directly");
    launch = clean + python + " " HOROVOD_LAUNCH_GLOO " ";
    r = run(launch + "3 " MP_DIR "/mp_collectives");
  }
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 3; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
  Run again = run(launch + "3 " MP_DIR "/mp_reinit 3");
  INFO(again.out);
  CHECK(again.status == 0);
  for (int i = 0; i < 3; ++i) CHECK(again.out.find("reinit ok rank " + std::to_string(i) + " rounds 3") != std::string::npos);
}

// A program that makes its communicator from braidrun's environment again after destroying
// it (a framework re-creating its world) meets on fresh keys of braidrun's store, which still
// holds the first init's records; without them rank 0 read another session's nonce.
TEST_CASE("under braidrun, a communicator made again in the same processes meets on fresh keys", "[multiproc]") {
  Run r = run(std::string(BRAIDRUN) + " -np 3 " MP_DIR "/mp_reinit 4");
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 3; ++i)
    CHECK(r.out.find("reinit ok rank " + std::to_string(i) + " rounds 4") != std::string::npos);
}

// torchrun-style jobs (rank 0 serves the store on MASTER_PORT) that make their communicator
// again: rank 0 serves a new store on the same port while a faster rank may still reach the
// previous one, which refuses it (its init's number differs) instead of holding it there.
TEST_CASE("under torchrun, a communicator made again in the same processes meets on the new store", "[multiproc]") {
  Run r = torchrunJob(3, "BRAID_TIMEOUT=20", MP_DIR "/mp_reinit 5");
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 3; ++i)
    CHECK(r.out.find("reinit ok rank " + std::to_string(i) + " rounds 5") != std::string::npos);
}

// braidrun's store admits only its ranks: a process on the same host without the job's key
// (or with another) is refused and logged, and the job, running while it tries, is correct.
TEST_CASE("a stranger cannot get into a braidrun job's store, and the job's results stay right", "[multiproc][auth]") {
  Run r = run(std::string(BRAIDRUN) +
              " -np 2 -x BRAID_TRANSPORT=tcp sh -c 'if [ \"$BRAID_RANK\" = 0 ]; then env -u BRAID_AUTH_KEY " MP_DIR
              "/store_stranger probe \"$BRAID_STORE_ADDR\" || exit 3; fi; exec " MP_DIR "/mp_collectives'");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("STRANGER ADMITTED") == std::string::npos);
  CHECK(r.out.find("stranger refused: no key: ") != std::string::npos);
  CHECK(r.out.find("stranger refused: wrong key: ") != std::string::npos);
  CHECK(r.out.find("stranger refused: 64 MiB frame") != std::string::npos);
  // braidrun's store says whom it refused.
  CHECK(r.out.find("refusing client 127.0.0.1:") != std::string::npos);
  for (int i = 0; i < 2; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
}

// Launchers other than braidrun (torchrun here) pass the key in BRAID_AUTH_KEY: rank 0's
// store and every tcp connection then require it. A rank with another key fails at once
// saying "authentication failed"; the others fail within the timeout, naming the rank they
// miss, instead of running with a stranger.
TEST_CASE("with BRAID_AUTH_KEY from another launcher, a rank with a wrong key fails fast and clearly",
          "[multiproc][auth]") {
  auto launch = [](const std::string& keyOfRank2) {
    return torchrunJob(3,
                       "-u BRAID_AUTH_KEY_FILE BRAID_TRANSPORT=tcp BRAID_TIMEOUT=6 BRAID_AUTH_KEY=\"$([ $r = 2 ] && "
                       "echo " + keyOfRank2 + " || echo job key for the test long enough)\"",
                       MP_DIR "/mp_collectives");
  };
  Run good = launch("job key for the test long enough");
  INFO(good.out);
  CHECK(good.status == 0);
  for (int i = 0; i < 3; ++i) CHECK(good.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
  CHECK(good.out.find("not authenticated") == std::string::npos);

  const auto start = std::chrono::steady_clock::now();
  Run bad = launch("another key also long enough");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(bad.out);
  CHECK(bad.status != 0);
  CHECK(bad.out.find("[2] ") != std::string::npos);
  CHECK(bad.out.find("authentication failed") != std::string::npos);
  CHECK(bad.out.find("collectives ok") == std::string::npos);
  CHECK(secs < 30);
}

// The attacks of a stranger who cannot get in, all at once against braidrun's store while
// the job starts and runs: 2000 idle connections held open, 64 MiB frames, 200 slow-loris
// HELLOs. braidrun's memory and descriptors stay bounded, the ranks (which connect during
// the flood) get in, and their results are right.
TEST_CASE("braidrun's store under a stranger's flood, huge frames and slow loris: bounded, and the job runs right",
          "[multiproc][auth][chaos]") {
  const auto start = std::chrono::steady_clock::now();
  Run r = run("BRAID_STORE_HELLO_SEC=2 " + braidrun(2) + "-x BRAID_TRANSPORT=tcp " STORE_ATTACK_JOB " " MP_DIR " 8");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 2; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
  CHECK(r.out.find("attack: flood held") != std::string::npos);
  std::regex re(R"((BEFORE|DURING|AFTER) rss_kb=(\d+) fds=(\d+))");
  long rssBefore = -1, rssMax = 0, fdMax = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), re); it != std::sregex_iterator(); ++it) {
    const long rss = std::stol((*it)[2]), fds = std::stol((*it)[3]);
    if ((*it)[1] == "BEFORE") rssBefore = rss;
    rssMax = std::max(rssMax, rss);
    fdMax = std::max(fdMax, fds);
  }
  REQUIRE(rssBefore > 0);
  CHECK(rssMax - rssBefore < 32 * 1024);  // KiB: a few hundred bytes per pending connection
  CHECK(fdMax < 1100);                     // BRAID_STORE_MAX_PENDING (1024) and the job's own
  CHECK(secs < 60);
}

// Without a key a job runs as before, and says so once: one SECURITY line, from rank 0,
// whatever BRAID_DEBUG says.
TEST_CASE("a job launched without a key runs and rank 0 says once that it is not authenticated", "[multiproc][auth]") {
  Run r = torchrunJob(3, "-u BRAID_AUTH_KEY -u BRAID_AUTH_KEY_FILE -u BRAID_DEBUG", MP_DIR "/mp_collectives");
  INFO(r.out);
  CHECK(r.status == 0);
  for (int i = 0; i < 3; ++i) CHECK(r.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
  const std::string line = "SECURITY rank 0: this job is not authenticated";
  const size_t first = r.out.find(line);
  REQUIRE(first != std::string::npos);
  CHECK(r.out.find("not authenticated", first + line.size()) == std::string::npos);
}

// BRAID_TLS=1: every store connection and tcp data connection runs TLS keyed by the job key;
// results are exact (braidrun, and braidGetUniqueId's store).
// Without a key there is nothing to key it with: init fails saying so.
TEST_CASE("BRAID_TLS=1 over tcp checks its results with zero wrong, and needs the job key", "[multiproc][tls]") {
  Run r = run(braidrun(3) + "-x BRAID_TLS=1 -x BRAID_TRANSPORT=tcp -x BRAID_SOCKETS_PER_PEER=2 " ALLREDUCE_PERF
                            " -b 8 -e 4M -f 16 -n 3 -w 1 -c 1");
  INFO(r.out);
  if (r.out.find("built without OpenSSL") != std::string::npos) {
    WARN("skipped: built without OpenSSL");
    return;
  }
  CHECK(r.status == 0);
  CHECK(r.out.find("Out of bounds values : 0 OK") != std::string::npos);
  Run c = run(braidrun(3) + "-x BRAID_TLS=1 -x BRAID_TRANSPORT=tcp " MP_DIR "/mp_collectives");
  INFO(c.out);
  CHECK(c.status == 0);
  for (int i = 0; i < 3; ++i) CHECK(c.out.find("collectives ok rank " + std::to_string(i)) != std::string::npos);
  // A killed rank: every survivor reports it, as over plain tcp (none dies of SIGPIPE
  // writing to it through the TLS session).
  Run k = run(braidrun(3) + "-x BRAID_TLS=1 -x BRAID_TRANSPORT=tcp -x BRAID_TIMEOUT=20 " MP_DIR
                            "/mp_fault kill 1 20 262144");
  INFO(k.out);
  auto res = results(k.out);
  CHECK(res.size() == 2);
  for (int surv : {0, 2}) {
    REQUIRE(res.count(surv));
    CHECK(res[surv].failedRank == 1);
  }
  // braidGetUniqueId + braidCommInitRank: the id's key keys the store's TLS and the data's.
  Run u = run("BRAID_TLS=1 BRAID_TRANSPORT=tcp timeout 120 " MP_DIR "/mp_unique_id 3");
  INFO(u.out);
  CHECK(u.status == 0);
  CHECK(u.out.find("unique id ok") != std::string::npos);

  Run nokey = torchrunJob(2, "-u BRAID_AUTH_KEY -u BRAID_AUTH_KEY_FILE BRAID_TLS=1 BRAID_TIMEOUT=10",
                          MP_DIR "/mp_collectives");
  INFO(nokey.out);
  CHECK(nokey.status != 0);
  CHECK(nokey.out.find("BRAID_TLS=1 needs the job's key") != std::string::npos);
}

// A rank whose own BRAID_TLS is malformed cannot tell which the job speaks: it tries the
// store in TLS and then in plaintext, and where it serves the store (rank 0 under torchrun)
// takes either, so that every rank reads why it fails at once, in a TLS job and in one
// without.
TEST_CASE("a rank with a malformed BRAID_TLS fails every rank's init at once, TLS job or not", "[multiproc][tls]") {
  for (const char* tls : {"1", "0"}) {
    for (int bad : {0, 2}) {
      INFO("BRAID_TLS=" << tls << ", malformed on rank " << bad);
      checkOneRankFailsEveryInit("BRAID_AUTH_KEY=00112233445566778899aabbccddeeff BRAID_TLS=$([ $r = " +
                                     std::to_string(bad) + " ] && echo maybe || echo " + tls + ")",
                                 MP_DIR "/mp_collectives", bad, "BRAID_TLS='maybe' is not 0 or 1");
    }
  }
}
