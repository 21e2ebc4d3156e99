// HCA lists (BRAID_IB_HCA) and GID selection (BRAID_IB_GID_INDEX) over a fake sysfs tree
// built in a temporary folder, shaped like /sys/class/infiniband on a RoCE host.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "support/catch.h"
#include "transports/ibverbs/device_select.h"

namespace braid::transport::ibverbs::test {
namespace {

// A temporary /sys/class/infiniband; removed with everything in it.
class FakeSysfs {
 public:
  FakeSysfs() {
    char tmpl[] = "/tmp/braid-ibsysfs-XXXXXX";
    const char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    root_ = d;
  }
  ~FakeSysfs() {
    const std::string cmd = "rm -rf '" + root_ + "'";
    if (std::system(cmd.c_str()) != 0) WARN("could not remove " + root_);
  }
  const std::string& root() const { return root_; }

  // GID `index` of `dev` port `port`; `type` empty leaves the type file out, as sysfs
  // does (the read fails) for an unpopulated entry.
  void gid(const std::string& dev, int port, int index, const std::string& text, const std::string& type) {
    const std::string p = root_ + "/" + dev + "/ports/" + std::to_string(port);
    mkdirs(p + "/gids");
    mkdirs(p + "/gid_attrs/types");
    write(p + "/gids/" + std::to_string(index), text + "\n");
    if (!type.empty()) write(p + "/gid_attrs/types/" + std::to_string(index), type + "\n");
  }

 private:
  static void mkdirs(const std::string& path) {
    for (size_t i = 1; i <= path.size(); ++i) {
      if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
    }
  }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
  }
  std::string root_;
};

const char* kZero = "0000:0000:0000:0000:0000:0000:0000:0000";
const char* kLinkLocal = "fe80:0000:0000:0000:0a42:a1ff:fe01:0203";
const char* kIpv4 = "0000:0000:0000:0000:0000:ffff:c0a8:0102";   // ::ffff:192.168.1.2
const char* kIpv4b = "0000:0000:0000:0000:0000:ffff:0a00:0005";  // ::ffff:10.0.0.5
const char* kIpv6 = "2001:0db8:0000:0000:0000:0000:0000:0042";

}  // namespace

TEST_CASE("HCA list: NCCL_IB_HCA syntax", "[ibverbs]") {
  auto all = parseHcaList("");
  REQUIRE(all.isOk());
  CHECK(all->empty());
  CHECK(all->allows("mlx5_0", 1));

  auto prefix = parseHcaList("mlx5");
  REQUIRE(prefix.isOk());
  CHECK(prefix->allows("mlx5_0"));
  CHECK(prefix->allows("mlx5_12", 2));
  CHECK_FALSE(prefix->allows("rxe0"));

  auto ports = parseHcaList("mlx5_0:1,mlx5_1");
  REQUIRE(ports.isOk());
  CHECK(ports->allows("mlx5_0", 1));
  CHECK_FALSE(ports->allows("mlx5_0", 2));
  CHECK(ports->allows("mlx5_0"));  // any port: the device is in the list
  CHECK(ports->allows("mlx5_1", 2));
  CHECK_FALSE(ports->allows("bnxt_re0", 1));

  auto exclude = parseHcaList("^mlx5_1");
  REQUIRE(exclude.isOk());
  CHECK(exclude->allows("mlx5_0"));
  CHECK_FALSE(exclude->allows("mlx5_1"));
  CHECK_FALSE(exclude->allows("mlx5_10"));  // a prefix

  auto exact = parseHcaList("=mlx5_1");
  REQUIRE(exact.isOk());
  CHECK(exact->allows("mlx5_1"));
  CHECK_FALSE(exact->allows("mlx5_10"));

  auto both = parseHcaList("^=mlx5_0:2");
  REQUIRE(both.isOk());
  CHECK(both->allows("mlx5_0", 1));
  CHECK_FALSE(both->allows("mlx5_0", 2));
  CHECK(both->allows("mlx5_00", 2));
  CHECK(both->spec() == "^=mlx5_0:2");
}

TEST_CASE("HCA list: malformed lists are refused with the list in the message", "[ibverbs]") {
  for (const char* bad : {"mlx5_0,,mlx5_1", "mlx5_0:x", ":1", "mlx5_0:", "mlx5_0:1234", ",", "^"}) {
    auto r = parseHcaList(bad);
    INFO(bad);
    if (std::string(bad) == "^") {
      // "^" alone excludes nothing: allowed, like NCCL.
      CHECK(r.isOk());
      continue;
    }
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find(std::string("'") + bad + "'") != std::string::npos);
    CHECK(r.status().message().find("ibverbs") != std::string::npos);
  }
}

TEST_CASE("GID text: sysfs notation parses to 16 bytes", "[ibverbs]") {
  uint8_t g[16];
  REQUIRE(parseGid(kIpv4, g));
  CHECK(g[10] == 0xFF);
  CHECK(g[11] == 0xFF);
  CHECK(g[12] == 192);
  CHECK(g[13] == 168);
  CHECK(g[14] == 1);
  CHECK(g[15] == 2);
  REQUIRE(parseGid("FE80:0000:0000:0000:0A42:A1FF:FE01:0203", g));
  CHECK(g[0] == 0xFE);
  CHECK(g[1] == 0x80);
  CHECK_FALSE(parseGid("fe80::1", g));
  CHECK_FALSE(parseGid("fe80:0000:0000:0000:0a42:a1ff:fe01:020", g));
  CHECK_FALSE(parseGid("fe80-0000:0000:0000:0a42:a1ff:fe01:0203", g));
  CHECK_FALSE(parseGid("fe80:0000:0000:0000:0a42:a1ff:fe01:02g3", g));
}

TEST_CASE("GID selection: RoCE v2 with an IPv4-mapped address wins", "[ibverbs]") {
  FakeSysfs fs;
  // What a ConnectX port with one IPv4 and one IPv6 link-local address shows.
  fs.gid("mlx5_0", 1, 0, kLinkLocal, "IB/RoCE v1");
  fs.gid("mlx5_0", 1, 1, kLinkLocal, "RoCE v2");
  fs.gid("mlx5_0", 1, 2, kIpv4, "IB/RoCE v1");
  fs.gid("mlx5_0", 1, 3, kIpv4, "RoCE v2");
  fs.gid("mlx5_0", 1, 4, kZero, "");
  fs.gid("mlx5_0", 1, 5, kIpv4b, "RoCE v2");  // a second address: the lower index wins
  auto g = selectGid(fs.root(), "mlx5_0", 1, -1);
  REQUIRE(g.isOk());
  CHECK(g->index == 3);
  CHECK(g->type == "RoCE v2");
  CHECK(g->gid == kIpv4);
  CHECK(g->why == "RoCE v2, IPv4-mapped");
}

TEST_CASE("GID selection: without IPv4, a global IPv6 RoCE v2 GID, never link-local", "[ibverbs]") {
  FakeSysfs fs;
  fs.gid("mlx5_1", 1, 0, kLinkLocal, "IB/RoCE v1");
  fs.gid("mlx5_1", 1, 1, kLinkLocal, "RoCE v2");
  fs.gid("mlx5_1", 1, 2, kIpv6, "IB/RoCE v1");
  fs.gid("mlx5_1", 1, 3, kIpv6, "RoCE v2");
  auto g = selectGid(fs.root(), "mlx5_1", 1, -1);
  REQUIRE(g.isOk());
  CHECK(g->index == 3);
  CHECK(g->why == "RoCE v2, global IPv6");
}

TEST_CASE("GID selection: RoCE v1 only, or an InfiniBand port, falls back to the first GID", "[ibverbs]") {
  FakeSysfs fs;
  fs.gid("rxe0", 1, 0, kZero, "");
  fs.gid("rxe0", 1, 1, kLinkLocal, "IB/RoCE v1");
  fs.gid("rxe0", 1, 2, kIpv4, "IB/RoCE v1");
  auto g = selectGid(fs.root(), "rxe0", 1, -1);
  REQUIRE(g.isOk());
  CHECK(g->index == 1);
  // An InfiniBand port has no types folder entries at all.
  fs.gid("mlx4_0", 2, 0, kLinkLocal, "");
  auto ib = selectGid(fs.root(), "mlx4_0", 2, -1);
  REQUIRE(ib.isOk());
  CHECK(ib->index == 0);
  CHECK(ib->type.empty());
}

TEST_CASE("GID selection: the ports are told apart", "[ibverbs]") {
  FakeSysfs fs;
  fs.gid("mlx5_0", 1, 0, kLinkLocal, "RoCE v2");
  fs.gid("mlx5_0", 2, 0, kLinkLocal, "RoCE v2");
  fs.gid("mlx5_0", 2, 7, kIpv4, "RoCE v2");
  auto p1 = selectGid(fs.root(), "mlx5_0", 1, -1);
  auto p2 = selectGid(fs.root(), "mlx5_0", 2, -1);
  REQUIRE(p1.isOk());
  REQUIRE(p2.isOk());
  CHECK(p1->index == 0);
  CHECK(p2->index == 7);
}

TEST_CASE("GID selection: BRAID_IB_GID_INDEX is taken as given, if it names a GID", "[ibverbs]") {
  FakeSysfs fs;
  fs.gid("mlx5_0", 1, 0, kLinkLocal, "IB/RoCE v1");
  fs.gid("mlx5_0", 1, 1, kIpv4, "IB/RoCE v1");
  fs.gid("mlx5_0", 1, 2, kZero, "");
  fs.gid("mlx5_0", 1, 3, kIpv4, "RoCE v2");
  auto g = selectGid(fs.root(), "mlx5_0", 1, 1);  // RoCE v1 on purpose
  REQUIRE(g.isOk());
  CHECK(g->index == 1);
  CHECK(g->type == "IB/RoCE v1");
  CHECK(g->why == "BRAID_IB_GID_INDEX");

  for (int bad : {2, 9}) {
    auto r = selectGid(fs.root(), "mlx5_0", 1, bad);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("BRAID_IB_GID_INDEX=" + std::to_string(bad)) != std::string::npos);
    CHECK(r.status().message().find("mlx5_0 port 1") != std::string::npos);
  }
}

TEST_CASE("GID selection: no sysfs, or nothing populated, is a clear error", "[ibverbs]") {
  FakeSysfs fs;
  // A configured index without sysfs (a container): trusted, checked later by the device.
  auto trusted = selectGid(fs.root(), "mlx5_9", 1, 4);
  REQUIRE(trusted.isOk());
  CHECK(trusted->index == 4);

  auto none = selectGid(fs.root(), "mlx5_9", 1, -1);
  REQUIRE_FALSE(none.isOk());
  CHECK(none.status().message().find("ibverbs: cannot list the GIDs of mlx5_9 port 1") != std::string::npos);

  fs.gid("mlx5_2", 1, 0, kZero, "");
  fs.gid("mlx5_2", 1, 1, "garbage", "RoCE v2");
  auto empty = selectGid(fs.root(), "mlx5_2", 1, -1);
  REQUIRE_FALSE(empty.isOk());
  CHECK(empty.status().message().find("mlx5_2 port 1 has no populated GID") != std::string::npos);
}

}  // namespace braid::transport::ibverbs::test
