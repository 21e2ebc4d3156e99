#include "transports/plugin/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "common/log.h"
#include "transports/plugin/plugin_status.h"

namespace braid::transport::plugin {
namespace {

constexpr const char* kPrefix = "libbraid-net-";
constexpr size_t kFirstBlobBytes = 4096;
constexpr size_t kMaxBlobBytes = 1 << 20;

// The communicator's abort check as a plugin calls it during setup. Its failure is braid's
// own error (a peer that died, another rank's report): kept, so that the setup call the
// plugin fails with it returns it as it was, not as the plugin's.
struct AbortCheck {
  std::function<Status()> check;
  Status failed;
};

braidPluginResult_t runAbortCheck(void* context, braidPluginError_v1* e) {
  auto* a = static_cast<AbortCheck*>(context);
  Status st = a->check();
  if (!st.isOk()) a->failed = st;
  return report(st, e);
}

void logFromPlugin(int level, const char* message) {
  if (!message) return;
  if (level == 0) {
    logSecurity("%s", message);
  } else if (level >= 1 && level <= 3) {
    logf(static_cast<LogLevel>(level), "%s", message);
  }
}

// Calls `f(error)` and turns its result into a Status that names the plugin.
template <typename F>
Status call(const std::string& name, F&& f) {
  braidPluginError_v1 e = emptyError();
  Status st = statusOf(f(&e), e);
  if (st.isOk() || st.code() == Code::kWouldBlock) return st;
  std::string msg = st.message().empty() ? "failed without a message" : st.message();
  // Plugins may name themselves already ("ucx: ..."); say it once.
  if (msg.rfind(name + ": ", 0) != 0) msg = name + ": " + msg;
  return Status(st.code(), msg, st.rank());
}

class PluginConnection final : public Connection {
 public:
  PluginConnection(const braidTransportPlugin_v1_t* t, const braidTransportPlugin_v2_t* v2,
                   const braidTransportPlugin_v4_t* v4, const braidTransportPlugin_v5_t* v5,
                   const braidTransportPlugin_v7_t* v7, const braidTransportPlugin_v9_t* v9,
                   const braidTransportPlugin_v10_t* v10, const std::string* name, void* c, int peer)
      : t_(t), v2_(v2), v4_(v4), v5_(v5), v7_(v7), v9_(v9), v10_(v10), name_(name), c_(c), peer_(peer),
        slotBytes_(t->slot_bytes(c)),
        fromUser_(v2 && v2->sends_from_user(c) != 0), tagMask_(v2 ? v2->tag_mask(c) : ~uint64_t{0}),
        // Below a slot's size means no more than a slot.
        maxMessage_(v4 ? std::max(slotBytes_, v4->max_message_bytes(c)) : slotBytes_),
        reduces_(v9 && v9->reduces_on_arrival(c) != 0),
        areaBytes_(v10 ? v10->device_area_bytes(c) : 0) {}
  ~PluginConnection() override { t_->close(c_); }

  size_t slotBytes() const override { return slotBytes_; }

  Status reserveSend(Slot* s) override {
    braidSlot_v1 slot{};
    Status st = call(*name_, [&](braidPluginError_v1* e) { return t_->reserve_send(c_, &slot, e); });
    if (!st.isOk()) return st;
    if (!slot.data) return internalError(*name_ + ": reserve_send returned a slot without memory");
    s->data = slot.data;
    return st;
  }
  Status postSend(const Slot& s, size_t bytes) override {
    braidSlot_v1 slot{s.data, bytes, s.tag};
    return call(*name_, [&](braidPluginError_v1* e) { return t_->post_send(c_, &slot, bytes, e); });
  }
  bool sendsFromUser() const override { return fromUser_; }
  Status postSendFrom(const Slot& s, const void* src, size_t bytes) override {
    if (!fromUser_) return Connection::postSendFrom(s, src, bytes);
    braidSlot_v1 slot{s.data, bytes, s.tag};
    return call(*name_, [&](braidPluginError_v1* e) { return v2_->post_send_from(c_, &slot, src, bytes, e); });
  }
  uint64_t tagMask() const override { return tagMask_; }
  size_t maxMessageBytes() const override { return maxMessage_; }
  Status peekTag(uint64_t* tag) override {
    if (!v4_) return Connection::peekTag(tag);
    uint64_t t = 0;
    Status st = call(*name_, [&](braidPluginError_v1* e) { return v4_->peek_tag(c_, &t, e); });
    if (st.isOk()) *tag = t;
    return st;
  }
  bool takesAnnouncements() const override { return v7_ != nullptr; }
  Status expectRecv(size_t ahead, void* dst, size_t bytes) override {
    if (!v7_) return Status::ok();
    return call(*name_, [&](braidPluginError_v1* e) { return v7_->expect_recv(c_, ahead, dst, bytes, e); });
  }
  Status peekRecv(Slot* s) override { return peek(s, nullptr, 0); }
  Status peekRecvInto(Slot* s, void* dst, size_t bytes) override { return peek(s, dst, bytes); }
  bool reducesOnArrival() const override { return reduces_; }
  Status peekRecvReduce(Slot* s, void* dst, size_t bytes, const ArrivalReduce& r) override {
    if (!reduces_) return peek(s, nullptr, 0);
    const braidArrivalReduce_v1 red{r.local, r.fn, r.ctx, r.elemBytes};
    return peek(s, dst, bytes, &red);
  }
  Status expectReduce(size_t ahead, void* dst, size_t bytes, const ArrivalReduce& r) override {
    if (!reduces_) return expectRecv(ahead, nullptr, bytes);
    const braidArrivalReduce_v1 red{r.local, r.fn, r.ctx, r.elemBytes};
    return call(*name_, [&](braidPluginError_v1* e) { return v9_->expect_reduce(c_, ahead, dst, bytes, &red, e); });
  }

  Status peek(Slot* s, void* dst, size_t bytes, const braidArrivalReduce_v1* red = nullptr) {
    braidSlot_v1 slot{};
    Status st = call(*name_, [&](braidPluginError_v1* e) {
      if (red) return v9_->peek_recv_reduce(c_, &slot, dst, bytes, red, e);
      return dst && v2_ ? v2_->peek_recv_into(c_, &slot, dst, bytes, e) : t_->peek_recv(c_, &slot, e);
    });
    if (!st.isOk()) return st;
    const size_t limit = dst && slot.data == dst ? bytes : slotBytes_;
    if (slot.bytes > limit || (!slot.data && slot.bytes)) {
      if (dst && bytes > slotBytes_ && slot.data != dst) {
        return Status(Code::kRemoteError,
                      *name_ + ": peek_recv_into left a message of " + std::to_string(slot.bytes) + " bytes from rank " +
                          std::to_string(peer_) + " in a slot of " + std::to_string(slotBytes_) +
                          " bytes; a message larger than a slot must land where it was asked to",
                      peer_);
      }
      return Status(Code::kRemoteError,
                    *name_ + ": peek_recv returned " + std::to_string(slot.bytes) + " bytes from rank " +
                        std::to_string(peer_) + ", more than " +
                        (limit == slotBytes_ ? "a slot holds (" : "were asked for (") + std::to_string(limit) + ")",
                    peer_);
    }
    *s = Slot{slot.data, slot.bytes, slot.tag};
    s->device = areaInUse_ && v10_->recv_in_device_area(c_, &slot) != 0;
    return st;
  }
  Status releaseRecv(const Slot& s) override {
    braidSlot_v1 slot{s.data, s.bytes, s.tag};
    return call(*name_, [&](braidPluginError_v1* e) { return t_->release_recv(c_, &slot, e); });
  }
  Status progress() override {
    return call(*name_, [&](braidPluginError_v1* e) { return t_->progress(c_, e); });
  }
  bool flushed() const override { return t_->flushed(c_) != 0; }
  bool seesPeerFailure() const override { return t_->sees_peer_failure(c_) != 0; }
  WaitHandle waitHandle(bool forSend) override {
    braidWaitHandle_v1 h{nullptr, 0, -1, 0};
    t_->wait_handle(c_, forSend ? 1 : 0, &h);
    return WaitHandle{h.futex_word, h.futex_value, h.fd, h.fd_events};
  }
  void disarm(bool forSend) override { t_->disarm(c_, forSend ? 1 : 0); }
  int peer() const override { return peer_; }
  MemoryRange slotMemory() const override {
    if (!v5_) return {};
    void* base = nullptr;
    size_t bytes = 0;
    v5_->slot_memory(c_, &base, &bytes);
    return base && bytes ? MemoryRange{base, bytes} : MemoryRange{};
  }

  // Device areas (version 10): always registered with the NIC, never CUDA IPC.
  size_t deviceAreaBytes() const override { return areaBytes_; }
  DeviceAreaKind deviceAreaKind() const override {
    return areaBytes_ ? DeviceAreaKind::kRegistered : DeviceAreaKind::kNone;
  }
  StatusOr<std::string> registerDeviceArea(const DeviceMemory& m) override {
    if (!areaBytes_) return Connection::registerDeviceArea(m);
    const braidDeviceMemory_v1 area{m.base, m.dmabufFd, m.dmabufOffset};
    char name[kDeviceAreaNameBytes] = {};
    Status st = call(*name_, [&](braidPluginError_v1* e) {
      return v10_->register_device_area(c_, &area, name, sizeof name, e);
    });
    if (!st.isOk()) return st;
    if (!std::memchr(name, '\0', sizeof name)) {
      v10_->release_device_area(c_);
      return internalError(*name_ + ": register_device_area wrote a name without its end");
    }
    return std::string(name);
  }
  Status attachPeerDeviceArea(const std::string& peerName) override {
    if (!areaBytes_) return Connection::attachPeerDeviceArea(peerName);
    return call(*name_, [&](braidPluginError_v1* e) { return v10_->attach_peer_device_area(c_, peerName.c_str(), e); });
  }
  void setDeviceArea(void* base) override {
    if (!areaBytes_) return;
    v10_->set_device_area(c_, base);
    areaInUse_ = base != nullptr;
  }
  void releaseDeviceArea() override {
    if (!areaBytes_) return;
    areaInUse_ = false;
    v10_->release_device_area(c_);
  }
  void* deviceData(const Slot& s) const override {
    if (!areaInUse_) return nullptr;
    braidSlot_v1 slot{s.data, s.bytes, s.tag};
    return v10_->device_data(c_, &slot);
  }
  Status postSendDevice(const Slot& s, size_t bytes) override {
    if (!areaInUse_) return Connection::postSendDevice(s, bytes);
    braidSlot_v1 slot{s.data, bytes, s.tag};
    return call(*name_, [&](braidPluginError_v1* e) { return v10_->post_send_device(c_, &slot, bytes, e); });
  }

 private:
  // A device area's name: an address, a key and a size fit many times over.
  static constexpr size_t kDeviceAreaNameBytes = 256;

  const braidTransportPlugin_v1_t* t_;
  const braidTransportPlugin_v2_t* v2_;  // nullptr for a v1 plugin
  const braidTransportPlugin_v4_t* v4_;  // nullptr below version 4
  const braidTransportPlugin_v5_t* v5_;  // nullptr below version 5
  const braidTransportPlugin_v7_t* v7_;  // nullptr below version 7
  const braidTransportPlugin_v9_t* v9_;  // nullptr below version 9
  const braidTransportPlugin_v10_t* v10_;  // nullptr below version 10
  const std::string* name_;
  void* c_;
  int peer_;
  size_t slotBytes_;
  bool fromUser_;
  uint64_t tagMask_;
  size_t maxMessage_;
  bool reduces_;  // the plugin reduces payloads as they arrive (v9's reduces_on_arrival)
  size_t areaBytes_;     // v10's device_area_bytes: 0 without device areas
  bool areaInUse_ = false;
};

class PluginTransport final : public Transport {
 public:
  PluginTransport(const braidTransportPlugin_v1_t* t, const braidTransportPlugin_v2_t* v2,
                  const braidTransportPlugin_v4_t* v4, const braidTransportPlugin_v5_t* v5,
                  const braidTransportPlugin_v6_t* v6, const braidTransportPlugin_v7_t* v7,
                  const braidTransportPlugin_v8_t* v8, const braidTransportPlugin_v9_t* v9,
                  const braidTransportPlugin_v10_t* v10, std::string name, void* h,
                  std::unique_ptr<AbortCheck> abortCheck)
      : t_(t), v2_(v2), v4_(v4), v5_(v5), v6_(v6), v7_(v7), v8_(v8), v9_(v9), v10_(v10), name_(std::move(name)), h_(h),
        abortCheck_(std::move(abortCheck)) {}
  ~PluginTransport() override { t_->finalize(h_); }

  const char* name() const override { return name_.c_str(); }
  std::string describe() const override {
    const char* d = t_->describe ? t_->describe(h_) : nullptr;
    return d ? d : "";
  }

  int canConnect(const PeerInfo& local, const PeerInfo& remote) const override {
    braidPeerInfo_v1 l{local.rank, local.hostId.c_str(), local.pid, local.nonce};
    // A peer of another network namespace has a host id of its own here: it shares no
    // loopback interface with this rank, so for a plugin it is another host.
    const std::string remoteHost = pluginHostId(local, remote);
    // A pid of another pid namespace names nothing the plugin could look at: it gets 0.
    braidPeerInfo_v1 r{remote.rank, remoteHost.c_str(), remote.pidNs == local.pidNs ? remote.pid : 0, remote.nonce};
    return std::max(0, t_->score(h_, &l, &r));
  }

  StatusOr<std::unique_ptr<Connection>> createRecv(int peer, int channel, std::string* blob) override {
    std::string buf(kFirstBlobBytes, '\0');
    void* c = nullptr;
    for (int attempt = 0;; ++attempt) {
      size_t n = buf.size();
      Status st = call(name_, [&](braidPluginError_v1* e) {
        return t_->create_recv(h_, peer, channel, &c, buf.data(), &n, e);
      });
      if (st.isOk()) {
        if (n > buf.size()) return internalError(name_ + ": create_recv wrote a blob longer than its buffer");
        if (!c) return internalError(name_ + ": create_recv returned no connection");
        buf.resize(n);
        break;
      }
      // One retry with the size the plugin asked for.
      if (st.code() != Code::kInvalidArgument || attempt > 0 || n <= buf.size() || n > kMaxBlobBytes) return st;
      buf.assign(n, '\0');
    }
    *blob = std::move(buf);
    return std::unique_ptr<Connection>(new PluginConnection(t_, v2_, v4_, v5_, v7_, v9_, v10_, &name_, c, peer));
  }

  StatusOr<std::unique_ptr<Connection>> connectSend(int peer, int channel, const std::string& blob) override {
    void* c = nullptr;
    Status st = call(name_, [&](braidPluginError_v1* e) {
      return t_->connect_send(h_, peer, channel, blob.data(), blob.size(), &c, e);
    });
    if (!st.isOk()) return setupResult(st);
    if (!c) return internalError(name_ + ": connect_send returned no connection");
    return std::unique_ptr<Connection>(new PluginConnection(t_, v2_, v4_, v5_, v7_, v9_, v10_, &name_, c, peer));
  }

  Status establish(Deadline deadline) override {
    return setupResult(call(name_, [&](braidPluginError_v1* e) { return t_->establish(h_, deadline.nanos(), e); }));
  }

  void peerFailed(int rank) override {
    if (v6_) v6_->peer_failed(h_, rank);
  }

  bool sawPeerFail(int rank) override { return v8_ && v8_->saw_peer_fail(h_, rank) != 0; }

 private:
  const braidTransportPlugin_v1_t* t_;
  const braidTransportPlugin_v2_t* v2_;
  const braidTransportPlugin_v4_t* v4_;  // nullptr below version 4
  const braidTransportPlugin_v5_t* v5_;  // nullptr below version 5
  const braidTransportPlugin_v6_t* v6_;  // nullptr below version 6
  const braidTransportPlugin_v7_t* v7_;  // nullptr below version 7
  const braidTransportPlugin_v8_t* v8_;  // nullptr below version 8
  const braidTransportPlugin_v9_t* v9_;  // nullptr below version 9
  const braidTransportPlugin_v10_t* v10_;  // nullptr below version 10
  std::string name_;
  void* h_;
  std::unique_ptr<AbortCheck> abortCheck_;

  // What a setup call returns: the abort check's own error when the plugin gave up on it.
  Status setupResult(Status st) const {
    return !st.isOk() && abortCheck_ && !abortCheck_->failed.isOk() ? abortCheck_->failed : st;
  }
};

}  // namespace

std::string pluginHostId(const PeerInfo& local, const PeerInfo& remote) {
  if (remote.hostId != local.hostId || shareNetNs(local, remote)) return remote.hostId;
  return remote.hostId + " netns:" + std::to_string(remote.netNs);
}

namespace {

// Every entry the host calls must be there; a table with a hole is refused at load, not
// discovered as a crash mid-collective.
std::string missingEntry(const braidTransportPlugin_v1_t* t) {
#define BRAID_CHECK_ENTRY(f) \
  if (!t->f) return #f;
  BRAID_CHECK_ENTRY(init) BRAID_CHECK_ENTRY(finalize) BRAID_CHECK_ENTRY(score)
  BRAID_CHECK_ENTRY(create_recv) BRAID_CHECK_ENTRY(connect_send) BRAID_CHECK_ENTRY(establish)
  BRAID_CHECK_ENTRY(slot_bytes) BRAID_CHECK_ENTRY(reserve_send) BRAID_CHECK_ENTRY(post_send)
  BRAID_CHECK_ENTRY(peek_recv) BRAID_CHECK_ENTRY(release_recv) BRAID_CHECK_ENTRY(progress)
  BRAID_CHECK_ENTRY(flushed) BRAID_CHECK_ENTRY(sees_peer_failure) BRAID_CHECK_ENTRY(wait_handle) BRAID_CHECK_ENTRY(disarm) BRAID_CHECK_ENTRY(close)
#undef BRAID_CHECK_ENTRY
  if (!t->name || !*t->name) return "name";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v2_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->sends_from_user) return "sends_from_user";
  if (!t->post_send_from) return "post_send_from";
  if (!t->peek_recv_into) return "peek_recv_into";
  if (!t->tag_mask) return "tag_mask";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v3_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->init_keyed) return "init_keyed";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v4_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->max_message_bytes) return "max_message_bytes";
  if (!t->peek_tag) return "peek_tag";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v5_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->slot_memory) return "slot_memory";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v6_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->peer_failed) return "peer_failed";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v7_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->expect_recv) return "expect_recv";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v8_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->saw_peer_fail) return "saw_peer_fail";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v9_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->reduces_on_arrival) return "reduces_on_arrival";
  if (!t->peek_recv_reduce) return "peek_recv_reduce";
  if (!t->expect_reduce) return "expect_reduce";
  return "";
}

std::string missingEntry(const braidTransportPlugin_v10_t* t) {
  std::string m = missingEntry(&t->base);
  if (!m.empty()) return m;
  if (!t->device_area_bytes) return "device_area_bytes";
  if (!t->register_device_area) return "register_device_area";
  if (!t->attach_peer_device_area) return "attach_peer_device_area";
  if (!t->set_device_area) return "set_device_area";
  if (!t->release_device_area) return "release_device_area";
  if (!t->device_data) return "device_data";
  if (!t->post_send_device) return "post_send_device";
  if (!t->recv_in_device_area) return "recv_in_device_area";
  return "";
}

std::string folderOf(const void* addr) {
  Dl_info info{};
  if (!dladdr(addr, &info) || !info.dli_fname) return "";
  // The main program reports the name it was started by, which may be relative.
  char resolved[PATH_MAX];
  std::string f = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  if (f.empty() || f[0] != '/') {
    ssize_t n = readlink("/proc/self/exe", resolved, sizeof(resolved) - 1);
    if (n <= 0) return "";
    f.assign(resolved, static_cast<size_t>(n));
  }
  size_t slash = f.rfind('/');
  return slash == std::string::npos ? "." : f.substr(0, slash);
}

std::vector<std::string> listFolder(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) == 0 && n.size() > 3 && n.compare(n.size() - 3, 3, ".so") == 0)
      out.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string baseName(const std::string& f) {
  size_t slash = f.rfind('/');
  return slash == std::string::npos ? f : f.substr(slash + 1);
}

}  // namespace

std::string nameFromFile(const std::string& file) {
  std::string b = baseName(file);
  if (b.rfind(kPrefix, 0) != 0) return b;
  b = b.substr(std::strlen(kPrefix));
  size_t so = b.find(".so");
  return so == std::string::npos ? b : b.substr(0, so);
}

std::vector<std::string> splitPluginList(const char* pluginList) {
  std::vector<std::string> out;
  if (!pluginList) return out;
  const std::string list = pluginList;
  for (size_t start = 0; start <= list.size();) {
    size_t colon = list.find(':', start);
    if (colon == std::string::npos) colon = list.size();
    if (colon > start) out.push_back(list.substr(start, colon - start));
    start = colon + 1;
  }
  return out;
}

std::vector<std::string> pluginFiles(const char* pluginList, const char* pluginDir) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](const std::string& f) {
    if (f.empty() || !seen.insert(baseName(f)).second) return;
    files.push_back(f);
  };
  for (const std::string& f : splitPluginList(pluginList)) add(f);
  std::vector<std::string> dirs;
  if (pluginDir && *pluginDir) {
    if (std::string(pluginDir) != "none") dirs.push_back(pluginDir);
  } else {
    std::string here = folderOf(reinterpret_cast<const void*>(&pluginFiles));
    if (!here.empty()) dirs.push_back(here + "/braid");
#ifdef BRAID_PLUGIN_INSTALL_DIR
    dirs.push_back(BRAID_PLUGIN_INSTALL_DIR);
#endif
#ifdef BRAID_PLUGIN_BUILD_DIR
    // Only for programs that live in the build tree: an installed braid never reaches
    // into the tree it was built in.
    if (!here.empty() && here.rfind(BRAID_BUILD_ROOT, 0) == 0) dirs.push_back(BRAID_PLUGIN_BUILD_DIR);
#endif
  }
  for (const std::string& d : dirs)
    for (const std::string& f : listFolder(d)) add(f);
  return files;
}

TransportFactory factoryFromTable(const braidTransportPlugin_v1_t* table, const std::string& origin,
                                  const braidTransportPlugin_v2_t* v2, const braidTransportPlugin_v3_t* v3,
                                  const braidTransportPlugin_v4_t* v4, const braidTransportPlugin_v5_t* v5,
                                  const braidTransportPlugin_v6_t* v6, const braidTransportPlugin_v7_t* v7,
                                  const braidTransportPlugin_v8_t* v8, const braidTransportPlugin_v9_t* v9,
                                  const braidTransportPlugin_v10_t* v10) {
  TransportFactory f;
  f.name = table->name;
  f.origin = origin;
  f.version = table->version ? table->version : "";
  f.create = [table, v2, v3, v4, v5, v6, v7, v8, v9, v10](const TransportConfig& cfg) -> StatusOr<std::unique_ptr<Transport>> {
    std::vector<const char*> ifs;
    for (const std::string& s : cfg.channelNetIfs) ifs.push_back(s.c_str());
    braidTransportConfig_v1 c{};
    c.rank = cfg.rank;
    c.nranks = cfg.nranks;
    c.nonce = cfg.nonce;
    c.slot_bytes = cfg.slotBytes;
    c.nslots = cfg.nslots;
    c.numa_node = cfg.numaNode;
    c.connect_timeout_sec = cfg.connectTimeoutSec;
    c.net_if = cfg.netIf.c_str();
    c.channel_net_ifs = ifs.data();
    c.num_channel_net_ifs = static_cast<int>(ifs.size());
    c.ib_hca = cfg.ibHca.c_str();
    c.ib_gid_index = cfg.ibGidIndex;
    c.log_level = static_cast<int>(logLevel());
    c.log = &logFromPlugin;
    // The check outlives this call: the transport keeps it, so it lives in the transport.
    auto abortCheck = std::make_unique<AbortCheck>(AbortCheck{cfg.abortCheck, Status()});
    if (abortCheck->check) {
      c.abort_check = &runAbortCheck;
      c.abort_check_context = abortCheck.get();
    }
    void* h = nullptr;
    std::string name = table->name;
    // A v3 plugin gets the job's key (a copy on this stack: the plugin keeps its own).
    braidJobKey_v1 key{};
    key.key = cfg.authKey.present ? cfg.authKey.bytes.data() : nullptr;
    key.key_bytes = cfg.authKey.present ? cfg.authKey.bytes.size() : 0;
    key.tls = cfg.tls ? 1 : 0;
    Status st = call(name, [&](braidPluginError_v1* e) {
      return v3 ? v3->init_keyed(&c, &key, &h, e) : table->init(&c, &h, e);
    });
    if (!st.isOk()) return st;
    if (!h) return internalError(name + ": init returned no transport");
    return std::unique_ptr<Transport>(new PluginTransport(table, v2, v4, v5, v6, v7, v8, v9, v10, name, h, std::move(abortCheck)));
  };
  return f;
}

StatusOr<TransportFactory> loadPlugin(const std::string& file) {
  // RTLD_LOCAL keeps a plugin's dependencies (libucp, libibverbs) out of the global
  // namespace; plugins stay loaded for the life of the process, as their tables must.
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    return Status(Code::kSystemError, "cannot load transport plugin " + file + ": " + (err ? err : "unknown error"));
  }
  // The newest table the library offers; its abi_version must match the symbol's.
  auto* v10 = static_cast<const braidTransportPlugin_v10_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V10));
  auto* v9 = v10 ? &v10->base : static_cast<const braidTransportPlugin_v9_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V9));
  auto* v8 = v9 ? &v9->base : static_cast<const braidTransportPlugin_v8_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V8));
  auto* v7 = v8 ? &v8->base : static_cast<const braidTransportPlugin_v7_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V7));
  auto* v6 = v7 ? &v7->base : static_cast<const braidTransportPlugin_v6_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V6));
  auto* v5 = v6 ? &v6->base : static_cast<const braidTransportPlugin_v5_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V5));
  auto* v4 = v5 ? &v5->base : static_cast<const braidTransportPlugin_v4_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V4));
  auto* v3 = v4 ? &v4->base : static_cast<const braidTransportPlugin_v3_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V3));
  auto* v2 = v3 ? &v3->base : static_cast<const braidTransportPlugin_v2_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V2));
  auto* table = v2 ? &v2->base
                   : static_cast<const braidTransportPlugin_v1_t*>(dlsym(lib, BRAID_TRANSPORT_PLUGIN_SYMBOL_V1));
  if (!table) {
    dlclose(lib);
    return Status(Code::kInvalidArgument, "transport plugin " + file +
                                              " exports none of " BRAID_TRANSPORT_PLUGIN_SYMBOL_V10
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V9
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V8
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V7
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V6
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V5
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V4
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V3
                                              ", " BRAID_TRANSPORT_PLUGIN_SYMBOL_V2
                                              " and " BRAID_TRANSPORT_PLUGIN_SYMBOL_V1
                                              " (this braid speaks plugin ABI versions 1 to 10)");
  }
  const uint32_t expected = v10 ? 10 : v9 ? 9 : v8 ? 8 : v7 ? 7 : v6 ? 6 : v5 ? 5 : v4 ? 4 : v3 ? 3 : v2 ? 2 : 1;
  if (table->abi_version != expected) {
    uint32_t v = table->abi_version;
    dlclose(lib);
    return Status(Code::kInvalidArgument, "transport plugin " + file + " exports " +
                                              (v10  ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V10
                                               : v9 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V9
                                               : v8 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V8
                                               : v7 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V7
                                               : v6 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V6
                                               : v5 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V5
                                               : v4 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V4
                                               : v3 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V3
                                               : v2 ? BRAID_TRANSPORT_PLUGIN_SYMBOL_V2
                                                    : BRAID_TRANSPORT_PLUGIN_SYMBOL_V1) +
                                              " with ABI version " + std::to_string(v) +
                                              " but this braid speaks versions 1 to 10");
  }
  std::string missing = v10 ? missingEntry(v10) : v9 ? missingEntry(v9) : v8 ? missingEntry(v8) : v7 ? missingEntry(v7) : v6 ? missingEntry(v6) : v5 ? missingEntry(v5) : v4 ? missingEntry(v4) : v3 ? missingEntry(v3) : v2 ? missingEntry(v2) : missingEntry(table);
  if (!missing.empty()) {
    dlclose(lib);
    return Status(Code::kInvalidArgument, "transport plugin " + file + ": its table has no '" + missing + "'");
  }
  return factoryFromTable(table, file, v2, v3, v4, v5, v6, v7, v8, v9, v10);
}

}  // namespace braid::transport::plugin
