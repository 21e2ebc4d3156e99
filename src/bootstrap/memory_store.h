#pragma once
// An in-process Store: a map behind one mutex, with a condition variable for waiters. It
// serves the in-process world and unit tests, where every rank is a thread of one process.

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bootstrap/store.h"

namespace braid::bootstrap {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // All methods are thread-safe. get/wait/multiGet block until the keys exist or `deadline`
  // passes (kTimeout naming the first missing key); the others never block beyond the lock.
  // add() fails with kInvalidArgument if the key holds something other than a decimal
  // integer, which is how add() itself stores values (so get() on a counter reads "3").
  Status set(const std::string& key, const std::string& value, Deadline deadline = Deadline()) override;
  bool inProcess() const override { return true; }
  StatusOr<std::string> get(const std::string& key, Deadline deadline) override;
  StatusOr<int64_t> add(const std::string& key, int64_t delta, Deadline deadline = Deadline()) override;
  StatusOr<std::string> compareSet(const std::string& key, const std::string& expected, const std::string& desired,
                                   Deadline deadline = Deadline()) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  StatusOr<bool> check(const std::vector<std::string>& keys, Deadline deadline = Deadline()) override;
  StatusOr<bool> deleteKey(const std::string& key, Deadline deadline = Deadline()) override;
  StatusOr<std::vector<std::string>> multiGet(const std::vector<std::string>& keys, Deadline deadline) override;

  // Number of keys stored; for tests. Thread-safe.
  size_t size() const;

 private:
  // Waits with `lock` held until every key exists; the first missing key on timeout.
  Status waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, Deadline deadline);

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> data_;
};

}  // namespace braid::bootstrap
