#include "bootstrap/http_kv.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <strings.h>
#include <utility>

#include "common/log.h"

namespace braid::bootstrap {

namespace {

// One request never takes longer than this, whatever the caller's deadline: a server that
// accepted and then stalls is asked again rather than waited on forever.
constexpr int kRequestCapMs = 10000;
constexpr int kMaxBackoffMs = 250;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string errnoText(int err) { return std::strerror(err); }


// Scope and key go into the path unescaped, and Horovod's server splits the path on '/'
// into exactly two parts, so both keep to characters that need no escaping.
Status checkPathPart(const char* what, const std::string& s) {
  if (s.empty()) return invalidArgument(std::string("key-value ") + what + " is empty");
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == ':'))
      return invalidArgument(std::string("key-value ") + what + " '" + s + "' has a character outside [A-Za-z0-9._:-]");
  return Status::ok();
}

// The first line of what the server sent, made printable and short, for messages.
std::string firstLine(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\r' || c == '\n' || out.size() >= 80) break;
    out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return out;
}

}  // namespace

Status resolveIpv4(const std::string& host, int port, sockaddr_in* out) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1) return Status::ok();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    return Status(Code::kSystemError, "cannot resolve host '" + host + "': " +
                                          (rc == EAI_SYSTEM ? errnoText(errno) : std::string(gai_strerror(rc))));
  out->sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return Status::ok();
}

HttpKvClient::HttpKvClient(std::string host, int port)
    : host_(std::move(host)), port_(port), address_(host_ + ":" + std::to_string(port)) {}

Status HttpKvClient::exchange(const std::string& method, const std::string& path, const std::string& body,
                              Deadline deadline, Reply* reply, bool* transient, int capMs, bool* sent) const {
  *transient = true;
  if (sent) *sent = false;
  sockaddr_in sa;
  BRAID_RETURN_IF_ERROR(resolveIpv4(host_, port_, &sa));
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return systemError("socket", errno);
  // Blocking calls bounded by socket timeouts (connect honours SO_SNDTIMEO on Linux): one
  // request is short, and this keeps the client free of a poll loop.
  const int ms = std::max(1, deadline.remainingMillis(capMs));
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int rc;
  do rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) return Status(Code::kRemoteError, "connect: " + errnoText(errno == EINPROGRESS ? ETIMEDOUT : errno));

  std::string req = method + " " + path + " HTTP/1.0\r\nHost: " + address_ + "\r\nConnection: close\r\n";
  if (method != "GET") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    ssize_t n = ::send(fd.get(), req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status(Code::kRemoteError, "send: " + errnoText(errno));
    off += static_cast<size_t>(n);
  }
  if (sent) *sent = true;

  // HTTP/1.0: the reply ends where the server closes the connection.
  std::string in;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status(Code::kRemoteError, "receive: " + errnoText(errno == EAGAIN ? ETIMEDOUT : errno));
    if (n == 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (in.size() > kMaxReplyBytes) {
      *transient = false;
      return Status(Code::kRemoteError, "key-value server at " + address_ + " sent a reply to " + method + " " + path +
                                            " longer than " + std::to_string(kMaxReplyBytes) + " bytes");
    }
  }
  const size_t headEnd = in.find("\r\n\r\n");
  if (headEnd == std::string::npos)
    return Status(Code::kRemoteError, in.empty() ? "connection closed without a reply" : "reply cut before its end");

  int status = 0;
  int minor = 0;
  char sp = 0;
  if (std::sscanf(in.c_str(), "HTTP/1.%d %3d%c", &minor, &status, &sp) != 3 || sp != ' ' || status < 100 ||
      status > 599) {
    *transient = false;
    return Status(Code::kRemoteError, "key-value server at " + address_ + " did not answer " + method + " " + path +
                                          " in HTTP: '" + firstLine(in) + "'");
  }
  std::string payload = in.substr(headEnd + 4);
  // Content-Length, when given, must be met: fewer bytes means the connection was cut.
  for (size_t pos = in.find("\r\n"); pos < headEnd;) {
    const size_t next = in.find("\r\n", pos + 2);
    const std::string line = in.substr(pos + 2, next - pos - 2);
    static constexpr char kLen[] = "content-length:";
    if (line.size() > sizeof(kLen) - 1 && strncasecmp(line.c_str(), kLen, sizeof(kLen) - 1) == 0) {
      char* end = nullptr;
      unsigned long long len = std::strtoull(line.c_str() + sizeof(kLen) - 1, &end, 10);
      if (len > payload.size()) return Status(Code::kRemoteError, "reply body cut before its Content-Length");
      payload.resize(len);
    }
    pos = next;
  }
  reply->status = status;
  reply->body = std::move(payload);
  *transient = false;
  return Status::ok();
}

StatusOr<HttpKvClient::Reply> HttpKvClient::retrying(const std::string& method, const std::string& path,
                                                     const std::string& body, Deadline deadline,
                                                     int retryStatus) const {
  const int64_t t0 = nowNanos();
  int backoffMs = 10;
  std::string last;
  for (;;) {
    Reply r;
    bool transient = false;
    Status s = exchange(method, path, body, deadline, &r, &transient, kRequestCapMs);
    if (s.isOk()) {
      if (r.status == 200) return r;
      // 408 is Horovod's server giving up on a slow request body: worth another try.
      if (r.status != retryStatus && r.status != 408)
        return Status(Code::kRemoteError, "key-value server at " + address_ + " answered " + method + " " + path +
                                              " with HTTP " + std::to_string(r.status));
      last = "HTTP " + std::to_string(r.status) + (r.status == 404 ? " (not set yet)" : "");
    } else if (!transient) {
      return s;
    } else {
      last = s.message();
    }
    if (deadline.expired()) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.1f", (nowNanos() - t0) / 1e9);
      return Status(Code::kTimeout, method + " " + path + " at key-value server " + address_ + " did not succeed in " +
                                        secs + " s (last: " + last + ")");
    }
    BRAID_TRACE("key-value server at %s: %s %s: %s; asking again", address_.c_str(), method.c_str(), path.c_str(),
                last.c_str());
    usleep(static_cast<useconds_t>(std::max(1, deadline.remainingMillis(backoffMs))) * 1000);
    backoffMs = std::min(backoffMs * 2, kMaxBackoffMs);
  }
}

StatusOr<std::string> HttpKvClient::getOnce(const std::string& scope, const std::string& key, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(checkPathPart("scope", scope));
  BRAID_RETURN_IF_ERROR(checkPathPart("key", key));
  const std::string path = "/" + scope + "/" + key;
  const int64_t t0 = nowNanos();
  for (;;) {
    Reply r;
    bool transient = false, sent = false;
    Status s = exchange("GET", path, "", deadline, &r, &transient, std::numeric_limits<int>::max(), &sent);
    if (s.isOk()) {
      if (r.status == 200) return std::move(r.body);
      return Status(Code::kRemoteError,
                    "key-value server at " + address_ + " answered GET " + path + " with HTTP " + std::to_string(r.status));
    }
    if (sent || !transient || deadline.expired()) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.1f", (nowNanos() - t0) / 1e9);
      return Status(deadline.expired() ? Code::kTimeout : s.code(),
                    "GET " + path + " at key-value server " + address_ + " got no answer in " + secs + " s (" +
                        s.message() + ")");
    }
    usleep(static_cast<useconds_t>(std::max(1, deadline.remainingMillis(100))) * 1000);
  }
}

Status HttpKvClient::put(const std::string& scope, const std::string& key, const std::string& value,
                         Deadline deadline) {
  BRAID_RETURN_IF_ERROR(checkPathPart("scope", scope));
  BRAID_RETURN_IF_ERROR(checkPathPart("key", key));
  auto r = retrying("PUT", "/" + scope + "/" + key, value, deadline, 0);
  return r.isOk() ? Status::ok() : r.status();
}

StatusOr<std::string> HttpKvClient::waitGet(const std::string& scope, const std::string& key, Deadline deadline) {
  BRAID_RETURN_IF_ERROR(checkPathPart("scope", scope));
  BRAID_RETURN_IF_ERROR(checkPathPart("key", key));
  BRAID_ASSIGN_OR_RETURN(Reply r, retrying("GET", "/" + scope + "/" + key, "", deadline, 404));
  return std::move(r.body);
}

StatusOr<std::string> HttpKvClient::localAddress() const {
  sockaddr_in sa;
  Status rs = resolveIpv4(host_, port_, &sa);
  if (!rs.isOk()) return rs.withContext("key-value server at " + address_);
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return systemError("socket", errno);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return systemError("connect", errno).withContext("no route to the key-value server at " + address_);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) return systemError("getsockname", errno);
  char buf[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return std::string(buf);
}

}  // namespace braid::bootstrap
