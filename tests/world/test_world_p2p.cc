// Point-to-point groups, split and pre-multiplied sums in the in-process world: the engine
// pieces the collectives' API builds on. Every element is checked against its sender.

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "support/catch.h"
#include "world/world.h"

using namespace braid;
using braid::testing::WorldOptions;

namespace {

// A value only (sender, receiver, index) determines, so a misrouted byte shows.
uint32_t tagValue(int from, int to, size_t i) {
  return static_cast<uint32_t>(from * 1000003u + to * 7919u + i * 2654435761u);
}

struct Errors {
  std::mutex mu;
  std::string first;
  void note(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (first.empty()) first = e;
  }
};

// Every rank sends `count(from, to)` uint32 to every rank (itself included) in one group.
void allPairsGroup(const WorldOptions& o, size_t (*count)(int, int), Errors* err) {
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    std::vector<std::vector<uint32_t>> out(n), in(n);
    algorithms::Request req;
    req.coll = algorithms::Collective::kSendRecv;
    req.dtype = DataType::kUint32;
    std::vector<void*> bufs;
    // Receives first on odd ranks, sends first on even ones: order inside a group is free.
    for (int pass = 0; pass < 2; ++pass) {
      bool sends = (pass == 0) == (r % 2 == 0);
      for (int k = 0; k < n; ++k) {
        int peer = (r + k) % n;
        if (sends) {
          size_t c = count(r, peer);
          out[peer].resize(c);
          for (size_t i = 0; i < c; ++i) out[peer][i] = tagValue(r, peer, i);
          req.p2p.push_back({true, peer, c});
          bufs.push_back(out[peer].data());
        } else {
          size_t c = count(peer, r);
          in[peer].assign(c, 0xdeadbeef);
          req.p2p.push_back({false, peer, c});
          bufs.push_back(in[peer].data());
        }
      }
    }
    Status s = comm.run(req, nullptr, nullptr, bufs);
    if (!s.isOk()) {
      err->note("rank " + std::to_string(r) + ": " + s.toString());
      return;
    }
    for (int from = 0; from < n; ++from)
      for (size_t i = 0; i < in[from].size(); ++i)
        if (in[from][i] != tagValue(from, r, i)) {
          err->note("n=" + std::to_string(n) + " rank " + std::to_string(r) + " from " + std::to_string(from) +
                    ": element " + std::to_string(i) + " wrong");
          return;
        }
  });
  if (!init.isOk()) err->note("init: " + init.toString());
}

size_t smallCount(int from, int to) { return static_cast<size_t>(1 + from + 3 * to); }
size_t mixedCount(int from, int to) { return (from + to) % 3 == 0 ? 0 : (from + to) % 3 == 1 ? 17 : 300000; }

}  // namespace

TEST_CASE("a group where every rank sends to and receives from every rank completes", "[world]") {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    for (size_t slot : {size_t{4096}, size_t{64 * 1024}}) {
      WorldOptions o;
      o.nranks = n;
      o.slotBytes = slot;
      o.nslots = 2;
      o.timeoutSec = 20;
      Errors err;
      allPairsGroup(o, &smallCount, &err);
      INFO("n=" << n << " slot=" << slot);
      CHECK(err.first == "");
      Errors err2;
      allPairsGroup(o, &mixedCount, &err2);  // messages far larger than any FIFO, and empty ones
      CHECK(err2.first == "");
    }
  }
}

TEST_CASE("a ring exchange of large messages inside one group does not deadlock", "[world]") {
  for (int n : {2, 3, 5}) {
    WorldOptions o;
    o.nranks = n;
    o.timeoutSec = 20;
    Errors err;
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      const size_t count = (1u << 20) + 5;
      std::vector<uint32_t> out(count), in(count, 0);
      int next = (r + 1) % n, prev = (r + n - 1) % n;
      for (size_t i = 0; i < count; ++i) out[i] = tagValue(r, next, i);
      algorithms::Request req;
      req.coll = algorithms::Collective::kSendRecv;
      req.dtype = DataType::kUint32;
      req.p2p = {{true, next, count}, {false, prev, count}};
      Status s = comm.run(req, nullptr, nullptr, {out.data(), in.data()});
      if (!s.isOk()) return err.note(s.toString());
      for (size_t i = 0; i < count; ++i)
        if (in[i] != tagValue(prev, r, i)) return err.note("rank " + std::to_string(r) + " element " + std::to_string(i));
    });
    REQUIRE(init.isOk());
    INFO("n=" << n);
    CHECK(err.first == "");
  }
}

namespace {

// One call's sends and receives as a group: (isSend, peer, count) and a buffer for each.
Status runGroup(core::Communicator& comm, const std::vector<algorithms::P2POp>& ops, const std::vector<void*>& bufs) {
  algorithms::Request req;
  req.coll = algorithms::Collective::kSendRecv;
  req.dtype = DataType::kUint32;
  req.p2p = ops;
  return comm.run(req, nullptr, nullptr, bufs);
}

// Checks that `in` holds `from`'s message to `to`, starting at element `first` of it.
bool holds(const std::vector<uint32_t>& in, int from, int to, size_t first = 0) {
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != tagValue(from, to, first + i)) return false;
  return true;
}

// n ranks over `transport`, a timeout a wait that never ends runs into.
WorldOptions over(const std::string& transport, int n) {
  WorldOptions o;
  o.nranks = n;
  o.transport = transport;
  o.timeoutSec = 20;
  return o;
}

}  // namespace

TEST_CASE("messages a group sends one peer match the receives that peer makes in calls of their own", "[world]") {
  // Rank 0 sends two messages of several parts each in one group; rank 1 receives them in
  // two calls, and then a third, sent alone, in a group with a receive of its own.
  // 400 KB and 512 KiB: messages of several parts (half a FIFO each), the last part short,
  // or all parts alike (where parts of the two messages taken for each other give no error).
  for (std::string transport : {"loopback", "tcp"}) for (size_t count : {size_t{100000}, size_t{131072}}) {
    const WorldOptions o = over(transport, 2);
    Errors err;
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      std::vector<uint32_t> a(count), b(count), c(count);
      if (r == 0) {
        for (size_t i = 0; i < count; ++i) {
          a[i] = tagValue(0, 1, i);
          b[i] = tagValue(0, 1, count + i);
          c[i] = tagValue(0, 1, 2 * count + i);
        }
        Status s = runGroup(comm, {{true, 1, count}, {true, 1, count}}, {a.data(), b.data()});
        if (s.isOk()) s = runGroup(comm, {{true, 1, count}}, {c.data()});
        if (!s.isOk()) err.note("rank 0: " + s.toString());
        return;
      }
      Status s = runGroup(comm, {{false, 0, count}}, {a.data()});
      if (s.isOk()) s = runGroup(comm, {{false, 0, count}}, {b.data()});
      if (s.isOk()) s = runGroup(comm, {{false, 0, count}}, {c.data()});
      if (!s.isOk()) return err.note("rank 1: " + s.toString());
      if (!holds(a, 0, 1)) return err.note("rank 1: the first message is wrong");
      if (!holds(b, 0, 1, count)) return err.note("rank 1: the second message is wrong");
      if (!holds(c, 0, 1, 2 * count)) return err.note("rank 1: the third message is wrong");
    });
    REQUIRE(init.isOk());
    INFO(transport << " count=" << count);
    CHECK(err.first == "");
  }
}

TEST_CASE("a group's receive from one peer goes on while its send to another waits for a later call", "[world]") {
  // Rank 1 receives from rank 0 and sends to rank 2 in one group; rank 2 takes rank 1's
  // message only after rank 0's second call, which comes after rank 0's send to rank 1
  // has been received whole. Every message is larger than a connection's slots hold.
  for (std::string transport : {"loopback", "tcp"}) {
    const WorldOptions o = over(transport, 3);
    Errors err;
    const size_t count = 300000;
    Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
      const int r = comm.rank();
      std::vector<uint32_t> out(count), in(count, 0);
      for (size_t i = 0; i < count; ++i) out[i] = tagValue(r, r == 0 ? 1 : 2, i);
      Status s;
      if (r == 0) {
        s = runGroup(comm, {{true, 1, count}}, {out.data()});
        for (size_t i = 0; i < count; ++i) out[i] = tagValue(0, 2, i);
        if (s.isOk()) s = runGroup(comm, {{true, 2, count}}, {out.data()});
      } else if (r == 1) {
        s = runGroup(comm, {{false, 0, count}, {true, 2, count}}, {in.data(), out.data()});
        if (s.isOk() && !holds(in, 0, 1)) return err.note("rank 1: the message from rank 0 is wrong");
      } else {
        s = runGroup(comm, {{false, 0, count}}, {in.data()});
        if (s.isOk() && !holds(in, 0, 2)) return err.note("rank 2: the message from rank 0 is wrong");
        if (s.isOk()) s = runGroup(comm, {{false, 1, count}}, {in.data()});
        if (s.isOk() && !holds(in, 1, 2)) return err.note("rank 2: the message from rank 1 is wrong");
      }
      if (!s.isOk()) err.note("rank " + std::to_string(r) + ": " + s.toString());
    });
    REQUIRE(init.isOk());
    INFO(transport);
    CHECK(err.first == "");
  }
}

TEST_CASE("a ring exchange in place sends every part before its receive overwrites it", "[world]") {
  // Each rank sends its buffer to the next and receives the previous rank's into the same
  // buffer (a sendrecv in place): the receive must wait for the part it overwrites to be out.
  for (std::string transport : {"loopback", "tcp"}) {
    for (int n : {2, 3}) {
      const WorldOptions o = over(transport, n);
      Errors err;
      const size_t count = 300001;
      Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
        const int r = comm.rank();
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        std::vector<uint32_t> buf(count);
        for (size_t i = 0; i < count; ++i) buf[i] = tagValue(r, next, i);
        // The receive first in the group: the order inside a group does not matter.
        Status s = runGroup(comm, {{false, prev, count}, {true, next, count}}, {buf.data(), buf.data()});
        if (!s.isOk()) return err.note("rank " + std::to_string(r) + ": " + s.toString());
        if (!holds(buf, prev, r)) err.note("rank " + std::to_string(r) + ": wrong elements");
      });
      REQUIRE(init.isOk());
      INFO(transport << " n=" << n);
      CHECK(err.first == "");
    }
  }
}

TEST_CASE("point-to-point messages interleave with collectives in issue order", "[world]") {
  WorldOptions o;
  o.nranks = 4;
  o.timeoutSec = 20;
  Errors err;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    for (int iter = 0; iter < 20; ++iter) {
      std::vector<float> v(1000, static_cast<float>(r + iter));
      algorithms::Request ar;
      ar.coll = algorithms::Collective::kAllReduce;
      ar.count = v.size();
      ar.inPlace = true;
      Status s = comm.run(ar, v.data(), v.data());
      if (!s.isOk()) return err.note(s.toString());
      float want = static_cast<float>(n * iter + n * (n - 1) / 2);
      if (v[999] != want) return err.note("allreduce value");
      // Only even ranks talk to each other; odd ranks skip straight to the next collective.
      if (r % 2 == 0 && n > 2) {
        int peer = r == 0 ? 2 : 0;
        uint32_t mine = tagValue(r, peer, iter), theirs = 0;
        algorithms::Request p;
        p.coll = algorithms::Collective::kSendRecv;
        p.dtype = DataType::kUint32;
        p.p2p = {{true, peer, 1}, {false, peer, 1}};
        s = comm.run(p, nullptr, nullptr, {&mine, &theirs});
        if (!s.isOk()) return err.note(s.toString());
        if (theirs != tagValue(peer, r, iter)) return err.note("p2p value");
      }
    }
  });
  REQUIRE(init.isOk());
  CHECK(err.first == "");
}

TEST_CASE("a send without a matching receive size fails cleanly instead of corrupting", "[world]") {
  WorldOptions o;
  o.nranks = 2;
  o.timeoutSec = 5;
  std::atomic<int> failed{0};
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    std::vector<uint32_t> buf(100, 7);
    algorithms::Request p;
    p.coll = algorithms::Collective::kSendRecv;
    p.dtype = DataType::kUint32;
    p.p2p = {{comm.rank() == 0, 1 - comm.rank(), comm.rank() == 0 ? size_t{100} : size_t{60}}};
    Status s = comm.run(p, nullptr, nullptr, {buf.data()});
    if (!s.isOk()) ++failed;
  });
  REQUIRE(init.isOk());
  CHECK(failed.load() >= 1);
}

TEST_CASE("split makes working sub-communicators ordered by key", "[world]") {
  WorldOptions o;
  o.nranks = 6;
  o.timeoutSec = 20;
  Errors err;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    int color = r == 5 ? -1 : r % 2;
    auto child = comm.split(color, /*key=*/-r);  // reversed order inside each color
    if (!child.isOk()) return err.note(child.status().toString());
    auto useChild = [&]() {
      if (color < 0) {
        if (child.value()) err.note("rank 5 got a communicator for a negative color");
        return;
      }
      core::Communicator& c = *child.value();
      int expectSize = color == 0 ? 3 : 2;  // evens 0,2,4; odds 1,3
      if (c.size() != expectSize) return err.note("child size");
      // Keys are -rank, so the highest old rank is child rank 0.
      int expectRank = color == 0 ? (4 - r) / 2 : (3 - r) / 2;
      if (c.rank() != expectRank)
        return err.note("rank " + std::to_string(r) + " child rank " + std::to_string(c.rank()));
      std::vector<int32_t> v(5000, r);
      algorithms::Request ar;
      ar.coll = algorithms::Collective::kAllReduce;
      ar.count = v.size();
      ar.dtype = DataType::kInt32;
      ar.inPlace = true;
      Status s = c.run(ar, v.data(), v.data());
      if (!s.isOk()) return err.note(s.toString());
      int want = color == 0 ? 0 + 2 + 4 : 1 + 3;
      if (v[4999] != want) err.note("child allreduce gave " + std::to_string(v[4999]));
    };
    useChild();
    // The parent still works after the split, on every rank.
    std::vector<int32_t> v(100, 1);
    algorithms::Request ar;
    ar.coll = algorithms::Collective::kAllReduce;
    ar.count = v.size();
    ar.dtype = DataType::kInt32;
    ar.inPlace = true;
    Status s = comm.run(ar, v.data(), v.data());
    if (!s.isOk() || v[99] != 6) err.note("parent after split: " + s.toString());
  });
  REQUIRE(init.isOk());
  CHECK(err.first == "");
}

TEST_CASE("a pre-multiplied sum scales each rank's input before summing", "[world]") {
  WorldOptions o;
  o.nranks = 3;
  Errors err;
  Status init = braid::testing::runWorld(o, [&](core::Communicator& comm) {
    const int r = comm.rank();
    for (bool inPlace : {false, true}) {
      std::vector<double> in(777, r + 1.0), out(777, 0);
      algorithms::Request ar;
      ar.coll = algorithms::Collective::kAllReduce;
      ar.count = in.size();
      ar.dtype = DataType::kFloat64;
      ar.inPlace = inPlace;
      ar.preMul = true;
      ar.preMulScalar = 0.5;
      double* dst = inPlace ? in.data() : out.data();
      Status s = comm.run(ar, in.data(), dst);
      if (!s.isOk()) return err.note(s.toString());
      if (dst[776] != 0.5 * (1 + 2 + 3)) return err.note("premul sum gave " + std::to_string(dst[776]));
      if (!inPlace && in[0] != r + 1.0) return err.note("premul changed the input");
    }
  });
  REQUIRE(init.isOk());
  CHECK(err.first == "");
}
