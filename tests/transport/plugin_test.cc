// The plugin loader: where plugins are looked for, what a broken library gets as an error,
// and the adapter's checks on what a plugin hands back (a plugin may be wrong; braid must
// not crash for it).

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/auth.h"
#include "common/clock.h"
#include "common/tcp_pacing.h"
#include "harness.h"
#include "support/catch.h"
#include "transports/plugin/plugin_export.h"
#include "transports/plugin/plugin_loader.h"

namespace braid::transport::test {
namespace {

const std::string kDir = BRAID_TEST_PLUGIN_DIR;

TEST_CASE("plugin loader: the list in BRAID_TRANSPORT_PLUGIN comes first, a file name loads once", "[plugin]") {
  auto files = plugin::pluginFiles("/a/libbraid-net-x.so::/b/libbraid-net-y.so:/c/libbraid-net-x.so",
                                   kDir.c_str());
  REQUIRE(files.size() >= 2);
  CHECK(files[0] == "/a/libbraid-net-x.so");
  CHECK(files[1] == "/b/libbraid-net-y.so");
  int tcpAbi = 0;
  for (const auto& f : files) {
    CHECK(f != "/c/libbraid-net-x.so");
    tcpAbi += f == kDir + "/libbraid-net-tcp-abi.so";
  }
  CHECK(tcpAbi == 1);  // found by scanning the folder
  CHECK(plugin::pluginFiles(nullptr, "none").empty());
  CHECK(plugin::pluginFiles("", "none").empty());
  CHECK(plugin::nameFromFile("/x/libbraid-net-ucx.so") == "ucx");
  CHECK(plugin::nameFromFile("/x/libbraid-net-ib-verbs.so.1") == "ib-verbs");
  CHECK(plugin::nameFromFile("other.so") == "other.so");
}

TEST_CASE("plugin loader: a missing file, a missing symbol and a wrong version name the file", "[plugin]") {
  auto missing = plugin::loadPlugin(kDir + "/libbraid-net-absent.so");
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().message().find("libbraid-net-absent.so") != std::string::npos);

  auto noSymbol = plugin::loadPlugin(kDir + "/libbraid-net-no-symbol.so");
  REQUIRE_FALSE(noSymbol.isOk());
  INFO(noSymbol.status().message());
  CHECK(noSymbol.status().code() == Code::kInvalidArgument);
  CHECK(noSymbol.status().message().find("libbraid-net-no-symbol.so") != std::string::npos);
  CHECK(noSymbol.status().message().find("braidTransportPlugin_v1") != std::string::npos);

  auto badVersion = plugin::loadPlugin(kDir + "/libbraid-net-bad-version.so");
  REQUIRE_FALSE(badVersion.isOk());
  INFO(badVersion.status().message());
  CHECK(badVersion.status().message().find("libbraid-net-bad-version.so") != std::string::npos);
  CHECK(badVersion.status().message().find("version 99") != std::string::npos);
  CHECK(badVersion.status().message().find("versions 1 to 10") != std::string::npos);
}

TEST_CASE("plugin loader: tcp behind the ABI loads, names itself and scores like tcp", "[plugin]") {
  auto f = plugin::loadPlugin(kDir + "/libbraid-net-tcp-abi.so");
  REQUIRE(f.isOk());
  CHECK(std::string(f->name) == "tcp-abi");
  CHECK(f->origin == kDir + "/libbraid-net-tcp-abi.so");
  CHECK(f->version.find("tests") != std::string::npos);
  TransportConfig cfg;
  cfg.nranks = 2;
  auto t = f->create(cfg);
  REQUIRE(t.isOk());
  CHECK(std::string(t.value()->name()) == "tcp-abi");
  PeerInfo local{0, "h", 1, 5};
  PeerInfo remote{1, "other", 2, 5};
  CHECK(t.value()->canConnect(local, remote) == 10);
  remote.nonce = 6;
  CHECK(t.value()->canConnect(local, remote) == 0);
}

TEST_CASE("plugin loader: init failing carries the plugin's message and name", "[plugin]") {
  auto f = plugin::loadPlugin(kDir + "/libbraid-net-failing.so");
  REQUIRE(f.isOk());
  setenv("BRAID_TEST_FAIL_RANK", "0", 1);
  setenv("BRAID_TEST_FAIL_MODE", "init", 1);
  TransportConfig cfg;
  cfg.nranks = 2;
  auto t = f->create(cfg);
  unsetenv("BRAID_TEST_FAIL_RANK");
  unsetenv("BRAID_TEST_FAIL_MODE");
  REQUIRE_FALSE(t.isOk());
  CHECK(t.status().code() == Code::kSystemError);
  CHECK(t.status().message() == "failing: init refused on purpose");
}

// ---- a table written here, wrong in the ways a plugin can be -------------------------

struct Fake {
  int blobMode = 0;   // 0 fine, 1 claims a longer blob than the buffer, 2 no connection
  size_t recvBytes = 16;
  uint8_t slot[64] = {};
};
Fake gFake;

braidPluginResult_t fakeInit(const braidTransportConfig_v1*, void** t, braidPluginError_v1*) {
  *t = &gFake;
  return braidPluginOk;
}
void fakeFinalize(void*) {}
int64_t gSeenPid = -1;  // the remote pid the last score was given
std::string gSeenHost;  // ... and its host id
int fakeScore(void*, const braidPeerInfo_v1*, const braidPeerInfo_v1* remote) {
  gSeenPid = remote->pid;
  gSeenHost = remote->host_id;
  return -5;
}
braidPluginResult_t fakeCreateRecv(void*, int, int, void** c, void* blob, size_t* n, braidPluginError_v1*) {
  if (gFake.blobMode == 1) {
    *n += 100;
    *c = &gFake;
    return braidPluginOk;
  }
  if (gFake.blobMode == 2) return braidPluginOk;
  std::memcpy(blob, "ok", 2);
  *n = 2;
  *c = &gFake;
  return braidPluginOk;
}
braidPluginResult_t fakeConnectSend(void*, int peer, int, const void*, size_t, void**, braidPluginError_v1* e) {
  e->rank = peer;
  std::snprintf(e->message, sizeof(e->message), "peer %d went away", peer);
  return braidPluginRemoteError;
}
braidPluginResult_t fakeEstablish(void*, int64_t, braidPluginError_v1*) { return braidPluginOk; }
size_t fakeSlotBytes(void*) { return 32; }
braidPluginResult_t fakeReserve(void*, braidSlot_v1* s, braidPluginError_v1*) {
  s->data = gFake.slot;
  return braidPluginOk;
}
braidPluginResult_t fakePost(void*, const braidSlot_v1*, size_t, braidPluginError_v1*) { return braidPluginWouldBlock; }
braidPluginResult_t fakePeek(void*, braidSlot_v1* s, braidPluginError_v1*) {
  s->data = gFake.slot;
  s->bytes = gFake.recvBytes;
  s->tag = 7;
  return braidPluginOk;
}
braidPluginResult_t fakeRelease(void*, const braidSlot_v1*, braidPluginError_v1*) { return braidPluginOk; }
braidPluginResult_t fakeProgress(void*, braidPluginError_v1* e) {
  // A plugin that forgets the NUL: the adapter must stop at the buffer's end.
  e->rank = 3;
  std::memset(e->message, 'x', sizeof(e->message));
  return braidPluginSystemError;
}
int fakeFlushed(void*) { return 1; }
int fakeSeesPeerFailure(void*) { return 1; }
void fakeWaitHandle(void*, int, braidWaitHandle_v1* h) { h->fd = 42; h->fd_events = 1; }
void fakeDisarm(void*, int) {}
void fakeClose(void*) {}

braidTransportPlugin_v1_t fakeTable() {
  braidTransportPlugin_v1_t t{};
  t.abi_version = 1;
  t.name = "fake";
  t.version = "1";
  t.init = fakeInit;
  t.finalize = fakeFinalize;
  t.score = fakeScore;
  t.create_recv = fakeCreateRecv;
  t.connect_send = fakeConnectSend;
  t.establish = fakeEstablish;
  t.slot_bytes = fakeSlotBytes;
  t.reserve_send = fakeReserve;
  t.post_send = fakePost;
  t.peek_recv = fakePeek;
  t.release_recv = fakeRelease;
  t.progress = fakeProgress;
  t.flushed = fakeFlushed;
  t.sees_peer_failure = fakeSeesPeerFailure;
  t.wait_handle = fakeWaitHandle;
  t.disarm = fakeDisarm;
  t.close = fakeClose;
  return t;
}

TEST_CASE("plugin adapter: what a wrong plugin returns becomes an error, not a crash", "[plugin]") {
  static const braidTransportPlugin_v1_t table = fakeTable();
  TransportFactory f = plugin::factoryFromTable(&table, "fake table");
  TransportConfig cfg;
  auto t = f.create(cfg);
  REQUIRE(t.isOk());
  Transport& tr = *t.value();
  PeerInfo a{0, "h", 1, 1};
  CHECK(tr.canConnect(a, a) == 0);  // a negative score means cannot
  CHECK(gSeenPid == 1);
  // A peer of another pid namespace: its pid would name another process here, so the plugin
  // gets 0 (transport_plugin.h).
  PeerInfo local{0, "h", 7, 1, /*pidNs=*/1, /*process=*/1};
  PeerInfo contained{1, "h", 7, 1, /*pidNs=*/2, /*process=*/2};
  (void)tr.canConnect(local, contained);
  CHECK(gSeenPid == 0);
  contained.pidNs = 1;
  (void)tr.canConnect(local, contained);
  CHECK(gSeenPid == 7);
  CHECK(gSeenHost == "h");
  // A peer of this host in another network namespace (ip netns, a container with a network
  // of its own under the host's name) shares no loopback interface: the plugin is given a
  // host id of its own for it, and the plain one where either namespace is unknown or they
  // are on different hosts.
  local.netNs = 10;
  contained.netNs = 20;
  (void)tr.canConnect(local, contained);
  CHECK(gSeenHost == "h netns:20");
  CHECK(gSeenPid == 7);
  contained.netNs = 10;
  (void)tr.canConnect(local, contained);
  CHECK(gSeenHost == "h");
  contained.netNs = 0;
  (void)tr.canConnect(local, contained);
  CHECK(gSeenHost == "h");
  contained.netNs = 20;
  contained.hostId = "other";
  (void)tr.canConnect(local, contained);
  CHECK(gSeenHost == "other");

  std::string blob;
  gFake.blobMode = 1;
  auto tooLong = tr.createRecv(1, 0, &blob);
  REQUIRE_FALSE(tooLong.isOk());
  CHECK(tooLong.status().message().find("fake: create_recv wrote a blob longer than its buffer") == 0);
  gFake.blobMode = 2;
  auto none = tr.createRecv(1, 0, &blob);
  REQUIRE_FALSE(none.isOk());
  CHECK(none.status().message() == "fake: create_recv returned no connection");
  gFake.blobMode = 0;
  auto conn = tr.createRecv(1, 0, &blob);
  REQUIRE(conn.isOk());
  CHECK(blob == "ok");

  auto send = tr.connectSend(4, 0, "ok");
  REQUIRE_FALSE(send.isOk());
  CHECK(send.status().code() == Code::kRemoteError);
  CHECK(send.status().rank() == 4);
  CHECK(send.status().message() == "fake: peer 4 went away");

  Connection& c = *conn.value();
  CHECK(c.slotBytes() == 32);
  // A v1 table: no zero copy, whole tags, and peekRecvInto falls back to peek_recv.
  CHECK_FALSE(c.sendsFromUser());
  CHECK(c.tagMask() == ~uint64_t{0});
  uint8_t land[16];
  Slot into;
  REQUIRE(c.peekRecvInto(&into, land, sizeof(land)).isOk());
  CHECK(into.data == gFake.slot);
  Slot s;
  REQUIRE(c.peekRecv(&s).isOk());
  CHECK(s.bytes == 16);
  CHECK(s.tag == 7);
  gFake.recvBytes = 33;  // more than a slot holds
  Status big = c.peekRecv(&s);
  CHECK(big.code() == Code::kRemoteError);
  CHECK(big.rank() == 1);
  CHECK(big.message().find("more than a slot holds") != std::string::npos);
  CHECK(c.postSend(s, 1).code() == Code::kWouldBlock);
  Status p = c.progress();
  CHECK(p.code() == Code::kSystemError);
  CHECK(p.rank() == 3);
  CHECK(p.message().size() == std::strlen("fake: ") + sizeof(braidPluginError_v1::message));
  WaitHandle h = c.waitHandle(false);
  CHECK(h.fd == 42);
  CHECK(c.flushed());
  CHECK(c.seesPeerFailure());
}

// Version 4 adds one entry, max_message_bytes: what the adapter makes of it (a table loaded as
// an older version, or one claiming less than a slot, carries no large messages), and what it
// makes of a plugin that leaves a large message in a slot instead of where it was asked to land.
struct FakeV4 {
  int fromUser = 1;
  size_t maxMessage = 1 << 20;
  bool land = true;
};
FakeV4 gFakeV4;
int fakeSendsFromUser(void*) { return gFakeV4.fromUser; }
braidPluginResult_t fakePostFrom(void*, const braidSlot_v1*, const void*, size_t, braidPluginError_v1*) {
  return braidPluginOk;
}
braidPluginResult_t fakePeekInto(void*, braidSlot_v1* s, void* dst, size_t bytes, braidPluginError_v1*) {
  s->data = gFakeV4.land ? dst : gFake.slot;
  s->bytes = bytes;
  s->tag = 9;
  return braidPluginOk;
}
uint64_t fakeTagMask(void*) { return ~uint64_t{0}; }
size_t fakeMaxMessage(void*) { return gFakeV4.maxMessage; }
braidPluginResult_t fakePeekTag(void*, uint64_t* tag, braidPluginError_v1*) {
  *tag = 77;
  return braidPluginOk;
}

// A transport made by `f` from a default config, and one receive connection of it (from
// rank 1, channel 0), for the adapter tests of later ABI versions.
std::pair<std::unique_ptr<Transport>, std::unique_ptr<Connection>> recvConnection(const TransportFactory& f) {
  auto t = f.create(TransportConfig{});
  REQUIRE(t.isOk());
  std::string blob;
  gFake.blobMode = 0;
  gFake.recvBytes = 16;  // the adapter test leaves more than a slot holds
  auto c = t.value()->createRecv(1, 0, &blob);
  REQUIRE(c.isOk());
  return std::make_pair(std::move(t).value(), std::move(c).value());
}

braidTransportPlugin_v4_t fakeTableV4() {
  braidTransportPlugin_v4_t t{};
  t.base.base.base = fakeTable();
  t.base.base.base.abi_version = 4;
  t.base.base.sends_from_user = fakeSendsFromUser;
  t.base.base.post_send_from = fakePostFrom;
  t.base.base.peek_recv_into = fakePeekInto;
  t.base.base.tag_mask = fakeTagMask;
  t.base.init_keyed = [](const braidTransportConfig_v1* c, const braidJobKey_v1*, void** h, braidPluginError_v1* e) {
    return fakeInit(c, h, e);
  };
  t.max_message_bytes = fakeMaxMessage;
  t.peek_tag = fakePeekTag;
  return t;
}

TEST_CASE("plugin ABI v4: max_message_bytes, never below a slot, none before v4, a large message must land",
          "[plugin]") {
  static const braidTransportPlugin_v4_t table = fakeTableV4();
  auto connection = [&](bool v4) {
    return recvConnection(plugin::factoryFromTable(&table.base.base.base, "fake v4 table", &table.base.base,
                                                   &table.base, v4 ? &table : nullptr));
  };
  gFakeV4 = FakeV4{};
  {
    auto [t, c] = connection(true);
    CHECK(c->maxMessageBytes() == (1u << 20));
    uint64_t tag = 0;
    REQUIRE(c->peekTag(&tag).isOk());
    CHECK(tag == 77);  // the plugin's own look, not a peek_recv (whose tag is 7)
    std::vector<uint8_t> dst(4096);
    Slot s;
    REQUIRE(c->peekRecvInto(&s, dst.data(), dst.size()).isOk());
    CHECK(s.data == dst.data());
    CHECK(s.bytes == dst.size());
    gFakeV4.land = false;  // a large message left in a 32-byte slot
    Status st = c->peekRecvInto(&s, dst.data(), dst.size());
    INFO(st.toString());
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.rank() == 1);
    CHECK(st.message().find("must land where it was asked to") != std::string::npos);
  }
  {
    auto [t, c] = connection(false);  // the same plugin loaded as v3
    CHECK(c->maxMessageBytes() == 32);
    uint64_t tag = 0;
    REQUIRE(c->peekTag(&tag).isOk());
    CHECK(tag == 7);  // through peek_recv
  }
  gFakeV4 = FakeV4{};
  gFakeV4.maxMessage = 8;
  {
    auto [t, c] = connection(true);
    CHECK(c->maxMessageBytes() == 32);
  }
  gFakeV4 = FakeV4{};
}

// Version 5 adds slot_memory: a connection's slots as the direct GPU path registers them
// (Connection::slotMemory); none through an older table, nor where the plugin says none.
struct FakeV5 {
  void* base = nullptr;
  size_t bytes = 0;
};
FakeV5 gFakeV5;
void fakeSlotMemory(void*, void** base, size_t* bytes) {
  *base = gFakeV5.base;
  *bytes = gFakeV5.bytes;
}

TEST_CASE("plugin ABI v5: slot_memory gives the direct GPU path a connection's slots, none before v5", "[plugin]") {
  static const braidTransportPlugin_v5_t table = [] {
    braidTransportPlugin_v5_t t{};
    t.base = fakeTableV4();
    t.base.base.base.base.abi_version = 5;
    t.slot_memory = fakeSlotMemory;
    return t;
  }();
  auto connection = [&](bool v5) {
    return recvConnection(plugin::factoryFromTable(&table.base.base.base.base, "fake v5 table",
                                                   &table.base.base.base, &table.base.base, &table.base,
                                                   v5 ? &table : nullptr));
  };
  static uint8_t slots[4096];
  gFakeV5 = FakeV5{slots, sizeof slots};
  {
    auto [t, c] = connection(true);
    CHECK(c->slotMemory().base == slots);
    CHECK(c->slotMemory().bytes == sizeof slots);
  }
  {
    auto [t, c] = connection(false);  // the same plugin loaded as v4
    CHECK(c->slotMemory().base == nullptr);
  }
  gFakeV5 = FakeV5{};  // the plugin's slots are no such memory
  {
    auto [t, c] = connection(true);
    CHECK(c->slotMemory().base == nullptr);
    CHECK(c->slotMemory().bytes == 0);
  }
}

// Version 6 adds peer_failed: braid's word that a rank failed, so the plugin's teardown
// waits for it no more. It reaches the plugin's own transport handle with the rank, and a
// plugin loaded as v5 hears nothing.
struct FakeV6 {
  std::vector<std::pair<void*, int>> told;
};
FakeV6 gFakeV6;
void fakePeerFailed(void* t, int rank) { gFakeV6.told.emplace_back(t, rank); }

// A transport that only records what it is told, exported through the real table.
class Recording final : public Transport {
 public:
  static std::vector<int> failed;
  const char* name() const override { return "recording"; }
  int canConnect(const PeerInfo&, const PeerInfo&) const override { return 1; }
  StatusOr<std::unique_ptr<Connection>> createRecv(int, int, std::string*) override {
    return Status(Code::kInternal, "none");
  }
  StatusOr<std::unique_ptr<Connection>> connectSend(int, int, const std::string&) override {
    return Status(Code::kInternal, "none");
  }
  Status establish(Deadline) override { return Status::ok(); }
  void peerFailed(int rank) override { failed.push_back(rank); }
  bool sawPeerFail(int rank) override {
    asked.push_back(rank);
    return rank == 2;
  }
  static std::vector<int> asked;
};
std::vector<int> Recording::failed;
std::vector<int> Recording::asked;
StatusOr<std::unique_ptr<Transport>> createRecording(const TransportConfig&) {
  return std::unique_ptr<Transport>(new Recording);
}

TEST_CASE("plugin ABI v6: peer_failed tells the plugin's transport the rank, nothing before v6", "[plugin]") {
  static const braidTransportPlugin_v6_t table = [] {
    braidTransportPlugin_v6_t t{};
    t.base.base = fakeTableV4();
    t.base.base.base.base.base.abi_version = 6;
    t.base.slot_memory = fakeSlotMemory;
    t.peer_failed = fakePeerFailed;
    return t;
  }();
  auto transportAs = [&](bool v6) {
    TransportFactory f = plugin::factoryFromTable(&table.base.base.base.base.base, "fake v6 table",
                                                  &table.base.base.base.base, &table.base.base.base,
                                                  &table.base.base, &table.base, v6 ? &table : nullptr);
    TransportConfig cfg;
    auto t = f.create(cfg);
    REQUIRE(t.isOk());
    return std::move(t).value();
  };
  gFakeV6 = FakeV6{};
  transportAs(true)->peerFailed(2);
  REQUIRE(gFakeV6.told.size() == 1);
  CHECK(gFakeV6.told[0].first == &gFake);  // the handle fakeInit gave
  CHECK(gFakeV6.told[0].second == 2);
  gFakeV6 = FakeV6{};
  transportAs(false)->peerFailed(2);  // the same plugin loaded as v5
  CHECK(gFakeV6.told.empty());

  // The export side: braid's own table for a C++ transport forwards it to that transport.
  static const braidTransportPlugin_v6_t exported = plugin::exportTableV6("recording", "1", &createRecording);
  CHECK(exported.base.base.base.base.base.abi_version == 6);
  REQUIRE(exported.peer_failed != nullptr);
  TransportFactory f = plugin::factoryFromTable(&exported.base.base.base.base.base, "exported v6 table",
                                                &exported.base.base.base.base, &exported.base.base.base,
                                                &exported.base.base, &exported.base, &exported);
  TransportConfig cfg;
  auto t = f.create(cfg);
  REQUIRE(t.isOk());
  Recording::failed.clear();
  t.value()->peerFailed(3);
  t.value()->peerFailed(1);
  CHECK(Recording::failed == std::vector<int>{3, 1});
}

// Version 7 adds expect_recv: braid's word of a receive ahead of its peek. It reaches the
// plugin's connection as given, its error comes back naming the plugin, and a plugin loaded
// as v6 hears nothing.
struct FakeV7 {
  struct Call {
    void* connection;
    size_t ahead;
    void* dst;
    size_t bytes;
  };
  std::vector<Call> calls;
  bool fail = false;
};
FakeV7 gFakeV7;
braidPluginResult_t fakeExpect(void* c, size_t ahead, void* dst, size_t bytes, braidPluginError_v1* e) {
  if (gFakeV7.fail) {
    e->rank = 1;
    std::snprintf(e->message, sizeof(e->message), "no room to post it");
    return braidPluginSystemError;
  }
  gFakeV7.calls.push_back({c, ahead, dst, bytes});
  return braidPluginOk;
}

TEST_CASE("plugin ABI v7: expect_recv reaches the plugin's connection, nothing before v7", "[plugin]") {
  static const braidTransportPlugin_v7_t table = [] {
    braidTransportPlugin_v7_t t{};
    t.base.base.base = fakeTableV4();
    t.base.base.base.base.base.base.abi_version = 7;
    t.base.base.slot_memory = fakeSlotMemory;
    t.base.peer_failed = fakePeerFailed;
    t.expect_recv = fakeExpect;
    return t;
  }();
  auto connectionAs = [&](int version) {
    const braidTransportPlugin_v7_t& x = table;
    return recvConnection(plugin::factoryFromTable(&x.base.base.base.base.base.base, "fake v7 table",
                                                   version >= 2 ? &x.base.base.base.base.base : nullptr,
                                                   version >= 3 ? &x.base.base.base.base : nullptr,
                                                   version >= 4 ? &x.base.base.base : nullptr,
                                                   version >= 5 ? &x.base.base : nullptr,
                                                   version >= 6 ? &x.base : nullptr, version >= 7 ? &x : nullptr));
  };
  std::vector<uint8_t> dst(64);
  gFakeV7 = FakeV7{};
  {
    auto [t, c] = connectionAs(7);
    CHECK(c->takesAnnouncements());  // so the executor announces to it
    REQUIRE(c->expectRecv(0, dst.data(), 24).isOk());
    REQUIRE(c->expectRecv(1, nullptr, 16).isOk());
    REQUIRE(gFakeV7.calls.size() == 2);
    CHECK(gFakeV7.calls[0].connection == &gFake);  // the handle fakeCreateRecv gave
    CHECK(gFakeV7.calls[0].ahead == 0);
    CHECK(gFakeV7.calls[0].dst == dst.data());
    CHECK(gFakeV7.calls[0].bytes == 24);
    CHECK(gFakeV7.calls[1].ahead == 1);
    CHECK(gFakeV7.calls[1].dst == nullptr);
    CHECK(gFakeV7.calls[1].bytes == 16);
    gFakeV7.fail = true;
    Status st = c->expectRecv(0, dst.data(), 24);
    INFO(st.toString());
    CHECK(st.code() == Code::kSystemError);
    CHECK(st.rank() == 1);
    CHECK(st.message().find("fake: no room to post it") != std::string::npos);  // the plugin named
  }
  gFakeV7 = FakeV7{};
  {
    auto [t, c] = connectionAs(6);  // the same plugin loaded as v6
    CHECK_FALSE(c->takesAnnouncements());
    REQUIRE(c->expectRecv(0, dst.data(), 24).isOk());
    CHECK(gFakeV7.calls.empty());
  }
  gFakeV7 = FakeV7{};

  // The export side: braid's own table forwards it to the C++ connection (tcp's ignores it).
  static const braidTransportPlugin_v7_t exported = plugin::exportTableV7("recording", "1", &createRecording);
  CHECK(exported.base.base.base.base.base.base.abi_version == 7);
  CHECK(exported.expect_recv != nullptr);
}

// Version 8 adds saw_peer_fail: whether the plugin's transport saw a rank fail. The answer
// comes back as the plugin gives it, for the rank asked; a plugin loaded as v7 is not asked
// and has seen nothing.
std::vector<std::pair<void*, int>> gAskedV8;
int fakeSawPeerFail(void* t, int rank) {
  gAskedV8.push_back({t, rank});
  return rank == 3 ? 1 : 0;
}

TEST_CASE("plugin ABI v8: saw_peer_fail asks the plugin's transport about a rank, nothing before v8", "[plugin]") {
  static const braidTransportPlugin_v8_t table = [] {
    braidTransportPlugin_v8_t t{};
    t.base.base.base.base = fakeTableV4();
    t.base.base.base.base.base.base.base.abi_version = 8;
    t.base.base.base.slot_memory = fakeSlotMemory;
    t.base.base.peer_failed = fakePeerFailed;
    t.base.expect_recv = fakeExpect;
    t.saw_peer_fail = fakeSawPeerFail;
    return t;
  }();
  auto transportAs = [&](int version) {
    const braidTransportPlugin_v8_t& x = table;
    TransportFactory f = plugin::factoryFromTable(
        &x.base.base.base.base.base.base.base, "fake v8 table", &x.base.base.base.base.base.base,
        &x.base.base.base.base.base, &x.base.base.base.base, &x.base.base.base, &x.base.base, &x.base,
        version >= 8 ? &x : nullptr);
    TransportConfig cfg;
    auto t = f.create(cfg);
    REQUIRE(t.isOk());
    return std::move(t).value();
  };
  gAskedV8.clear();
  {
    auto t = transportAs(8);
    CHECK(t->sawPeerFail(3));
    CHECK_FALSE(t->sawPeerFail(1));
    REQUIRE(gAskedV8.size() == 2);
    CHECK(gAskedV8[0].first == &gFake);  // the handle fakeInit gave
    CHECK(gAskedV8[0].second == 3);
    CHECK(gAskedV8[1].second == 1);
  }
  gAskedV8.clear();
  CHECK_FALSE(transportAs(7)->sawPeerFail(3));  // the same plugin loaded as v7
  CHECK(gAskedV8.empty());

  // The export side: braid's own table forwards the question to the C++ transport.
  static const braidTransportPlugin_v8_t exported = plugin::exportTableV8("recording", "1", &createRecording);
  CHECK(exported.base.base.base.base.base.base.base.abi_version == 8);
  REQUIRE(exported.saw_peer_fail != nullptr);
  TransportFactory f = plugin::factoryFromTable(
      &exported.base.base.base.base.base.base.base, "exported v8 table", &exported.base.base.base.base.base.base,
      &exported.base.base.base.base.base, &exported.base.base.base.base, &exported.base.base.base,
      &exported.base.base, &exported.base, &exported);
  TransportConfig cfg;
  auto t = f.create(cfg);
  REQUIRE(t.isOk());
  Recording::asked.clear();
  CHECK(t.value()->sawPeerFail(2));
  CHECK_FALSE(t.value()->sawPeerFail(4));
  CHECK(Recording::asked == std::vector<int>{2, 4});
}

// Version 9 adds reduction on arrival. The fake reduces its 16-byte payload (4 floats, the
// slot's bytes) with braid's function into dst, in two calls of whole elements, and returns
// dst; or, told to, leaves the payload in its slot; a plugin loaded as v8 is never asked.
struct FakeV9 {
  int reduces = 1;
  bool inSlot = false;  // the payload stays in the slot
  bool fail = false;
  std::vector<std::pair<size_t, void*>> expected;  // expect_reduce's ahead and dst
  size_t peeks = 0;
};
FakeV9 gFakeV9;
int fakeReducesOnArrival(void*) { return gFakeV9.reduces; }
braidPluginResult_t fakePeekReduce(void*, braidSlot_v1* s, void* dst, size_t bytes, const braidArrivalReduce_v1* r,
                                   braidPluginError_v1* e) {
  ++gFakeV9.peeks;
  if (gFakeV9.fail) {
    e->rank = 1;
    std::snprintf(e->message, sizeof(e->message), "the payload came apart");
    return braidPluginRemoteError;
  }
  s->tag = 7;
  s->bytes = gFake.recvBytes;
  if (gFakeV9.inSlot) {
    s->data = gFake.slot;
    return braidPluginOk;
  }
  const size_t n = std::min(bytes, gFake.recvBytes) / r->elem_bytes * r->elem_bytes;
  const size_t cut = r->elem_bytes;
  const char* local = static_cast<const char*>(r->local);
  r->fn(r->ctx, static_cast<char*>(dst) + cut, gFake.slot + cut, local + cut, n - cut);
  r->fn(r->ctx, dst, gFake.slot, local, cut);
  s->data = dst;
  return braidPluginOk;
}
braidPluginResult_t fakeExpectReduce(void*, size_t ahead, void* dst, size_t, const braidArrivalReduce_v1* r,
                                     braidPluginError_v1*) {
  if (!r || !r->fn) return braidPluginInvalidArgument;
  gFakeV9.expected.push_back({ahead, dst});
  return braidPluginOk;
}
void addFloats(void*, void* dst, const void* payload, const void* local, size_t bytes) {
  for (size_t i = 0; i < bytes / sizeof(float); ++i)
    static_cast<float*>(dst)[i] = static_cast<const float*>(payload)[i] + static_cast<const float*>(local)[i];
}

TEST_CASE("plugin ABI v9: reductions on arrival reach the plugin's connection, nothing before v9", "[plugin]") {
  static const braidTransportPlugin_v9_t table = [] {
    braidTransportPlugin_v9_t t{};
    t.base.base.base.base.base = fakeTableV4();
    t.base.base.base.base.base.base.base.base.abi_version = 9;
    t.base.base.base.base.slot_memory = fakeSlotMemory;
    t.base.base.base.peer_failed = fakePeerFailed;
    t.base.base.expect_recv = fakeExpect;
    t.base.saw_peer_fail = fakeSawPeerFail;
    t.reduces_on_arrival = fakeReducesOnArrival;
    t.peek_recv_reduce = fakePeekReduce;
    t.expect_reduce = fakeExpectReduce;
    return t;
  }();
  auto connectionAs = [&](int version) {
    const braidTransportPlugin_v9_t& x = table;
    return recvConnection(plugin::factoryFromTable(
        &x.base.base.base.base.base.base.base.base, "fake v9 table", &x.base.base.base.base.base.base.base,
        &x.base.base.base.base.base.base, &x.base.base.base.base.base, &x.base.base.base.base, &x.base.base.base,
        &x.base.base, &x.base, version >= 9 ? &x : nullptr));
  };
  const float payload[4] = {1, 2, 3, 4};
  const float local[4] = {10, 20, 30, 40};
  ArrivalReduce r;
  r.local = local;
  r.fn = &addFloats;
  r.elemBytes = sizeof(float);
  gFakeV9 = FakeV9{};
  {
    auto [t, c] = connectionAs(9);
    std::memcpy(gFake.slot, payload, sizeof(payload));
    CHECK(c->reducesOnArrival());
    float dst[4] = {};
    REQUIRE(c->expectReduce(0, dst, sizeof(dst), r).isOk());
    REQUIRE(gFakeV9.expected.size() == 1);
    CHECK(gFakeV9.expected[0].first == 0);
    CHECK(gFakeV9.expected[0].second == dst);
    Slot s;
    REQUIRE(c->peekRecvReduce(&s, dst, sizeof(dst), r).isOk());
    CHECK(s.data == dst);
    CHECK(s.bytes == 16);
    CHECK(s.tag == 7);
    for (int i = 0; i < 4; ++i) CHECK(dst[i] == payload[i] + local[i]);
    // Left in its slot: the slot comes back and dst is untouched.
    gFakeV9.inSlot = true;
    float untouched[4] = {-1, -1, -1, -1};
    REQUIRE(c->peekRecvReduce(&s, untouched, sizeof(untouched), r).isOk());
    CHECK(s.data == gFake.slot);
    CHECK(untouched[0] == -1);
    // A failure names the plugin and the rank.
    gFakeV9.fail = true;
    Status st = c->peekRecvReduce(&s, dst, sizeof(dst), r);
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.rank() == 1);
    CHECK(st.message().find("fake: the payload came apart") != std::string::npos);
  }
  gFakeV9 = FakeV9{};
  gFakeV9.reduces = 0;
  {
    auto [t, c] = connectionAs(9);  // a v9 plugin whose connection does not reduce
    CHECK_FALSE(c->reducesOnArrival());
    float dst[4] = {-1, -1, -1, -1};
    Slot s;
    REQUIRE(c->peekRecvReduce(&s, dst, sizeof(dst), r).isOk());  // a plain peek
    CHECK(s.data == gFake.slot);
    CHECK(gFakeV9.peeks == 0);
    CHECK(dst[0] == -1);
  }
  gFakeV9 = FakeV9{};
  {
    auto [t, c] = connectionAs(8);  // the same plugin loaded as v8
    CHECK_FALSE(c->reducesOnArrival());
    float dst[4] = {-1, -1, -1, -1};
    REQUIRE(c->expectReduce(0, dst, sizeof(dst), r).isOk());
    CHECK(gFakeV9.expected.empty());
    Slot s;
    REQUIRE(c->peekRecvReduce(&s, dst, sizeof(dst), r).isOk());
    CHECK(s.data == gFake.slot);
    CHECK(gFakeV9.peeks == 0);
  }
  gFakeV9 = FakeV9{};

  // The export side: braid's own table forwards to the C++ connection (tcp's does not reduce).
  static const braidTransportPlugin_v9_t exported = plugin::exportTableV9("recording", "1", &createRecording);
  CHECK(exported.base.base.base.base.base.base.base.base.abi_version == 9);
  CHECK(exported.reduces_on_arrival != nullptr);
  CHECK(exported.peek_recv_reduce != nullptr);
  CHECK(exported.expect_reduce != nullptr);
}

// ---- plugin ABI v10: device areas registered with a NIC (GPUDirect RDMA) -------------------

// An in-process transport whose connections have registered device areas, as the verbs
// transport's do: the sender's "NIC" copies a device payload from the sender's area into
// the receiver's, and the slot carries its tag and length in order with host messages.
struct AreaMsg {
  std::vector<uint8_t> bytes;  // a host message's payload
  size_t length = 0;
  uint64_t tag = 0;
  bool device = false;
};
struct AreaRecvEnd;
struct AreaLog {
  int dmabufFd = -2;  // as the receiving end's registration saw it
  bool released = false;
  void* peerArea = nullptr;  // as the sending end attached it
};
AreaLog gAreaLog;
constexpr size_t kAreaSlot = 64;
constexpr int kAreaSlots = 4;

class AreaRecvConnection final : public Connection {
 public:
  size_t slotBytes() const override { return kAreaSlot; }
  Status reserveSend(Slot*) override { return Status(Code::kInternal, "receive end"); }
  Status postSend(const Slot&, size_t) override { return Status(Code::kInternal, "receive end"); }
  Status peekRecv(Slot* s) override {
    if (queue.empty()) return Status(Code::kWouldBlock, "");
    const AreaMsg& m = queue.front();
    if (!m.bytes.empty()) std::memcpy(slot, m.bytes.data(), m.bytes.size());
    *s = Slot{slot, m.length, m.tag};
    s->device = m.device;
    return Status::ok();
  }
  Status releaseRecv(const Slot&) override {
    queue.erase(queue.begin());
    return Status::ok();
  }
  Status progress() override { return Status::ok(); }
  WaitHandle waitHandle(bool) override { return WaitHandle{}; }
  int peer() const override { return 1; }
  size_t deviceAreaBytes() const override { return kAreaSlot * kAreaSlots; }
  DeviceAreaKind deviceAreaKind() const override { return DeviceAreaKind::kRegistered; }
  StatusOr<std::string> registerDeviceArea(const DeviceMemory& m) override {
    gAreaLog.dmabufFd = m.dmabufFd;
    registered = m.base;
    return "area:" + std::to_string(reinterpret_cast<uintptr_t>(m.base));
  }
  void setDeviceArea(void* base) override { area = static_cast<uint8_t*>(base); }
  void releaseDeviceArea() override {
    area = nullptr;
    gAreaLog.released = true;
  }
  void* deviceData(const Slot& s) const override { return area && s.device ? area : nullptr; }

  std::vector<AreaMsg> queue;
  uint8_t slot[kAreaSlot] = {};
  void* registered = nullptr;
  uint8_t* area = nullptr;
};

class AreaSendConnection final : public Connection {
 public:
  explicit AreaSendConnection(AreaRecvConnection* to) : to_(to) {}
  size_t slotBytes() const override { return kAreaSlot; }
  Status reserveSend(Slot* s) override {
    s->data = staging_;
    return Status::ok();
  }
  Status postSend(const Slot& s, size_t bytes) override {
    to_->queue.push_back(AreaMsg{std::vector<uint8_t>(staging_, staging_ + bytes), bytes, s.tag, false});
    return Status::ok();
  }
  Status peekRecv(Slot*) override { return Status(Code::kInternal, "send end"); }
  Status releaseRecv(const Slot&) override { return Status(Code::kInternal, "send end"); }
  Status progress() override { return Status::ok(); }
  WaitHandle waitHandle(bool) override { return WaitHandle{}; }
  int peer() const override { return 0; }
  size_t deviceAreaBytes() const override { return kAreaSlot * kAreaSlots; }
  DeviceAreaKind deviceAreaKind() const override { return DeviceAreaKind::kRegistered; }
  StatusOr<std::string> registerDeviceArea(const DeviceMemory&) override { return std::string(); }
  Status attachPeerDeviceArea(const std::string& name) override {
    if (name.compare(0, 5, "area:") != 0) return Status(Code::kInvalidArgument, "not an area: " + name);
    peer_ = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(std::strtoull(name.c_str() + 5, nullptr, 10)));
    gAreaLog.peerArea = peer_;
    return Status::ok();
  }
  void setDeviceArea(void* base) override { area_ = static_cast<uint8_t*>(base); }
  void* deviceData(const Slot& s) const override { return area_ && s.data == staging_ ? area_ : nullptr; }
  Status postSendDevice(const Slot& s, size_t bytes) override {
    if (!area_ || !peer_) return Status(Code::kInternal, "no areas");
    std::memcpy(peer_, area_, bytes);
    to_->queue.push_back(AreaMsg{{}, bytes, s.tag, true});
    return Status::ok();
  }

 private:
  AreaRecvConnection* to_;
  uint8_t staging_[kAreaSlot] = {};
  uint8_t* area_ = nullptr;
  uint8_t* peer_ = nullptr;
};

class AreaTransport final : public Transport {
 public:
  const char* name() const override { return "areas"; }
  int canConnect(const PeerInfo&, const PeerInfo&) const override { return 1; }
  StatusOr<std::unique_ptr<Connection>> createRecv(int, int, std::string* blob) override {
    auto c = std::make_unique<AreaRecvConnection>();
    *blob = std::to_string(reinterpret_cast<uintptr_t>(c.get()));
    return std::unique_ptr<Connection>(std::move(c));
  }
  StatusOr<std::unique_ptr<Connection>> connectSend(int, int, const std::string& blob) override {
    auto* to = reinterpret_cast<AreaRecvConnection*>(static_cast<uintptr_t>(std::strtoull(blob.c_str(), nullptr, 10)));
    return std::unique_ptr<Connection>(new AreaSendConnection(to));
  }
  Status establish(Deadline) override { return Status::ok(); }
};
StatusOr<std::unique_ptr<Transport>> createAreas(const TransportConfig&) {
  return std::unique_ptr<Transport>(new AreaTransport);
}

TEST_CASE("plugin ABI v10: registered device areas through the table, both ways, nothing before v10", "[plugin]") {
  static const braidTransportPlugin_v10_t exported = plugin::exportTableV10("areas", "1", &createAreas);
  const braidTransportPlugin_v10_t& x = exported;
  CHECK(x.base.base.base.base.base.base.base.base.base.abi_version == 10);
  auto factoryAs = [&](int version) {
    return plugin::factoryFromTable(&x.base.base.base.base.base.base.base.base.base, "areas table",
                                    &x.base.base.base.base.base.base.base.base, &x.base.base.base.base.base.base.base,
                                    &x.base.base.base.base.base.base, &x.base.base.base.base.base,
                                    &x.base.base.base.base, &x.base.base.base, &x.base.base, &x.base,
                                    version >= 10 ? &x : nullptr);
  };
  gAreaLog = AreaLog{};
  {
    const TransportFactory f = factoryAs(10);
    auto t = f.create(TransportConfig{});
    REQUIRE(t.isOk());
    std::string blob;
    auto r = t.value()->createRecv(1, 0, &blob);
    REQUIRE(r.isOk());
    auto sd = t.value()->connectSend(0, 0, blob);
    REQUIRE(sd.isOk());
    std::unique_ptr<Connection> recv = std::move(r).value(), send = std::move(sd).value();
    for (Connection* c : {recv.get(), send.get()}) {
      CHECK(c->deviceAreaKind() == Connection::DeviceAreaKind::kRegistered);
      CHECK(c->deviceAreaBytes() == kAreaSlot * kAreaSlots);
    }
    std::vector<uint8_t> sendArea(kAreaSlot * kAreaSlots), recvArea(kAreaSlot * kAreaSlots);
    // The receiving end names its area (the dmabuf fd passes through); the sender attaches it.
    auto name = recv->registerDeviceArea(Connection::DeviceMemory{recvArea.data(), 1234, 0});
    REQUIRE(name.isOk());
    CHECK(gAreaLog.dmabufFd == 1234);
    CHECK(name.value() == "area:" + std::to_string(reinterpret_cast<uintptr_t>(recvArea.data())));
    REQUIRE(send->registerDeviceArea(Connection::DeviceMemory{sendArea.data(), -1, 0}).isOk());
    Status bad = send->attachPeerDeviceArea("nothing");
    CHECK(bad.code() == Code::kInvalidArgument);
    CHECK(bad.message().find("areas: not an area: nothing") != std::string::npos);
    REQUIRE(send->attachPeerDeviceArea(name.value()).isOk());
    CHECK(gAreaLog.peerArea == recvArea.data());
    // Not in use before set_device_area.
    Slot out;
    REQUIRE(send->reserveSend(&out).isOk());
    CHECK(send->deviceData(out) == nullptr);
    recv->setDeviceArea(recvArea.data());
    send->setDeviceArea(sendArea.data());
    // A device message: written at deviceData of the reserved slot, read at deviceData of
    // the received one, flagged as such.
    REQUIRE(send->reserveSend(&out).isOk());
    REQUIRE(send->deviceData(out) == sendArea.data());
    for (size_t i = 0; i < 40; ++i) sendArea[i] = static_cast<uint8_t>(i * 3 + 1);
    out.tag = 21;
    REQUIRE(send->postSendDevice(out, 40).isOk());
    // A host message after it, in order.
    REQUIRE(send->reserveSend(&out).isOk());
    std::memset(out.data, 0x5A, 8);
    out.tag = 22;
    REQUIRE(send->postSend(out, 8).isOk());
    Slot in;
    REQUIRE(recv->peekRecv(&in).isOk());
    CHECK(in.device);
    CHECK(in.tag == 21);
    CHECK(in.bytes == 40);
    REQUIRE(recv->deviceData(in) == recvArea.data());
    bool same = true;
    for (size_t i = 0; i < 40; ++i) same &= recvArea[i] == static_cast<uint8_t>(i * 3 + 1);
    CHECK(same);
    REQUIRE(recv->releaseRecv(in).isOk());
    REQUIRE(recv->peekRecv(&in).isOk());
    CHECK_FALSE(in.device);
    CHECK(in.tag == 22);
    CHECK(static_cast<const uint8_t*>(in.data)[7] == 0x5A);
    CHECK(recv->deviceData(in) == nullptr);
    REQUIRE(recv->releaseRecv(in).isOk());
    recv->releaseDeviceArea();
    CHECK(gAreaLog.released);
  }
  {
    // The same plugin loaded as v9: no device areas, and asking for them is refused.
    const TransportFactory f = factoryAs(9);
    auto t = f.create(TransportConfig{});
    REQUIRE(t.isOk());
    std::string blob;
    auto r = t.value()->createRecv(1, 0, &blob);
    REQUIRE(r.isOk());
    CHECK(r.value()->deviceAreaKind() == Connection::DeviceAreaKind::kNone);
    CHECK(r.value()->deviceAreaBytes() == 0);
    CHECK_FALSE(r.value()->registerDeviceArea(Connection::DeviceMemory{}).isOk());
  }
  // braid's own plugins without areas (tcp behind the ABI) say so through v10.
  static const StatusOr<TransportFactory> tcpAbi = plugin::loadPlugin(kDir + "/libbraid-net-tcp-abi.so");
  REQUIRE(tcpAbi.isOk());
  auto t = tcpAbi.value().create(loopbackPairConfig(0, freshNonce()));
  REQUIRE(t.isOk());
  std::string blob;
  auto r = t.value()->createRecv(1, 0, &blob);
  REQUIRE(r.isOk());
  CHECK(r.value()->deviceAreaKind() == Connection::DeviceAreaKind::kNone);
}

// Plugin ABI v3 hands the job's key to the plugin; a plugin whose peers reach it directly
// (tcp's sockets, UCX's hellos) then admits only a peer that proves the key. Checked for
// every such plugin in the build, through the ABI: tcp behind it, and UCX.
const TransportFactory* factoryNamed(const char* name) {
  static const StatusOr<TransportFactory> tcpAbi = plugin::loadPlugin(kDir + "/libbraid-net-tcp-abi.so");
  if (std::string(name) == "tcp-abi") return tcpAbi.isOk() ? &tcpAbi.value() : nullptr;
  for (const TransportFactory& f : registry())
    if (std::string(f.name) == name) return &f;
  return nullptr;
}

TransportConfig keyedConfig(int rank, uint64_t nonce, const AuthKey& key) {
  TransportConfig cfg = loopbackPairConfig(rank, nonce);
  cfg.authKey = key;
  return cfg;
}

TEST_CASE("plugin ABI v3: the job key reaches the plugin, a peer with another key is refused, the real one connects",
          "[plugin][auth]") {
  for (const char* name : {"tcp-abi", "ucx"}) {
    const TransportFactory* f = factoryNamed(name);
    if (!f) {
      WARN("skipped for " << name << ": not in this build");
      continue;
    }
    INFO(name);
    const uint64_t nonce = freshNonce();
    const AuthKey key = randomAuthKey();
    auto t0 = f->create(keyedConfig(0, nonce, key));
    auto t1 = f->create(keyedConfig(1, nonce, key));
    auto stranger = f->create(keyedConfig(1, nonce, randomAuthKey()));   // knows the nonce, not the key
    auto keyless = f->create(keyedConfig(1, nonce, AuthKey{}));
    REQUIRE(t0.isOk());
    REQUIRE(t1.isOk());
    REQUIRE(stranger.isOk());
    REQUIRE(keyless.isOk());
    std::string blob;
    auto r = t0.value()->createRecv(1, 0, &blob);
    REQUIRE(r.isOk());
    std::unique_ptr<Connection> recv = std::move(r).value();
    // Both pose as rank 1 before the real rank 1 turns up.
    auto s1 = stranger.value()->connectSend(0, 0, blob);
    auto s2 = keyless.value()->connectSend(0, 0, blob);
    REQUIRE(s1.isOk());
    REQUIRE(s2.isOk());
    // The strangers' sides are driven too, as a stranger's process would be.
    auto driveStrangers = [&] {
      return std::thread([&] {
        (void)stranger.value()->establish(Deadline::after(1.5));
        (void)keyless.value()->establish(Deadline::after(1.5));
      });
    };
    std::thread others = driveStrangers();
    Status early = t0.value()->establish(Deadline::after(1.5));
    others.join();
    INFO(describe(early));
    CHECK(early.code() == Code::kTimeout);
    CHECK(early.rank() == 1);
    CHECK(early.message().find("authentication failed") != std::string::npos);

    auto s = t1.value()->connectSend(0, 0, blob);
    REQUIRE(s.isOk());
    std::unique_ptr<Connection> send = std::move(s).value();
    Deadline d = Deadline::after(10);
    Status est;
    others = driveStrangers();
    std::thread sender([&] { CHECK(t1.value()->establish(d).isOk()); });
    est = t0.value()->establish(d);
    sender.join();
    others.join();
    INFO(describe(est));
    REQUIRE(est.isOk());
    uint8_t payload[100];
    fillPattern(payload, sizeof(payload), 7);
    REQUIRE(sendSlot(*send, payload, sizeof(payload), 42, Deadline::after(5)).isOk());
    Slot got;
    Status rs = recvSlot(*recv, &got, Deadline::after(5));
    INFO(describe(rs));
    REQUIRE(rs.isOk());
    CHECK(got.tag == 42);
    CHECK(got.bytes == sizeof(payload));
    CHECK(checkPattern(got.data, got.bytes, 7) < 0);
  }
}

// The ucx plugin's factory, or null when this build has none.
const TransportFactory* ucxFactory() {
  for (const TransportFactory& f : registry())
    if (std::string(f.name) == "ucx") return &f;
  return nullptr;
}

// Puts the named environment variables back as they were when it goes out of scope.
class RestoreEnv {
 public:
  explicit RestoreEnv(std::vector<const char*> names) : names_(std::move(names)) {
    for (const char* n : names_) {
      const char* v = std::getenv(n);
      saved_.emplace_back(v != nullptr, v ? v : "");
    }
  }
  ~RestoreEnv() {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (saved_[i].first) setenv(names_[i], saved_[i].second.c_str(), 1);
      else unsetenv(names_[i]);
    }
  }

 private:
  std::vector<const char*> names_;
  std::vector<std::pair<bool, std::string>> saved_;
};

// UCX 1.13's shared-memory transports lose the length of a 64 KiB message when their segment
// is above 65535 bytes: the plugin refuses such a setting at init, naming it.
TEST_CASE("ucx plugin: a shared-memory segment above 65535 bytes is refused, naming the variable", "[plugin][ucx]") {
  const TransportFactory* ucx = ucxFactory();
  if (!ucx) {
    WARN("skipped: no ucx plugin in this build");
    return;
  }
  const std::vector<const char*> names = {"UCX_MM_SEG_SIZE", "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE"};
  Status big, unit, edge, none;
  {
    RestoreEnv restore(names);
    auto createWith = [&](const char* name, const char* value) {
      for (const char* n : names) unsetenv(n);
      if (name) setenv(name, value, 1);
      TransportConfig cfg;
      cfg.nranks = 2;
      return ucx->create(cfg).status();
    };
    big = createWith("UCX_POSIX_SEG_SIZE", "65800");
    unit = createWith("UCX_MM_SEG_SIZE", "128k");
    edge = createWith("UCX_SYSV_SEG_SIZE", "65535");
    none = createWith(nullptr, nullptr);
  }
  CHECK(big.code() == Code::kInvalidArgument);
  CHECK(big.message().find("UCX_POSIX_SEG_SIZE=65800") != std::string::npos);
  CHECK(unit.code() == Code::kInvalidArgument);
  CHECK(unit.message().find("UCX_MM_SEG_SIZE=128k") != std::string::npos);
  CHECK(edge.isOk());
  CHECK(none.isOk());
}

// The UCX plugin chooses UCX's rendezvous threshold and tcp's receive segment only where the
// user did not (docs/transports.md): what it chose shows in its description, as braid-info
// prints it. The segment is set only where tcp is among UCX's transports.
TEST_CASE("ucx plugin: the rendezvous threshold and tcp segment follow UCX_TLS and yield to the user's",
          "[plugin][ucx]") {
  const TransportFactory* ucx = ucxFactory();
  if (!ucx) {
    WARN("skipped: no ucx plugin in this build");
    return;
  }
  std::optional<RestoreEnv> restore(std::in_place,
                                    std::vector<const char*>{"UCX_TLS", "UCX_RNDV_THRESH", "UCX_TCP_RX_SEG_SIZE",
                                                             "BRAID_UCX_REDUCE_ON_ARRIVAL"});
  auto describeWith = [&](const char* tls, const char* thresh, const char* seg = nullptr, size_t slot = 512 * 1024,
                          const char* arrival = nullptr) {
    if (tls) setenv("UCX_TLS", tls, 1); else unsetenv("UCX_TLS");
    if (thresh) setenv("UCX_RNDV_THRESH", thresh, 1); else unsetenv("UCX_RNDV_THRESH");
    if (seg) setenv("UCX_TCP_RX_SEG_SIZE", seg, 1); else unsetenv("UCX_TCP_RX_SEG_SIZE");
    if (arrival) setenv("BRAID_UCX_REDUCE_ON_ARRIVAL", arrival, 1); else unsetenv("BRAID_UCX_REDUCE_ON_ARRIVAL");
    TransportConfig cfg;
    cfg.nranks = 2;
    cfg.slotBytes = slot;
    auto t = ucx->create(cfg);
    INFO(t.status().toString());
    REQUIRE(t.isOk());
    return t.value()->describe();
  };
  const std::string all = describeWith(nullptr, nullptr);
  const std::string sm = describeWith("sm,self", nullptr);
  const std::string tcp = describeWith("tcp,self", nullptr);
  const std::string user = describeWith("tcp,self", "8k", "64K");
  const std::string notTcp = describeWith("^tcp", nullptr);
  // Over tcp alone payloads are reduced on arrival, and a slot's message goes eager; not
  // with that turned off, nor with slots too small to post their receives on demand.
  const std::string tcpRings = describeWith("tcp,self", nullptr, nullptr, 1 << 20);
  const std::string tcpOff = describeWith("tcp,self", nullptr, nullptr, 1 << 20, "0");
  const std::string tcpSmall = describeWith("tcp,self", nullptr, nullptr, 32 << 10);
  restore.reset();
  INFO(all << "\n" << sm << "\n" << tcp << "\n" << user << "\n" << notTcp << "\n" << tcpRings << "\n" << tcpOff
           << "\n" << tcpSmall);
  if (all.find("; RDMA") != std::string::npos) {
    // An RDMA device: UCX's own model of its lanes decides.
    CHECK(all.find("UCX_RNDV_THRESH") == std::string::npos);
    CHECK(all.find("UCX_TCP_RX_SEG_SIZE") == std::string::npos);
    return;
  }
  const std::string seg = "tcp receives in 512K segments (UCX_TCP_RX_SEG_SIZE)";
  CHECK(all.find(seg) != std::string::npos);
  CHECK(tcp.find(seg) != std::string::npos);
  CHECK(sm.find("UCX_TCP_RX_SEG_SIZE") == std::string::npos);
  CHECK(notTcp.find("UCX_TCP_RX_SEG_SIZE") == std::string::npos);
  CHECK(user.find("UCX_TCP_RX_SEG_SIZE") == std::string::npos);
  CHECK(all.find("eager up to 64 KiB (UCX_RNDV_THRESH=65537)") != std::string::npos);
  CHECK(sm.find("eager up to 64 KiB (UCX_RNDV_THRESH=65537)") != std::string::npos);
  CHECK(tcp.find("eager up to 512 KiB (UCX_RNDV_THRESH=524289)") != std::string::npos);
  CHECK(tcpRings.find("eager up to 1024 KiB (UCX_RNDV_THRESH=1048577)") != std::string::npos);
  CHECK(tcpOff.find("eager up to 128 KiB (UCX_RNDV_THRESH=131073)") != std::string::npos);
  CHECK(tcpSmall.find("eager up to 128 KiB (UCX_RNDV_THRESH=131073)") != std::string::npos);
  CHECK(user.find("UCX_RNDV_THRESH") == std::string::npos);
}

// A receiver that died after it published its address: over UCX's tcp, creating the
// endpoint to it fails at once as "unreachable", as it would for a peer that no transport of
// UCX_TLS reaches. With the communicator's check naming the dead rank, connecting fails with
// that remote error, which lets the survivors recover; without one it stays the system
// error that names UCX's settings.
TEST_CASE("ucx plugin: connecting to a receiver that died is a remote error naming it", "[plugin][ucx]") {
  const TransportFactory* ucx = ucxFactory();
  if (!ucx) {
    WARN("skipped: no ucx plugin in this build");
    return;
  }
  RestoreEnv restore({"UCX_TLS"});
  setenv("UCX_TLS", "tcp,self", 1);
  const uint64_t nonce = freshNonce();
  // The receiver lives in a child process, which publishes its address and exits.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    auto t = ucx->create(loopbackPairConfig(1, nonce));
    std::string blob;
    if (t.isOk()) {
      auto r = t.value()->createRecv(0, 0, &blob);
      if (!r.isOk()) blob.clear();
    }
    (void)!write(fds[1], blob.data(), blob.size());
    _exit(0);
  }
  close(fds[1]);
  std::string blob;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) blob.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(!blob.empty());

  auto connectWith = [&](std::function<Status()> check) -> Status {
    TransportConfig cfg = loopbackPairConfig(0, nonce);
    cfg.abortCheck = std::move(check);
    auto t = ucx->create(cfg);
    if (!t.isOk()) return t.status();
    auto s = t.value()->connectSend(1, 0, blob);
    if (!s.isOk()) return s.status();
    // Where UCX connects lazily, the hello is what fails.
    return t.value()->establish(Deadline::after(5));
  };
  int checks = 0;
  const int64_t start = nowNanos();
  Status named = connectWith([&]() -> Status {
    ++checks;
    return Status(Code::kRemoteError, "rank 1 exited during init", 1);
  });
  const double secs = static_cast<double>(nowNanos() - start) / 1e9;
  Status plain = connectWith(nullptr);
  INFO(describe(named) << "\n" << describe(plain));
  CHECK(named.code() == Code::kRemoteError);
  CHECK(named.rank() == 1);
  CHECK(named.message() == "rank 1 exited during init");
  CHECK(checks >= 1);
  CHECK(secs < 3.0);
  CHECK(!plain.isOk());
  CHECK(plain.code() == Code::kSystemError);
  CHECK(plain.message().find("cannot reach rank 1") != std::string::npos);
}

// A tcp socket of this process: its congestion control, whether it listens, and its ports
// (this end's, the peer's) for the message of a failure.
struct TcpSocket {
  std::string cc;
  bool listening;
  std::string ports;
};

std::string portOf(int fd, bool peer) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if ((peer ? getpeername : getsockname)(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "-";
  if (a.ss_family == AF_INET) return std::to_string(ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port));
  if (a.ss_family == AF_INET6) return std::to_string(ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port));
  return "?";
}

// Each tcp socket this process opened since `before` (openSocketInodes).
std::vector<TcpSocket> tcpSocketsSince(const std::set<uint64_t>& before) {
  std::vector<TcpSocket> found;
  DIR* dir = opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    struct stat st;
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(dir) || fstat(fd, &st) != 0 ||
        !S_ISSOCK(st.st_mode) || before.count(static_cast<uint64_t>(st.st_ino)))
      continue;
    int protocol = 0, listening = 0;
    socklen_t len = sizeof(protocol);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) continue;
    len = sizeof(listening);
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    found.push_back(TcpSocket{congestionControlOf(fd), listening != 0,
                              "port " + portOf(fd, false) + (listening ? "" : ", peer's port " + portOf(fd, true))});
  }
  closedir(dir);
  return found;
}

// The UCX plugin, where a test can see it take tcp sockets off a pacing congestion control;
// otherwise nullptr, saying why.
const TransportFactory* ucxOverPacedTcp() {
  const TransportFactory* ucx = ucxFactory();
  if (!ucx) {
    WARN("skipped: no ucx plugin in this build");
    return nullptr;
  }
  if (!canUnpaceSockets()) {
    WARN("skipped: the kernel's tcp congestion control (" << tcpCongestionControl()
                                                         << ") does not pace, or this process may not leave it");
    return nullptr;
  }
  return ucx;
}

// A connection takes the congestion control its listener had when its handshake ended,
// even one accepted later, and UCX accepts some only after establish: a worker's listeners
// leave the pacing as UCX opens them, before the worker's address is handed out
// (docs/transports.md, "UCX").
TEST_CASE("ucx plugin: a worker's tcp listeners leave a pacing congestion control before its address goes out",
          "[plugin][ucx]") {
  const TransportFactory* ucx = ucxOverPacedTcp();
  if (!ucx) return;
  RestoreEnv restore({"UCX_TLS"});
  setenv("UCX_TLS", "tcp", 1);
  const std::set<uint64_t> before = openSocketInodes();
  TransportConfig cfg = loopbackPairConfig(0, freshNonce());
  cfg.nranks = 2;
  auto t = ucx->create(cfg);
  INFO(t.status().toString());
  REQUIRE(t.isOk());
  std::string blob;
  auto recv = t.value()->createRecv(1, 0, &blob);  // the worker of channel 0, and its address
  INFO(recv.status().toString());
  REQUIRE(recv.isOk());
  CHECK(!blob.empty());
  int listeners = 0;
  for (const TcpSocket& s : tcpSocketsSince(before)) {
    INFO((s.listening ? "listener" : "connection") << " under " << s.cc << " (" << s.ports << ")");
    CHECK(s.listening);  // no peer has its address yet
    CHECK_FALSE(congestionControlPaces(s.cc));
    listeners += s.listening ? 1 : 0;
  }
  CHECK(listeners >= 1);
}

// UCX's tcp opens sockets of its own and sets no congestion control on them; where the kernel
// paces tcp (BBR), the plugin takes those within one host off it as braid's tcp does with
// its own (docs/transports.md, "UCX").
TEST_CASE("ucx plugin: its tcp connections within one host leave a pacing congestion control", "[plugin][ucx]") {
  const TransportFactory* ucx = ucxOverPacedTcp();
  if (!ucx) return;
  RestoreEnv restore({"UCX_TLS"});
  setenv("UCX_TLS", "tcp", 1);
  const std::set<uint64_t> before = openSocketInodes();
  std::vector<TcpSocket> seen;
  TransportConfig cfg = loopbackPairConfig(0, freshNonce());
  const std::string result = runPair(*ucx, Mode::kThreads, cfg, [&](Endpoint& ep) -> std::string {
    std::string err = setupPair(ep, 1);
    if (!err.empty()) return err;
    if (ep.rank == 1) return signalPeer(ep, "established");
    err = waitPeer(ep, "established");
    if (!err.empty()) return err;
    seen = tcpSocketsSince(before);  // both transports are still up
    return "";
  });
  REQUIRE(result == "");
  int connected = 0, listeners = 0;
  for (const TcpSocket& s : seen) {
    INFO((s.listening ? "listener" : "connection") << " under " << s.cc << " (" << s.ports << ")");
    CHECK_FALSE(congestionControlPaces(s.cc));
    (s.listening ? listeners : connected) += 1;
  }
  CHECK(connected >= 2);  // both ends of at least one connection
  CHECK(listeners >= 1);
}

}  // namespace
}  // namespace braid::transport::test
