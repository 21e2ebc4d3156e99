#include "bootstrap/store.h"

#include <algorithm>

namespace braid::bootstrap {

StatusOr<std::string> Store::compareSet(const std::string& key, const std::string& /*expected*/,
                                        const std::string& /*desired*/, Deadline /*deadline*/) {
  return invalidArgument("compareSet('" + key + "'): this store has no compare-and-set operation");
}

Status Store::setOnClose(const std::string& key, const std::string& /*value*/, Deadline /*deadline*/) {
  return invalidArgument("setOnClose('" + key + "'): this store cannot tell when a client is gone");
}

Status Store::addOnClose(const std::string& key, int64_t /*delta*/, Deadline /*deadline*/) {
  return invalidArgument("addOnClose('" + key + "'): this store cannot tell when a client is gone");
}

StatusOr<int64_t> Store::fence(const std::vector<uint64_t>& /*clients*/, const std::string& /*why*/,
                                Deadline /*deadline*/) {
  return invalidArgument("fence: this store does not tell its clients apart");
}

StatusOr<bool> Store::cancelOnClose(const std::string& key, Deadline /*deadline*/) {
  return invalidArgument("cancelOnClose('" + key + "'): this store cannot tell when a client is gone");
}

StatusOr<std::vector<std::string>> Store::multiGet(const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) {
    BRAID_ASSIGN_OR_RETURN(std::string v, get(k, deadline));
    values.push_back(std::move(v));
  }
  return values;
}

std::string allGatherKey(const std::string& prefix, int r) { return prefix + "/" + std::to_string(r); }

namespace {

// Turns a timed-out gather into a report that names who is missing: the store only knows
// keys, but the caller (and the user reading the message) thinks in ranks.
Status missingRanks(Store& store, const std::string& prefix, int nranks, const Status& timeout) {
  std::vector<int> missing;
  for (int r = 0; r < nranks; ++r) {
    auto present = store.check({allGatherKey(prefix, r)});
    if (!present.isOk()) return timeout;  // the store itself is gone; keep the first error
    if (!present.value()) missing.push_back(r);
  }
  if (missing.empty()) return timeout;
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + std::to_string(missing[i]);
  if (missing.size() > 8) list += ", ... (" + std::to_string(missing.size()) + " in all)";
  return Status(Code::kTimeout,
                "allGather '" + prefix + "' timed out waiting for rank(s) " + list + " of " + std::to_string(nranks),
                missing[0]);
}

}  // namespace

namespace {

constexpr double kPollSec = 0.2;

// The earlier of `deadline` and one poll period from now.
Deadline slice(Deadline deadline, double sec = kPollSec) {
  Deadline next = Deadline::after(sec);
  return !deadline.never() && deadline.nanos() < next.nanos() ? deadline : next;
}

}  // namespace

StatusOr<std::vector<std::string>> allGather(Store& store, const std::string& prefix, int rank, int nranks,
                                             const std::string& value, Deadline deadline,
                                             const std::function<Status()>& poll) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalidArgument("allGather '" + prefix + "': rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(nranks) + ")");
  BRAID_RETURN_IF_ERROR(store.set(allGatherKey(prefix, rank), value));
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) keys.push_back(allGatherKey(prefix, r));
  // Each slice asks for every key again: with many ranks, slices grow (at most 2 s) so that
  // the waiting ranks do not flood the store.
  const double sliceSec = std::min(2.0, kPollSec * std::max(1.0, nranks / 64.0));
  StatusOr<std::vector<std::string>> values = Status(Code::kTimeout, "not started");
  for (;;) {
    values = store.multiGet(keys, poll ? slice(deadline, sliceSec) : deadline);
    if (values.isOk() || values.status().code() != Code::kTimeout || deadline.expired() || !poll) break;
    BRAID_RETURN_IF_ERROR(poll());
  }
  if (!values.isOk()) {
    if (values.status().code() == Code::kTimeout) return missingRanks(store, prefix, nranks, values.status());
    return values.status().withContext("allGather '" + prefix + "'");
  }
  if (values.value().size() != keys.size())
    return internalError("allGather '" + prefix + "': store returned " + std::to_string(values.value().size()) +
                         " values for " + std::to_string(keys.size()) + " keys");
  return values;
}

Status waitPolling(Store& store, const std::vector<std::string>& keys, Deadline deadline,
                   const std::function<Status()>& poll) {
  if (!poll) return store.wait(keys, deadline);
  for (;;) {
    Status s = store.wait(keys, slice(deadline));
    if (s.code() != Code::kTimeout || deadline.expired()) return s;
    BRAID_RETURN_IF_ERROR(poll());
  }
}

StatusOr<std::string> getPolling(Store& store, const std::string& key, Deadline deadline,
                                 const std::function<Status()>& poll) {
  BRAID_RETURN_IF_ERROR(waitPolling(store, {key}, deadline, poll));
  return store.get(key, deadline);
}

Status barrier(Store& store, const std::string& name, int nranks, Deadline deadline,
               const std::function<Status()>& poll) {
  if (nranks < 1) return invalidArgument("barrier '" + name + "': nranks " + std::to_string(nranks) + " < 1");
  const std::string countKey = name + "/count";
  const std::string doneKey = name + "/done";
  BRAID_ASSIGN_OR_RETURN(int64_t arrived, store.add(countKey, 1));
  // The last arrival opens the barrier with one key, so waiters need a single wake-up
  // instead of polling a counter.
  if (arrived == nranks) BRAID_RETURN_IF_ERROR(store.set(doneKey, "1"));
  if (arrived > nranks)
    return internalError("barrier '" + name + "': " + std::to_string(arrived) + " arrivals for " +
                         std::to_string(nranks) + " ranks (was the name reused?)");
  Status s = waitPolling(store, {doneKey}, deadline, poll);
  if (s.code() == Code::kTimeout) {
    auto now = store.add(countKey, 0);
    std::string seen = now.isOk() ? std::to_string(now.value()) : std::string("?");
    return Status(Code::kTimeout, "barrier '" + name + "' timed out with " + seen + " of " + std::to_string(nranks) +
                                      " ranks arrived");
  }
  return s.withContext("barrier '" + name + "'");
}

}  // namespace braid::bootstrap
