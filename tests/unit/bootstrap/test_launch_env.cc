// detectLaunchEnv with injected environments: every launcher, precedence between them, and
// every malformed value (the message must name the variable and its value).

#include <map>
#include <string>

#include "bootstrap/launch_env.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {

using Env = std::map<std::string, std::string>;

// `env` as the process environment, for the strict and the lenient form.
std::function<const char*(const char*)> reading(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}
StatusOr<LaunchEnv> detect(const Env& env) { return detectLaunchEnv(reading(env)); }
StatusOr<LaunchEnv> lenient(const Env& env) { return detectLaunchEnvLenient(reading(env)); }

// A refusal the lenient form keeps (placeError, rankError) says `why`, and the strict form
// refuses the same environment with the same reason.
void checkKeptRefusal(const Status& kept, const Env& env, const std::string& why) {
  REQUIRE_FALSE(kept.isOk());
  CHECK(kept.code() == Code::kInvalidArgument);
  CHECK(kept.message().find(why) != std::string::npos);
  auto strict = detect(env);
  REQUIRE_FALSE(strict.isOk());
  CHECK(strict.status().message() == kept.message());
}

// `env` with `k` set to `v`, or with `k` removed.
Env with(Env env, const std::string& k, const std::string& v) {
  env[k] = v;
  return env;
}
Env without(Env env, const std::string& k) {
  env.erase(k);
  return env;
}

// Asserts an invalid-argument failure whose message contains every one of `needles`.
void checkFails(const Env& env, std::initializer_list<std::string> needles) {
  auto r = detect(env);
  REQUIRE_FALSE(r.isOk());
  INFO(r.status().message());
  CHECK(r.status().code() == Code::kInvalidArgument);
  for (const auto& n : needles) CHECK(r.status().message().find(n) != std::string::npos);
}

Env braidEnv() {
  return {{"BRAID_RANK", "2"}, {"BRAID_WORLD_SIZE", "4"}, {"BRAID_STORE_ADDR", "10.0.0.1:29400"}};
}
// As horovodrun --gloo sets it (gloo_run.py), for rank 1 of 4 on two hosts.
Env horovodEnv() {
  return {{"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "4"}, {"HOROVOD_LOCAL_RANK", "1"}, {"HOROVOD_LOCAL_SIZE", "2"},
          {"HOROVOD_CROSS_RANK", "0"}, {"HOROVOD_CROSS_SIZE", "2"}, {"HOROVOD_HOSTNAME", "localhost"},
          {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.1.2.3"}, {"HOROVOD_GLOO_RENDEZVOUS_PORT", "40123"},
          {"HOROVOD_CONTROLLER", "gloo"}, {"HOROVOD_CPU_OPERATIONS", "gloo"}, {"HOROVOD_GLOO_IFACE", "eth0"}};
}
Env torchEnv() {
  return {{"RANK", "1"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
          {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}};
}
Env ompiEnv() {
  return {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "head"}, {"MASTER_PORT", "1234"}};
}
Env slurmEnv() {
  return {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "0"}, {"BRAID_STORE_ADDR", "n1:5000"}};
}

}  // namespace

TEST_CASE("launch env: braidrun", "[bootstrap][launch_env]") {
  auto e = detect(braidEnv());
  REQUIRE(e.isOk());
  CHECK(e->source == "braid");
  CHECK(e->rank == 2);
  CHECK(e->worldSize == 4);
  CHECK(e->localRank == -1);
  CHECK(e->localSize == -1);
  CHECK(e->storeHost == "10.0.0.1");
  CHECK(e->storePort == 29400);
  CHECK_FALSE(e->serveStore);

  Env env = braidEnv();
  env["BRAID_RANK"] = "0";
  env["BRAID_LOCAL_RANK"] = "0";
  env["BRAID_LOCAL_SIZE"] = "4";
  auto r0 = detect(env);
  REQUIRE(r0.isOk());
  CHECK(r0->serveStore);  // rank 0 hosts the store...
  CHECK(r0->localRank == 0);
  CHECK(r0->localSize == 4);
  env["BRAID_STORE_EXTERNAL"] = "1";
  CHECK_FALSE(detect(env)->serveStore);  // ...unless braidrun does
  env["BRAID_STORE_EXTERNAL"] = "0";
  CHECK(detect(env)->serveStore);
}

TEST_CASE("launch env: horovodrun --gloo", "[bootstrap][launch_env]") {
  auto e = detect(horovodEnv());
  REQUIRE(e.isOk());
  CHECK(e->source == "horovod");
  CHECK(e->rank == 1);
  CHECK(e->worldSize == 4);
  CHECK(e->localRank == 1);
  CHECK(e->localSize == 2);
  // No store address yet: it comes through horovodrun's key-value server.
  CHECK(e->storeHost.empty());
  CHECK(e->storePort == 0);
  CHECK_FALSE(e->serveStore);
  CHECK(e->kvHost == "10.1.2.3");
  CHECK(e->kvPort == 40123);
  CHECK(e->kvScope == "braid");
  CHECK(e->kvKey == "store.n4");

  Env env = horovodEnv();
  env["HOROVOD_RANK"] = "0";
  env["HOROVOD_LOCAL_RANK"] = "0";
  auto r0 = detect(env);
  REQUIRE(r0.isOk());
  CHECK(r0->serveStore);  // rank 0 serves, on a port it picks and publishes
  CHECK(r0->storePort == 0);
  env["HOROVOD_ELASTIC"] = "0";
  CHECK(detect(env).isOk());
  CHECK_FALSE(detect(env)->horovodElastic);
  // horovodrun --min-np/--max-np: a later init asks its driver for its place, under its host
  // name (Horovod's default "localhost" when it gives none).
  env["HOROVOD_ELASTIC"] = "1";
  auto el = detect(env);
  REQUIRE(el.isOk());
  CHECK(el->horovodElastic);
  CHECK(el->hvdHostname == "localhost");
  env["HOROVOD_HOSTNAME"] = "node7";
  CHECK(detect(env)->hvdHostname == "node7");
  env["BRAID_STORE_ADDR"] = "head:6000";
  auto refused = detect(env);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.status().message().find("unset BRAID_STORE_ADDR") != std::string::npos);
  env.erase("BRAID_STORE_ADDR");
  env.erase("HOROVOD_HOSTNAME");
  env["HOROVOD_ELASTIC"] = "0";

  // BRAID_STORE_ADDR names the store outright; the key-value server is not used.
  env["BRAID_STORE_ADDR"] = "head:6000";
  auto fixed = detect(env);
  REQUIRE(fixed.isOk());
  CHECK(fixed->storeHost == "head");
  CHECK(fixed->storePort == 6000);
  CHECK(fixed->serveStore);
  CHECK(fixed->kvHost.empty());

  // Only the rank variables are needed besides the server: the others are optional.
  Env minimal = {{"HOROVOD_RANK", "0"}, {"HOROVOD_SIZE", "1"}, {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "h"},
                 {"HOROVOD_GLOO_RENDEZVOUS_PORT", "1"}};
  auto m = detect(minimal);
  REQUIRE(m.isOk());
  CHECK(m->localRank == -1);
  CHECK(m->kvKey == "store.n1");
}

TEST_CASE("launch env: torchrun", "[bootstrap][launch_env]") {
  auto e = detect(torchEnv());
  REQUIRE(e.isOk());
  CHECK(e->source == "torchrun");
  CHECK(e->rank == 1);
  CHECK(e->worldSize == 8);
  CHECK(e->localRank == 1);
  CHECK(e->localSize == 4);
  CHECK(e->storeHost == "node0");
  CHECK(e->storePort == 29500);
  CHECK_FALSE(e->serveStore);

  Env env = torchEnv();
  env["RANK"] = "0";
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";  // torch's agent store holds MASTER_PORT
  auto r0 = detect(env);
  REQUIRE(r0.isOk());
  CHECK(r0->storePort == 29501);
  CHECK(r0->serveStore);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK(detect(env)->storePort == 29500);
}

TEST_CASE("launch env: OpenMPI and Slurm", "[bootstrap][launch_env]") {
  auto o = detect(ompiEnv());
  REQUIRE(o.isOk());
  CHECK(o->source == "openmpi");
  CHECK(o->rank == 3);
  CHECK(o->worldSize == 4);
  CHECK(o->localRank == 1);
  CHECK(o->localSize == 2);
  CHECK(o->storeHost == "head");
  CHECK(o->storePort == 1234);
  CHECK_FALSE(o->serveStore);

  Env ompi = ompiEnv();
  ompi["BRAID_STORE_ADDR"] = "other:7777";  // BRAID_STORE_ADDR wins over MASTER_*
  CHECK(detect(ompi)->storeHost == "other");
  CHECK(detect(ompi)->storePort == 7777);

  auto s = detect(slurmEnv());
  REQUIRE(s.isOk());
  CHECK(s->source == "slurm");
  CHECK(s->rank == 0);
  CHECK(s->worldSize == 16);
  CHECK(s->localRank == 0);
  CHECK(s->localSize == -1);
  CHECK(s->storeHost == "n1");
  CHECK(s->storePort == 5000);
  CHECK(s->serveStore);
  Env slurm = slurmEnv();
  slurm["BRAID_STORE_EXTERNAL"] = "true";
  CHECK_FALSE(detect(slurm)->serveStore);
  slurm.erase("BRAID_STORE_ADDR");
  slurm.erase("BRAID_STORE_EXTERNAL");
  slurm["MASTER_ADDR"] = "m";
  slurm["MASTER_PORT"] = "99";
  CHECK(detect(slurm)->storePort == 99);
}

// braidrun sets HOROVOD_* beside BRAID_*, so braid's come first; horovodrun sets nothing
// else, but generic RANK or SLURM_* may be inherited from around it, so Horovod's come next.
TEST_CASE("launch env: precedence braid > horovod > torchrun > OpenMPI > Slurm", "[bootstrap][launch_env]") {
  Env all;
  for (const Env& e : {slurmEnv(), ompiEnv(), torchEnv(), horovodEnv(), braidEnv()})
    for (const auto& [k, v] : e) all[k] = v;
  CHECK(detect(all)->source == "braid");
  for (const char* k : {"BRAID_RANK", "BRAID_WORLD_SIZE"}) all.erase(k);
  CHECK(detect(all)->source == "horovod");
  for (const char* k : {"HOROVOD_RANK", "HOROVOD_SIZE"}) all.erase(k);
  CHECK(detect(all)->source == "torchrun");
  for (const char* k : {"RANK", "WORLD_SIZE"}) all.erase(k);
  CHECK(detect(all)->source == "openmpi");
  for (const char* k : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}) all.erase(k);
  CHECK(detect(all)->source == "slurm");
}

TEST_CASE("launch env: no launcher is a world of size 1", "[bootstrap][launch_env]") {
  for (const Env& env : {Env{}, Env{{"BRAID_RANK", ""}, {"PATH", "/bin"}}}) {  // empty = unset
    auto r = detect(env);
    INFO(r.status().toString());
    REQUIRE(r.isOk());
    CHECK(r->source == "none");
    CHECK(r->rank == 0);
    CHECK(r->worldSize == 1);
    CHECK(r->localRank == 0);
    CHECK(r->localSize == 1);
    CHECK(r->storeHost.empty());
    CHECK_FALSE(r->serveStore);
  }
  // What the log line names as looked for.
  for (const char* n : {"BRAID_RANK", "HOROVOD_RANK", "RANK/WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    CHECK(std::string(kLauncherVariables).find(n) != std::string::npos);
  // A launcher that is there but incomplete is still an error, not a world of one.
  checkFails({{"BRAID_RANK", "0"}}, {"BRAID_WORLD_SIZE"});
}

TEST_CASE("launch env: malformed values name the variable and value", "[bootstrap][launch_env]") {
  SECTION("braid") {
    checkFails(with(braidEnv(), "BRAID_RANK", "two"), {"BRAID_RANK='two'", "not an integer"});
    checkFails(with(braidEnv(), "BRAID_RANK", "1x"), {"BRAID_RANK='1x'"});
    checkFails(with(braidEnv(), "BRAID_RANK", "-1"), {"BRAID_RANK='-1'", "negative"});
    checkFails(with(braidEnv(), "BRAID_RANK", "4"), {"BRAID_RANK=4", "BRAID_WORLD_SIZE=4"});
    checkFails(with(braidEnv(), "BRAID_RANK", "99999999999999999999"), {"BRAID_RANK="});
    checkFails(with(braidEnv(), "BRAID_WORLD_SIZE", "0"), {"BRAID_WORLD_SIZE='0'"});
    checkFails(without(braidEnv(), "BRAID_WORLD_SIZE"), {"BRAID_WORLD_SIZE is not set"});
    checkFails(without(braidEnv(), "BRAID_RANK"), {"BRAID_RANK is not set"});
    checkFails(without(braidEnv(), "BRAID_STORE_ADDR"), {"BRAID_STORE_ADDR is not set"});
    checkFails(with(braidEnv(), "BRAID_STORE_ADDR", "nohost"), {"BRAID_STORE_ADDR='nohost'", "host:port"});
    checkFails(with(braidEnv(), "BRAID_STORE_ADDR", ":80"), {"BRAID_STORE_ADDR=':80'", "no host"});
    checkFails(with(braidEnv(), "BRAID_STORE_ADDR", "h:http"), {"BRAID_STORE_ADDR='h:http'", "bad port"});
    checkFails(with(braidEnv(), "BRAID_STORE_ADDR", "h:0"), {"BRAID_STORE_ADDR='h:0'"});
    checkFails(with(braidEnv(), "BRAID_STORE_ADDR", "h:65536"), {"BRAID_STORE_ADDR='h:65536'"});
    checkFails(with(braidEnv(), "BRAID_STORE_EXTERNAL", "maybe"), {"BRAID_STORE_EXTERNAL='maybe'"});
    checkFails(with(braidEnv(), "BRAID_LOCAL_RANK", "-3"), {"BRAID_LOCAL_RANK='-3'"});
    checkFails(with(with(braidEnv(), "BRAID_LOCAL_RANK", "2"), "BRAID_LOCAL_SIZE", "2"),
               {"BRAID_LOCAL_RANK=2", "BRAID_LOCAL_SIZE=2"});
    checkFails(with(braidEnv(), "BRAID_LOCAL_SIZE", "5"), {"BRAID_LOCAL_SIZE=5", "BRAID_WORLD_SIZE=4"});
    checkFails(with(braidEnv(), "BRAID_LOCAL_SIZE", "0"), {"BRAID_LOCAL_SIZE='0'"});
  }
  SECTION("horovod") {
    checkFails(with(horovodEnv(), "HOROVOD_RANK", "one"), {"HOROVOD_RANK='one'", "not an integer"});
    checkFails(with(horovodEnv(), "HOROVOD_RANK", "-1"), {"HOROVOD_RANK='-1'", "negative"});
    checkFails(with(horovodEnv(), "HOROVOD_RANK", "4"), {"HOROVOD_RANK=4", "HOROVOD_SIZE=4"});
    checkFails(with(horovodEnv(), "HOROVOD_SIZE", "0"), {"HOROVOD_SIZE='0'"});
    checkFails(without(horovodEnv(), "HOROVOD_SIZE"), {"HOROVOD_SIZE is not set"});
    checkFails(without(horovodEnv(), "HOROVOD_RANK"), {"HOROVOD_RANK is not set"});
    checkFails(with(horovodEnv(), "HOROVOD_LOCAL_RANK", "x1"), {"HOROVOD_LOCAL_RANK='x1'"});
    checkFails(with(horovodEnv(), "HOROVOD_LOCAL_RANK", "2"), {"HOROVOD_LOCAL_RANK=2", "HOROVOD_LOCAL_SIZE=2"});
    checkFails(with(horovodEnv(), "HOROVOD_LOCAL_SIZE", "5"), {"HOROVOD_LOCAL_SIZE=5", "HOROVOD_SIZE=4"});
    checkFails(with(horovodEnv(), "HOROVOD_CROSS_RANK", "a"), {"HOROVOD_CROSS_RANK='a'"});
    checkFails(with(horovodEnv(), "HOROVOD_CROSS_RANK", "2"), {"HOROVOD_CROSS_RANK=2", "HOROVOD_CROSS_SIZE=2"});
    checkFails(with(horovodEnv(), "HOROVOD_CROSS_SIZE", "5"), {"HOROVOD_CROSS_SIZE=5", "HOROVOD_SIZE=4"});
    checkFails(with(horovodEnv(), "HOROVOD_CROSS_SIZE", "0"), {"HOROVOD_CROSS_SIZE='0'"});
    checkFails(with(horovodEnv(), "HOROVOD_ELASTIC", "sometimes"), {"HOROVOD_ELASTIC='sometimes'"});
    checkFails(without(horovodEnv(), "HOROVOD_GLOO_RENDEZVOUS_ADDR"),
               {"HOROVOD_GLOO_RENDEZVOUS_ADDR is not set", "BRAID_STORE_ADDR"});
    checkFails(without(horovodEnv(), "HOROVOD_GLOO_RENDEZVOUS_PORT"), {"HOROVOD_GLOO_RENDEZVOUS_PORT is not set"});
    checkFails(with(horovodEnv(), "HOROVOD_GLOO_RENDEZVOUS_PORT", "http"), {"HOROVOD_GLOO_RENDEZVOUS_PORT='http'"});
    checkFails(with(horovodEnv(), "HOROVOD_GLOO_RENDEZVOUS_PORT", "0"), {"HOROVOD_GLOO_RENDEZVOUS_PORT='0'"});
    checkFails(with(horovodEnv(), "HOROVOD_GLOO_RENDEZVOUS_PORT", "65536"), {"HOROVOD_GLOO_RENDEZVOUS_PORT='65536'"});
    checkFails(with(horovodEnv(), "HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.1.2.3:80"),
               {"HOROVOD_GLOO_RENDEZVOUS_ADDR='10.1.2.3:80'"});
    checkFails(with(horovodEnv(), "BRAID_STORE_ADDR", "head"), {"BRAID_STORE_ADDR='head'"});
  }
  SECTION("torchrun") {
    checkFails(with(torchEnv(), "RANK", "abc"), {"RANK='abc'"});
    checkFails(with(torchEnv(), "RANK", "8"), {"RANK=8", "WORLD_SIZE=8"});
    checkFails(with(torchEnv(), "WORLD_SIZE", "-8"), {"WORLD_SIZE='-8'"});
    checkFails(without(torchEnv(), "WORLD_SIZE"), {"WORLD_SIZE is not set"});
    checkFails(without(torchEnv(), "RANK"), {"RANK is not set"});
    checkFails(without(torchEnv(), "MASTER_ADDR"), {"MASTER_ADDR is not set"});
    checkFails(without(torchEnv(), "MASTER_PORT"), {"MASTER_PORT is not set"});
    checkFails(with(torchEnv(), "MASTER_PORT", "99999"), {"MASTER_PORT='99999'"});
    checkFails(with(torchEnv(), "MASTER_PORT", "port"), {"MASTER_PORT='port'"});
    checkFails(with(torchEnv(), "LOCAL_RANK", "x"), {"LOCAL_RANK='x'"});
    checkFails(with(torchEnv(), "LOCAL_RANK", "4"), {"LOCAL_RANK=4", "LOCAL_WORLD_SIZE=4"});
    checkFails(with(torchEnv(), "LOCAL_WORLD_SIZE", "nine"), {"LOCAL_WORLD_SIZE='nine'"});
    checkFails(with(torchEnv(), "TORCHELASTIC_USE_AGENT_STORE", "perhaps"), {"TORCHELASTIC_USE_AGENT_STORE='perhaps'"});
    checkFails(with(with(torchEnv(), "TORCHELASTIC_USE_AGENT_STORE", "True"), "MASTER_PORT", "65535"),
               {"MASTER_PORT='65535'"});
  }
  SECTION("OpenMPI") {
    checkFails(with(ompiEnv(), "OMPI_COMM_WORLD_RANK", "r"), {"OMPI_COMM_WORLD_RANK='r'"});
    checkFails(with(ompiEnv(), "OMPI_COMM_WORLD_RANK", "4"), {"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4"});
    checkFails(without(ompiEnv(), "OMPI_COMM_WORLD_SIZE"), {"OMPI_COMM_WORLD_SIZE is not set"});
    checkFails(with(ompiEnv(), "OMPI_COMM_WORLD_LOCAL_RANK", "-1"), {"OMPI_COMM_WORLD_LOCAL_RANK='-1'"});
    checkFails(with(ompiEnv(), "OMPI_COMM_WORLD_LOCAL_SIZE", "z"), {"OMPI_COMM_WORLD_LOCAL_SIZE='z'"});
    checkFails(without(without(ompiEnv(), "MASTER_ADDR"), "MASTER_PORT"), {"BRAID_STORE_ADDR", "MASTER_ADDR"});
    checkFails(without(ompiEnv(), "MASTER_PORT"), {"MASTER_PORT is not set"});
    checkFails(without(ompiEnv(), "MASTER_ADDR"), {"MASTER_ADDR is not set"});
    checkFails(with(ompiEnv(), "BRAID_STORE_ADDR", "bad"), {"BRAID_STORE_ADDR='bad'"});
  }
  SECTION("Slurm") {
    checkFails(with(slurmEnv(), "SLURM_PROCID", "first"), {"SLURM_PROCID='first'"});
    checkFails(with(slurmEnv(), "SLURM_PROCID", "16"), {"SLURM_PROCID=16", "SLURM_NTASKS=16"});
    checkFails(with(slurmEnv(), "SLURM_NTASKS", "0"), {"SLURM_NTASKS='0'"});
    checkFails(without(slurmEnv(), "SLURM_NTASKS"), {"SLURM_NTASKS is not set"});
    checkFails(with(slurmEnv(), "SLURM_LOCALID", "-2"), {"SLURM_LOCALID='-2'"});
    checkFails(without(slurmEnv(), "BRAID_STORE_ADDR"), {"Slurm", "BRAID_STORE_ADDR", "MASTER_ADDR"});
    checkFails(with(slurmEnv(), "BRAID_STORE_ADDR", "n1:-5"), {"BRAID_STORE_ADDR='n1:-5'"});
  }
}

// The lenient form keeps the rank, the world size and the store when only a variable that
// places the rank on its host is refused (the rank joins to tell the others why), and still
// fails on anything else.
TEST_CASE("launch env: a refused local placement is left in placeError by the lenient form", "[bootstrap][launch_env]") {
  struct Case {
    Env env;
    int rank, worldSize;
    const char* storeHost;
    const char* why;
  };
  for (const Case& c :
       {Case{with(braidEnv(), "BRAID_LOCAL_SIZE", "5"), 2, 4, "10.0.0.1", "BRAID_LOCAL_SIZE=5 exceeds BRAID_WORLD_SIZE=4"},
        Case{with(horovodEnv(), "HOROVOD_CROSS_RANK", "2"), 1, 4, "", "HOROVOD_CROSS_RANK=2 must be less than"},
        Case{with(horovodEnv(), "HOROVOD_LOCAL_RANK", "x1"), 1, 4, "", "HOROVOD_LOCAL_RANK='x1'"},
        Case{with(torchEnv(), "LOCAL_WORLD_SIZE", "9"), 1, 8, "node0", "LOCAL_WORLD_SIZE=9 exceeds WORLD_SIZE=8"},
        Case{with(torchEnv(), "LOCAL_RANK", "4"), 1, 8, "node0", "LOCAL_RANK=4 must be less than LOCAL_WORLD_SIZE=4"},
        Case{with(ompiEnv(), "OMPI_COMM_WORLD_LOCAL_SIZE", "z"), 3, 4, "head", "OMPI_COMM_WORLD_LOCAL_SIZE='z'"},
        Case{with(slurmEnv(), "SLURM_LOCALID", "-2"), 0, 16, "n1", "SLURM_LOCALID='-2'"}}) {
    INFO(c.why);
    auto e = lenient(c.env);
    REQUIRE(e.isOk());
    CHECK(e.value().rank == c.rank);
    CHECK(e.value().worldSize == c.worldSize);
    CHECK(e.value().storeHost == c.storeHost);
    checkKeptRefusal(e.value().placeError, c.env, c.why);
  }
  auto sound = lenient(torchEnv());
  REQUIRE(sound.isOk());
  CHECK(sound.value().placeError.isOk());
  CHECK_FALSE(lenient(without(torchEnv(), "MASTER_PORT")).isOk());
}

// Under torchrun's variables (often written by hand) a process whose own RANK is refused
// keeps the world size and the store in the lenient form, so that it can tell the job why
// no process joins as the rank it should have been; rankError says why, and the strict form
// refuses it with the same reason. Without a store it has nobody to tell: the rank's reason
// is the error, not the store's.
TEST_CASE("launch env: a refused torchrun RANK is left in rankError, with the store", "[bootstrap][launch_env]") {
  struct Case {
    Env env;
    const char* why;
  };
  for (const Case& c : {Case{with(torchEnv(), "RANK", "8"), "RANK=8 must be less than WORLD_SIZE=8"},
                        Case{with(torchEnv(), "RANK", "x1"), "RANK='x1' is not an integer"},
                        Case{with(torchEnv(), "RANK", "-1"), "RANK='-1' must not be negative"},
                        Case{without(torchEnv(), "RANK"), "torchrun launch: RANK is not set"}}) {
    INFO(c.why);
    auto e = lenient(c.env);
    REQUIRE(e.isOk());
    CHECK(e.value().rank == -1);
    CHECK(e.value().worldSize == 8);
    CHECK(e.value().storeHost == "node0");
    CHECK(e.value().storePort == 29500);
    CHECK(e.value().rankZeroServes);
    CHECK_FALSE(e.value().serveStore);
    checkKeptRefusal(e.value().rankError, c.env, c.why);
    // No store to tell: the rank's own reason, not the missing variable.
    auto alone = lenient(without(c.env, "MASTER_PORT"));
    REQUIRE_FALSE(alone.isOk());
    CHECK(alone.status().message() == e.value().rankError.message());
  }
  // An etcd store (BRAID_STORE) stands for MASTER_ADDR/MASTER_PORT.
  auto etcd = lenient(with(with(torchEnv(), "RANK", "9"), "BRAID_STORE", "etcd://127.0.0.1:2379/jobs"));
  REQUIRE(etcd.isOk());
  CHECK(etcd.value().storeUrl == "etcd://127.0.0.1:2379/jobs");
  CHECK_FALSE(etcd.value().rankError.isOk());
  // A sound RANK leaves rankError ok.
  auto sound = lenient(torchEnv());
  REQUIRE(sound.isOk());
  CHECK(sound.value().rankError.isOk());
  CHECK(sound.value().rank == 1);
}

TEST_CASE("launch env: srun and a one-host mpirun find the store with no address given", "[bootstrap][launch_env]") {
  SECTION("Slurm: the step's first node, a port from the job and step ids") {
    Env e = without(slurmEnv(), "BRAID_STORE_ADDR");
    e["SLURM_PROCID"] = "5";
    e["SLURM_JOB_ID"] = "123456";
    e["SLURM_STEP_ID"] = "2";
    e["SLURM_JOB_NODELIST"] = "login1,gpu[07-10]";
    e["SLURM_STEP_NODELIST"] = "gpu[07-10,12],login1";
    auto r = detect(e);
    INFO(r.status().toString());
    REQUIRE(r.isOk());
    CHECK(r->storeHost == "gpu07");
    CHECK(r->storePort == 20000 + static_cast<int>((123456ull * 8 + 2) % 12768));
    CHECK(r->rankZeroServes);
    CHECK_FALSE(r->serveStore);  // rank 5
    e.erase("SLURM_STEP_NODELIST");
    e.erase("SLURM_STEP_ID");
    auto j = detect(e);
    REQUIRE(j.isOk());
    CHECK(j->storeHost == "login1");
    CHECK(j->storePort == 20000 + static_cast<int>((123456ull * 8) % 12768));
    e["SLURM_PROCID"] = "0";
    CHECK(detect(e)->serveStore);
    e["SLURM_JOB_NODELIST"] = "r[1-2]n[3-4]";
    CHECK(detect(e)->storeHost == "r1n3");
    e["SLURM_JOB_NODELIST"] = "gpu[07";
    checkFails(e, {"SLURM_JOB_NODELIST='gpu[07' is not a Slurm host list", "BRAID_STORE_ADDR"});
    e.erase("SLURM_JOB_NODELIST");
    checkFails(e, {"SLURM_JOB_NODELIST is not set", "BRAID_STORE_ADDR"});
  }
  SECTION("OpenMPI on one host: loopback, a port from mpirun's job id") {
    Env e = without(without(ompiEnv(), "MASTER_ADDR"), "MASTER_PORT");
    e["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4";
    e["OMPI_COMM_WORLD_LOCAL_RANK"] = "3";
    e["OMPI_MCA_ess_base_jobid"] = "2089877505";
    auto r = detect(e);
    INFO(r.status().toString());
    REQUIRE(r.isOk());
    CHECK(r->storeHost == "127.0.0.1");
    CHECK(r->storePort == 20000 + static_cast<int>((2089877505ull * 8) % 12768));
    CHECK(r->rankZeroServes);
    // Across hosts OpenMPI's variables do not say where rank 0 runs: the address goes
    // through the PMIx server when there is one ...
    e["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
    e["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
    e["PMIX_NAMESPACE"] = "2089877505";
    e["PMIX_RANK"] = "3";
    auto p = detect(e);
    INFO(p.status().toString());
    REQUIRE(p.isOk());
    CHECK(p->pmixKey == "braid.store.n4");
    CHECK(p->storeHost.empty());
    CHECK(p->storePort == 0);
    CHECK(p->rankZeroServes);
    CHECK_FALSE(p->serveStore);  // rank 3
    e["OMPI_COMM_WORLD_RANK"] = "0";
    e["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
    CHECK(detect(e)->serveStore);
    e["OMPI_COMM_WORLD_RANK"] = "3";
    e["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
    // ... an address given wins over it ...
    e["MASTER_ADDR"] = "node1";
    e["MASTER_PORT"] = "29500";
    CHECK(detect(e)->pmixKey.empty());
    CHECK(detect(e)->storeHost == "node1");
    e.erase("MASTER_ADDR");
    e.erase("MASTER_PORT");
    // ... and without either the error says what to pass.
    e.erase("PMIX_NAMESPACE");
    checkFails(e, {"span several hosts", "PMIx", "-x MASTER_ADDR", "BRAID_STORE_ADDR"});
    e["PMIX_NAMESPACE"] = "2089877505";
    e["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4";
    CHECK(detect(e)->pmixKey.empty());  // one host: loopback as above, no PMIx
  }
}

TEST_CASE("launch env: a published store address is split like BRAID_STORE_ADDR", "[bootstrap][launch_env]") {
  std::string host = "unchanged";
  int port = -1;
  REQUIRE(parseStoreAddress("braid/store.n4.i0", "10.0.0.7:41000", &host, &port).isOk());
  CHECK(host == "10.0.0.7");
  CHECK(port == 41000);
  for (const char* bad : {"10.0.0.7", "10.0.0.7:", ":41000", "10.0.0.7:99999", "h:p"}) {
    INFO(bad);
    Status s = parseStoreAddress("braid/store.n4.i0", bad, &host, &port);
    REQUIRE_FALSE(s.isOk());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find(std::string("braid/store.n4.i0='") + bad + "'") != std::string::npos);
  }
  CHECK(host == "10.0.0.7");  // left alone by the failures
  CHECK(port == 41000);
}

TEST_CASE("launch env: BRAID_STORE names an etcd store under every launcher", "[bootstrap][launch_env][etcd]") {
  const std::string url = "etcd://10.0.0.9:2379,10.0.0.10:2379/jobs";
  struct Case {
    Env env;
    std::string tag;
  };
  const Case cases[] = {
      // braidrun's variables, its store address ignored.
      {{{"BRAID_RANK", "1"}, {"BRAID_WORLD_SIZE", "4"}, {"BRAID_STORE_ADDR", "10.0.0.1:29400"},
        {"BRAID_JOB_ID", "0123abcd"}},
       "0123abcd"},
      // By hand: no store address at all.
      {{{"BRAID_RANK", "1"}, {"BRAID_WORLD_SIZE", "4"}}, ""},
      // torchrun without MASTER_ADDR; its default run id "none" tells no runs apart.
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"TORCHELASTIC_RUN_ID", "none"}}, ""},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"TORCHELASTIC_RUN_ID", "job/7 x"}, {"TORCHELASTIC_RESTART_COUNT", "2"}},
       "job_7_x.2"},
      {{{"HOROVOD_RANK", "1"}, {"HOROVOD_SIZE", "4"}}, ""},
      // mpirun across hosts, with no PMIx server and no MASTER_ADDR.
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
        {"OMPI_MCA_ess_base_jobid", "3735879681"}},
       "3735879681"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "881"}, {"SLURM_STEP_ID", "3"}}, "881.3"},
  };
  for (const Case& c : cases) {
    Env env = c.env;
    env["BRAID_STORE"] = url;
    auto e = detect(env);
    INFO(e.status().toString());
    REQUIRE(e.isOk());
    CHECK(e.value().rank == 1);
    CHECK(e.value().worldSize == 4);
    CHECK(e.value().storeUrl == url);
    CHECK(e.value().storeHost.empty());
    CHECK(e.value().kvHost.empty());
    CHECK(e.value().pmixKey.empty());
    CHECK_FALSE(e.value().serveStore);
    CHECK_FALSE(e.value().rankZeroServes);
    CHECK(e.value().jobTag == c.tag);
  }
  Env bad = braidEnv();
  bad["BRAID_STORE"] = "etcd://10.0.0.9:2379";
  checkFails(bad, {"BRAID_STORE", "etcd://10.0.0.9:2379", "prefix"});
  bad["BRAID_STORE"] = "redis://h:1/x";
  checkFails(bad, {"BRAID_STORE", "redis://h:1/x"});
}

TEST_CASE("horovodrun's elastic answer to rank_and_size becomes the rank's place", "[launch]") {
  LaunchEnv e;
  e.rank = 3;
  e.worldSize = 4;
  int cross[2] = {-1, -1};
  REQUIRE(parseHorovodSlot("rank_and_size", "2,5,0,2,1,3", &e, cross).isOk());
  CHECK(e.rank == 2);
  CHECK(e.worldSize == 5);
  CHECK(e.localRank == 0);
  CHECK(e.localSize == 2);
  CHECK(cross[0] == 1);
  CHECK(cross[1] == 3);
  CHECK(e.kvKey == "store.n5");

  auto fails = [&](const std::string& v, const char* needle) {
    LaunchEnv x;
    auto s = parseHorovodSlot("rank_and_size/h:0", v, &x, cross);
    REQUIRE_FALSE(s.isOk());
    CHECK(s.code() == Code::kInvalidArgument);
    INFO(s.message());
    CHECK(s.message().find("rank_and_size/h:0") != std::string::npos);
    CHECK(s.message().find(needle) != std::string::npos);
  };
  fails("-1,-1,-1,-1,-1,-1", "removed this slot");
  fails("5,5,0,1,0,1", "rank 5 of 5");
  fails("0,2,2,2,0,1", "local 2 of 2");
  fails("0,2,0,1,0,3", "cross 0 of 3");
  fails("1,2,0,1,0", "six integers");
  fails("1,2,0,1,0,1,7", "six integers");
  fails("1,2,x,1,0,1", "six integers");
  fails("", "six integers");
  fails("1,,0,1,0,1", "six integers");
}
