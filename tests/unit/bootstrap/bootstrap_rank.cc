// A rank program for braidrun tests: finds its place in the job from the environment,
// rendezvouses through the store braidrun hosts, and prints what it saw.
//
//   bootstrap_rank            allGather + barrier across all ranks
//   bootstrap_rank survive    rank 0 leaves after the allGather; the others keep using the
//                             store (braidrun hosts it, so it outlives rank 0)

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bootstrap/launch_env.h"
#include "bootstrap/tcp_store.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {

int fail(int rank, const Status& s) {
  std::printf("rank %d failed: %s\n", rank, s.toString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "gather";
  auto env = detectLaunchEnv([](const char* n) { return std::getenv(n); });
  if (!env.isOk()) return fail(-1, env.status());
  const LaunchEnv& e = env.value();
  if (e.serveStore) return fail(e.rank, Status(Code::kInternal, "braidrun should host the store"));
  // braidrun's store admits only clients that prove the job's key, which it gave us.
  auto key = authKeyFromEnv();
  if (!key.isOk()) return fail(e.rank, key.status());
  if (!key.value().present) return fail(e.rank, Status(Code::kInternal, "braidrun gave no BRAID_AUTH_KEY"));
  auto client = TcpStoreClient::connect(e.storeHost, e.storePort, 0, Deadline::after(20),
                                        TcpStoreClient::kDefaultOpTimeoutSec, key.value());
  if (!client.isOk()) return fail(e.rank, client.status());
  Store& store = *client.value();
  Deadline d = Deadline::after(20);
  auto all = allGather(store, "ag", e.rank, e.worldSize, "r" + std::to_string(e.rank), d);
  if (!all.isOk()) return fail(e.rank, all.status());
  for (int r = 0; r < e.worldSize; ++r)
    if (all.value()[r] != "r" + std::to_string(r)) return fail(e.rank, Status(Code::kInternal, "wrong gather"));
  if (mode == "survive") {
    if (e.rank == 0) return 0;
    usleep(300 * 1000);  // rank 0 is gone by now
    Status b = barrier(store, "rest", e.worldSize - 1, d);
    if (!b.isOk()) return fail(e.rank, b);
  } else {
    Status b = barrier(store, "all", e.worldSize, d);
    if (!b.isOk()) return fail(e.rank, b);
  }
  std::printf("rank %d of %d ok (local %d/%d, from %s)\n", e.rank, e.worldSize, e.localRank, e.localSize,
              e.source.c_str());
  return 0;
}
