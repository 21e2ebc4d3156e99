#include "bootstrap/etcd_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "bootstrap/http_kv.h"
#include "bootstrap/store_value.h"
#include "common/log.h"
#include "topology/json.h"

namespace braid::bootstrap {

namespace {

using topology::JsonValue;

// etcd's --max-txn-ops defaults to 128; a read asks three ranges per key (the key, and
// setOnClose's value and marker beside it).
constexpr size_t kKeysPerTxn = 42;
constexpr int kDefaultLeaseTtlSec = 10;
constexpr int kFirstPauseUs = 1000;
constexpr int kMaxPauseUs = 20000;
constexpr int kMaxReconnectPauseMs = 250;
constexpr int kMinRequestMs = 100;
// How long get() polls for a missing key before it watches for it instead.
constexpr double kPollBeforeWatchSec = 1.0;

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

bool unbase64(const std::string& in, std::string* out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  out->clear();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    int v = val(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  for (; i < in.size(); ++i)
    if (in[i] != '=') return false;
  return true;
}

// The byte string just past every key that starts with `p`: etcd's range_end for a prefix.
std::string prefixEnd(std::string p) {
  while (!p.empty()) {
    if (static_cast<uint8_t>(p.back()) < 0xff) {
      p.back() = static_cast<char>(p.back() + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// etcd's JSON writes 64-bit integers as strings and leaves out fields that are zero.
int64_t intField(const JsonValue& o, const char* name) {
  const JsonValue* v = o.find(name);
  if (!v) return 0;
  if (v->isNumber()) return static_cast<int64_t>(v->numberValue());
  if (v->isString()) return std::strtoll(v->stringValue().c_str(), nullptr, 10);
  return 0;
}

std::string rangeBody(const std::string& key, bool countOnly) {
  return std::string("{\"key\":\"") + base64(key) + "\"" + (countOnly ? ",\"count_only\":true" : "") + "}";
}

std::string putOp(const std::string& key, const std::string& value) {
  return "{\"request_put\":{\"key\":\"" + base64(key) + "\",\"value\":\"" + base64(value) + "\"}}";
}

std::string rangeOp(const std::string& key, bool countOnly) {
  return "{\"request_range\":" + rangeBody(key, countOnly) + "}";
}

std::string printable(const std::string& s, size_t max = 120) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return out;
}

// Waits for `events` on `fd` until `deadline`; kTimeout naming `what` when it passes.
Status waitFd(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = deadline.remainingMillis(1000);
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return Status::ok();
    if (rc < 0 && errno != EINTR) return systemError("poll", errno);
    if (rc == 0 && deadline.expired()) return Status(Code::kTimeout, std::string(what) + " timed out");
  }
}

// The reply of one successful call as a JSON object.
StatusOr<JsonValue> parseReply(const std::string& text, const std::string& where) {
  auto v = topology::parseJson(text, where);
  if (!v.isOk() || !v.value().isObject())
    return Status(Code::kRemoteError, where + " answered with something other than a JSON object: '" +
                                          printable(text) + "'");
  return v;
}

// The kvs[0] of a range reply (response_range inside a transaction, or a range call's own).
void kvFrom(const JsonValue& range, bool values, std::string* value, bool* present, int64_t* mod) {
  *present = false;
  const JsonValue* kvs = range.find("kvs");
  if (kvs && kvs->isArray() && !kvs->items().empty()) {
    const JsonValue& kv = kvs->items()[0];
    *present = true;
    *mod = intField(kv, "mod_revision");
    if (values) {
      const JsonValue* v = kv.find("value");
      if (v && v->isString()) unbase64(v->stringValue(), value);
    }
  } else if (intField(range, "count") > 0) {
    *present = true;  // a count-only range
  }
}

// setOnClose's two keys beside `key` (full keys): the value to show once the client is
// gone, and the marker that lives as long as its lease. A NUL cannot occur in braid's keys,
// and both stay under `key`'s prefix, so deletePrefix takes them along.
std::string closeValueKey(const std::string& key) { return key + std::string(1, '\0') + "close"; }
std::string closeMarkerKey(const std::string& key) { return key + std::string(1, '\0') + "alive"; }

// addOnClose's keys beside a counter `key` (full keys), one pair per client (its lease):
// the sum of its deltas (no lease) and a marker on its lease. A sum whose marker is gone
// has fired: the next add() moves it into the counter.
std::string countPrefix(const std::string& key) { return key + std::string(1, '\0') + "oc"; }
std::string countSumKey(const std::string& key, int64_t lease) {
  return countPrefix(key) + "d:" + std::to_string(lease);
}
std::string countMarkerKey(const std::string& key, int64_t lease) {
  return countPrefix(key) + "a:" + std::to_string(lease);
}

}  // namespace

std::string formatEtcdUrl(const EtcdUrl& url) {
  std::string s = url.tls ? "etcds://" : "etcd://";
  for (size_t i = 0; i < url.endpoints.size(); ++i)
    s += (i ? "," : "") + url.endpoints[i].first + ":" + std::to_string(url.endpoints[i].second);
  return s + url.prefix;
}

StatusOr<EtcdUrl> parseEtcdUrl(const std::string& what, const std::string& value) {
  auto bad = [&](const std::string& why) {
    return invalidArgument(what + "='" + printable(value) + "' " + why +
                           " (want etcd://host:port[,host:port...]/prefix, the prefix naming the job)");
  };
  static const std::string kScheme = "etcd://", kTlsScheme = "etcds://";
  const bool tls = value.compare(0, kTlsScheme.size(), kTlsScheme) == 0;
  if (!tls && value.compare(0, kScheme.size(), kScheme) != 0) return bad("is not an etcd:// or etcds:// URL");
  const std::string rest = value.substr(tls ? kTlsScheme.size() : kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 >= rest.size()) return bad("names no prefix");
  EtcdUrl u;
  u.tls = tls;
  std::string prefix = rest.substr(slash);
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  if (prefix == "/") return bad("names no prefix");
  for (char c : prefix)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/'))
      return bad("has a prefix character outside [A-Za-z0-9._/-]");
  u.prefix = prefix;
  const std::string hosts = rest.substr(0, slash);
  size_t start = 0;
  while (start <= hosts.size()) {
    size_t comma = hosts.find(',', start);
    if (comma == std::string::npos) comma = hosts.size();
    const std::string hp = hosts.substr(start, comma - start);
    const size_t colon = hp.rfind(':');
    if (hp.empty() || colon == std::string::npos || colon == 0 || colon + 1 == hp.size())
      return bad("has an endpoint '" + printable(hp) + "' that is not host:port");
    const std::string host = hp.substr(0, colon);
    for (char c : host)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
        return bad("has a host '" + printable(host) + "' that is not a name or IPv4 address");
    char* end = nullptr;
    const long port = std::strtol(hp.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535) return bad("has a port outside [1, 65535] in '" + hp + "'");
    u.endpoints.emplace_back(host, static_cast<int>(port));
    start = comma + 1;
  }
  return u;
}

StatusOr<EtcdCredentials> EtcdCredentials::fromEnv() {
  EtcdCredentials c;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  c.tls.caFile = env("BRAID_ETCD_CACERT");
  c.tls.certFile = env("BRAID_ETCD_CERT");
  c.tls.keyFile = env("BRAID_ETCD_KEY");
  if (c.tls.certFile.empty() != c.tls.keyFile.empty())
    return invalidArgument("BRAID_ETCD_CERT and BRAID_ETCD_KEY go together (a client certificate and its key); only " +
                           std::string(c.tls.certFile.empty() ? "BRAID_ETCD_KEY" : "BRAID_ETCD_CERT") + " is set");
  const std::string user = env("BRAID_ETCD_USER");
  const std::string passwordFile = env("BRAID_ETCD_PASSWORD_FILE");
  if (user.empty()) {
    if (!passwordFile.empty()) return invalidArgument("BRAID_ETCD_PASSWORD_FILE is set but BRAID_ETCD_USER is not");
    return c;
  }
  const size_t colon = user.find(':');
  c.user = user.substr(0, colon);
  if (c.user.empty()) return invalidArgument("BRAID_ETCD_USER names no user (want name:password, or name)");
  if (colon != std::string::npos) {
    c.password = user.substr(colon + 1);
  } else if (!passwordFile.empty()) {
    FILE* f = std::fopen(passwordFile.c_str(), "r");
    if (!f)
      return invalidArgument("BRAID_ETCD_PASSWORD_FILE='" + passwordFile + "' cannot be read: " + std::strerror(errno));
    char buf[4096];
    const size_t n = std::fread(buf, 1, sizeof(buf), f);
    std::fclose(f);
    c.password.assign(buf, n);
    while (!c.password.empty() && (c.password.back() == '\n' || c.password.back() == '\r')) c.password.pop_back();
  } else {
    return invalidArgument("BRAID_ETCD_USER='" + c.user +
                           "' has no password (want name:password, or BRAID_ETCD_PASSWORD_FILE)");
  }
  return c;
}

EtcdStore::~EtcdStore() {
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(leaseMu_);
    stopping_ = true;
    if (!leaseLost_) lease = leaseId_;
  }
  leaseCv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  // Revoking the lease ends it now rather than a TTL from now: keys not withdrawn with
  // cancelOnClose read as set at once, as a TCP store sets them when the connection ends.
  if (lease) (void)call("/v3/lease/revoke", "{\"ID\":\"" + std::to_string(lease) + "\"}", Deadline::after(2), true);
  dropConnection();
}

StatusOr<int> EtcdStore::leaseTtlFromEnv() {
  const char* v = std::getenv("BRAID_ETCD_LEASE_TTL");
  if (!v || !*v) return kDefaultLeaseTtlSec;
  char* end = nullptr;
  errno = 0;
  const long ttl = std::strtol(v, &end, 10);
  if (errno || *end || ttl < 2 || ttl > 3600)
    return invalidArgument(std::string("BRAID_ETCD_LEASE_TTL='") + v + "': expected whole seconds from 2 to 3600");
  return static_cast<int>(ttl);
}

Status EtcdStore::ensureLease(Deadline deadline) {
  std::lock_guard<std::mutex> lock(leaseMu_);
  if (leaseLost_)
    return Status(Code::kRemoteError, where() + " let this process's lease (BRAID_ETCD_LEASE_TTL " +
                                          std::to_string(leaseTtl_) + " s) run out: it counts as gone");
  if (leaseId_) return Status::ok();
  BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/lease/grant", "{\"TTL\":\"" + std::to_string(leaseTtl_) + "\"}",
                                             deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  const int64_t id = intField(v, "ID");
  if (id == 0) return Status(Code::kRemoteError, where() + " granted a lease without an ID: '" + printable(r) + "'");
  leaseId_ = id;
  leaseTtl_ = static_cast<int>(std::max<int64_t>(intField(v, "TTL"), 1));
  keeper_ = std::thread([this] { keepAlive(); });
  BRAID_INFO("store: lease %lld of %d s on %s", static_cast<long long>(id), leaseTtl_, where().c_str());
  return Status::ok();
}

void EtcdStore::keepAlive() {
  std::unique_lock<std::mutex> lock(leaseMu_);
  const auto every = std::chrono::milliseconds(leaseTtl_ * 1000 / 3);
  const std::string body = "{\"ID\":\"" + std::to_string(leaseId_) + "\"}";
  while (!stopping_) {
    leaseCv_.wait_for(lock, every, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    // The gateway streams the keep-alive replies: one {"result": {"ID", "TTL"}} for the one
    // request sent. TTL 0 (or none): etcd no longer has the lease.
    auto r = call("/v3/lease/keepalive", body, Deadline::after(std::max(1, leaseTtl_ / 3)), true);
    bool lost = false;
    if (r.isOk()) {
      auto v = parseReply(r.value(), where());
      const JsonValue* result = v.isOk() ? v.value().find("result") : nullptr;
      lost = !result || intField(*result, "TTL") <= 0;
    } else {
      BRAID_TRACE("store: keeping lease %lld alive: %s", static_cast<long long>(leaseId_),
                  r.status().message().c_str());
    }
    lock.lock();
    if (lost) {
      leaseLost_ = true;
      BRAID_WARN("store: %s let this process's lease run out (BRAID_ETCD_LEASE_TTL %d s): the job counts it "
                 "as gone",
                 where().c_str(), leaseTtl_);
      break;
    }
  }
}

Status EtcdStore::setOnClose(const std::string& key, const std::string& value, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(ensureLease(deadline).withContext("setOnClose('" + key + "')"));
  int64_t lease;
  {
    std::lock_guard<std::mutex> lock(leaseMu_);
    lease = leaseId_;
  }
  const std::string body = "{\"success\":[" + putOp(closeValueKey(fullKey(key)), value) +
                           ",{\"request_put\":{\"key\":\"" + base64(closeMarkerKey(fullKey(key))) +
                           "\",\"value\":\"\",\"lease\":\"" + std::to_string(lease) + "\"}}]}";
  auto r = call("/v3/kv/txn", body, deadline, true);
  return r.isOk() ? Status::ok() : r.status().withContext("setOnClose('" + key + "')");
}

StatusOr<bool> EtcdStore::cancelOnClose(const std::string& key, Deadline deadline) {
  const std::string body = "{\"success\":[{\"request_delete_range\":" + rangeBody(closeValueKey(fullKey(key)), false) +
                           "},{\"request_delete_range\":" + rangeBody(closeMarkerKey(fullKey(key)), false) + "}]}";
  BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/txn", body, deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  const JsonValue* rs = v.find("responses");
  const JsonValue* del =
      rs && rs->isArray() && !rs->items().empty() ? rs->items()[0].find("response_delete_range") : nullptr;
  return del && intField(*del, "deleted") > 0;
}

void EtcdStore::dropConnection() {
  tls_.reset();
  std::lock_guard<std::mutex> lock(fdMu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  usedBefore_ = false;
}

void EtcdStore::interrupt() {
  interrupted_.store(true);
  {
    std::lock_guard<std::mutex> lock(fdMu_);
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  std::lock_guard<std::mutex> lock(watchMu_);
  if (watcher_) watcher_->interrupt();
}

std::string EtcdStore::where() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& ep = url_.endpoints[endpoint_];
  return "etcd at " + ep.first + ":" + std::to_string(ep.second);
}

StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::connect(const EtcdUrl& url, Deadline deadline,
                                                      EtcdCredentials credentials) {
  if (url.endpoints.empty()) return invalidArgument("etcd store: no endpoints");
  BRAID_ASSIGN_OR_RETURN(int ttl, leaseTtlFromEnv());
  std::unique_ptr<EtcdStore> s(new EtcdStore(url, std::move(credentials)));
  s->leaseTtl_ = ttl;
  auto r = s->call("/v3/kv/range", rangeBody(s->fullKey(""), true), deadline, true);
  if (!r.isOk()) return r.status();
  auto v = parseReply(r.value(), s->where());
  if (!v.isOk()) return v.status();
  if (!v.value().find("header"))
    return Status(Code::kRemoteError, s->where() + " does not answer as etcd's v3 API: '" + printable(r.value()) + "'");
  BRAID_INFO("store: %s, keys under %s/", s->where().c_str(), url.prefix.c_str());
  return s;
}

StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::connectForJob(const std::string& braidStore,
                                                              const std::string& jobTag, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(EtcdUrl u, parseEtcdUrl("BRAID_STORE", braidStore));
  if (!jobTag.empty()) u.prefix += "/" + jobTag;
  BRAID_ASSIGN_OR_RETURN(EtcdCredentials c, EtcdCredentials::fromEnv());
  return connect(u, deadline, std::move(c));
}

Status EtcdStore::exchange(const char* path, const std::string& body, Deadline deadline, std::string* reply,
                           int* httpStatus, bool* sent, bool* reused, const StreamDone* streamDone) {
  *sent = false;
  *reused = fd_ >= 0 && usedBefore_;
  if (interrupted_.load()) return Status(Code::kAborted, "interrupted");
  const auto& ep = url_.endpoints[endpoint_];
  const std::string hostPort = ep.first + ":" + std::to_string(ep.second);
  if (fd_ < 0) {
    sockaddr_in sa;
    BRAID_RETURN_IF_ERROR(resolveIpv4(ep.first, ep.second, &sa));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return systemError("socket", errno);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    if (rc != 0 && errno == EINPROGRESS) {
      Status w = waitFd(fd, POLLOUT, deadline, "connect");
      int err = 0;
      socklen_t len = sizeof(err);
      if (w.isOk()) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (!w.isOk() || err != 0) {
        ::close(fd);
        return w.isOk() ? Status(Code::kRemoteError, std::string("connect: ") + std::strerror(err)) : w;
      }
    } else if (rc != 0) {
      int err = errno;
      ::close(fd);
      return Status(Code::kRemoteError, std::string("connect: ") + std::strerror(err));
    }
    {
      std::lock_guard<std::mutex> lock(fdMu_);
      fd_ = fd;
      // An interrupt() that came while connecting ends this connection too.
      if (interrupted_.load()) ::shutdown(fd_, SHUT_RDWR);
    }
    usedBefore_ = false;
    if (url_.tls) {
      auto t = TlsStream::createVerifiedClient(fd_, credentials_.tls, ep.first);
      if (!t.isOk()) {
        dropConnection();
        return t.status();
      }
      tls_ = std::move(t).value();
      for (;;) {
        const int h = tls_->handshake();
        if (h == 1) break;
        if (h < 0) {
          // A certificate that does not verify is a setting to fix, not a member to pass over.
          const bool unverified = tls_->error().find("does not verify") != std::string::npos;
          Status fail(unverified ? Code::kInvalidArgument : Code::kRemoteError,
                      tls_->error() + (unverified ? " (BRAID_ETCD_CACERT)" : ""));
          dropConnection();
          return fail;
        }
        Status w = waitFd(fd_, tls_->wantEvents(), deadline, "the TLS handshake");
        if (!w.isOk()) {
          dropConnection();
          return w;
        }
      }
    }
  }
  const bool auth = !token_.empty() && std::strcmp(path, "/v3/auth/authenticate") != 0;
  std::string req = std::string("POST ") + path + " HTTP/1.1\r\nHost: " + hostPort +
                    (auth ? "\r\nAuthorization: " + token_ : std::string()) +
                    "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\n\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    ssize_t n;
    if (tls_) {
      iovec v{const_cast<char*>(req.data() + off), req.size() - off};
      n = tls_->writev(&v, 1);
      if (n < 0 && errno != EAGAIN) return Status(Code::kRemoteError, tls_->error());
      if (n < 0) {
        BRAID_RETURN_IF_ERROR(waitFd(fd_, tls_->wantEvents(), deadline, "sending a request"));
        continue;
      }
    } else {
      n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        BRAID_RETURN_IF_ERROR(waitFd(fd_, POLLOUT, deadline, "sending a request"));
        continue;
      }
      if (n < 0) return Status(Code::kRemoteError, std::string("send: ") + std::strerror(errno));
    }
    *sent = true;
    off += static_cast<size_t>(n);
  }
  while (tls_ && tls_->pending() > 0) {
    if (tls_->flush() == 0) break;
    if (errno != EAGAIN) return Status(Code::kRemoteError, tls_->error());
    BRAID_RETURN_IF_ERROR(waitFd(fd_, tls_->wantEvents(), deadline, "sending a request"));
  }
  usedBefore_ = true;

  // The reply: a status line and headers, then Content-Length bytes or chunks.
  std::string in;
  size_t headEnd = std::string::npos;
  bool chunked = false, closeAfter = false;
  size_t contentLength = std::string::npos;
  size_t scan = 0;  // chunked: where the next chunk's size line starts
  std::string payload;
  char buf[16384];
  for (;;) {
    if (headEnd == std::string::npos) {
      headEnd = in.find("\r\n\r\n");
      if (headEnd != std::string::npos) {
        int minor = 0, status = 0;
        char sp = 0;
        if (std::sscanf(in.c_str(), "HTTP/1.%d %3d%c", &minor, &status, &sp) != 3 || sp != ' ')
          return Status(Code::kRemoteError, "not an HTTP reply: '" + printable(in.substr(0, in.find('\r'))) + "'");
        *httpStatus = status;
        for (size_t pos = in.find("\r\n"); pos < headEnd;) {
          const size_t next = in.find("\r\n", pos + 2);
          std::string line = in.substr(pos + 2, next - pos - 2);
          for (auto& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          if (line.rfind("content-length:", 0) == 0)
            contentLength = std::strtoull(line.c_str() + 15, nullptr, 10);
          else if (line.rfind("transfer-encoding:", 0) == 0 && line.find("chunked") != std::string::npos)
            chunked = true;
          else if (line.rfind("connection:", 0) == 0 && line.find("close") != std::string::npos)
            closeAfter = true;
          pos = next;
        }
        if (contentLength != std::string::npos && contentLength > kMaxReplyBytes)
          return Status(Code::kRemoteError, "a reply of " + std::to_string(contentLength) + " bytes is too long");
        scan = headEnd + 4;
      }
    }
    if (headEnd != std::string::npos) {
      if (chunked) {
        bool done = false;
        for (;;) {
          const size_t eol = in.find("\r\n", scan);
          if (eol == std::string::npos) break;
          const size_t len = std::strtoull(in.c_str() + scan, nullptr, 16);
          if (len == 0) {
            // The last chunk, then trailer lines (none from etcd) and an empty line.
            done = in.find("\r\n\r\n", eol) != std::string::npos;
            break;
          }
          if (payload.size() + len > kMaxReplyBytes)
            return Status(Code::kRemoteError, "a chunked reply longer than " + std::to_string(kMaxReplyBytes) + " bytes");
          if (in.size() < eol + 2 + len + 2) break;
          payload.append(in, eol + 2, len);
          scan = eol + 2 + len + 2;
          if (streamDone && (*streamDone)(payload)) {
            done = true;
            closeAfter = true;  // the rest of the stream is not read
            break;
          }
        }
        if (done) break;
      } else if (contentLength != std::string::npos) {
        if (in.size() >= headEnd + 4 + contentLength) {
          payload = in.substr(headEnd + 4, contentLength);
          break;
        }
      }
    } else if (in.size() > 65536) {
      return Status(Code::kRemoteError, "reply headers longer than 64 KiB");
    }
    ssize_t n;
    if (tls_) {
      iovec v{buf, sizeof(buf)};
      n = tls_->readv(&v, 1);
      if (n < 0 && errno == EAGAIN) {
        BRAID_RETURN_IF_ERROR(waitFd(fd_, tls_->wantEvents(), deadline, "waiting for the reply"));
        continue;
      }
      if (n < 0) return Status(Code::kRemoteError, tls_->error());
    } else {
      n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        BRAID_RETURN_IF_ERROR(waitFd(fd_, POLLIN, deadline, "waiting for the reply"));
        continue;
      }
      if (n < 0) return Status(Code::kRemoteError, std::string("receive: ") + std::strerror(errno));
    }
    if (n == 0) {
      if (headEnd != std::string::npos && !chunked && contentLength == std::string::npos) {
        payload = in.substr(headEnd + 4);  // the reply ends where the server closes
        closeAfter = true;
        break;
      }
      return Status(Code::kRemoteError, in.empty() ? "connection closed without a reply" : "reply cut before its end");
    }
    in.append(buf, static_cast<size_t>(n));
    if (in.size() > kMaxReplyBytes + 65536)
      return Status(Code::kRemoteError, "a reply longer than " + std::to_string(kMaxReplyBytes) + " bytes");
  }
  if (closeAfter) dropConnection();
  *reply = std::move(payload);
  return Status::ok();
}

StatusOr<std::string> EtcdStore::call(const char* path, const std::string& body, Deadline deadline,
                                      bool retryAfterSend, const StreamDone* streamDone) {
  // A request never waits longer than the default bound, so that a stalled endpoint is
  // left for the next one rather than waited on forever; and it gets at least 100 ms, so
  // that a deadline that has just passed still reads a key that is there.
  Deadline bound = deadline.never() ? Deadline::after(kDefaultOpTimeoutSec) : deadline;
  if (bound.remainingMillis(kMinRequestMs) < kMinRequestMs) bound = Deadline::after(kMinRequestMs / 1000.0);
  int pauseMs = 10;
  std::string last;
  std::lock_guard<std::mutex> lock(mu_);
  bool loggedInAgain = false;
  for (int attempt = 0;; ++attempt) {
    if (!credentials_.user.empty() && token_.empty()) BRAID_RETURN_IF_ERROR(authenticate(bound));
    std::string reply;
    int status = 0;
    bool sent = false, reused = false;
    if (interrupted_.load()) return Status(Code::kAborted, "the etcd store's client was interrupted");
    Status s = exchange(path, body, bound, &reply, &status, &sent, &reused, streamDone);
    const auto& ep = url_.endpoints[endpoint_];
    const std::string at = "etcd at " + ep.first + ":" + std::to_string(ep.second);
    if (s.isOk()) {
      if (status == 200) return reply;
      // The gateway's errors: {"error": "...", "code": N, "message": "..."}.
      std::string msg = printable(reply, 300);
      auto v = topology::parseJson(reply, at);
      if (v.isOk() && v.value().isObject()) {
        const JsonValue* m = v.value().find("message");
        if (!m) m = v.value().find("error");
        if (m && m->isString()) msg = m->stringValue();
      }
      // A token etcd no longer knows (simple tokens expire after 5 idle minutes; a restart
      // forgets them all): log in again, once, and ask again. Nothing was done.
      if (status == 401 && !credentials_.user.empty() && !loggedInAgain &&
          msg.find("auth token") != std::string::npos) {
        loggedInAgain = true;
        token_.clear();
        continue;
      }
      if (status == 401 || msg.find("user name is empty") != std::string::npos ||
          msg.find("permission denied") != std::string::npos)
        return Status(Code::kInvalidArgument,
                      at + " refused " + path + " (HTTP " + std::to_string(status) + ": " + msg + ")" +
                          (credentials_.user.empty() ? "; this cluster has authentication on: set BRAID_ETCD_USER"
                                                     : "; user '" + credentials_.user + "'"));
      // A member without a leader (an election under way) answers 503: worth asking again.
      const bool transient = status == 503 || msg.find("leader changed") != std::string::npos ||
                             msg.find("no leader") != std::string::npos;
      // etcd refuses requests over --max-request-bytes ("request is too large"), its gRPC
      // gateway those over 2 MiB ("received message larger than max").
      const bool tooLarge = msg.find("too large") != std::string::npos || msg.find("larger than max") != std::string::npos;
      const Code code = tooLarge ? Code::kInvalidArgument : Code::kRemoteError;
      if (!transient || tooLarge || bound.expired())
        return Status(code, at + " answered " + path + " with HTTP " + std::to_string(status) + ": " + msg);
      last = "HTTP " + std::to_string(status) + ": " + msg;
    } else {
      dropConnection();
      // Settings that cannot work (a certificate file missing, a server certificate that
      // does not verify) are not worth asking again.
      if (s.code() == Code::kInvalidArgument) return Status(Code::kInvalidArgument, at + ": " + s.message());
      // A write that may have reached etcd is not repeated, except on a kept-alive
      // connection that the server had closed before this request (nothing came back):
      // etcd never saw it.
      if (sent && !retryAfterSend && !(reused && s.message() == "connection closed without a reply"))
        return Status(Code::kRemoteError, at + ": " + path + " failed after it was sent (" + s.message() +
                                              "); it may or may not have taken effect");
      last = at + ": " + s.message();
      if (s.code() == Code::kTimeout && bound.expired())
        return Status(Code::kTimeout, at + " did not answer " + path + " in time (" + s.message() + ")");
      // The next endpoint, when there are several: a member that fails may be down.
      if (url_.endpoints.size() > 1 && !(reused && !sent)) endpoint_ = (endpoint_ + 1) % url_.endpoints.size();
      if (reused && attempt == 0) continue;  // a stale kept-alive connection: at once
    }
    if (bound.expired()) {
      std::string all;
      for (const auto& e : url_.endpoints) all += (all.empty() ? "" : ", ") + e.first + ":" + std::to_string(e.second);
      return Status(Code::kTimeout, "the etcd store (" + all + ") did not answer " + path + " in time (last: " + last + ")");
    }
    BRAID_TRACE("etcd store: %s: %s; asking again", path, last.c_str());
    usleep(static_cast<useconds_t>(std::max(1, bound.remainingMillis(pauseMs))) * 1000);
    pauseMs = std::min(pauseMs * 2, kMaxReconnectPauseMs);
  }
}

namespace {

// JSON's string form of `s` (quotes, backslashes and control characters escaped).
std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

Status EtcdStore::authenticate(Deadline deadline) {
  const auto& ep = url_.endpoints[endpoint_];
  const std::string at = "etcd at " + ep.first + ":" + std::to_string(ep.second);
  std::string reply;
  int status = 0;
  bool sent = false, reused = false;
  Status s = exchange("/v3/auth/authenticate",
                      "{\"name\":" + jsonString(credentials_.user) + ",\"password\":" + jsonString(credentials_.password) +
                          "}",
                      deadline, &reply, &status, &sent, &reused);
  if (!s.isOk()) {
    dropConnection();
    return Status(s.code() == Code::kTimeout ? Code::kTimeout : Code::kRemoteError,
                  at + ": logging in as '" + credentials_.user + "' failed: " + s.message());
  }
  auto v = topology::parseJson(reply, at);
  const JsonValue* token = v.isOk() && v.value().isObject() ? v.value().find("token") : nullptr;
  if (status != 200 || !token || !token->isString() || token->stringValue().empty()) {
    std::string msg = printable(reply, 300);
    if (v.isOk() && v.value().isObject()) {
      const JsonValue* m = v.value().find("message");
      if (m && m->isString()) msg = m->stringValue();
    }
    return Status(Code::kInvalidArgument, at + " did not let '" + credentials_.user + "' log in (HTTP " +
                                              std::to_string(status) + ": " + msg + "; BRAID_ETCD_USER)");
  }
  token_ = token->stringValue();
  return Status::ok();
}

StatusOr<EtcdStore::Kv> EtcdStore::failureRead(const JsonValue& reply, const char* what) const {
  const JsonValue* rs = reply.find("responses");
  const JsonValue* range =
      rs && rs->isArray() && rs->items().size() == 1 ? rs->items()[0].find("response_range") : nullptr;
  if (!range)
    return Status(Code::kRemoteError, where() + " answered a failed " + what + " transaction without its read");
  Kv kv;
  kvFrom(*range, true, &kv.value, &kv.present, &kv.modRevision);
  return kv;
}

StatusOr<EtcdStore::Kv> EtcdStore::read(const std::string& key, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/range", rangeBody(fullKey(key), false), deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  Kv kv;
  kvFrom(v, true, &kv.value, &kv.present, &kv.modRevision);
  return kv;
}

Status EtcdStore::readMany(const std::vector<std::string>& keys, bool values, Deadline deadline,
                           std::vector<Kv>* out, int64_t* revision) {
  out->assign(keys.size(), Kv{});
  for (size_t first = 0; first < keys.size(); first += kKeysPerTxn) {
    const size_t n = std::min(kKeysPerTxn, keys.size() - first);
    std::string body = "{\"success\":[";
    for (size_t i = 0; i < n; ++i) {
      const std::string k = fullKey(keys[first + i]);
      body += (i ? "," : "") + rangeOp(k, !values) + "," + rangeOp(closeValueKey(k), !values) + "," +
              rangeOp(closeMarkerKey(k), true);
    }
    body += "]}";
    BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/txn", body, deadline, true));
    BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
    if (revision) {
      const JsonValue* header = v.find("header");
      *revision = header ? intField(*header, "revision") : 0;
    }
    const JsonValue* rs = v.find("responses");
    if (!rs || !rs->isArray() || rs->items().size() != 3 * n)
      return Status(Code::kRemoteError, where() + " answered a transaction of " + std::to_string(3 * n) +
                                            " reads with another number of replies");
    for (size_t i = 0; i < n; ++i) {
      Kv got[3];
      for (int j = 0; j < 3; ++j) {
        const JsonValue* range = rs->items()[3 * i + j].find("response_range");
        if (!range) return Status(Code::kRemoteError, where() + " answered a read with something else");
        kvFrom(*range, values && j < 2, &got[j].value, &got[j].present, &got[j].modRevision);
      }
      // The key itself; else setOnClose's value once its marker is gone with the lease.
      Kv& kv = (*out)[first + i];
      if (got[0].present) kv = std::move(got[0]);
      else if (got[1].present && !got[2].present) kv = std::move(got[1]);
    }
  }
  return Status::ok();
}

Status EtcdStore::set(const std::string& key, const std::string& value, Deadline deadline) {
  const std::string body = "{\"key\":\"" + base64(fullKey(key)) + "\",\"value\":\"" + base64(value) + "\"}";
  auto r = call("/v3/kv/put", body, deadline, true);
  return r.isOk() ? Status::ok() : r.status().withContext("setting '" + key + "'");
}

StatusOr<std::string> EtcdStore::get(const std::string& key, Deadline deadline) {
  const Deadline bound = deadline.never() ? Deadline::after(kDefaultOpTimeoutSec) : deadline;
  int pauseUs = kFirstPauseUs;
  // A key that comes soon is polled for; one that keeps the caller waiting longer is
  // watched, so that many waiting processes (late ranks, the live view's responders, which
  // wait a minute at a time) do not ask etcd 50 times a second each. Polling again where
  // the watch cannot be kept.
  const Deadline watchFrom = Deadline::after(kPollBeforeWatchSec);
  bool watch = true;
  for (;;) {
    if (interrupted_.load()) return Status(Code::kAborted, "the etcd store's client was interrupted");
    std::vector<Kv> kvs;
    int64_t revision = 0;
    Status r = readMany({key}, true, bound, &kvs, &revision);
    if (r.code() == Code::kTimeout) return Status(Code::kTimeout, "key '" + key + "' was not read in time: " + r.message());
    BRAID_RETURN_IF_ERROR(r);
    if (kvs[0].present) return kvs[0].value;
    if (bound.expired()) return Status(Code::kTimeout, "key '" + key + "' was not set in time (" + where() + ")");
    if (watch && watchFrom.expired() && revision > 0) {
      Status w = watchChange(key, revision, bound);
      if (w.isOk()) continue;
      if (w.code() == Code::kAborted) return w;
      if (w.code() == Code::kTimeout && bound.expired())
        return Status(Code::kTimeout, "key '" + key + "' was not set in time (" + where() + ")");
      BRAID_TRACE("etcd store: watching '%s': %s; polling instead", key.c_str(), w.message().c_str());
      watch = false;
    }
    usleep(static_cast<useconds_t>(std::min<int64_t>(pauseUs, bound.remainingMillis(1000) * 1000 + 1)));
    pauseUs = std::min(pauseUs * 2, kMaxPauseUs);
  }
}

Status EtcdStore::watchChange(const std::string& key, int64_t afterRevision, Deadline deadline) {
  std::unique_ptr<EtcdStore> w(new EtcdStore(url_, credentials_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    w->endpoint_ = endpoint_;
  }
  {
    std::lock_guard<std::mutex> lock(watchMu_);
    if (interrupted_.load()) return Status(Code::kAborted, "the etcd store's client was interrupted");
    watcher_ = w.get();
  }
  const std::string k = fullKey(key);
  const std::string body = "{\"create_request\":{\"key\":\"" + base64(k) + "\",\"range_end\":\"" +
                           base64(k + std::string(1, '\x01')) + "\",\"start_revision\":\"" +
                           std::to_string(afterRevision + 1) + "\"}}";
  // The stream: one JSON object per line, {"result": {...}}. The first says the watch was
  // created; the next with "events" is the change. A watch etcd cancels (its revision
  // compacted away) ends it without one. Read from its start each time (a few short lines):
  // a request call() sends again starts a new stream.
  bool changed = false;
  std::string why;
  const StreamDone done = [&](const std::string& text) {
    for (size_t parsed = 0, eol; (eol = text.find('\n', parsed)) != std::string::npos; parsed = eol + 1) {
      auto v = topology::parseJson(text.substr(parsed, eol - parsed), "etcd watch");
      const JsonValue* result = v.isOk() && v.value().isObject() ? v.value().find("result") : nullptr;
      if (!result) {
        why = "an unexpected watch message: '" + printable(text.substr(parsed, eol - parsed)) + "'";
        return true;
      }
      const JsonValue* events = result->find("events");
      if (events && events->isArray() && !events->items().empty()) {
        changed = true;
        return true;
      }
      const JsonValue* canceled = result->find("canceled");
      if ((canceled && canceled->isBool() && canceled->boolValue()) || intField(*result, "compact_revision") > 0) {
        why = "etcd canceled the watch";
        return true;
      }
    }
    return false;
  };
  auto r = w->call("/v3/watch", body, deadline, true, &done);
  {
    std::lock_guard<std::mutex> lock(watchMu_);
    watcher_ = nullptr;
  }
  if (!r.isOk()) return r.status();
  if (changed) return Status::ok();
  return Status(Code::kRemoteError, why.empty() ? "the watch ended without a change" : why);
}

// The counter `key` and the addOnClose sums that have fired (their client's marker gone),
// read in one transaction.
StatusOr<EtcdStore::Counter> EtcdStore::readCounter(const std::string& key, Deadline deadline) {
  const std::string k = fullKey(key);
  const std::string p = countPrefix(k);
  const std::string body = "{\"success\":[" + rangeOp(k, false) + ",{\"request_range\":{\"key\":\"" + base64(p) +
                           "\",\"range_end\":\"" + base64(prefixEnd(p)) + "\"}}]}";
  BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/txn", body, deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  const JsonValue* rs = v.find("responses");
  const JsonValue* own = rs && rs->isArray() && rs->items().size() == 2 ? rs->items()[0].find("response_range") : nullptr;
  const JsonValue* sums = own ? rs->items()[1].find("response_range") : nullptr;
  if (!sums) return Status(Code::kRemoteError, where() + " answered a transaction of 2 reads with something else");
  Counter c;
  kvFrom(*own, true, &c.kv.value, &c.kv.present, &c.kv.modRevision);
  std::map<std::string, std::pair<std::string, int64_t>> sumByLease;  // lease -> (value, mod revision)
  std::set<std::string> alive;
  if (const JsonValue* kvs = sums->find("kvs"); kvs && kvs->isArray()) {
    for (const JsonValue& kv : kvs->items()) {
      const JsonValue* kb = kv.find("key");
      std::string name, value;
      if (!kb || !kb->isString() || !unbase64(kb->stringValue(), &name) || name.size() < p.size() + 2) continue;
      const std::string kind = name.substr(p.size(), 2), lease = name.substr(p.size() + 2);
      if (kind == "a:") {
        alive.insert(lease);
      } else if (kind == "d:") {
        if (const JsonValue* vb = kv.find("value"); vb && vb->isString()) unbase64(vb->stringValue(), &value);
        sumByLease[lease] = {value, intField(kv, "mod_revision")};
      }
    }
  }
  for (const auto& [lease, sum] : sumByLease) {
    int64_t n = 0;
    if (alive.count(lease) || !parseCounter(sum.first, &n)) continue;
    c.fired += n;
    c.firedKeys.push_back({p + "d:" + lease, sum.second});
    c.firedMarkers.push_back(p + "a:" + lease);
  }
  return c;
}

StatusOr<int64_t> EtcdStore::add(const std::string& key, int64_t delta, Deadline deadline) {
  const Deadline bound = deadline.never() ? Deadline::after(kDefaultOpTimeoutSec) : deadline;
  for (;;) {
    BRAID_ASSIGN_OR_RETURN(Counter c, readCounter(key, bound));
    const Kv& kv = c.kv;
    int64_t cur = 0;
    if (kv.present && !parseCounter(kv.value, &cur))
      return invalidArgument("add on key '" + key + "', which holds '" + printable(kv.value, 40) +
                             "', not an integer (" + where() + ")");
    // The fired sums of clients that are gone move into the counter in the same transaction,
    // which holds only if nothing read has changed since (and no marker came back).
    // A read (delta 0, nothing fired) writes nothing: joining ranks poll a counter so.
    if (delta == 0 && c.fired == 0 && kv.present) return cur;
    const int64_t next = cur + c.fired + delta;
    const std::string k64 = base64(fullKey(key));
    std::string compare =
        kv.present ? "{\"key\":\"" + k64 + "\",\"target\":\"MOD\",\"result\":\"EQUAL\",\"mod_revision\":\"" +
                         std::to_string(kv.modRevision) + "\"}"
                   : "{\"key\":\"" + k64 + "\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}";
    std::string success = putOp(fullKey(key), std::to_string(next));
    for (size_t i = 0; i < c.firedKeys.size(); ++i) {
      compare += ",{\"key\":\"" + base64(c.firedKeys[i].first) +
                 "\",\"target\":\"MOD\",\"result\":\"EQUAL\",\"mod_revision\":\"" +
                 std::to_string(c.firedKeys[i].second) + "\"},{\"key\":\"" + base64(c.firedMarkers[i]) +
                 "\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}";
      success += ",{\"request_delete_range\":" + rangeBody(c.firedKeys[i].first, false) + "}";
    }
    const std::string body = "{\"compare\":[" + compare + "],\"success\":[" + success + "]}";
    BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/txn", body, bound, false));
    BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
    const JsonValue* ok = v.find("succeeded");
    if (ok && ok->isBool() && ok->boolValue()) return next;
    // Another writer came first: read again.
    if (bound.expired()) return Status(Code::kTimeout, "add on key '" + key + "' kept losing races until the deadline");
  }
}

Status EtcdStore::addOnClose(const std::string& key, int64_t delta, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(ensureLease(deadline).withContext("addOnClose('" + key + "')"));
  int64_t lease;
  {
    std::lock_guard<std::mutex> lock(leaseMu_);
    lease = leaseId_;
  }
  std::lock_guard<std::mutex> lock(countMu_);
  int64_t& sum = countSums_[key];
  const int64_t next = sum + delta;
  const std::string k = fullKey(key);
  // Back to 0: nothing to add at this client's end, so neither key is kept.
  const std::string body =
      next == 0 ? "{\"success\":[{\"request_delete_range\":" + rangeBody(countSumKey(k, lease), false) +
                      "},{\"request_delete_range\":" + rangeBody(countMarkerKey(k, lease), false) + "}]}"
                : "{\"success\":[" + putOp(countSumKey(k, lease), std::to_string(next)) +
                      ",{\"request_put\":{\"key\":\"" + base64(countMarkerKey(k, lease)) +
                      "\",\"value\":\"\",\"lease\":\"" + std::to_string(lease) + "\"}}]}";
  auto r = call("/v3/kv/txn", body, deadline, true);
  if (!r.isOk()) return r.status().withContext("addOnClose('" + key + "')");
  sum = next;
  if (next == 0) countSums_.erase(key);
  return Status::ok();
}

Status EtcdStore::settleOnClose(const std::string& key, Deadline deadline) {
  const std::string k = fullKey(key);
  BRAID_ASSIGN_OR_RETURN(
      std::string r, call("/v3/kv/txn",
                          "{\"success\":[" + rangeOp(k, true) + "," + rangeOp(closeValueKey(k), false) + "," +
                              rangeOp(closeMarkerKey(k), true) + "]}",
                          deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  const JsonValue* rs = v.find("responses");
  if (!rs || !rs->isArray() || rs->items().size() != 3)
    return Status(Code::kRemoteError, where() + " answered a transaction of 3 reads with another number of replies");
  Kv got[3];
  for (int j = 0; j < 3; ++j) {
    const JsonValue* range = rs->items()[j].find("response_range");
    if (!range) return Status(Code::kRemoteError, where() + " answered a read with something else");
    kvFrom(*range, j == 1, &got[j].value, &got[j].present, &got[j].modRevision);
  }
  if (got[0].present || !got[1].present || got[2].present) return Status::ok();
  // Fired: write the value into the key itself (if it is still absent and the marker has
  // not come back), as a TCP store would have.
  const auto absent = [](const std::string& fk) {
    return "{\"key\":\"" + base64(fk) + "\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}";
  };
  const std::string body = "{\"compare\":[" + absent(k) + "," + absent(closeMarkerKey(k)) + "],\"success\":[" +
                           putOp(k, got[1].value) + ",{\"request_delete_range\":" +
                           rangeBody(closeValueKey(k), false) + "}]}";
  return call("/v3/kv/txn", body, deadline, true).status();
}

StatusOr<std::string> EtcdStore::compareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, Deadline deadline) {
  // A key set by a client's end (setOnClose) compares as what it reads as.
  BRAID_RETURN_IF_ERROR(settleOnClose(key, deadline));
  const std::string k64 = base64(fullKey(key));
  // An absent key counts as holding "": for expected "" the key must not exist yet, or
  // exist holding "" (the second transaction).
  std::vector<std::string> compares;
  if (expected.empty())
    compares.push_back("{\"key\":\"" + k64 + "\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}");
  compares.push_back("{\"key\":\"" + k64 + "\",\"target\":\"VALUE\",\"result\":\"EQUAL\",\"value\":\"" +
                     base64(expected) + "\"}");
  std::string current;
  for (const std::string& c : compares) {
    const std::string body = "{\"compare\":[" + c + "],\"success\":[" + putOp(fullKey(key), desired) + "],\"failure\":[" +
                             rangeOp(fullKey(key), false) + "]}";
    BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/txn", body, deadline, true));
    BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
    const JsonValue* ok = v.find("succeeded");
    if (ok && ok->isBool() && ok->boolValue()) return desired;
    BRAID_ASSIGN_OR_RETURN(Kv kv, failureRead(v, "compare-and-set"));
    current = kv.value;
    // Absent after a failed CREATE comparison cannot be; present and not "": no match.
    if (!kv.present || !current.empty()) return current;
  }
  return current;
}

Status EtcdStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  auto v = multiGet(keys, deadline);
  return v.isOk() ? Status::ok() : v.status();
}

StatusOr<bool> EtcdStore::check(const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<Kv> kvs;
  BRAID_RETURN_IF_ERROR(readMany(keys, false, deadline, &kvs));
  for (const Kv& kv : kvs)
    if (!kv.present) return false;
  return true;
}

StatusOr<bool> EtcdStore::deleteKey(const std::string& key, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/deleterange", rangeBody(fullKey(key), false), deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  return intField(v, "deleted") > 0;
}

StatusOr<std::vector<std::string>> EtcdStore::multiGet(const std::vector<std::string>& keys, Deadline deadline) {
  const Deadline bound = deadline.never() ? Deadline::after(kDefaultOpTimeoutSec) : deadline;
  std::vector<std::string> values(keys.size());
  std::vector<size_t> missing(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) missing[i] = i;
  int pauseUs = kFirstPauseUs;
  for (;;) {
    std::vector<std::string> ask;
    for (size_t i : missing) ask.push_back(keys[i]);
    std::vector<Kv> kvs;
    Status r = readMany(ask, true, bound, &kvs);
    if (r.code() == Code::kTimeout)
      return Status(Code::kTimeout, "key '" + ask[0] + "' was not read in time: " + r.message());
    BRAID_RETURN_IF_ERROR(r);
    std::vector<size_t> still;
    for (size_t j = 0; j < missing.size(); ++j) {
      if (kvs[j].present)
        values[missing[j]] = std::move(kvs[j].value);
      else
        still.push_back(missing[j]);
    }
    missing.swap(still);
    if (missing.empty()) return values;
    if (bound.expired())
      return Status(Code::kTimeout, "key '" + keys[missing[0]] + "' was not set in time (" + where() + ")");
    usleep(static_cast<useconds_t>(std::min<int64_t>(pauseUs, bound.remainingMillis(1000) * 1000 + 1)));
    pauseUs = std::min(pauseUs * 2, kMaxPauseUs);
  }
}

StatusOr<int64_t> EtcdStore::deletePrefix(const std::string& prefix, Deadline deadline) {
  const std::string k = fullKey(prefix);
  const std::string body = "{\"key\":\"" + base64(k) + "\",\"range_end\":\"" + base64(prefixEnd(k)) + "\"}";
  BRAID_ASSIGN_OR_RETURN(std::string r, call("/v3/kv/deleterange", body, deadline, true));
  BRAID_ASSIGN_OR_RETURN(JsonValue v, parseReply(r, where()));
  return intField(v, "deleted");
}

}  // namespace braid::bootstrap
