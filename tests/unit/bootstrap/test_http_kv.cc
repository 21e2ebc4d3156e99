// HttpKvClient against a scripted HTTP server in this process: the PUT/GET exchange as
// horovodrun's key-value server speaks it, polling through 404s and refused connections,
// and the failures that must not be retried (a reply that is not HTTP, an oversized reply,
// an unexpected status), each naming the server.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "bootstrap/http_kv.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {

// Answers each connection with what `respond` returns for the request's method, path and
// body (a whole raw HTTP reply), then closes it, as Python's http.server does for HTTP/1.0.
class ScriptedServer {
 public:
  using Respond = std::function<std::string(const std::string&, const std::string&, const std::string&)>;

  explicit ScriptedServer(Respond respond) : respond_(std::move(respond)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    socklen_t len = sizeof(sa);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  int requests() const { return requests_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string in;
      char buf[4096];
      size_t want = std::string::npos;
      while (in.size() < want) {
        ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        size_t head = in.find("\r\n\r\n");
        if (head != std::string::npos && want == std::string::npos) {
          size_t len = 0;
          size_t cl = in.find("Content-Length: ");
          if (cl != std::string::npos && cl < head) len = std::stoul(in.substr(cl + 16));
          want = head + 4 + len;
        }
      }
      ++requests_;
      const size_t sp1 = in.find(' '), sp2 = in.find(' ', sp1 + 1);
      const size_t head = in.find("\r\n\r\n");
      std::string out = respond_(in.substr(0, sp1), in.substr(sp1 + 1, sp2 - sp1 - 1),
                                 head == std::string::npos ? "" : in.substr(head + 4));
      for (size_t off = 0; off < out.size();) {
        ssize_t n = send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      close(c);
    }
  }

  Respond respond_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

std::string reply(int status, const std::string& body = "") {
  return "HTTP/1.0 " + std::to_string(status) + " X\r\nServer: test\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A port nothing listens on: bound, never listened on, closed.
int deadPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  socklen_t len = sizeof(sa);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  close(fd);
  return ntohs(sa.sin_port);
}

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("http kv: a PUT is read back by GET, a missing key is polled for", "[bootstrap][http_kv]") {
  std::mutex mu;
  std::map<std::string, std::string> kv;
  int gets404 = 0;
  ScriptedServer srv([&](const std::string& method, const std::string& path, const std::string& body) {
    std::lock_guard<std::mutex> lock(mu);
    if (method == "PUT") {
      kv[path] = body;
      return reply(200);
    }
    auto it = kv.find(path);
    if (it == kv.end()) {
      ++gets404;
      return reply(404);
    }
    return reply(200, it->second);
  });
  HttpKvClient c("127.0.0.1", srv.port());
  CHECK(c.address() == "127.0.0.1:" + std::to_string(srv.port()));
  REQUIRE(c.put("braid", "store.n2.i0", "10.0.0.5:4242", Deadline::after(5)).isOk());
  auto v = c.waitGet("braid", "store.n2.i0", Deadline::after(5));
  REQUIRE(v.isOk());
  CHECK(v.value() == "10.0.0.5:4242");

  // The reader starts first and polls through 404s until the writer comes.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CHECK(HttpKvClient("127.0.0.1", srv.port()).put("braid", "late", "x:1", Deadline::after(5)).isOk());
  });
  auto late = c.waitGet("braid", "late", Deadline::after(5));
  writer.join();
  REQUIRE(late.isOk());
  CHECK(late.value() == "x:1");
  CHECK(gets404 >= 2);

  auto self = c.localAddress();
  REQUIRE(self.isOk());
  CHECK(self.value() == "127.0.0.1");
}

TEST_CASE("http kv: a key never set times out naming the key and the server", "[bootstrap][http_kv]") {
  ScriptedServer srv([](const std::string&, const std::string&, const std::string&) { return reply(404); });
  HttpKvClient c("127.0.0.1", srv.port());
  auto t0 = std::chrono::steady_clock::now();
  auto v = c.waitGet("braid", "absent", Deadline::after(0.5));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(v.isOk());
  INFO(v.status().message());
  CHECK(v.status().code() == Code::kTimeout);
  CHECK(contains(v.status().message(), "/braid/absent"));
  CHECK(contains(v.status().message(), c.address()));
  CHECK(contains(v.status().message(), "404"));
  CHECK(secs >= 0.45);
  CHECK(secs < 3);
}

TEST_CASE("http kv: a server not up yet is retried, one never up times out", "[bootstrap][http_kv]") {
  const int port = deadPort();
  HttpKvClient c("127.0.0.1", port);
  Status put = c.put("braid", "k", "v", Deadline::after(0.4));
  REQUIRE_FALSE(put.isOk());
  INFO(put.message());
  CHECK(put.code() == Code::kTimeout);
  CHECK(contains(put.message(), "127.0.0.1:" + std::to_string(port)));
  CHECK(contains(put.message(), "refused"));
}

TEST_CASE("http kv: replies that retrying cannot mend fail at once", "[bootstrap][http_kv]") {
  std::string answer;
  ScriptedServer srv([&](const std::string&, const std::string&, const std::string&) { return answer; });
  HttpKvClient c("127.0.0.1", srv.port());
  auto failsFast = [&](const std::string& what, std::initializer_list<std::string> needles) {
    answer = what;
    auto t0 = std::chrono::steady_clock::now();
    auto v = c.waitGet("braid", "k", Deadline::after(10));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_FALSE(v.isOk());
    INFO(v.status().message());
    CHECK(v.status().code() == Code::kRemoteError);
    CHECK(secs < 2);
    CHECK(contains(v.status().message(), c.address()));
    for (const auto& n : needles) CHECK(contains(v.status().message(), n));
  };
  failsFast("SSH-2.0-OpenSSH_9.2\r\n\r\n", {"did not answer GET /braid/k in HTTP", "SSH-2.0"});
  failsFast(reply(400), {"HTTP 400"});
  failsFast(reply(500), {"HTTP 500"});
  failsFast(reply(200, std::string(HttpKvClient::kMaxReplyBytes + 10, 'a')), {"longer than"});

  // A reply whose body falls short of its Content-Length was cut: retried, then a timeout.
  answer = "HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort";
  auto cut = c.waitGet("braid", "k", Deadline::after(0.3));
  REQUIRE_FALSE(cut.isOk());
  CHECK(cut.status().code() == Code::kTimeout);
  CHECK(contains(cut.status().message(), "Content-Length"));
}

TEST_CASE("http kv: scope and key stay within characters a path needs no escaping for", "[bootstrap][http_kv]") {
  HttpKvClient c("127.0.0.1", 1);
  for (const char* key : {"", "a/b", "a b", "k?x=1", "%2F"}) {
    INFO("key '" << key << "'");
    auto s = c.put("braid", key, "v", Deadline::after(1));
    REQUIRE_FALSE(s.isOk());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(c.waitGet("braid", key, Deadline::after(1)).status().code() == Code::kInvalidArgument);
  }
  CHECK(c.put("br/aid", "k", "v", Deadline::after(1)).code() == Code::kInvalidArgument);
}

TEST_CASE("http kv: getOnce sends one request and waits for the answer, however long", "[bootstrap][http_kv]") {
  // horovodrun's elastic driver holds rank_and_size until every worker has asked, and
  // counts each request: a second one from the same worker would be counted twice.
  std::atomic<int> holdMs{1500};
  std::string answer = reply(200, "1,3,1,2,0,2");
  std::string path;
  ScriptedServer srv([&](const std::string&, const std::string& p, const std::string&) {
    path = p;
    std::this_thread::sleep_for(std::chrono::milliseconds(holdMs.load()));
    return answer;
  });
  HttpKvClient c("127.0.0.1", srv.port());
  auto v = c.getOnce("rank_and_size", "localhost:1", Deadline::after(30));
  REQUIRE(v.isOk());
  CHECK(v.value() == "1,3,1,2,0,2");
  CHECK(path == "/rank_and_size/localhost:1");
  CHECK(srv.requests() == 1);

  // A 404 is not polled for: the driver answers this key or nothing.
  holdMs = 0;
  answer = reply(404);
  auto missing = c.getOnce("rank_and_size", "localhost:1", Deadline::after(5));
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().code() == Code::kRemoteError);
  CHECK(contains(missing.status().message(), "HTTP 404"));
  CHECK(srv.requests() == 2);

  // No answer by the deadline: a timeout naming the request, after that one request.
  holdMs = 1500;
  answer = reply(200, "0,1,0,1,0,1");
  auto late = c.getOnce("rank_and_size", "localhost:1", Deadline::after(0.4));
  REQUIRE_FALSE(late.isOk());
  INFO(late.status().message());
  CHECK(late.status().code() == Code::kTimeout);
  CHECK(contains(late.status().message(), "GET /rank_and_size/localhost:1"));
  CHECK(contains(late.status().message(), c.address()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  CHECK(srv.requests() == 3);
}

TEST_CASE("http kv: getOnce tries to connect until the deadline", "[bootstrap][http_kv]") {
  HttpKvClient c("127.0.0.1", deadPort());
  auto t0 = std::chrono::steady_clock::now();
  auto v = c.getOnce("rank_and_size", "h:0", Deadline::after(0.5));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(v.isOk());
  CHECK(v.status().code() == Code::kTimeout);
  CHECK(secs >= 0.45);
  CHECK(secs < 3);
}
