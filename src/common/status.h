#pragma once
// Status and StatusOr: how every layer below src/api reports failure. No exceptions are
// thrown below the API; a Status carries a code, a message, and (for remote failures) the
// rank that failed, so the API can name it.

#include <cerrno>
#include <string>
#include <utility>

namespace braid {

enum class Code : int {
  kOk = 0,
  kInvalidArgument,
  kSystemError,
  kRemoteError,   // a peer died, closed its connection, or reported an error
  kTimeout,       // a deadline passed (BRAID_TIMEOUT, or a store wait)
  kAborted,       // the communicator was aborted locally or by a peer
  kInternal,
  kWouldBlock,    // transports only: retry after progress; never leaves the executor
  kInProgress,
  kRevoked,       // the communicator was revoked (on any rank): only shrink, split and destroy remain
};

const char* codeName(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string msg, int rank = -1)
      : code_(code), rank_(rank), msg_(msg.empty() ? nullptr : new std::string(std::move(msg))) {}
  Status(Code code, const char* msg, int rank = -1)
      : code_(code), rank_(rank), msg_(msg && *msg ? new std::string(msg) : nullptr) {}
  // A status without a message allocates nothing: a transport's "not yet" (kWouldBlock),
  // returned while a rank spins on a slot, costs two words.
  explicit Status(Code code) : code_(code) {}
  Status(const Status& o) : code_(o.code_), rank_(o.rank_), msg_(o.msg_ ? new std::string(*o.msg_) : nullptr) {}
  Status(Status&& o) noexcept : code_(o.code_), rank_(o.rank_), msg_(o.msg_) { o.msg_ = nullptr; }
  Status& operator=(const Status& o) {
    if (this != &o) {
      std::string* copy = o.msg_ ? new std::string(*o.msg_) : nullptr;
      if (msg_) freeMessage(msg_);
      msg_ = copy;
      code_ = o.code_;
      rank_ = o.rank_;
    }
    return *this;
  }
  Status& operator=(Status&& o) noexcept {
    if (this != &o) {
      std::string* old = msg_;
      code_ = o.code_;
      rank_ = o.rank_;
      msg_ = o.msg_;
      o.msg_ = nullptr;
      if (old) freeMessage(old);
    }
    return *this;
  }
  // Inline, a test and a branch; freeing a message (failures only) is out of line.
  ~Status() {
    if (__builtin_expect(msg_ != nullptr, 0)) freeMessage(msg_);
  }

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == Code::kOk; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return code_; }
  const std::string& message() const { return msg_ ? *msg_ : emptyMessage(); }
  // The rank a kRemoteError or kTimeout is about, or -1 when unknown.
  int rank() const { return rank_; }
  std::string toString() const;

  // Prefixes the message with context ("allreduce: ..."), keeping code and rank.
  Status withContext(const std::string& ctx) const {
    if (isOk()) return *this;
    return Status(code_, ctx + ": " + message(), rank_);
  }

 private:
  static const std::string& emptyMessage();
  static void freeMessage(std::string* msg);

  // Every call returns a Status, nearly always ok: the message lives on the heap, only for
  // the failures that have one, so an ok Status is two words to pass and nothing to free.
  Code code_ = Code::kOk;
  int rank_ = -1;
  std::string* msg_ = nullptr;
};

inline Status invalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
inline Status internalError(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
// errno-based failure of a named system call.
Status systemError(const char* call, int err);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status s) : status_(std::move(s)) {}  // NOLINT: implicit on purpose
  StatusOr(T v) : value_(std::move(v)), has_(true) {}  // NOLINT
  bool isOk() const { return has_; }
  const Status& status() const { return status_; }
  T& value() & { return value_; }
  T&& value() && { return std::move(value_); }
  const T& value() const& { return value_; }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  Status status_;
  T value_{};
  bool has_ = false;
};

}  // namespace braid

#define BRAID_CONCAT_INNER(a, b) a##b
#define BRAID_CONCAT(a, b) BRAID_CONCAT_INNER(a, b)

#define BRAID_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::braid::Status braid_status_ = (expr);          \
    if (!braid_status_.isOk()) return braid_status_; \
  } while (0)

#define BRAID_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.isOk()) return tmp.status();             \
  lhs = std::move(tmp).value()

// BRAID_ASSIGN_OR_RETURN(auto x, makeX()): unwraps a StatusOr or returns its error.
#define BRAID_ASSIGN_OR_RETURN(lhs, expr) \
  BRAID_ASSIGN_OR_RETURN_IMPL(BRAID_CONCAT(braid_sor_, __LINE__), lhs, expr)

// BRAID_SYSCHECK(call): runs a system call returning -1 on error, retrying on EINTR, and
// returns a kSystemError Status naming the call. Usable where a Status is returned.
#define BRAID_SYSCHECK(call)                                          \
  do {                                                                \
    long braid_rc_;                                                   \
    do {                                                              \
      braid_rc_ = static_cast<long>(call);                            \
    } while (braid_rc_ == -1 && errno == EINTR);                      \
    if (braid_rc_ == -1) return ::braid::systemError(#call, errno);   \
  } while (0)
