#include "transports/plugin/plugin_export.h"

#include "transports/plugin/plugin_status.h"

#include <cstring>
#include <exception>
#include <string>

#include "common/log.h"

namespace braid::transport::plugin {
namespace {

// One library exports one transport, so the factory can live in a file-level variable.
CreateFn gCreate = nullptr;

struct ExportedTransport {
  std::unique_ptr<Transport> impl;
  std::string description;
};

struct ExportedConnection {
  std::unique_ptr<Connection> impl;
  // The slot a peek returned last, and whether its payload is in the device area
  // (recv_in_device_area; braidSlot_v1 has no room for it).
  void* peeked = nullptr;
  bool peekedDevice = false;
};

// Exceptions (bad_alloc, mostly) must not unwind into a C caller.
template <typename F>
braidPluginResult_t guarded(braidPluginError_v1* e, F&& f) {
  try {
    return f();
  } catch (const std::exception& ex) {
    fillError(e, -1, std::string("exception: ") + ex.what());
  } catch (...) {
    fillError(e, -1, "unknown exception");
  }
  return braidPluginInternal;
}

Connection* conn(void* c) { return static_cast<ExportedConnection*>(c)->impl.get(); }

// What every kind of peek hands back, noting where the payload is.
void peeked(void* c, const Slot& s, braidSlot_v1* slot) {
  auto* x = static_cast<ExportedConnection*>(c);
  x->peeked = s.data;
  x->peekedDevice = s.device;
  *slot = braidSlot_v1{s.data, s.bytes, s.tag};
}
Transport* transport(void* t) { return static_cast<ExportedTransport*>(t)->impl.get(); }

PeerInfo peerOf(const braidPeerInfo_v1* p) {
  PeerInfo r;
  r.rank = p->rank;
  r.hostId = p->host_id ? p->host_id : "";
  r.pid = p->pid;
  r.nonce = p->nonce;
  return r;
}

braidPluginResult_t initKeyed(const braidTransportConfig_v1* config, const braidJobKey_v1* key, void** out,
                              braidPluginError_v1* e) {
  return guarded(e, [&] {
    if (!config || !out) return report(invalidArgument("init: null config or output"), e);
    if (config->log) setLogSink(static_cast<LogLevel>(config->log_level), config->log);
    TransportConfig cfg = configFromV1(*config);
    if (key && key->key) {
      if (key->key_bytes != cfg.authKey.bytes.size()) {
        return report(invalidArgument("init: a job key of " + std::to_string(key->key_bytes) + " bytes, expected " +
                                      std::to_string(cfg.authKey.bytes.size())),
                      e);
      }
      cfg.authKey.present = true;
      std::memcpy(cfg.authKey.bytes.data(), key->key, key->key_bytes);
    }
    cfg.tls = key && key->tls != 0;
    auto t = gCreate(cfg);
    if (!t.isOk()) return report(t.status(), e);
    auto* et = new ExportedTransport{std::move(t).value(), ""};
    et->description = et->impl->describe();
    *out = et;
    return braidPluginOk;
  });
}

braidPluginResult_t init(const braidTransportConfig_v1* config, void** out, braidPluginError_v1* e) {
  return initKeyed(config, nullptr, out, e);
}

void finalize(void* t) { delete static_cast<ExportedTransport*>(t); }

int score(void* t, const braidPeerInfo_v1* local, const braidPeerInfo_v1* remote) {
  if (!t || !local || !remote) return 0;
  return transport(t)->canConnect(peerOf(local), peerOf(remote));
}

const char* describe(void* t) { return static_cast<ExportedTransport*>(t)->description.c_str(); }

braidPluginResult_t createRecv(void* t, int peer, int channel, void** out, void* blob, size_t* blobBytes,
                               braidPluginError_v1* e) {
  return guarded(e, [&] {
    std::string b;
    auto c = transport(t)->createRecv(peer, channel, &b);
    if (!c.isOk()) return report(c.status(), e);
    if (b.size() > *blobBytes) {
      *blobBytes = b.size();
      return report(invalidArgument("create_recv: blob needs " + std::to_string(b.size()) + " bytes"), e);
    }
    std::memcpy(blob, b.data(), b.size());
    *blobBytes = b.size();
    *out = new ExportedConnection{std::move(c).value()};
    return braidPluginOk;
  });
}

braidPluginResult_t connectSend(void* t, int peer, int channel, const void* blob, size_t blobBytes, void** out,
                                braidPluginError_v1* e) {
  return guarded(e, [&] {
    auto c = transport(t)->connectSend(peer, channel, std::string(static_cast<const char*>(blob), blobBytes));
    if (!c.isOk()) return report(c.status(), e);
    *out = new ExportedConnection{std::move(c).value()};
    return braidPluginOk;
  });
}

braidPluginResult_t establish(void* t, int64_t deadlineNs, braidPluginError_v1* e) {
  return guarded(e, [&] { return report(transport(t)->establish(Deadline::atNanos(deadlineNs)), e); });
}

size_t slotBytes(void* c) { return conn(c)->slotBytes(); }

braidPluginResult_t reserveSend(void* c, braidSlot_v1* slot, braidPluginError_v1* e) {
  Slot s;
  Status st = conn(c)->reserveSend(&s);
  if (st.isOk()) *slot = braidSlot_v1{s.data, s.bytes, s.tag};
  return report(st, e);
}

braidPluginResult_t postSend(void* c, const braidSlot_v1* slot, size_t bytes, braidPluginError_v1* e) {
  return report(conn(c)->postSend(Slot{slot->data, slot->bytes, slot->tag}, bytes), e);
}

braidPluginResult_t peekRecv(void* c, braidSlot_v1* slot, braidPluginError_v1* e) {
  Slot s;
  Status st = conn(c)->peekRecv(&s);
  if (st.isOk()) peeked(c, s, slot);
  return report(st, e);
}

braidPluginResult_t releaseRecv(void* c, const braidSlot_v1* slot, braidPluginError_v1* e) {
  return report(conn(c)->releaseRecv(Slot{slot->data, slot->bytes, slot->tag}), e);
}

braidPluginResult_t progress(void* c, braidPluginError_v1* e) { return report(conn(c)->progress(), e); }

int flushed(void* c) { return conn(c)->flushed() ? 1 : 0; }

int seesPeerFailure(void* c) { return conn(c)->seesPeerFailure() ? 1 : 0; }

void waitHandle(void* c, int forSend, braidWaitHandle_v1* h) {
  WaitHandle w = conn(c)->waitHandle(forSend != 0);
  *h = braidWaitHandle_v1{w.futexWord, w.futexValue, w.fd, w.fdEvents};
}

void disarm(void* c, int forSend) { conn(c)->disarm(forSend != 0); }

void closeConnection(void* c) { delete static_cast<ExportedConnection*>(c); }

int sendsFromUser(void* c) { return conn(c)->sendsFromUser() ? 1 : 0; }

braidPluginResult_t postSendFrom(void* c, const braidSlot_v1* slot, const void* src, size_t bytes,
                                 braidPluginError_v1* e) {
  return report(conn(c)->postSendFrom(Slot{slot->data, slot->bytes, slot->tag}, src, bytes), e);
}

braidPluginResult_t peekRecvInto(void* c, braidSlot_v1* slot, void* dst, size_t bytes, braidPluginError_v1* e) {
  Slot s;
  Status st = conn(c)->peekRecvInto(&s, dst, bytes);
  if (st.isOk()) peeked(c, s, slot);
  return report(st, e);
}

uint64_t tagMask(void* c) { return conn(c)->tagMask(); }

size_t maxMessageBytes(void* c) { return conn(c)->maxMessageBytes(); }

braidPluginResult_t peekTag(void* c, uint64_t* tag, braidPluginError_v1* e) {
  uint64_t t = 0;
  Status st = conn(c)->peekTag(&t);
  if (st.isOk()) *tag = t;
  return report(st, e);
}

void slotMemory(void* c, void** base, size_t* bytes) {
  const Connection::MemoryRange r = conn(c)->slotMemory();
  *base = r.base;
  *bytes = r.base ? r.bytes : 0;
}

braidPluginResult_t expectRecv(void* c, size_t ahead, void* dst, size_t bytes, braidPluginError_v1* e) {
  return report(conn(c)->expectRecv(ahead, dst, bytes), e);
}

ArrivalReduce arrivalOf(const braidArrivalReduce_v1& r) {
  ArrivalReduce a;
  a.local = r.local;
  a.fn = r.fn;
  a.ctx = r.ctx;
  a.elemBytes = r.elem_bytes;
  return a;
}

int reducesOnArrival(void* c) { return conn(c)->reducesOnArrival() ? 1 : 0; }

braidPluginResult_t peekRecvReduce(void* c, braidSlot_v1* slot, void* dst, size_t bytes,
                                   const braidArrivalReduce_v1* r, braidPluginError_v1* e) {
  if (!r || !r->fn || r->elem_bytes == 0) return report(Status(Code::kInvalidArgument, "peek_recv_reduce without a reduction"), e);
  Slot s;
  Status st = conn(c)->peekRecvReduce(&s, dst, bytes, arrivalOf(*r));
  if (st.isOk()) peeked(c, s, slot);
  return report(st, e);
}

braidPluginResult_t expectReduce(void* c, size_t ahead, void* dst, size_t bytes, const braidArrivalReduce_v1* r,
                                 braidPluginError_v1* e) {
  if (!r || !r->fn || r->elem_bytes == 0) return report(Status(Code::kInvalidArgument, "expect_reduce without a reduction"), e);
  return report(conn(c)->expectReduce(ahead, dst, bytes, arrivalOf(*r)), e);
}

size_t deviceAreaBytes(void* c) {
  return conn(c)->deviceAreaKind() == Connection::DeviceAreaKind::kRegistered ? conn(c)->deviceAreaBytes() : 0;
}

braidPluginResult_t registerDeviceArea(void* c, const braidDeviceMemory_v1* area, char* name, size_t capacity,
                                       braidPluginError_v1* e) {
  return guarded(e, [&] {
    if (!area || !name || capacity == 0) return report(invalidArgument("register_device_area: null argument"), e);
    auto n = conn(c)->registerDeviceArea(Connection::DeviceMemory{area->base, area->dmabuf_fd, area->dmabuf_offset});
    if (!n.isOk()) return report(n.status(), e);
    if (n.value().size() >= capacity) {
      conn(c)->releaseDeviceArea();
      return report(internalError("register_device_area: a name of " + std::to_string(n.value().size()) +
                                  " bytes does not fit " + std::to_string(capacity)),
                    e);
    }
    std::memcpy(name, n.value().c_str(), n.value().size() + 1);
    return braidPluginOk;
  });
}

braidPluginResult_t attachPeerDeviceArea(void* c, const char* name, braidPluginError_v1* e) {
  return guarded(e, [&] {
    if (!name) return report(invalidArgument("attach_peer_device_area: no name"), e);
    return report(conn(c)->attachPeerDeviceArea(name), e);
  });
}

void setDeviceArea(void* c, void* base) { conn(c)->setDeviceArea(base); }

void releaseDeviceArea(void* c) { conn(c)->releaseDeviceArea(); }

void* deviceData(void* c, const braidSlot_v1* slot) {
  Slot s{slot->data, slot->bytes, slot->tag};
  auto* x = static_cast<ExportedConnection*>(c);
  s.device = x->peeked == slot->data && x->peekedDevice;
  return conn(c)->deviceData(s);
}

braidPluginResult_t postSendDevice(void* c, const braidSlot_v1* slot, size_t bytes, braidPluginError_v1* e) {
  return report(conn(c)->postSendDevice(Slot{slot->data, slot->bytes, slot->tag}, bytes), e);
}

int recvInDeviceArea(void* c, const braidSlot_v1* slot) {
  auto* x = static_cast<ExportedConnection*>(c);
  return slot && x->peeked == slot->data && x->peekedDevice ? 1 : 0;
}

void peerFailed(void* t, int rank) {
  if (!t) return;
  try {
    transport(t)->peerFailed(rank);
  } catch (...) {
    // Only advice: a transport that cannot take it waits for the peer as before.
  }
}

int sawPeerFail(void* t, int rank) {
  if (!t) return 0;
  try {
    return transport(t)->sawPeerFail(rank) ? 1 : 0;
  } catch (...) {
    return 0;  // cannot tell
  }
}

}  // namespace

TransportConfig configFromV1(const braidTransportConfig_v1& c) {
  TransportConfig t;
  t.rank = c.rank;
  t.nranks = c.nranks;
  t.nonce = c.nonce;
  t.slotBytes = c.slot_bytes;
  t.nslots = c.nslots;
  t.numaNode = c.numa_node;
  t.connectTimeoutSec = c.connect_timeout_sec;
  t.netIf = c.net_if ? c.net_if : "";
  for (int i = 0; i < c.num_channel_net_ifs; ++i)
    t.channelNetIfs.push_back(c.channel_net_ifs[i] ? c.channel_net_ifs[i] : "");
  t.ibHca = c.ib_hca ? c.ib_hca : "";
  t.ibGidIndex = c.ib_gid_index;
  if (c.abort_check) {
    auto check = c.abort_check;
    void* ctx = c.abort_check_context;
    t.abortCheck = [check, ctx]() -> Status {
      braidPluginError_v1 e = emptyError();
      return statusOf(check(ctx, &e), e);
    };
  }
  return t;
}

braidTransportPlugin_v1_t exportTableV1(const char* name, const char* version, CreateFn create) {
  gCreate = create;
  braidTransportPlugin_v1_t t{};
  t.abi_version = 1;
  t.name = name;
  t.version = version;
  t.init = &init;
  t.finalize = &finalize;
  t.score = &score;
  t.describe = &describe;
  t.create_recv = &createRecv;
  t.connect_send = &connectSend;
  t.establish = &establish;
  t.slot_bytes = &slotBytes;
  t.reserve_send = &reserveSend;
  t.post_send = &postSend;
  t.peek_recv = &peekRecv;
  t.release_recv = &releaseRecv;
  t.progress = &progress;
  t.flushed = &flushed;
  t.sees_peer_failure = &seesPeerFailure;
  t.wait_handle = &waitHandle;
  t.disarm = &disarm;
  t.close = &closeConnection;
  return t;
}

braidTransportPlugin_v2_t exportTableV2(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v2_t t{};
  t.base = exportTableV1(name, version, create);
  t.base.abi_version = 2;
  t.sends_from_user = &sendsFromUser;
  t.post_send_from = &postSendFrom;
  t.peek_recv_into = &peekRecvInto;
  t.tag_mask = &tagMask;
  return t;
}

braidTransportPlugin_v3_t exportTableV3(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v3_t t{};
  t.base = exportTableV2(name, version, create);
  t.base.base.abi_version = 3;
  t.init_keyed = &initKeyed;
  return t;
}

braidTransportPlugin_v4_t exportTableV4(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v4_t t{};
  t.base = exportTableV3(name, version, create);
  t.base.base.base.abi_version = 4;
  t.max_message_bytes = &maxMessageBytes;
  t.peek_tag = &peekTag;
  return t;
}

braidTransportPlugin_v5_t exportTableV5(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v5_t t{};
  t.base = exportTableV4(name, version, create);
  t.base.base.base.base.abi_version = 5;
  t.slot_memory = &slotMemory;
  return t;
}

braidTransportPlugin_v6_t exportTableV6(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v6_t t{};
  t.base = exportTableV5(name, version, create);
  t.base.base.base.base.base.abi_version = 6;
  t.peer_failed = &peerFailed;
  return t;
}

braidTransportPlugin_v7_t exportTableV7(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v7_t t{};
  t.base = exportTableV6(name, version, create);
  t.base.base.base.base.base.base.abi_version = 7;
  t.expect_recv = &expectRecv;
  return t;
}

braidTransportPlugin_v8_t exportTableV8(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v8_t t{};
  t.base = exportTableV7(name, version, create);
  t.base.base.base.base.base.base.base.abi_version = 8;
  t.saw_peer_fail = &sawPeerFail;
  return t;
}

braidTransportPlugin_v9_t exportTableV9(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v9_t t{};
  t.base = exportTableV8(name, version, create);
  t.base.base.base.base.base.base.base.base.abi_version = 9;
  t.reduces_on_arrival = &reducesOnArrival;
  t.peek_recv_reduce = &peekRecvReduce;
  t.expect_reduce = &expectReduce;
  return t;
}

braidTransportPlugin_v10_t exportTableV10(const char* name, const char* version, CreateFn create) {
  braidTransportPlugin_v10_t t{};
  t.base = exportTableV9(name, version, create);
  t.base.base.base.base.base.base.base.base.base.abi_version = 10;
  t.device_area_bytes = &deviceAreaBytes;
  t.register_device_area = &registerDeviceArea;
  t.attach_peer_device_area = &attachPeerDeviceArea;
  t.set_device_area = &setDeviceArea;
  t.release_device_area = &releaseDeviceArea;
  t.device_data = &deviceData;
  t.post_send_device = &postSendDevice;
  t.recv_in_device_area = &recvInDeviceArea;
  return t;
}

}  // namespace braid::transport::plugin
