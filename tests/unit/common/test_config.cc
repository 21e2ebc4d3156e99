// The environment knob table: defaults, parsing, and errors that name the variable.

#include <map>
#include <set>
#include <string>

#include "common/status.h"
#include "core/config.h"
#include "support/catch.h"

using braid::Code;
using braid::core::Config;

namespace {
braid::StatusOr<Config> parse(const std::map<std::string, std::string>& env) {
  return Config::fromEnv([&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("config defaults with an empty environment", "[unit]") {
  auto c = parse({});
  REQUIRE(c.isOk());
  CHECK(c->timeoutSec == 300);
  CHECK(c->nchannels == 0);
  CHECK(c->transport.empty());
  CHECK(c->slotBytes == 0);  // chosen at init from the transports in use
  CHECK(c->nslots == 0);
  CHECK(c->bind);
}

TEST_CASE("config parses every knob", "[unit]") {
  auto c = parse({{"BRAID_TIMEOUT", "2.5"}, {"BRAID_NCHANNELS", "3"}, {"BRAID_TRANSPORT", "tcp"},
                  {"BRAID_SLOT_BYTES", "128K"}, {"BRAID_NSLOTS", "16"}, {"BRAID_SPIN_US", "0"},
                  {"BRAID_YIELD_US", "7"}, {"BRAID_SOCKETS_PER_PEER", "2"}, {"BRAID_NET_IF", "eth0"},
                  {"BRAID_BIND", "0"}, {"BRAID_HOST_ID", "nodeA"}, {"BRAID_PORT_RANGE", "40000-40099"},
                  {"BRAID_IB_ZCOPY", "0"}, {"BRAID_IB_ZCOPY_MIN", "131072"}, {"BRAID_TCP_ZCOPY", "send"},
                  {"BRAID_SHM_CMA", "0"}, {"BRAID_UCX_ZCOPY", "1"}, {"BRAID_UCX_REDUCE_ON_ARRIVAL", "auto"}});
  REQUIRE(c.isOk());
  CHECK(c->timeoutSec == 2.5);
  CHECK(c->nchannels == 3);
  CHECK(c->transport == "tcp");
  CHECK(c->slotBytes == 128 * 1024);
  CHECK(c->nslots == 16);
  CHECK(c->spinMicros == 0);
  CHECK(c->yieldMicros == 7);
  CHECK(c->socketsPerPeer == 2);
  CHECK(c->netIf == "eth0");
  CHECK(!c->bind);
  CHECK(c->hostId == "nodeA");
  CHECK(c->portLo == 40000);
  CHECK(c->portHi == 40099);
}

TEST_CASE("BRAID_STORE_STANDBY: on (rank 1), off, or on another host than rank 0's", "[unit]") {
  auto d = parse({});
  REQUIRE(d.isOk());
  CHECK(d->storeStandby);
  CHECK_FALSE(d->storeStandbyOtherHost);
  auto off = parse({{"BRAID_STORE_STANDBY", "0"}});
  REQUIRE(off.isOk());
  CHECK_FALSE(off->storeStandby);
  auto host = parse({{"BRAID_STORE_STANDBY", "host"}});
  REQUIRE(host.isOk());
  CHECK(host->storeStandby);
  CHECK(host->storeStandbyOtherHost);
}

// The direct GPU path cuts every step into slot-sized slices; a rank that stages must cut
// alike, so asking for it turns whole blocks off (for the communicator, where one rank asks).
TEST_CASE("BRAID_CUDA_PATH=direct or ipc turns whole blocks off, staged leaves them on", "[unit]") {
  for (const char* path : {"direct", "ipc"}) {
    auto c = parse({{"BRAID_CUDA_PATH", path}});
    REQUIRE(c.isOk());
    CHECK_FALSE(c->wholeBlocks);
  }
  for (const char* path : {"staged", ""}) {
    auto c = parse({{"BRAID_CUDA_PATH", path}});
    REQUIRE(c.isOk());
    CHECK(c->wholeBlocks);
  }
}

TEST_CASE("malformed knobs are rejected naming the variable and value", "[unit]") {
  const std::map<std::string, std::string> bad[] = {
      {{"BRAID_TIMEOUT", "soon"}}, {{"BRAID_TIMEOUT", "-1"}},         {{"BRAID_NCHANNELS", "x"}},
      {{"BRAID_NCHANNELS", "65"}}, {{"BRAID_TRANSPORT", "carrier-pigeon"}}, {{"BRAID_SLOT_BYTES", "12Q"}},
      {{"BRAID_SLOT_BYTES", "1"}}, {{"BRAID_NSLOTS", "1"}},            {{"BRAID_BIND", "maybe"}},
      {{"BRAID_SOCKETS_PER_PEER", "0"}}, {{"BRAID_PORT_RANGE", "40000"}}, {{"BRAID_PORT_RANGE", "9-8"}},
      {{"BRAID_PORT_RANGE", "0-10"}},     {{"BRAID_PORT_RANGE", "1-70000"}}, {{"BRAID_PORT_RANGE", "1-2x"}},
      {{"BRAID_STORE_STANDBY", "elsewhere"}}, {{"BRAID_TLS_KERNEL", "off"}}, {{"BRAID_IB_ZCOPY", "yes"}},
      {{"BRAID_IB_ZCOPY_MIN", "64K"}},        {{"BRAID_IB_ZCOPY_MIN", "-1"}},   {{"BRAID_TCP_ZCOPY", "recv"}},
      {{"BRAID_SHM_CMA", "false"}},           {{"BRAID_UCX_ZCOPY", "no"}},      {{"BRAID_UCX_REDUCE_ON_ARRIVAL", "always"}}};
  for (const auto& env : bad) {
    auto c = parse(env);
    const auto& [name, value] = *env.begin();
    INFO(name << "=" << value);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.status().code() == Code::kInvalidArgument);
    CHECK(c.status().message().find(name) != std::string::npos);
    CHECK(c.status().message().find(value) != std::string::npos);
  }
}

// What a rank whose own settings are refused joins with, to tell the others why.
TEST_CASE("fromEnvLenient keeps the valid knobs and leaves the refused ones at their defaults", "[unit]") {
  const std::map<std::string, std::string> env = {{"BRAID_TIMEOUT", "7"},      {"BRAID_NSLOTS", "abc"},
                                                  {"BRAID_TLS", "1"},          {"BRAID_SLOT_BYTES", "1"},
                                                  {"BRAID_SOCKETS_PER_PEER", "2"}};
  auto get = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  REQUIRE(!Config::fromEnv(get).isOk());
  Config c = Config::fromEnvLenient(get);
  CHECK(c.timeoutSec == 7);
  CHECK(c.tls);
  CHECK(c.socketsPerPeer == 2);
  CHECK(c.nslots == 0);     // refused: the default
  CHECK(c.slotBytes == 0);  // refused too
  // Nothing refused: the same as fromEnv.
  Config plain = Config::fromEnvLenient([](const char* n) -> const char* {
    return std::string(n) == "BRAID_NSLOTS" ? "16" : nullptr;
  });
  CHECK(plain.nslots == 16);
}

TEST_CASE("parseSize accepts binary suffixes and rejects garbage", "[unit]") {
  size_t v = 0;
  CHECK((braid::core::parseSize("4096", &v) && v == 4096));
  CHECK((braid::core::parseSize("8K", &v) && v == 8192));
  CHECK((braid::core::parseSize("2M", &v) && v == 2u << 20));
  CHECK((braid::core::parseSize("1GB", &v) && v == 1u << 30));
  CHECK_FALSE(braid::core::parseSize("", &v));
  CHECK_FALSE(braid::core::parseSize("-5", &v));
  CHECK_FALSE(braid::core::parseSize("5X", &v));
  CHECK_FALSE(braid::core::parseSize("99999999999999999999", &v));
  CHECK_FALSE(braid::core::parseSize("17179869184G", &v));
}

TEST_CASE("the config table lists every knob once, each with help", "[unit]") {
  std::set<std::string> names;
  for (const auto& e : braid::core::configTable()) {
    CHECK(names.insert(e.name).second);
    CHECK(std::string(e.help).size() > 10);
  }
  CHECK(names.count("BRAID_TIMEOUT"));
  CHECK(names.count("BRAID_TRANSPORT"));
}
