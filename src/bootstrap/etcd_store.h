#pragma once
// A store kept in an etcd cluster (BRAID_STORE=etcd://host:port[,host:port...]/prefix), the
// store TorchElastic and many clusters already run. Unlike a store that rank 0 serves, it
// outlives every rank, so survivors can still agree, shrink and grow after any one of them
// is lost.
//
// It speaks etcd's v3 API through the JSON gateway that every etcd server since 3.4 serves
// on its client port (POST /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/kv/deleterange; keys
// and values base64). One keep-alive HTTP/1.1 connection per store, to one endpoint at a
// time; a connection that fails moves to the next endpoint of the list. Keys live under
// `prefix` + "/", which names the job (as torchrun's --rdzv-id does): two jobs that share a
// prefix share keys.
//
// How each operation maps onto etcd:
//   set          put
//   get, wait,   range requests, repeated with a growing pause (1 ms up to 20 ms) until
//   multiGet     the keys exist: etcd has no blocking get, and its watch would need a
//                streaming reply for the same effect at rendezvous sizes
//   add          read, then a transaction that writes value+delta if the key's revision is
//                still the one read (absent: if it is still absent); repeated on a lost race
//   compareSet   a transaction comparing the value (an absent key: its creation revision 0)
//   check        one transaction of count-only ranges (42 keys per transaction)
//   setOnClose   a lease of BRAID_ETCD_LEASE_TTL seconds (default 10) that a thread of this
//                store keeps alive (a third of the TTL apart), and two keys beside `key`:
//                the value to show (no lease) and a marker on the lease. etcd deletes the
//                marker when the lease runs out (the process died, stopped, or lost its
//                network) or is revoked (this store destroyed); every read of `key` (get,
//                wait, check, multiGet) finds it holding the value from then on, unless
//                `key` itself was set (compareSet first writes it into `key`).
//                cancelOnClose deletes both.
//   addOnClose   the same lease, and two keys beside the counter per client: the sum of
//                its deltas (no lease) and a marker on the lease. add() reads the counter
//                and every such sum in one transaction, and moves the sums whose marker is
//                gone into the counter in the same transaction as its own delta, so a
//                client that died is counted once, by whichever add comes first.
// Requests that write are sent once on a fresh failure of the connection (an add that
// reached etcd and lost its reply must not add twice); reads and puts are retried.
//
// A cluster that asks for more: `etcds://` speaks TLS to its https endpoints, checking
// their certificates against BRAID_ETCD_CACERT (else the system's trust store) and showing
// BRAID_ETCD_CERT/BRAID_ETCD_KEY where etcd asks for client certificates
// (--client-cert-auth); BRAID_ETCD_USER ("name:password", or "name" with
// BRAID_ETCD_PASSWORD_FILE) logs in to a cluster with authentication enabled
// (/v3/auth/authenticate) and sends its token with every request, logging in again when
// etcd says the token is no longer valid.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/store.h"
#include "common/tls.h"

namespace braid::topology {
class JsonValue;
}

namespace braid::bootstrap {

struct EtcdUrl {
  std::vector<std::pair<std::string, int>> endpoints;  // host (IPv4 or name), port
  std::string prefix;                                  // "/jobs/run7": starts with '/', no trailing '/'
  bool tls = false;                                    // etcds://: the endpoints speak https
};

// Parses "etcd://host:port[,host:port...]/prefix" (or etcds://, TLS). `what` names where
// the value came from (an environment variable) in the kInvalidArgument message. The prefix
// is required and keeps to [A-Za-z0-9._/-]. Pure.
StatusOr<EtcdUrl> parseEtcdUrl(const std::string& what, const std::string& value);
// The URL again ("etcd://host:port[,host:port...]/prefix"): what parseEtcdUrl reads. Pure.
std::string formatEtcdUrl(const EtcdUrl& url);

// What a secured cluster asks of its clients: certificates for TLS (used with etcds://) and
// a user to log in as (empty: none).
struct EtcdCredentials {
  CertTlsOptions tls;
  std::string user;
  std::string password;
  // From BRAID_ETCD_CACERT, BRAID_ETCD_CERT, BRAID_ETCD_KEY, BRAID_ETCD_USER and
  // BRAID_ETCD_PASSWORD_FILE; kInvalidArgument naming the variable when one is unusable.
  static StatusOr<EtcdCredentials> fromEnv();
};

class EtcdStore : public Store {
 public:
  // Bounds requests whose deadline never expires, as TcpStoreClient does.
  static constexpr double kDefaultOpTimeoutSec = 30;
  // Replies longer than this are refused.
  static constexpr size_t kMaxReplyBytes = size_t(256) << 20;

  // Connects to the first endpoint that answers and checks that it speaks etcd's v3 JSON
  // API (a range request on the prefix). Endpoints that refuse are retried, in turn, until
  // `deadline`; then kTimeout naming every endpoint and the last failure. Blocks.
  static StatusOr<std::unique_ptr<EtcdStore>> connect(const EtcdUrl& url, Deadline deadline,
                                                      EtcdCredentials credentials = {});
  // The same for the URL in BRAID_STORE (`braidStore`), with the run's tag
  // (LaunchEnv::jobTag) appended to its prefix when there is one, so that runs sharing a
  // prefix do not meet each other's keys, and the credentials of EtcdCredentials::fromEnv.
  static StatusOr<std::unique_ptr<EtcdStore>> connectForJob(const std::string& braidStore, const std::string& jobTag,
                                                            Deadline deadline);

  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  Status set(const std::string& key, const std::string& value, Deadline deadline = Deadline()) override;
  StatusOr<std::string> get(const std::string& key, Deadline deadline) override;
  StatusOr<int64_t> add(const std::string& key, int64_t delta, Deadline deadline = Deadline()) override;
  StatusOr<std::string> compareSet(const std::string& key, const std::string& expected, const std::string& desired,
                                   Deadline deadline = Deadline()) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  StatusOr<bool> check(const std::vector<std::string>& keys, Deadline deadline = Deadline()) override;
  StatusOr<bool> deleteKey(const std::string& key, Deadline deadline = Deadline()) override;
  StatusOr<std::vector<std::string>> multiGet(const std::vector<std::string>& keys, Deadline deadline) override;
  Status setOnClose(const std::string& key, const std::string& value, Deadline deadline = Deadline()) override;
  StatusOr<bool> cancelOnClose(const std::string& key, Deadline deadline = Deadline()) override;
  Status addOnClose(const std::string& key, int64_t delta, Deadline deadline = Deadline()) override;
  // Ends a call blocked on this client (a get() parked in a watch included) with kAborted,
  // and fails every later one. Any thread.
  void interrupt() override;

  // The lease's time to live, from BRAID_ETCD_LEASE_TTL (whole seconds, 2 to 3600; default
  // 10): how long after a process dies its setOnClose keys read as set. kInvalidArgument
  // naming the variable when it is not such a number (connect() fails with it).
  static StatusOr<int> leaseTtlFromEnv();

  // Removes every key that starts with `prefix` (in the store's namespace); returns how
  // many there were. For a job's last rank to leave nothing behind.
  StatusOr<int64_t> deletePrefix(const std::string& prefix, Deadline deadline = Deadline());

  // The URL it was made from, for messages and for new processes to find the same store.
  const EtcdUrl& url() const { return url_; }
  // "etcd at host:port" of the endpoint in use now, for messages. Thread-safe.
  std::string where() const;

 private:
  struct Kv {
    bool present = false;
    std::string value;
    int64_t modRevision = 0;
  };

  // A streamed reply (a watch) is read until this returns true for the body so far, and the
  // connection is then dropped (the stream never ends by itself).
  using StreamDone = std::function<bool(const std::string&)>;

  EtcdStore(EtcdUrl url, EtcdCredentials credentials) : url_(std::move(url)), credentials_(std::move(credentials)) {}
  // Logs in as credentials_.user and keeps the token for the requests that follow.
  Status authenticate(Deadline deadline);
  // POSTs `body` to `path` and returns the parsed reply body (a JSON object as text).
  // `retryAfterSend`: whether the request may be sent again once it may have reached etcd.
  StatusOr<std::string> call(const char* path, const std::string& body, Deadline deadline, bool retryAfterSend,
                             const StreamDone* streamDone = nullptr);
  // Waits, on a connection of its own, until a key in [`key`, `key` + "\x01") (the key and
  // its setOnClose/addOnClose companions) changes after revision `afterRevision`: ok once one
  // did, kTimeout at the deadline, another error when the watch cannot be kept (the caller
  // then polls). A wake-up only: the caller reads again.
  Status watchChange(const std::string& key, int64_t afterRevision, Deadline deadline);
  // One request on the current connection (made if there is none). `sent` says whether any
  // byte of the request left; `reused` whether the connection carried an earlier request.
  Status exchange(const char* path, const std::string& body, Deadline deadline, std::string* reply, int* httpStatus,
                  bool* sent, bool* reused, const StreamDone* streamDone = nullptr);
  void dropConnection();
  std::string fullKey(const std::string& key) const { return url_.prefix + "/" + key; }
  StatusOr<Kv> read(const std::string& key, Deadline deadline);
  // A counter and the addOnClose sums of clients that are gone, not yet added into it: their
  // keys with the revisions read, and their (absent) markers.
  struct Counter {
    Kv kv;
    int64_t fired = 0;
    std::vector<std::pair<std::string, int64_t>> firedKeys;
    std::vector<std::string> firedMarkers;
  };
  StatusOr<Counter> readCounter(const std::string& key, Deadline deadline);
  // The key as the failure branch of a transaction read it (add, compareSet).
  StatusOr<Kv> failureRead(const topology::JsonValue& reply, const char* what) const;
  // For each key, whether it exists (and its value when `values`), in one round trip per 64.
  // `revision`, when given: the store's revision the (last) read saw.
  Status readMany(const std::vector<std::string>& keys, bool values, Deadline deadline, std::vector<Kv>* out,
                  int64_t* revision = nullptr);

  EtcdUrl url_;
  EtcdCredentials credentials_;
  mutable std::mutex mu_;  // the connection; one request at a time
  std::mutex fdMu_;        // orders interrupt()'s shutdown against fd_'s close and replacement
  std::atomic<bool> interrupted_{false};
  std::mutex watchMu_;
  EtcdStore* watcher_ = nullptr;  // under watchMu_: watchChange's connection, for interrupt()
  int fd_ = -1;
  std::unique_ptr<TlsStream> tls_;  // etcds://: the session on fd_
  std::string token_;                // from authenticate(), sent with every request
  size_t endpoint_ = 0;
  bool usedBefore_ = false;

  // If setOnClose(key)'s client is gone and `key` itself is absent, writes the value into
  // `key` (and drops the registration), so that a compareSet sees what reads see.
  Status settleOnClose(const std::string& key, Deadline deadline);
  // setOnClose's lease: granted on first use, kept alive by keeper_ until the destructor
  // revokes it.
  Status ensureLease(Deadline deadline);
  void keepAlive();
  std::mutex leaseMu_;
  std::condition_variable leaseCv_;
  int64_t leaseId_ = 0;  // 0: none yet
  int leaseTtl_ = 0;  // asked for (BRAID_ETCD_LEASE_TTL), then as etcd granted it
  bool stopping_ = false;
  // addOnClose: this client's sum per key, as written beside it.
  std::mutex countMu_;
  std::map<std::string, int64_t> countSums_;
  bool leaseLost_ = false;
  std::thread keeper_;
};

}  // namespace braid::bootstrap
