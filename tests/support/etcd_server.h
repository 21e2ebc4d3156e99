#pragma once
// A throwaway single-member etcd cluster for tests of the etcd store: Debian's etcd-server
// (scripts/setup.sh installs it), on free loopback ports, with its data in a temporary
// folder that goes with it. Tests skip, saying why, where no etcd binary is installed.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

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

  // With `tls`, etcd also serves https on tlsPort(), its certificate (for 127.0.0.1) signed
  // by a CA of the test's own (caFile()), and asks https clients for a certificate of that
  // CA (clientCert()/clientKey()). Needs the openssl command; tlsOk() says whether it all came up.
  struct Options {
    bool tls = false;
    int authTokenTtlSec = 0;  // etcd's --auth-token-ttl (simple tokens; 0: etcd's 300 s)
  };

  // Starts etcd and waits until it answers; ok() says whether it did. Its ports are free
  // when chosen but may be taken before etcd binds them (by another test's outgoing
  // connection, whose local port comes from the same range): an etcd that exits before it
  // answers is started again on other ports, up to 5 times. One that runs gets 30 s.
  EtcdServer() : EtcdServer(Options{}) {}
  explicit EtcdServer(Options opts) {
    const std::string bin = binary();
    if (bin.empty()) return;
    char dir[] = "/tmp/braid-etcd-XXXXXX";
    if (!mkdtemp(dir)) return;
    dir_ = dir;
    if (opts.tls && !makeCertificates()) return;
    for (int attempt = 0; attempt < 5 && !ok_; ++attempt) ok_ = start(bin, opts);
  }

  // Turns etcd's authentication on, with user root (password `password`) in role root,
  // through the plain endpoint. Returns whether etcd took every step.
  bool enableAuth(const std::string& password) {
    std::string quoted;
    for (char c : password) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    return post("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"" + quoted + "\"}") &&
           post("/v3/auth/role/add", "{\"name\":\"root\"}") &&
           post("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}") && post("/v3/auth/enable", "{}");
  }

  int tlsPort() const { return tlsPort_; }
  bool tlsOk() const { return ok_ && tlsPort_ > 0; }
  // "etcds://127.0.0.1:TLSPORT", to which a test appends its prefix.
  std::string tlsEndpoint() const { return "etcds://127.0.0.1:" + std::to_string(tlsPort_); }
  std::string caFile() const { return dir_ + "/ca.pem"; }
  std::string clientCert() const { return dir_ + "/client.pem"; }
  std::string clientKey() const { return dir_ + "/client.key"; }
  // A CA etcd does not know, with a client certificate of its own, for the failures.
  std::string otherCaFile() const { return dir_ + "/other-ca.pem"; }
  std::string otherClientCert() const { return dir_ + "/other-client.pem"; }
  std::string otherClientKey() const { return dir_ + "/other-client.key"; }
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
  // One try: etcd on fresh ports, with a fresh data folder; whether it answered. Leaves no
  // process behind when it did not.
  bool start(const std::string& bin, const Options& opts) {
    std::system(("rm -rf '" + dir_ + "/data'").c_str());
    port_ = freePort();
    const int peer = freePort();
    std::string client = "http://127.0.0.1:" + std::to_string(port_);
    const std::string peerUrl = "http://127.0.0.1:" + std::to_string(peer);
    const std::string log = dir_ + "/etcd.log";
    std::vector<std::string> args = {"etcd", "--name", "t", "--data-dir", dir_ + "/data"};
    if (opts.tls) {
      tlsPort_ = freePort();
      client += ",https://127.0.0.1:" + std::to_string(tlsPort_);
      args.insert(args.end(), {"--cert-file", dir_ + "/server.pem", "--key-file", dir_ + "/server.key",
                               "--trusted-ca-file", caFile(), "--client-cert-auth"});
    }
    if (opts.authTokenTtlSec > 0) args.insert(args.end(), {"--auth-token-ttl", std::to_string(opts.authTokenTtlSec)});
    args.insert(args.end(), {"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls",
                             peerUrl, "--initial-advertise-peer-urls", peerUrl, "--initial-cluster", "t=" + peerUrl,
                             "--log-level", "error"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      // Killed with the test, should the test be killed (a CTest timeout) before its
      // destructor runs: no etcd is left behind.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      // dup2, not freopen: closing the inherited stdio streams would flush the test's
      // unwritten output a second time.
      setpgid(0, 0);
      int out = open("/dev/null", O_WRONLY), err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(out, 1);
      dup2(err, 2);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    auto url = bootstrap::parseEtcdUrl("test", endpoint() + "/ready");
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (url.isOk() && std::chrono::steady_clock::now() < giveUp) {
      if (bootstrap::EtcdStore::connect(url.value(), Deadline::after(1)).isOk()) return true;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // it exited: most likely a port was taken
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return false;
  }

  // A CA, a server certificate for 127.0.0.1 and a client certificate signed by it, and a
  // second CA with a client certificate of its own, made with the openssl command. The
  // server's certificate is good for client use too: with --client-cert-auth, etcd's JSON
  // gateway reaches its own gRPC server showing it.
  bool makeCertificates() {
    const std::string d = "'" + dir_ + "'";
    const std::string q = " >/dev/null 2>&1";
    auto ca = [&](const std::string& name) {
      return "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=braid test " + name + "' -keyout " + d +
             "/" + name + ".key -out " + d + "/" + name + ".pem" + q;
    };
    // No common name: etcd 3.4 refuses logins through its JSON gateway when the gateway's
    // own connection (made with the server's certificate) carries one.
    auto leaf = [&](const std::string& name, const std::string& caName, const std::string& ext) {
      return "openssl req -newkey rsa:2048 -nodes -subj '/O=braid test " + name + "' -keyout " + d + "/" + name + ".key -out " +
             d + "/" + name + ".csr" + q + " && printf '" + ext + "' > " + d + "/" + name + ".ext && openssl x509 -req -in " +
             d + "/" + name + ".csr -CA " + d + "/" + caName + ".pem -CAkey " + d + "/" + caName +
             ".key -CAcreateserial -days 2 -extfile " + d + "/" + name + ".ext -out " + d + "/" + name + ".pem" + q;
    };
    const std::string script = ca("ca") + " && " + ca("other-ca") + " && " +
                                leaf("server", "ca", "subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n") +
                                " && " + leaf("client", "ca", "extendedKeyUsage=clientAuth\\n") + " && " +
                                leaf("other-client", "other-ca", "extendedKeyUsage=clientAuth\\n");
    return std::system(("command -v openssl >/dev/null && " + script).c_str()) == 0;
  }

  // POSTs a JSON body to the plain endpoint; whether etcd answered 200.
  bool post(const std::string& path, const std::string& body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      return false;
    }
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    bool ok = send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
    std::string reply;
    char buf[4096];
    for (ssize_t n; ok && (n = recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
    close(fd);
    return ok && reply.rfind("HTTP/1.1 200", 0) == 0;
  }

  std::string dir_;
  int tlsPort_ = 0;
  int port_ = 0;
  pid_t pid_ = -1;
  bool ok_ = false;
};

}  // namespace braid::testing
