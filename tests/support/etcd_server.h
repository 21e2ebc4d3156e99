#pragma once
// A throwaway single-member etcd cluster for tests of the etcd store: Debian's etcd-server
// (scripts/setup.sh installs it), on free loopback ports, with its data in a temporary
// folder that goes with it. Tests skip, saying why, where no etcd binary is installed.

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "bootstrap/etcd_store.h"

namespace braid::testing {

class EtcdServer {
 public:
  // The etcd binary: $BRAID_TEST_ETCD, else /usr/bin/etcd; "" when there is none.
  static std::string binary() {
    const char* e = std::getenv("BRAID_TEST_ETCD");
    std::string path = e && *e ? e : "/usr/bin/etcd";
    return access(path.c_str(), X_OK) == 0 ? path : "";
  }

  // Starts etcd and waits (up to 20 s) until it answers; ok() says whether it did.
  EtcdServer() {
    const std::string bin = binary();
    if (bin.empty()) return;
    char dir[] = "/tmp/braid-etcd-XXXXXX";
    if (!mkdtemp(dir)) return;
    dir_ = dir;
    port_ = freePort();
    const int peer = freePort();
    const std::string client = "http://127.0.0.1:" + std::to_string(port_);
    const std::string peerUrl = "http://127.0.0.1:" + std::to_string(peer);
    const std::string log = dir_ + "/etcd.log";
    pid_ = fork();
    if (pid_ == 0) {
      // dup2, not freopen: closing the inherited stdio streams would flush the test's
      // unwritten output a second time.
      setpgid(0, 0);
      int out = open("/dev/null", O_WRONLY), err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(out, 1);
      dup2(err, 2);
      execl(bin.c_str(), "etcd", "--name", "t", "--data-dir", (dir_ + "/data").c_str(), "--listen-client-urls",
            client.c_str(), "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peerUrl.c_str(),
            "--initial-advertise-peer-urls", peerUrl.c_str(), "--initial-cluster", ("t=" + peerUrl).c_str(),
            "--log-level", "error", static_cast<char*>(nullptr));
      _exit(127);
    }
    auto url = bootstrap::parseEtcdUrl("test", endpoint() + "/ready");
    if (url.isOk()) ok_ = bootstrap::EtcdStore::connect(url.value(), Deadline::after(20)).isOk();
  }
  ~EtcdServer() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  bool ok() const { return ok_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // "etcd://127.0.0.1:PORT", to which a test appends its prefix.
  std::string endpoint() const { return "etcd://127.0.0.1:" + std::to_string(port_); }
  // Why a test cannot run, for SKIP().
  static const char* missing() { return "no etcd binary (/usr/bin/etcd, from Debian's etcd-server, or $BRAID_TEST_ETCD)"; }

  // A port nothing listens on right now (bound once with port 0, then released).
  static int freePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool ok_ = false;
};

}  // namespace braid::testing
