// One-direction bandwidth of a transport between two ranks: rank 0 streams slots, rank 1
// receives them. Not a test; a measuring tool for transport work.
//
//   transport_bandwidth [--transport tcp] [--mode processes|threads] [--bytes N]
//                       [--slot N] [--slots N] [--sockets N] [--iters N] [--touch]
//
// Sizes take K/M/G suffixes (powers of two). Without --touch, neither side reads or writes
// the payload, so the figure is the transport alone; with it, the sender writes every byte
// and the receiver reads every byte, as the executor would.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

using namespace braid;
using namespace braid::transport;
using namespace braid::transport::test;

namespace {

volatile uint64_t gSink = 0;

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

struct Options {
  std::string transport = "tcp";
  Mode mode = Mode::kProcesses;
  size_t bytes = size_t{1} << 30;
  size_t slot = 512 << 10;
  int slots = 8;
  int sockets = 1;
  int iters = 5;
  bool touch = false;
};

std::string stream(Endpoint& ep, const Options& o) {
  T_RUN(setupPair(ep, 1));
  std::vector<double> rates;
  for (int it = 0; it < o.iters; ++it) {
    T_RUN(ep.rank == 0 ? waitPeer(ep, "go") : signalPeer(ep, "go"));
    const int64_t start = nowNanos();
    Deadline d = Deadline::after(120);
    uint64_t sink = 0;
    for (size_t off = 0; off < o.bytes; off += o.slot) {
      const size_t n = std::min(o.slot, o.bytes - off);
      Slot s;
      if (ep.rank == 0) {
        T_OK(reserveSlot(*ep.send[0], &s, d));
        if (o.touch) std::memset(s.data, static_cast<int>(off >> 20), n);
        s.tag = off;
        T_OK(ep.send[0]->postSend(s, n));
      } else {
        T_OK(recvSlot(*ep.recv[0], &s, d));
        if (o.touch) {
          const auto* p = static_cast<const uint64_t*>(s.data);
          for (size_t i = 0; i < s.bytes / 8; ++i) sink += p[i];
        }
        T_OK(ep.recv[0]->releaseRecv(s));
      }
    }
    if (ep.rank == 0) {
      T_OK(flush(*ep.send[0], d));
    } else {
      const double secs = static_cast<double>(nowNanos() - start) / 1e9;
      rates.push_back(static_cast<double>(o.bytes) / secs / 1e9);
      gSink = gSink + sink;  // keeps the read loop from being optimized away
      std::printf("  iter %d: %.3f GB/s\n", it, rates.back());
    }
  }
  if (ep.rank == 1) {
    std::sort(rates.begin(), rates.end());
    std::printf("%s %s: %zu bytes, slot %zu x %d, %d socket(s)/peer%s: best %.3f GB/s, median %.3f GB/s\n",
                o.transport.c_str(), modeName(o.mode), o.bytes, o.slot, o.slots, o.sockets,
                o.touch ? ", payload touched" : "", rates.back(), rates[rates.size() / 2]);
    std::fflush(stdout);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--transport") o.transport = next();
    else if (a == "--mode") o.mode = std::string(next()) == "threads" ? Mode::kThreads : Mode::kProcesses;
    else if (a == "--bytes") o.bytes = parseSize(next());
    else if (a == "--slot") o.slot = parseSize(next());
    else if (a == "--slots") o.slots = std::atoi(next());
    else if (a == "--sockets") o.sockets = std::atoi(next());
    else if (a == "--iters") o.iters = std::max(1, std::atoi(next()));
    else if (a == "--touch") o.touch = true;
    else {
      std::fprintf(stderr, "unknown option %s (see the comment at the top of transport_bandwidth.cc)\n", a.c_str());
      return 2;
    }
  }
  const TransportFactory* factory = nullptr;
  for (const TransportFactory& f : registry()) {
    if (o.transport == f.name) factory = &f;
  }
  if (factory == nullptr) {
    std::fprintf(stderr, "no transport named %s\n", o.transport.c_str());
    return 2;
  }
  if (!supportsMode(*factory, o.mode)) {
    std::fprintf(stderr, "%s cannot connect ranks as %s\n", factory->name, modeName(o.mode));
    return 2;
  }
  TransportConfig cfg;
  cfg.nonce = freshNonce();
  cfg.slotBytes = o.slot;
  cfg.nslots = o.slots;
  cfg.socketsPerPeer = o.sockets;
  std::string err = runPair(*factory, o.mode, cfg, [&](Endpoint& ep) { return stream(ep, o); }, 600);
  if (!err.empty()) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 1;
  }
  return 0;
}
