// braid-doctor: checks the network between the ranks of a job before (or instead of) the
// job. Every pair of ranks measures latency (8-byte ping-pong) and bandwidth (a stream of
// messages, each direction on its own), in rounds in which every rank has one partner (the
// circle method: n-1 rounds for n ranks, no rank in two pairs at once, so pairs do not
// disturb each other's figures). Rank 0 prints the matrices, compares each link with the
// median of its kind (ranks on one host, or on two), and names what falls below the
// threshold: a rank whose every link in one direction is slow (the rank or its host is the
// problem; links it explains do not count against the ranks at their other end), or single
// links (doctor_verdict.h). Exit status 1 when something is flagged, 0 when not, 2 for bad
// arguments.
//
// Latency is the median of the round trips (halved), bandwidth the sender's view of a
// stream of messages ending with the receiver's one-byte acknowledgement.
//
//   braidrun -np 8 braid-doctor
//   braidrun -H node1:1,node2:1,node3:1 braid-doctor -J doctor.json   # one rank per host
//   perf/plot.py --doctor doctor.json -o .                             # heatmaps
//
// It uses only braid's public C API, as the perf tools do, and their command-line helpers.

#include <braid/braid.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "doctor_verdict.h"

namespace {

using braid::perf::jsonEscape;
using braid::perf::parseSize;
using braid::perf::quietRank;

constexpr int kUsage = 2;
// A link's latency is flagged only when it is also this much above its kind's median: a few
// microseconds between ranks that share a core, or not, are placement, not a bad link.
constexpr double kLatencySlackUs = 10.0;

struct Options {
  size_t bytes = 4u << 20;  // bandwidth message
  int iters = 8;            // bandwidth messages per direction
  int latIters = 50;        // ping-pongs
  double threshold = 0.5;   // a link below threshold x its kind's median bandwidth (or above
                            // median latency / threshold) is flagged
  std::string json;
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: braidrun -np N braid-doctor [-b SIZE] [-n N] [-l N] [-t FRACTION] [-J FILE]\n"
               "  -b, --bytes SIZE       bandwidth message size (default 4M; K/M/G suffixes)\n"
               "  -n, --iters N          bandwidth messages per direction and pair (default 8)\n"
               "  -l, --lat-iters N      latency ping-pongs per pair (default 50)\n"
               "  -t, --threshold F      flag a link below F x the median bandwidth of its kind, or\n"
               "                         above the median latency / F and 10 us (default 0.5)\n"
               "  -J, --json FILE        write the matrices and findings as JSON (rank 0)\n"
               "  -h, --help, --version\n"
               "Every pair of ranks measures latency and bandwidth both ways, in rounds with one\n"
               "partner per rank. Links between ranks of one host are compared with each other,\n"
               "links across hosts likewise. Exit status 1 when a link or rank is flagged.\n");
}

bool parseInt(const char* s, int lo, int hi, int* out) {
  long long v = 0;
  if (!braid::perf::parseInt(s, lo, hi, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

// -1: go on; else the exit status.
int parseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto bad = [&](const char* v, const char* want) {
      if (!quietRank())
        std::fprintf(stderr, "braid-doctor: invalid value '%s' for %s: expected %s\n", v ? v : "", a.c_str(), want);
      return kUsage;
    };
    if (a == "-h" || a == "--help") {
      if (!quietRank()) usage(stdout);
      return 0;
    } else if (a == "--version") {
      if (!quietRank()) std::printf("braid-doctor (braid) %d.%d.%d\n", BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH);
      return 0;
    } else if (a == "-b" || a == "--bytes") {
      const char* v = value();
      if (!v || !parseSize(v, &o->bytes) || o->bytes == 0 || o->bytes > (1ull << 32))
        return bad(v, "a size such as 1M");
    } else if (a == "-n" || a == "--iters") {
      const char* v = value();
      if (!v || !parseInt(v, 1, 100000, &o->iters)) return bad(v, "an integer >= 1");
    } else if (a == "-l" || a == "--lat-iters") {
      const char* v = value();
      if (!v || !parseInt(v, 1, 1000000, &o->latIters)) return bad(v, "an integer >= 1");
    } else if (a == "-t" || a == "--threshold") {
      const char* v = value();
      char* end = nullptr;
      o->threshold = v ? std::strtod(v, &end) : 0;
      if (!v || *end || !(o->threshold > 0 && o->threshold < 1)) return bad(v, "a fraction between 0 and 1");
    } else if (a == "-J" || a == "--json") {
      const char* v = value();
      if (!v || !*v) return bad(v, "a file name");
      o->json = v;
    } else {
      if (!quietRank()) std::fprintf(stderr, "braid-doctor: unknown argument '%s' (see -h)\n", a.c_str());
      return kUsage;
    }
  }
  return -1;
}

struct Run {
  braidComm_t comm = nullptr;
  int rank = 0;
  int n = 1;
};

[[noreturn]] void fail(const Run& run, const char* what, braidResult_t r) {
  std::fprintf(stderr, "braid-doctor: rank %d: %s failed: %s: %s\n", run.rank, what, braidGetErrorString(r),
               braidGetLastError(run.comm));
  if (run.comm) braidCommAbort(run.comm);
  std::exit(1);
}

void ok(const Run& run, braidResult_t r, const char* what) {
  if (r != braidSuccess) fail(run, what, r);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Round `round` of the circle method over `m` slots (m even): slot m-1 stays, the others
// rotate. Returns this slot's partner.
int partnerIn(int round, int slot, int m) {
  if (slot == m - 1) return round;
  if (slot == round) return m - 1;
  return ((2 * round - slot) % (m - 1) + (m - 1)) % (m - 1);
}

// One pair: latency (ping-pongs, the lower rank starts) and bandwidth each way (iters
// messages, then a one-byte acknowledgement, timed by the sender). Fills this rank's row.
void measurePair(const Run& run, const Options& o, int peer, std::vector<uint8_t>& buf, double* latUs,
                 double* bwToPeer) {
  uint64_t token = 0;
  const bool first = run.rank < peer;
  auto send = [&](void* p, size_t bytes) { ok(run, braidSend(p, bytes, braidUint8, peer, run.comm, nullptr), "braidSend"); };
  auto recv = [&](void* p, size_t bytes) { ok(run, braidRecv(p, bytes, braidUint8, peer, run.comm, nullptr), "braidRecv"); };
  auto pingPong = [&] {
    if (first) {
      send(&token, 8);
      recv(&token, 8);
    } else {
      recv(&token, 8);
      send(&token, 8);
    }
  };
  pingPong();  // warms the connection up (first messages may set it up)
  // The median round trip, not the mean: one descheduled moment on a busy host would
  // otherwise make a good link look slow.
  std::vector<double> rtt(static_cast<size_t>(o.latIters));
  for (int i = 0; i < o.latIters; ++i) {
    const double t = now();
    pingPong();
    rtt[static_cast<size_t>(i)] = now() - t;
  }
  std::nth_element(rtt.begin(), rtt.begin() + rtt.size() / 2, rtt.end());
  *latUs = rtt[rtt.size() / 2] / 2 * 1e6;  // one way
  double t0 = 0;
  uint8_t ack = 0;
  for (int dir = 0; dir < 2; ++dir) {
    const bool sender = (dir == 0) == first;
    if (sender) {
      t0 = now();
      for (int i = 0; i < o.iters; ++i) send(buf.data(), o.bytes);
      recv(&ack, 1);
      const double secs = now() - t0;
      *bwToPeer = static_cast<double>(o.bytes) * o.iters / secs / 1e9;
    } else {
      for (int i = 0; i < o.iters; ++i) recv(buf.data(), o.bytes);
      send(&ack, 1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int status = parseArgs(argc, argv, &o);
  if (status >= 0) return status;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Run run;
  braidResult_t r = braidCommInitFromEnv(&run.comm);
  if (r != braidSuccess) {
    std::fprintf(stderr, "braid-doctor: braidCommInitFromEnv failed: %s: %s\n", braidGetErrorString(r),
                 braidGetLastError(nullptr));
    return 1;
  }
  ok(run, braidCommUserRank(run.comm, &run.rank), "braidCommUserRank");
  ok(run, braidCommCount(run.comm, &run.n), "braidCommCount");
  const int n = run.n;
  if (n < 2) {
    if (run.rank == 0) std::printf("braid-doctor: a job of one rank has no link to check\n");
    braidCommDestroy(run.comm);
    return 0;
  }

  // Which host each rank is on (BRAID_HOST_ID where set, as braid itself tells hosts apart,
  // else the host name), gathered by a sum of zeroed slots, one per rank.
  constexpr size_t kSlot = 96;
  std::vector<uint8_t> names(kSlot * n, 0);
  std::string host;
  if (const char* id = std::getenv("BRAID_HOST_ID"); id && *id) {
    host = id;
  } else {
    char h[64] = "";
    gethostname(h, sizeof(h) - 1);
    host = h;
  }
  std::snprintf(reinterpret_cast<char*>(&names[kSlot * run.rank]), kSlot - 1, "%s", host.c_str());
  ok(run, braidAllReduce(names.data(), names.data(), names.size(), braidUint8, braidSum, run.comm, nullptr),
     "braidAllReduce (hosts)");
  std::vector<std::string> hosts(n);
  for (int i = 0; i < n; ++i) hosts[i] = reinterpret_cast<const char*>(&names[kSlot * i]);

  // Row `rank` of each matrix: latency (us, one way) and bandwidth (GB/s) toward each peer.
  std::vector<double> lat(static_cast<size_t>(n) * n, 0.0), bw(static_cast<size_t>(n) * n, 0.0);
  std::vector<uint8_t> buf(o.bytes, 0x5a);
  const int slots = n % 2 ? n + 1 : n;  // an odd job has an empty slot: its partner sits out
  for (int round = 0; round < slots - 1; ++round) {
    ok(run, braidBarrier(run.comm), "braidBarrier");
    const int peer = partnerIn(round, run.rank, slots);
    if (peer >= n) continue;
    measurePair(run, o, peer, buf, &lat[static_cast<size_t>(run.rank) * n + peer],
                &bw[static_cast<size_t>(run.rank) * n + peer]);
  }
  ok(run, braidAllReduce(lat.data(), lat.data(), lat.size(), braidFloat64, braidSum, run.comm, nullptr),
     "braidAllReduce (latency)");
  ok(run, braidAllReduce(bw.data(), bw.data(), bw.size(), braidFloat64, braidSum, run.comm, nullptr),
     "braidAllReduce (bandwidth)");

  int verdict = 0;
  if (run.rank == 0) {
    auto at = [&](const std::vector<double>& m, int i, int j) { return m[static_cast<size_t>(i) * n + j]; };
    const braid::perf::DoctorVerdict dv = braid::perf::diagnose(hosts, bw, lat, o.threshold, kLatencySlackUs);
    const std::vector<char>& slow = dv.slow;
    bool kindSeen[2] = {false, false};
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j) kindSeen[hosts[i] == hosts[j] ? 0 : 1] = true;

    std::vector<std::string> distinct = hosts;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::printf("# braid-doctor: %d ranks, %zu host(s); bandwidth message %zu B x %d, %d ping-pongs; threshold %.2f\n",
                n, distinct.size(), o.bytes, o.iters, o.latIters, o.threshold);
    for (int i = 0; i < n; ++i) std::printf("#  rank %2d on %s\n", i, hosts[i].c_str());
    auto table = [&](const char* title, const std::vector<double>& m, const char* fmt) {
      std::printf("\n%s (row: from, column: to)\n%6s", title, "");
      for (int j = 0; j < n; ++j) std::printf(" %8d", j);
      std::printf("\n");
      for (int i = 0; i < n; ++i) {
        std::printf("%6d", i);
        for (int j = 0; j < n; ++j) {
          if (i == j) {
            std::printf(" %8s", "-");
          } else {
            char cell[32];
            std::snprintf(cell, sizeof(cell), fmt, at(m, i, j));
            std::printf(" %7s%c", cell, slow[static_cast<size_t>(i) * n + j] ? '*' : ' ');
          }
        }
        std::printf("\n");
      }
    };
    table("bandwidth, GB/s", bw, "%.3f");
    table("latency, us one way", lat, "%.1f");
    std::printf("\nmedians:");
    for (int k = 0; k < 2; ++k) {
      const char* kind = k ? "cross-host" : "same-host";
      if (!kindSeen[k]) std::printf("%s %s none", k ? ";" : "", kind);
      else std::printf("%s %s %.3f GB/s %.1f us", k ? ";" : "", kind, dv.bwMedian[k], dv.latMedian[k]);
    }
    std::printf("\n");
    for (const auto& r : dv.ranks)
      std::printf("SLOW RANK %d (%s): every link %s it is slow\n", r.rank, hosts[r.rank].c_str(),
                  r.from && r.to ? "from and to" : r.from ? "from" : "to");
    for (const auto& f : dv.lonely)
      std::printf("SLOW LINK %d -> %d (%s -> %s): %s\n", f.from, f.to, hosts[f.from].c_str(), hosts[f.to].c_str(),
                  f.why.c_str());
    if (dv.ok()) std::printf("OK: no link below %.2f x its median\n", o.threshold);
    verdict = dv.ok() ? 0 : 1;
    const auto& links = dv.links;

    if (!o.json.empty()) {
      std::string s = "{\n  \"tool\": \"braid-doctor\",\n  \"nranks\": " + std::to_string(n) + ",\n  \"hosts\": [";
      for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::string("\"") + jsonEscape(hosts[i]) + "\"";
      s += "],\n  \"bytes\": " + std::to_string(o.bytes) + ",\n  \"threshold\": " + std::to_string(o.threshold) + ",\n";
      auto matrix = [&](const char* key, const std::vector<double>& m) {
        s += std::string("  \"") + key + "\": [";
        for (int i = 0; i < n; ++i) {
          s += i ? ",\n    [" : "\n    [";
          for (int j = 0; j < n; ++j) {
            char v[32];
            std::snprintf(v, sizeof(v), "%.6g", i == j ? 0.0 : at(m, i, j));
            s += (j ? ", " : "") + std::string(i == j ? "null" : v);
          }
          s += "]";
        }
        s += "\n  ],\n";
      };
      matrix("bandwidth_gbs", bw);
      matrix("latency_us", lat);
      s += "  \"slow_ranks\": [";
      for (size_t k = 0; k < dv.ranks.size(); ++k) s += (k ? ", " : "") + std::to_string(dv.ranks[k].rank);
      s += "],\n  \"slow_links\": [";
      for (size_t k = 0; k < links.size(); ++k)
        s += (k ? ", " : "") + std::string("{\"from\": ") + std::to_string(links[k].from) +
             ", \"to\": " + std::to_string(links[k].to) + ", \"why\": \"" + jsonEscape(links[k].why) + "\"}";
      s += "],\n  \"ok\": " + std::string(verdict == 0 ? "true" : "false") + "\n}\n";
      FILE* f = std::fopen(o.json.c_str(), "w");
      if (!f || std::fwrite(s.data(), 1, s.size(), f) != s.size() || std::fclose(f) != 0)
        std::fprintf(stderr, "braid-doctor: cannot write %s: %s\n", o.json.c_str(), std::strerror(errno));
    }
  }
  // Every rank exits with rank 0's verdict.
  int32_t v = verdict;
  ok(run, braidBroadcast(&v, &v, 1, braidInt32, 0, run.comm, nullptr), "braidBroadcast (verdict)");
  braidCommDestroy(run.comm);
  return v;
}
