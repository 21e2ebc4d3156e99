#pragma once
// A client for the HTTP key-value server that horovodrun runs for its gloo rendezvous
// (HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT): PUT and GET on /<scope>/<key>, 404 for a key that is
// not set yet. braid only passes its own store's address through it, from rank 0 to the
// others, so the client stays small: one blocking connection per request, HTTP/1.0 (the
// server closes after each reply), a bounded reply, and no keep-alive or redirects.

#include <netinet/in.h>

#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace braid::bootstrap {

// `host` (an IPv4 literal, else resolved to its first IPv4 address) and `port` as a
// sockaddr_in; kSystemError naming the host when it cannot be resolved.
Status resolveIpv4(const std::string& host, int port, sockaddr_in* out);

class HttpKvClient {
 public:
  // Replies longer than this are refused: the values braid exchanges are a few dozen bytes.
  static constexpr size_t kMaxReplyBytes = 64 * 1024;

  // Talks to the server at `host` (IPv4 address or name) : `port`. Contacts nothing yet.
  HttpKvClient(std::string host, int port);

  // Stores `value` under /`scope`/`key`. While the server cannot be reached (refused, reset,
  // not resolvable yet) or answers 408, retries with backoff until `deadline`, then
  // kTimeout naming the server and the last failure; any other reply than 200 fails at once
  // with kRemoteError quoting it. kInvalidArgument for a scope or key outside
  // [A-Za-z0-9._:-]. Blocks; thread-safe (no shared state).
  Status put(const std::string& scope, const std::string& key, const std::string& value, Deadline deadline);

  // The value under /`scope`/`key`, asking again while the server answers 404 or cannot be
  // reached, until `deadline` (then kTimeout naming the key, the server and what it last
  // answered). Other replies fail as for put(). Blocks; thread-safe.
  StatusOr<std::string> waitGet(const std::string& scope, const std::string& key, Deadline deadline);

  // One GET of /`scope`/`key` that waits for its answer until `deadline`, for a server that
  // holds the request until it can answer (horovodrun's elastic driver answers
  // rank_and_size only once every worker has asked, and counts each request it gets, so a
  // request is sent again only when connecting failed). Any reply but 200 is kRemoteError
  // quoting it; no reply by `deadline` is kTimeout. Blocks; thread-safe.
  StatusOr<std::string> getOnce(const std::string& scope, const std::string& key, Deadline deadline);

  // The address of this host's interface that routes to the server (a UDP connect picks
  // the route; nothing is sent). Whoever can reach the server reaches this host there too,
  // which a host name from the launcher ("localhost") does not promise. kSystemError naming
  // the server if it cannot be resolved or routed to. Thread-safe.
  StatusOr<std::string> localAddress() const;

  // "host:port", for messages. Thread-safe.
  const std::string& address() const { return address_; }

 private:
  // The outcome of one request: `transient` failures (no connection, the connection cut
  // before a whole reply) may be retried; the others may not.
  struct Reply {
    int status = 0;
    std::string body;
  };
  // `capMs` bounds how long one request waits for its reply (and for connecting); `sent`,
  // when given, tells whether the request left before a failure.
  Status exchange(const std::string& method, const std::string& path, const std::string& body, Deadline deadline,
                  Reply* reply, bool* transient, int capMs, bool* sent = nullptr) const;
  // Polls `method` on `path` until a reply other than those `retryStatus` accepts, or
  // `deadline`; returns the final reply (200 only).
  StatusOr<Reply> retrying(const std::string& method, const std::string& path, const std::string& body,
                           Deadline deadline, int retryStatus) const;

  std::string host_;
  int port_ = 0;
  std::string address_;
};

}  // namespace braid::bootstrap
