#pragma once
// Lets braid rendezvous through the c10d::Store that init_process_group / new_group hand to
// the backend (a PrefixStore over the job's TCPStore), so that braid needs no second port
// and no extra environment: every group's keys are already separated by torch's prefix.

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "braid/braid.hpp"

namespace braid_torch {

// Thread-safe because c10d's stores are (TCPStore serialises its client's requests); braid
// calls it from its progress threads as well as from the thread that creates the backend.
// openRoot gives braid's live view a connection of its own to the TCPStore underneath.
class C10dStoreAdapter : public braid::Store {
 public:
  // `maxPause`: the longest pause between two checks of a wait.
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store,
                            std::chrono::microseconds maxPause = std::chrono::microseconds(5000))
      : store_(std::move(store)), maxPause_(maxPause) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }

  // Waits (with braid's deadline, see wait()) before c10d's get(), which would otherwise
  // block the shared connection with the store's own timeout.
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::vector<uint8_t> v = translate([&] { return store_->get(key); });
    return std::string(v.begin(), v.end());
  }

  int64_t add(const std::string& key, int64_t delta) override {
    return translate([&] { return store_->add(key, delta); });
  }

  // Polls check() instead of calling c10d's wait(): a TCPStore client is one connection,
  // and its wait() holds that connection until the keys appear, so a wait for one
  // communicator's rendezvous (e.g. a lazily created point-to-point channel whose peer has
  // not arrived yet) would block every other thread's store traffic, including the set()
  // that peer is waiting for. Polling keeps each request short.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(50);
    while (!check(keys)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string names;
        for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
        throw braid::TimeoutError("c10d store: keys [" + names + "] did not appear within " +
                                      std::to_string(timeout.count()) + " ms",
                                  -1);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, maxPause_);
    }
  }

  // The live view's root: a connection of its own (TCPStore::clone) to the TCPStore under
  // torch's prefixes, named by its address; its waits (the asking side's, for the answers)
  // check every 100 ms at most, and the answering thread polls it on its own schedule
  // (core/live_status.cc). A store that is not a TCPStore (FileStore, HashStore) has none.
  std::shared_ptr<braid::Store> openRoot(std::string* name) override {
    c10::intrusive_ptr<c10d::Store> root = store_;
    if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(root.get())) root = prefixed->getUnderlyingNonPrefixStore();
    auto* tcp = dynamic_cast<c10d::TCPStore*>(root.get());
    if (tcp == nullptr) return nullptr;
    *name = tcp->getHost() + ":" + std::to_string(tcp->getPort());
    c10::intrusive_ptr<c10d::Store> conn = translate([&] { return root->clone(); });
    return std::make_shared<C10dStoreAdapter>(std::move(conn), std::chrono::microseconds(100000));
  }

  // Whether this process runs the TCPStore's server, as the store's description says
  // ("server=TCPServer(port=...)" in the host, "server=<nullptr>" in a client): the rank
  // that made it with is_master (rank 0 under init_method env:// and tcp://), none where
  // torchrun's agent hosts it.
  int hostsRoot() override {
    c10::intrusive_ptr<c10d::Store> root = store_;
    if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(root.get())) root = prefixed->getUnderlyingNonPrefixStore();
    auto* tcp = dynamic_cast<c10d::TCPStore*>(root.get());
    if (tcp == nullptr) return -1;
    const std::string repr = tcp->repr();
    if (repr.find("server=TCPServer") != std::string::npos) return 1;
    if (repr.find("server=<nullptr>") != std::string::npos) return 0;
    return -1;
  }

  bool check(const std::vector<std::string>& keys) override {
    return translate([&] { return store_->check(keys); });
  }

  bool deleteKey(const std::string& key) override {
    return translate([&] { return store_->deleteKey(key); });
  }

  // c10d's compareSet sets a missing key when `expected` is empty, as braid's does.
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override {
    std::vector<uint8_t> v = translate([&] {
      return store_->compareSet(key, std::vector<uint8_t>(expected.begin(), expected.end()),
                                std::vector<uint8_t>(desired.begin(), desired.end()));
    });
    return std::string(v.begin(), v.end());
  }

 private:
  // A c10d store reports an expired wait as DistStoreError whose message says "timeout";
  // braid's bootstrap needs braid::TimeoutError for that case to report it as one.
  template <typename F>
  auto translate(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const c10::DistStoreError& e) {
      std::string what = e.what_without_backtrace();
      if (what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos)
        throw braid::TimeoutError("c10d store: " + what, -1);
      throw braid::RemoteError("c10d store: " + what, -1);
    } catch (const c10::Error& e) {
      throw braid::RemoteError(std::string("c10d store: ") + e.what_without_backtrace(), -1);
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  const std::chrono::microseconds maxPause_;
};

}  // namespace braid_torch
