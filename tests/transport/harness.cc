#include "harness.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

namespace braid::transport::test {
namespace {

// ---- side channels ---------------------------------------------------------------------

// Two queues, one per direction, for ranks that are threads of this process.
struct MemoryLink {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> inbox[2];  // inbox[r]: messages for rank r
  bool gone[2] = {false, false};     // rank r finished and will send nothing more
};

class MemorySide final : public SideChannel {
 public:
  MemorySide(MemoryLink* link, int rank) : link_(link), rank_(rank) {}
  ~MemorySide() override {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->gone[rank_] = true;
    link_->cv.notify_all();
  }
  bool send(const std::string& msg) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    if (link_->gone[1 - rank_]) return false;
    link_->inbox[1 - rank_].push_back(msg);
    link_->cv.notify_all();
    return true;
  }
  bool recv(std::string* msg, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(link_->mu);
    for (;;) {
      auto& q = link_->inbox[rank_];
      if (!q.empty()) {
        *msg = std::move(q.front());
        q.pop_front();
        return true;
      }
      if (link_->gone[1 - rank_] || deadline.expired()) return false;
      link_->cv.wait_for(lock, std::chrono::milliseconds(deadline.remainingMillis(100)));
    }
  }

 private:
  MemoryLink* link_;
  int rank_;
};

// Length-prefixed messages over a pair of pipes, for ranks in different processes.
class PipeSide final : public SideChannel {
 public:
  PipeSide(int in, int out) : in_(in), out_(out) {}
  ~PipeSide() override {
    close(in_);
    close(out_);
  }
  bool send(const std::string& msg) override {
    uint32_t len = static_cast<uint32_t>(msg.size());
    std::string wire(reinterpret_cast<const char*>(&len), 4);
    wire += msg;
    size_t done = 0;
    while (done < wire.size()) {
      ssize_t n = write(out_, wire.data() + done, wire.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool recv(std::string* msg, Deadline deadline) override {
    uint32_t len = 0;
    if (!readExactly(&len, 4, deadline)) return false;
    std::string body(len, '\0');
    if (len > 0 && !readExactly(&body[0], len, deadline)) return false;
    *msg = std::move(body);
    return true;
  }

 private:
  bool readExactly(void* dst, size_t bytes, Deadline deadline) {
    size_t done = 0;
    while (done < bytes) {
      pollfd p{in_, POLLIN, 0};
      int rc = poll(&p, 1, deadline.remainingMillis(100));
      if (rc < 0 && errno != EINTR) return false;
      if (rc <= 0) {
        if (deadline.expired()) return false;
        continue;
      }
      ssize_t n = read(in_, static_cast<char*>(dst) + done, bytes - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  int in_;
  int out_;
};

// ---- running one rank ------------------------------------------------------------------

std::string runRank(const TransportFactory& factory, Mode mode, const TransportConfig& base, int rank,
                    SideChannel* side, const Scenario& scenario) {
  Endpoint ep;
  ep.rank = rank;
  ep.peer = 1 - rank;
  ep.mode = mode;
  ep.factory = &factory;
  ep.cfg = base;
  ep.cfg.rank = rank;
  ep.cfg.nranks = 2;
  ep.side = side;
  auto created = factory.create(ep.cfg);
  if (!created.isOk()) return "create: " + created.status().toString();
  ep.transport = std::move(created).value();
  std::string result = scenario(ep);
  // Neither rank tears down while the other may still be reading: memory transports keep
  // slots in the receiver's memory, and a closed socket would look like a failure.
  if (result.empty() && !ep.skipFinalBarrier) {
    std::string err = signalPeer(ep, "done");
    if (err.empty()) err = waitPeer(ep, "done");
    if (!err.empty()) result = "end-of-test barrier: " + err;
  }
  ep.send.clear();
  ep.recv.clear();
  ep.transport.reset();
  return result;
}

std::string combine(const std::string& r0, const std::string& r1) {
  bool skip0 = r0.rfind("skip: ", 0) == 0;
  bool skip1 = r1.rfind("skip: ", 0) == 0;
  if (skip0 && (skip1 || r1.empty())) return r0;
  if (skip1 && r0.empty()) return r1;
  std::string out;
  if (!r0.empty()) out += "rank 0: " + r0;
  if (!r1.empty()) out += (out.empty() ? "" : "\n") + std::string("rank 1: ") + r1;
  return out;
}

std::string runThreads(const TransportFactory& factory, const TransportConfig& cfg, const Scenario& scenario,
                       double timeoutSec) {
  MemoryLink link;
  std::string results[2];
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      std::string res;
      {
        MemorySide side(&link, r);
        res = runRank(factory, Mode::kThreads, cfg, r, &side, scenario);
      }
      std::lock_guard<std::mutex> lock(mu);
      results[r] = std::move(res);
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::duration<double>(timeoutSec), [&] { return finished == 2; })) {
      // A scenario ignored its deadlines: the threads cannot be stopped safely, so stop.
      std::fprintf(stderr, "transport test: a rank did not finish within %.0f s; aborting\n", timeoutSec);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  return combine(results[0], results[1]);
}

std::string runProcesses(const TransportFactory& factory, const TransportConfig& cfg, const Scenario& scenario,
                         double timeoutSec) {
  int toChild[2], toParent[2], result[2];
  if (pipe2(toChild, O_CLOEXEC) != 0 || pipe2(toParent, O_CLOEXEC) != 0 || pipe2(result, O_CLOEXEC) != 0) {
    return std::string("pipe: ") + std::strerror(errno);
  }
  std::fflush(nullptr);  // or buffered output would be printed twice
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    // Rank 1. Never returns into the test framework.
    close(toChild[1]);
    close(toParent[0]);
    close(result[0]);
    alarm(static_cast<unsigned>(timeoutSec) + 5);  // a hung child must not outlive the test
    std::string res;
    {
      PipeSide side(toChild[0], toParent[1]);
      res = runRank(factory, Mode::kProcesses, cfg, 1, &side, scenario);
    }
    size_t done = 0;
    while (done < res.size()) {
      ssize_t n = write(result[1], res.data() + done, res.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(result[1]);
    std::fflush(nullptr);
    _exit(res.empty() || res.rfind("skip: ", 0) == 0 ? 0 : 1);
  }
  close(toChild[0]);
  close(toParent[1]);
  close(result[1]);
  Deadline deadline = Deadline::after(timeoutSec);
  std::string r0;
  {
    PipeSide side(toParent[0], toChild[1]);
    r0 = runRank(factory, Mode::kProcesses, cfg, 0, &side, scenario);
  }
  // Rank 1's report, then its exit status.
  std::string r1;
  char buf[4096];
  for (;;) {
    pollfd p{result[0], POLLIN, 0};
    int rc = poll(&p, 1, deadline.remainingMillis(100));
    if (rc <= 0) {
      if (rc < 0 && errno == EINTR) continue;
      if (deadline.expired()) break;
      continue;
    }
    ssize_t n = read(result[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r1.append(buf, static_cast<size_t>(n));
  }
  close(result[0]);
  int status = 0;
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && !deadline.expired()) usleep(10000);
  if (w == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    r1 += (r1.empty() ? "" : "; ") + std::string("did not finish in time (killed)");
  } else if (r1.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    r1 = WIFSIGNALED(status) ? "child killed by signal " + std::to_string(WTERMSIG(status))
                             : "child exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return combine(r0, r1);
}

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t patternWord(uint64_t seed, uint64_t word) { return splitmix(seed * 0x100000001B3ull + word); }

}  // namespace

const char* modeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }

bool supportsMode(const TransportFactory& f, Mode mode) {
  TransportConfig cfg;
  cfg.nranks = 2;
  auto t = f.create(cfg);
  if (!t.isOk()) return false;
  PeerInfo local{0, "conformance-host", static_cast<int64_t>(getpid()), 7};
  PeerInfo remote = local;
  remote.rank = 1;
  if (mode == Mode::kProcesses) remote.pid = local.pid + 1;
  return t.value()->canConnect(local, remote) > 0;
}

std::string setupPair(Endpoint& ep, int channels, double timeoutSec) {
  Deadline deadline = Deadline::after(timeoutSec);
  std::string mine;
  for (int ch = 0; ch < channels; ++ch) {
    std::string blob;
    auto c = ep.transport->createRecv(ep.peer, ch, &blob);
    if (!c.isOk()) return "createRecv(channel " + std::to_string(ch) + "): " + describe(c.status());
    ep.recv.push_back(std::move(c).value());
    uint32_t len = static_cast<uint32_t>(blob.size());
    mine.append(reinterpret_cast<const char*>(&len), 4);
    mine += blob;
  }
  if (!ep.side->send(mine)) return "side channel closed while sending blobs";
  std::string theirs;
  if (!ep.side->recv(&theirs, deadline)) return "no blobs from the peer";
  size_t pos = 0;
  for (int ch = 0; ch < channels; ++ch) {
    uint32_t len = 0;
    if (pos + 4 > theirs.size()) return "short blob message";
    std::memcpy(&len, theirs.data() + pos, 4);
    pos += 4;
    if (pos + len > theirs.size()) return "short blob message";
    std::string blob = theirs.substr(pos, len);
    pos += len;
    auto c = ep.transport->connectSend(ep.peer, ch, blob);
    if (!c.isOk()) return "connectSend(channel " + std::to_string(ch) + "): " + describe(c.status());
    ep.send.push_back(std::move(c).value());
  }
  T_RUN(signalPeer(ep, "connected"));
  T_RUN(waitPeer(ep, "connected", timeoutSec));
  Status s = ep.transport->establish(deadline);
  if (!s.isOk()) return "establish: " + describe(s);
  return "";
}

std::string signalPeer(Endpoint& ep, const std::string& cue) {
  if (!ep.side->send(cue)) return "side channel closed while sending '" + cue + "'";
  return "";
}

std::string waitPeer(Endpoint& ep, const std::string& cue, double timeoutSec) {
  std::string got;
  if (!ep.side->recv(&got, Deadline::after(timeoutSec))) {
    return "peer did not send '" + cue + "' within " + std::to_string(timeoutSec) + " s";
  }
  if (got != cue) return "expected cue '" + cue + "' from the peer, got '" + got + "'";
  return "";
}

std::string runPair(const TransportFactory& factory, Mode mode, const TransportConfig& cfg,
                    const Scenario& scenario, double timeoutSec) {
  // A peer that dies must show up as an error, not as SIGPIPE killing the test.
  signal(SIGPIPE, SIG_IGN);
  return mode == Mode::kThreads ? runThreads(factory, cfg, scenario, timeoutSec)
                                : runProcesses(factory, cfg, scenario, timeoutSec);
}

TransportConfig loopbackPairConfig(int rank, uint64_t nonce) {
  TransportConfig cfg;
  cfg.rank = rank;
  cfg.nranks = 2;
  cfg.nonce = nonce;
  cfg.slotBytes = 4096;
  cfg.nslots = 4;
  cfg.connectTimeoutSec = 5;
  cfg.netIf = "127.0.0.1";
  return cfg;
}

std::vector<std::pair<std::string, std::string>> runOnThreadPairs(const std::vector<std::string>& names,
                                                                  const TransportConfig& cfg,
                                                                  const Scenario& scenario) {
  std::vector<std::pair<std::string, std::string>> ran;
  for (const std::string& name : names) {
    const TransportFactory* f = registeredFactory(name);
    if (!f || !supportsMode(*f, Mode::kThreads)) continue;
    TransportConfig c = cfg;
    c.nonce = freshNonce();
    std::string result = runPair(*f, Mode::kThreads, c, scenario);
    if (result.rfind("skip:", 0) == 0) continue;
    ran.emplace_back(name, std::move(result));
  }
  return ran;
}

const TransportFactory* registeredFactory(const std::string& name) {
  for (const TransportFactory& f : registry())
    if (name == f.name) return &f;
  return nullptr;
}

uint64_t freshNonce() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(nowNanos());
  }();
  return splitmix(base + counter.fetch_add(1) + static_cast<uint64_t>(getpid()) * 1000003ull);
}

void waitReady(Connection& c, bool forSend, int capMillis) {
  WaitHandle h = c.waitHandle(forSend);
  if (h.fd >= 0) {
    pollfd p{h.fd, h.fdEvents, 0};
    poll(&p, 1, capMillis);
  } else if (h.futexWord != nullptr) {
    // Memory transports keep futex words in shared memory: no FUTEX_PRIVATE_FLAG.
    if (__atomic_load_n(h.futexWord, __ATOMIC_ACQUIRE) == h.futexValue) {
      timespec ts{capMillis / 1000, static_cast<long>(capMillis % 1000) * 1000000L};
      syscall(SYS_futex, h.futexWord, FUTEX_WAIT, h.futexValue, &ts, nullptr, 0);
    }
  } else {
    usleep(100);
  }
  c.disarm(forSend);
}

Status reserveSlot(Connection& c, Slot* s, Deadline deadline) {
  for (;;) {
    Status st = c.reserveSend(s);
    if (st.isOk() || st.code() != Code::kWouldBlock) return st;
    st = c.progress();
    if (!st.isOk() && st.code() != Code::kWouldBlock) return st;
    if (deadline.expired()) return Status(Code::kTimeout, "no free send slot before the deadline");
    waitReady(c, true, deadline.remainingMillis(50));
  }
}

Status sendSlot(Connection& c, const void* data, size_t bytes, uint64_t tag, Deadline deadline) {
  Slot s;
  BRAID_RETURN_IF_ERROR(reserveSlot(c, &s, deadline));
  if (bytes > 0) std::memcpy(s.data, data, bytes);
  s.tag = tag;
  return c.postSend(s, bytes);
}

Status recvSlot(Connection& c, Slot* s, Deadline deadline, void* dst, size_t bytes) {
  for (;;) {
    Status st = dst ? c.peekRecvInto(s, dst, bytes) : c.peekRecv(s);
    if (st.isOk() || st.code() != Code::kWouldBlock) return st;
    st = c.progress();
    if (!st.isOk() && st.code() != Code::kWouldBlock) return st;
    if (deadline.expired()) return Status(Code::kTimeout, "nothing received before the deadline");
    waitReady(c, false, deadline.remainingMillis(50));
  }
}

Status flush(Connection& c, Deadline deadline) {
  while (!c.flushed()) {
    Status st = c.progress();
    if (!st.isOk() && st.code() != Code::kWouldBlock) return st;
    if (c.flushed()) break;
    if (deadline.expired()) return Status(Code::kTimeout, "sends not flushed before the deadline");
    waitReady(c, true, deadline.remainingMillis(50));
  }
  return Status::ok();
}

void fillPattern(void* dst, size_t bytes, uint64_t seed, uint64_t offset) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t i = 0;
  // Leading bytes up to a word boundary of the stream, whole words, then the tail.
  for (; i < bytes && (offset + i) % 8 != 0; ++i) {
    uint64_t p = offset + i;
    out[i] = static_cast<uint8_t>(patternWord(seed, p / 8) >> (8 * (p % 8)));
  }
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = patternWord(seed, (offset + i) / 8);
    std::memcpy(out + i, &w, 8);
  }
  for (; i < bytes; ++i) {
    uint64_t p = offset + i;
    out[i] = static_cast<uint8_t>(patternWord(seed, p / 8) >> (8 * (p % 8)));
  }
}

int64_t checkPattern(const void* src, size_t bytes, uint64_t seed, uint64_t offset) {
  const auto* in = static_cast<const uint8_t*>(src);
  size_t i = 0;
  auto byteAt = [&](uint64_t p) { return static_cast<uint8_t>(patternWord(seed, p / 8) >> (8 * (p % 8))); };
  for (; i < bytes && (offset + i) % 8 != 0; ++i) {
    if (in[i] != byteAt(offset + i)) return static_cast<int64_t>(i);
  }
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = patternWord(seed, (offset + i) / 8), got;
    std::memcpy(&got, in + i, 8);
    if (got != w) break;
  }
  for (; i < bytes; ++i) {
    if (in[i] != byteAt(offset + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

std::string describe(const Status& s) {
  std::string out = s.toString();
  if (s.rank() >= 0) out += " [rank " + std::to_string(s.rank()) + "]";
  return out;
}

}  // namespace braid::transport::test
