#include "bootstrap/memory_store.h"

#include <algorithm>
#include <chrono>

#include "bootstrap/store_value.h"

namespace braid::bootstrap {

Status MemoryStore::set(const std::string& key, const std::string& value, Deadline /*deadline*/) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
  return Status::ok();
}

Status MemoryStore::waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                               Deadline deadline) {
  for (const auto& k : keys) {
    while (data_.find(k) == data_.end()) {
      if (deadline.expired()) return Status(Code::kTimeout, "store key '" + k + "' was not set before the deadline");
      // Wake at least once a second even without a deadline: cheap, and robust against a
      // deadline that was computed on a clock that jumped.
      changed_.wait_for(lock, std::chrono::milliseconds(std::max(1, deadline.remainingMillis(1000))));
    }
  }
  return Status::ok();
}

StatusOr<std::string> MemoryStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  BRAID_RETURN_IF_ERROR(waitLocked(lock, {key}, deadline));
  return data_.at(key);
}

StatusOr<std::vector<std::string>> MemoryStore::multiGet(const std::vector<std::string>& keys, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  BRAID_RETURN_IF_ERROR(waitLocked(lock, keys, deadline));
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(data_.at(k));
  return values;
}

StatusOr<int64_t> MemoryStore::add(const std::string& key, int64_t delta, Deadline /*deadline*/) {
  int64_t now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    int64_t cur = 0;
    if (it != data_.end() && !parseCounter(it->second, &cur))
      return invalidArgument("store key '" + key + "' holds a non-integer value; add() needs a counter");
    now = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));  // wraps, never UB
    data_[key] = std::to_string(now);
  }
  changed_.notify_all();
  return now;
}

StatusOr<std::string> MemoryStore::compareSet(const std::string& key, const std::string& expected,
                                              const std::string& desired, Deadline /*deadline*/) {
  std::string now;
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end() ? expected.empty() : it->second == expected) {
      it = data_.insert_or_assign(key, desired).first;
      changed = true;
    }
    if (it != data_.end()) now = it->second;
  }
  if (changed) changed_.notify_all();
  return now;
}

Status MemoryStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return waitLocked(lock, keys, deadline);
}

StatusOr<bool> MemoryStore::check(const std::vector<std::string>& keys, Deadline /*deadline*/) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys)
    if (data_.find(k) == data_.end()) return false;
  return true;
}

StatusOr<bool> MemoryStore::deleteKey(const std::string& key, Deadline /*deadline*/) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

size_t MemoryStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

}  // namespace braid::bootstrap
