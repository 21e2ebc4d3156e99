// braid-info: what this build of braid is and how it is configured.
//   braid-info            version, CPU kernels, transports, placement
//   braid-info --config   every environment knob: name, type, default, current value, help
//   braid-info --plan COLL SIZE... [world]
//                         the planner's choice and predicted time per size, e.g.
//                         `braid-info --plan allreduce 8 1K 1M 1G --hosts 4 --latency 1ms`
//   braid-info --scaling COLL SIZE [world] [--max-ranks N]
//                         every algorithm's simulated time from 2 ranks up (docs/scaling.md)
//   braid-info --status [PID | HOST:PORT | etcd://HOST:PORT/PREFIX] [--wait S] [--watch S]
//                         where each rank of a running job is now, and which rank holds
//                         the others up (core/live_status.h)
// A world is --hosts H --ranks-per-host R [--channels C] [--transport T] [--latency T]
// [--bandwidth B] [--simulate]; without one, a running job's WORLD_SIZE / LOCAL_WORLD_SIZE
// (torchrun, braidrun) describe it, else one host of 8 ranks.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "bootstrap/etcd_store.h"
#include "bootstrap/job_file.h"
#include "bootstrap/launch_env.h"
#include "bootstrap/tcp_store.h"
#include "core/live_status.h"
#include "common/timeline.h"
#include "core/config.h"
#include "device/runtime.h"
#include "plan/planner.h"
#include "plan/simulator.h"
#include "reduce/reduce.h"
#include "topology/placement.h"
#include "transports/transport.h"

namespace {

void printConfig() {
  int width = 24;  // the longest name's, so that the columns line up
  for (const auto& e : braid::core::configTable()) width = std::max(width, static_cast<int>(std::strlen(e.name)));
  std::printf("%-*s %-8s %-8s %-16s %s\n", width, "variable", "type", "default", "current", "help");
  for (const auto& e : braid::core::configTable()) {
    const char* cur = std::getenv(e.name);
    std::printf("%-*s %-8s %-8s %-16s %s\n", width, e.name, e.type, *e.defaultValue ? e.defaultValue : "-",
                cur ? cur : "-", e.help);
  }
  auto cfg = braid::core::Config::fromEnv();
  if (!cfg.isOk()) {
    std::printf("\nerror: %s\n", cfg.status().toString().c_str());
    std::exit(2);
  }
}

// "8", "1K", "64M", "1G" (binary) -> bytes; false when malformed.
bool parseBytes(const std::string& s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  std::string u = end;
  double mul = 1;
  if (u == "K" || u == "KB" || u == "KiB") mul = 1024.0;
  else if (u == "M" || u == "MB" || u == "MiB") mul = 1024.0 * 1024;
  else if (u == "G" || u == "GB" || u == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (!u.empty()) return false;
  *out = v * mul;
  return true;
}

// "1ms", "20us", "5ns", "0.001" (seconds) -> seconds.
bool parseSeconds(const std::string& s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  std::string u = end;
  if (u == "s" || u.empty()) *out = v;
  else if (u == "ms") *out = v * 1e-3;
  else if (u == "us") *out = v * 1e-6;
  else if (u == "ns") *out = v * 1e-9;
  else return false;
  return true;
}

std::string fmtBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s", b, units[u]);
  return buf;
}

std::string fmtTime(double s) {
  char buf[32];
  if (s < 0) return "-";
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

struct WorldArgs {
  int hosts = 0, ranksPerHost = 0, channels = 0, maxRanks = 1024;
  std::string transport;
  double latency = -1, bandwidth = -1;
  bool simulate = false;
  std::vector<std::string> rest;
};

void printUsage(FILE* f) {
  std::fprintf(f,
               "usage: braid-info [--config | --version | --help]\n"
               "       braid-info --timeline DIR [-o FILE]\n"
               "       braid-info --plan COLL SIZE... [--hosts H] [--ranks-per-host R] [--channels C]\n"
               "                  [--transport T] [--latency 1ms] [--bandwidth 1.2G] [--simulate]\n"
               "       braid-info --scaling COLL SIZE [--ranks-per-host R] [--max-ranks N] [...]\n"
               "       braid-info --status [PID | HOST:PORT | etcd://HOST:PORT/PREFIX] [--wait S] [--watch S]\n"
               "  (no argument)  version, reduction kernels, transports (built in and plugins), machine\n"
               "  --config       every environment knob: name, type, default, current value, help\n"
               "  --plan         the algorithm, channels and predicted time braid picks per size\n"
               "  --scaling      the same for growing rank counts\n"
               "  --status       where each rank of a running job is now and which rank holds the\n"
               "                 others up: braidrun's PID (default: this user's only braidrun job) or\n"
               "                 the store's HOST:PORT with the job's BRAID_AUTH_KEY[_FILE], or its etcd\n"
               "                 URL with the prefix its ranks log (BRAID_ETCD_* as theirs); --wait S\n"
               "                 for answers (1 s), --watch S to ask again every S seconds\n"
               "  --timeline     merge the per-rank traces BRAID_TIMELINE=DIR wrote into one Chrome\n"
               "                 trace (default DIR/timeline.json; open in ui.perfetto.dev)\n"
               "  --version      braid's version\n");
}

[[noreturn]] void usage() {
  printUsage(stderr);
  std::exit(2);
}

WorldArgs parseWorld(int argc, char** argv, int first) {
  WorldArgs w;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--hosts") w.hosts = std::atoi(next().c_str());
    else if (a == "--ranks-per-host") w.ranksPerHost = std::atoi(next().c_str());
    else if (a == "--channels") w.channels = std::atoi(next().c_str());
    else if (a == "--max-ranks") w.maxRanks = std::atoi(next().c_str());
    else if (a == "--transport") w.transport = next();
    else if (a == "--simulate") w.simulate = true;
    else if (a == "--latency") {
      if (!parseSeconds(next(), &w.latency)) usage();
    } else if (a == "--bandwidth") {
      if (!parseBytes(next(), &w.bandwidth)) usage();
    } else if (a.rfind("--", 0) == 0) {
      usage();
    } else {
      w.rest.push_back(a);
    }
  }
  // Inside a running job, its size and ranks per host stand in for the flags.
  if (w.hosts <= 0 && w.ranksPerHost <= 0) {
    const char* ws = std::getenv("WORLD_SIZE");
    const char* lws = std::getenv("LOCAL_WORLD_SIZE");
    if (!lws) lws = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int n = ws ? std::atoi(ws) : 0;
    int local = lws ? std::atoi(lws) : 0;
    if (n > 0) {
      w.ranksPerHost = local > 0 ? local : n;
      w.hosts = std::max(1, n / w.ranksPerHost);
    }
  }
  if (w.hosts <= 0) w.hosts = 1;
  if (w.ranksPerHost <= 0) w.ranksPerHost = 8;
  if (w.channels <= 0) w.channels = 1;
  return w;
}

braid::plan::Machine machineOf(const WorldArgs& w, int hosts, int ranksPerHost) {
  braid::plan::Machine m = braid::plan::uniformMachine(hosts, ranksPerHost, w.channels);
  if (!w.transport.empty()) m.intra = m.inter = braid::plan::transportLink(w.transport);
  // --latency / --bandwidth describe the network (or the only link on one host).
  braid::plan::Link& net = hosts > 1 ? m.inter : m.intra;
  if (w.latency >= 0) net.alpha = w.latency;
  if (w.bandwidth > 0) net.beta = w.bandwidth;
  if (w.transport == "tcp" && hosts == 1) {  // the communicator's stream geometry
    m.ringSlotBytes = 64 * 1024;
    m.ringSlots = 8;
  }
  return m;
}

bool parseCollective(const std::string& name, braid::algorithms::Collective* c) {
  for (int i = 0; i < braid::algorithms::kNumCollectives; ++i) {
    auto coll = static_cast<braid::algorithms::Collective>(i);
    if (name == braid::algorithms::collectiveName(coll)) {
      *c = coll;
      return true;
    }
  }
  return false;
}

// A float32 request whose size column (requestBytes) is `bytes`.
braid::algorithms::Request requestOf(braid::algorithms::Collective c, double bytes, int n) {
  using braid::algorithms::Collective;
  braid::algorithms::Request r;
  r.coll = c;
  r.dtype = braid::DataType::kFloat32;
  size_t elems = static_cast<size_t>(bytes / 4);
  switch (c) {
    case Collective::kAllGather: case Collective::kReduceScatter: case Collective::kAllToAll:
    case Collective::kGather: case Collective::kScatter:
      r.count = elems / static_cast<size_t>(n);
      break;
    case Collective::kAllGatherV: case Collective::kReduceScatterV: case Collective::kAllToAllV:
      r.counts.assign(static_cast<size_t>(n), elems / static_cast<size_t>(n));
      r.sendCounts = r.counts;
      for (int i = 0; i < n; ++i) {
        r.displs.push_back(static_cast<size_t>(i) * r.counts[0]);
        r.sendDispls.push_back(static_cast<size_t>(i) * r.counts[0]);
      }
      break;
    case Collective::kSendRecv:
      r.p2p.push_back({true, n > 1 ? 1 : 0, elems});
      break;
    default:
      r.count = elems;
  }
  return r;
}

std::string describe(const braid::plan::Machine& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%d hosts x %d ranks, %d channel(s); intra alpha %s beta %s/s; inter alpha %s beta %s/s",
                m.nhosts(), m.maxRanksPerHost(), m.nchannels, fmtTime(m.intra.alpha).c_str(),
                fmtBytes(m.intra.beta).c_str(), fmtTime(m.inter.alpha).c_str(), fmtBytes(m.inter.beta).c_str());
  return buf;
}

int printPlan(int argc, char** argv) {
  WorldArgs w = parseWorld(argc, argv, 2);
  braid::algorithms::Collective coll;
  if (w.rest.size() < 2 || !parseCollective(w.rest[0], &coll)) usage();
  braid::plan::Machine m = machineOf(w, w.hosts, w.ranksPerHost);
  auto rules = braid::plan::parseAlgoOverride(braid::core::Config::fromEnv().isOk()
                                                  ? braid::core::Config::fromEnv().value().algo
                                                  : std::string());
  std::printf("# %s; %s\n", w.rest[0].c_str(), describe(m).c_str());
  std::printf("%-10s %-20s %-8s %-10s %-12s %s\n", "size", "algorithm", "channels", "slice", "predicted",
              w.simulate ? "simulated / all candidates: predicted (simulated)" : "all candidates (predicted)");
  const braid::algorithms::Layout layout = braid::plan::simLayout(m, 0);
  for (size_t i = 1; i < w.rest.size(); ++i) {
    double bytes;
    if (!parseBytes(w.rest[i], &bytes)) usage();
    braid::algorithms::Request req = requestOf(coll, bytes, m.nranks());
    auto p = braid::plan::choosePlan(req, layout, m, rules.isOk() ? &rules.value() : nullptr, nullptr);
    if (!p.isOk()) {
      std::printf("%-10s error: %s\n", w.rest[i].c_str(), p.status().toString().c_str());
      continue;
    }
    std::string sim;
    if (w.simulate) {
      auto r = braid::plan::simulateAlgorithm(*p->algo, req, m);
      sim = (r.isOk() ? fmtTime(r->seconds) : std::string("error")) + " / ";
    }
    std::string all;
    for (const auto& c : braid::plan::rankAlgorithms(req, m)) {
      all += std::string(all.empty() ? "" : ", ") + c.algo->name + " " + fmtTime(c.seconds);
      if (w.simulate) {  // and what the simulator makes of the candidate's real schedules
        auto r = braid::plan::simulateAlgorithm(*c.algo, req, m);
        all += r.isOk() ? " (sim " + fmtTime(r->seconds) + ")" : std::string(" (n/a)");
      }
    }
    std::printf("%-10s %-20s %-8d %-10s %-12s %s%s%s\n", fmtBytes(bytes).c_str(),
                (std::string(p->algo->name) + (p->overridden ? " (BRAID_ALGO)" : "")).c_str(), p->channels,
                fmtBytes(static_cast<double>(p->sliceBytes)).c_str(), fmtTime(p->predicted).c_str(), sim.c_str(),
                all.c_str(), "");
  }
  return 0;
}

// One markdown table: rows are rank counts, columns every algorithm of `coll` (simulated).
int printScaling(int argc, char** argv) {
  WorldArgs w = parseWorld(argc, argv, 2);
  braid::algorithms::Collective coll;
  double bytes;
  if (w.rest.size() != 2 || !parseCollective(w.rest[0], &coll) || !parseBytes(w.rest[1], &bytes)) usage();
  std::vector<const braid::algorithms::AlgorithmInfo*> algos;
  for (const auto& a : braid::algorithms::algorithmTable())
    if (a.coll == coll) algos.push_back(&a);
  braid::plan::Machine probe = machineOf(w, 2, w.ranksPerHost);
  std::printf("%s of %s, %d rank(s) per host; %s\n\n", w.rest[0].c_str(), fmtBytes(bytes).c_str(), w.ranksPerHost,
              describe(probe).c_str());
  std::printf("| ranks |");
  for (auto* a : algos) std::printf(" %s |", a->name);
  std::printf(" planner picks |\n|---|");
  for (size_t i = 0; i <= algos.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (int n = 2; n <= w.maxRanks; n *= 2) {
    int rph = std::min(n, w.ranksPerHost);
    braid::plan::Machine m = machineOf(w, n / rph, rph);
    braid::algorithms::Request req = requestOf(coll, bytes, n);
    std::printf("| %d |", n);
    for (auto* a : algos) {
      auto r = braid::plan::simulateAlgorithm(*a, req, m);
      std::printf(" %s |", r.isOk() ? fmtTime(r->seconds).c_str() : "n/a");
    }
    auto p = braid::plan::choosePlan(req, braid::plan::simLayout(m, 0), m, nullptr, nullptr);
    std::printf(" %s |\n", p.isOk() ? p->algo->name : "-");
    std::fflush(stdout);
  }
  return 0;
}

// Every transport found, built in and plugins, with the scores it gives a peer in this
// process, on this host and on another host (0 = cannot reach it), and what it found.
void printTransports() {
  using braid::transport::PeerInfo;
  std::printf("transports (score: same process / same host / other host):\n");
  PeerInfo local{0, "braid-info-host", static_cast<int64_t>(getpid()), 1};
  PeerInfo sameProcess = local;
  sameProcess.rank = 1;
  PeerInfo sameHost = sameProcess;
  sameHost.pid += 1;
  PeerInfo otherHost = sameHost;
  otherHost.hostId = "braid-info-other-host";
  for (const auto& f : braid::transport::registry()) {
    braid::transport::TransportConfig cfg;
    cfg.nranks = 2;
    auto t = f.create(cfg);
    std::printf("  %-10s %s%s%s\n", f.name, f.origin.c_str(), f.version.empty() ? "" : ", ",
                f.version.c_str());
    if (!t.isOk()) {
      std::printf("             unavailable here: %s\n", t.status().message().c_str());
      continue;
    }
    std::printf("             score %d / %d / %d", t.value()->canConnect(local, sameProcess),
                t.value()->canConnect(local, sameHost), t.value()->canConnect(local, otherHost));
    std::string d = t.value()->describe();
    std::printf("%s%s\n", d.empty() ? "" : "; ", d.c_str());
  }
  for (const auto& failed : braid::transport::pluginFailures())
    std::printf("  %-10s %s: not loaded: %s\n", failed.name.c_str(), failed.file.c_str(), failed.reason.c_str());
}

// The store of the job `target` names: a braidrun pid, HOST:PORT, an etcd URL (the prefix
// the job's keys are under, its run's tag included), or "" (this user's only running
// braidrun job, else BRAID_STORE_ADDR); `title` says which job it is.
braid::StatusOr<std::unique_ptr<braid::bootstrap::Store>> statusStore(const std::string& target, std::string* title) {
  using braid::Code;
  using braid::Status;
  namespace bs = braid::bootstrap;
  auto isEtcd = [](const std::string& a) { return a.rfind("etcd://", 0) == 0 || a.rfind("etcds://", 0) == 0; };
  // The credentials are this environment's BRAID_ETCD_* settings, as the ranks' are.
  auto etcdStore = [](const std::string& at) -> braid::StatusOr<std::unique_ptr<bs::Store>> {
    BRAID_ASSIGN_OR_RETURN(bs::EtcdUrl url, bs::parseEtcdUrl("the store", at));
    BRAID_ASSIGN_OR_RETURN(bs::EtcdCredentials credentials, bs::EtcdCredentials::fromEnv());
    BRAID_ASSIGN_OR_RETURN(auto etcd, bs::EtcdStore::connect(url, braid::Deadline::after(5), std::move(credentials)));
    return std::unique_ptr<bs::Store>(std::move(etcd));
  };
  if (isEtcd(target)) {
    *title = "job at " + target;
    return etcdStore(target);
  }
  std::string addr;
  braid::AuthKey key;
  bool tls = false;
  const bool isAddr = target.find(':') != std::string::npos;
  if (!isAddr) {
    const int pid = target.empty() ? 0 : std::atoi(target.c_str());
    if (!target.empty() && (pid <= 0 || target.find_first_not_of("0123456789") != std::string::npos))
      return Status(Code::kInvalidArgument, "'" + target + "' is neither braidrun's pid nor HOST:PORT");
    auto dir = bs::jobFileDir(false);
    auto jobs = dir.isOk() ? bs::listJobFiles(pid) : braid::StatusOr<std::vector<bs::JobFile>>(dir.status());
    const std::string where = dir.isOk() ? dir.value() : std::string("(") + dir.status().message() + ")";
    if (jobs.isOk() && jobs.value().size() == 1) {
      const bs::JobFile& j = jobs.value()[0];
      addr = j.store;
      key = j.key;
      tls = j.tls;
      *title = "braidrun job " + std::to_string(j.pid) + " (" + std::to_string(j.np) + " ranks, started " +
               std::to_string(static_cast<long long>(time(nullptr)) - j.started) + " s ago): " + j.command;
    } else if (pid > 0) {
      return Status(Code::kInvalidArgument, "no running braidrun job with pid " + std::to_string(pid) +
                                                " of this user in " + where);
    } else if (jobs.isOk() && jobs.value().size() > 1) {
      std::string list;
      for (const auto& j : jobs.value()) list += "\n  " + std::to_string(j.pid) + "  " + j.command;
      return Status(Code::kInvalidArgument, "several braidrun jobs run; name one by its pid:" + list);
    } else if (const char* e = std::getenv("BRAID_STORE_ADDR"); e && *e) {
      addr = e;
    } else {
      return Status(Code::kInvalidArgument, "no running braidrun job of this user in " + where +
                                                "; give the store's HOST:PORT (with the job's BRAID_AUTH_KEY or "
                                                "BRAID_AUTH_KEY_FILE)");
    }
  } else {
    addr = target;
  }
  if (title->empty()) {
    // Not a braidrun job's file: the key and TLS come from this environment, as a rank's.
    *title = "job at " + addr;
    BRAID_ASSIGN_OR_RETURN(key, braid::authKeyFromEnv());
    auto cfg = braid::core::Config::fromEnv();
    tls = cfg.isOk() && cfg.value().tls && key.present;
  }
  if (isEtcd(addr)) return etcdStore(addr);  // a braidrun job whose ranks' store is etcd
  std::string host;
  int port = 0;
  BRAID_RETURN_IF_ERROR(bs::parseStoreAddress("the store address", addr, &host, &port));
  // braidrun's store takes any nonce; a store rank 0 serves (torchrun, mpirun, Slurm) wants
  // the number of its init: the first few are tried.
  Status last;
  for (uint64_t init = 0; init <= 64; ++init) {
    const uint64_t nonce = init == 0 ? 0 : 0x6272616964000000ull + init;
    auto c = bs::TcpStoreClient::connect(host, port, nonce, braid::Deadline::after(5), 10, key, tls);
    if (c.isOk()) return std::unique_ptr<bs::Store>(std::move(c).value());
    last = c.status();
    if (last.message().find("nonce mismatch") == std::string::npos) break;
  }
  // Something listens there but does not speak braid's store protocol: a PyTorch job's store
  // (torchrun's MASTER_ADDR:MASTER_PORT), perhaps, where braid's ranks answer too, asked
  // through torch's client.
  if (last.message().find("HELLO") == std::string::npos) return last;
  return Status(last.code(), last.message() + "\nIf " + addr +
                                 " is a PyTorch job's store (MASTER_ADDR:MASTER_PORT), ask it with: python -m "
                                 "braid.torch.status " + addr);
}

int printStatus(int argc, char** argv) {
  std::string target;
  double wait = 1.0, watch = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&](const char* flag) {
      if (i + 1 >= argc) usage();
      char* end = nullptr;
      double v = std::strtod(argv[++i], &end);
      if (*end || !(v > 0) || v > 3600) {
        std::fprintf(stderr, "braid-info --status: %s '%s' must be a number of seconds in (0, 3600]\n", flag, argv[i]);
        std::exit(2);
      }
      return v;
    };
    if (a == "--wait") wait = number("--wait");
    else if (a == "--watch") watch = number("--watch");
    else if (a.rfind("--", 0) == 0 || !target.empty()) usage();
    else target = a;
  }
  std::string title;
  auto store = statusStore(target, &title);
  if (!store.isOk()) {
    std::fprintf(stderr, "braid-info --status: %s\n", store.status().message().c_str());
    return 1;
  }
  for (;;) {
    auto states = braid::core::askLiveStatus(*store.value(), wait);
    if (!states.isOk()) {
      std::fprintf(stderr, "braid-info --status: %s\n", states.status().message().c_str());
      return 1;
    }
    std::printf("%s\n%s", title.c_str(), braid::core::renderLiveStatus(states.value(), wait).c_str());
    std::fflush(stdout);
    if (watch <= 0) return 0;
    usleep(static_cast<useconds_t>(watch * 1e6));
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    printUsage(stdout);
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "--version")) {
    std::printf("braid-info (braid) %d.%d.%d\n", BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH);
    return 0;
  }
  if (argc > 1 && !std::strcmp(argv[1], "--timeline")) {
    if (argc != 3 && !(argc == 5 && !std::strcmp(argv[3], "-o"))) usage();
    std::string dir = argv[2];
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const std::string out = argc == 5 ? argv[4] : dir + "/timeline.json";
    std::string err;
    int64_t n = braid::timeline::merge(dir, out, &err);
    if (n < 0) {
      std::fprintf(stderr, "braid-info --timeline: %s\n", err.c_str());
      return 1;
    }
    std::printf("%s: %lld events\n", out.c_str(), static_cast<long long>(n));
    return 0;
  }
  if (argc > 1 && !std::strcmp(argv[1], "--config")) {
    printConfig();
    return 0;
  }
  if (argc > 1 && !std::strcmp(argv[1], "--plan")) return printPlan(argc, argv);
  if (argc > 1 && !std::strcmp(argv[1], "--scaling")) return printScaling(argc, argv);
  if (argc > 1 && !std::strcmp(argv[1], "--status")) return printStatus(argc, argv);
  if (argc > 1) usage();
  std::printf("braid %d.%d.%d\n", BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH);
  std::printf("reduction kernels: %s\n", braid::reduce::simdLevel());
  std::printf("GPU path: %s\n", braid::device::cudaRuntime().describe().c_str());
  printTransports();
  std::printf("machine: %s\n", braid::topology::Placement::local().summary().c_str());
  return 0;
}
