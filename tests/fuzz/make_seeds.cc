// Writes the fuzz targets' seed corpora with braid's own encoders, so that every seed is a
// well-formed input the fuzzer mutates from (a fuzzer starting from nothing rarely gets past
// a magic number and a checksum).
//
//   make_seeds OUT_DIR TOPOLOGY_FIXTURES_DIR
//
// writes OUT_DIR/<target>/<name> for every target of tests/fuzz.

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "bootstrap/unique_id.h"
#include "common/auth.h"
#include "topology/discover.h"
#include "topology/graph_json.h"
#include "transports/ibverbs/rdma_protocol.h"
#include "transports/slot_fifo.h"
#include "transports/tcp/socket_util.h"

using namespace braid;
namespace proto = braid::bootstrap::proto;

namespace {

std::string gOut;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = gOut + "/" + target;
  mkdir(gOut.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

std::string request(const proto::Request& r) {
  std::string out;
  if (!proto::encodeRequest(r, &out).isOk()) std::abort();
  return out;
}

std::string reply(const proto::Reply& r) {
  std::string out;
  if (!proto::encodeReply(r, &out).isOk()) std::abort();
  return out;
}

void storeSeeds() {
  using proto::Op;
  auto req = [](Op op) {
    proto::Request r;
    r.op = op;
    return r;
  };
  proto::Request hello = req(Op::kHello);
  hello.nonce = 0x6272616964000001ull;
  proto::Request keyed = hello;
  keyed.challenge = std::string(proto::kChallengeBytes, 'c');
  proto::Request auth = req(Op::kAuth);
  auth.proof = std::string(proto::kProofBytes, 'p');
  proto::Request set = req(Op::kSet);
  set.keys = {"braid/peer/0"};
  set.value = "host\n1234\n99";
  proto::Request get = req(Op::kGet);
  get.keys = {"braid/nonce"};
  get.timeoutMs = 5000;
  proto::Request add = req(Op::kAdd);
  add.keys = {"braid/live"};
  add.delta = -1;
  proto::Request wait = req(Op::kWait);
  wait.keys = {"a", "b", "c"};
  proto::Request check = req(Op::kCheck);
  check.keys = {"a"};
  proto::Request del = req(Op::kDelete);
  del.keys = {"a"};
  proto::Request cas = req(Op::kCompareSet);
  cas.keys = {"braid/agree0/vote/1"};
  cas.value = "V1";
  proto::Request mget = req(Op::kMultiGet);
  mget.keys = {"k0", "k1"};
  mget.timeoutMs = 0;
  proto::Request onClose = req(Op::kSetOnClose);
  onClose.keys = {"braid/gone/1"};
  onClose.value = "1";
  proto::Request cancel = req(Op::kCancelOnClose);
  cancel.keys = {"braid/gone/1"};
  proto::Request fence = req(Op::kFence);
  fence.value = "rank 2 left out";
  fence.clients = {0x1234};
  const std::string r0(1, '\0');
  write("fuzz_store_protocol", "hello", r0 + request(hello));
  write("fuzz_store_protocol", "hello_auth", r0 + request(keyed) + request(auth));
  write("fuzz_store_protocol", "session", r0 + request(hello) + request(set) + request(get) + request(add) +
                                              request(wait) + request(check) + request(del) + request(cas) + request(mget) +
                                              request(onClose) + request(cancel) + request(fence));
  proto::Reply ok;
  proto::Reply value;
  value.op = Op::kValue;
  value.value = "v";
  proto::Reply num;
  num.op = Op::kInt;
  num.number = 7;
  proto::Reply flag;
  flag.op = Op::kBool;
  flag.flag = true;
  proto::Reply timeout;
  timeout.op = Op::kTimeout;
  timeout.value = "k";
  proto::Reply err;
  err.op = Op::kError;
  err.code = Code::kInvalidArgument;
  err.message = "authentication failed";
  proto::Reply values;
  values.op = Op::kValues;
  values.values = {"a", "", "ccc"};
  proto::Reply challenge;
  challenge.op = Op::kChallenge;
  challenge.challenge = std::string(proto::kChallengeBytes, 's');
  challenge.proof = std::string(proto::kProofBytes, 'q');
  const std::string r1(1, '\1');
  write("fuzz_store_protocol", "replies", r1 + reply(ok) + reply(value) + reply(num) + reply(flag) +
                                              reply(timeout) + reply(err) + reply(values));
  write("fuzz_store_protocol", "challenge", r1 + reply(challenge) + reply(ok));
}

void wireSeeds() {
  namespace tcp = transport::tcp;
  tcp::Handshake h;
  h.nonce = 0x1234;
  h.srcRank = 1;
  h.dstRank = 0;
  h.channel = 2;
  h.socketIndex = 0;
  h.socketsPerPeer = 1;
  h.slotBytes = 65536;
  uint8_t buf[tcp::kHandshakeBytes];
  tcp::encodeHandshake(h, buf);
  write("fuzz_wire", "handshake", std::string(reinterpret_cast<char*>(buf), sizeof(buf)));
  AuthKey k = randomAuthKey();
  tcp::signHandshake(k, std::string(tcp::kChallengeBytes, 'c'), &h);
  tcp::encodeHandshake(h, buf);
  write("fuzz_wire", "handshake_signed", std::string(reinterpret_cast<char*>(buf), sizeof(buf)));
  sockaddr_in a{};
  tcp::parseAddress("10.1.2.3:4567", &a);
  write("fuzz_wire", "blob", tcp::formatBlob(a, std::string(tcp::kChallengeBytes, '\x5a')));
  write("fuzz_wire", "address", "127.0.0.1:29500");
  const size_t bytes = transport::SlotFifo::regionBytes(2, 64);
  std::vector<uint64_t> region(bytes / 8 + 1, 0);
  transport::SlotFifo::format(region.data(), 2, 64, 0x1234);
  write("fuzz_wire", "fifo", std::string(reinterpret_cast<char*>(region.data()), bytes));
  // A slot size whose product with the slot count wraps around to something that fits: a
  // FIFO header that once passed SlotFifo::check (the slot size sits at byte 24).
  const uint64_t wrapping = ~uint64_t{0} - 31;
  std::memcpy(reinterpret_cast<char*>(region.data()) + 24, &wrapping, 8);
  write("fuzz_wire", "fifo_wrapping_slot_size", std::string(reinterpret_cast<char*>(region.data()), bytes));
  transport::ibverbs::RecvBlob b;
  b.nonce = 0x1234;
  b.rank = 3;
  b.channel = 1;
  b.nslots = 8;
  b.slotBytes = 4096;
  b.slabAddr = 0x7f0000001000ull;
  b.slabRkey = 77;
  b.data.qpn = 100;
  b.data.mtu = 3;
  b.hello.qpn = 101;
  b.helloQkey = 0x11111111;
  write("fuzz_wire", "rdma_blob", transport::ibverbs::encodeRecvBlob(b));
  transport::ibverbs::SenderHello hl;
  hl.nonce = 0x1234;
  hl.rank = 2;
  hl.channel = 1;
  hl.recvQpn = 100;
  hl.data.qpn = 55;
  hl.data.mtu = 3;
  hl.creditAddr = 0x7f0000002000ull;
  hl.creditRkey = 9;
  write("fuzz_wire", "rdma_hello", transport::ibverbs::encodeHello(hl));
}

void uniqueIdSeeds() {
  bootstrap::UniqueId u;
  u.host = "10.0.0.1";
  u.port = 29500;
  u.nonce = 0xfeedfacecafebeefull;
  u.key = randomAuthKey();
  char id[bootstrap::kUniqueIdBytes];
  bootstrap::encodeUniqueId(u, id);
  write("fuzz_unique_id", "id", std::string(id, sizeof(id)));
  u.host = "node-17.cluster.example.com";
  bootstrap::encodeUniqueId(u, id);
  write("fuzz_unique_id", "id_hostname", std::string(id, sizeof(id)));
  write("fuzz_unique_id", "store_address", "master-0:29500");
  write("fuzz_unique_id", "hex_key", std::string(64, 'a'));
  write("fuzz_unique_id", "passphrase", "correct horse battery staple");
}

void topologySeeds(const std::string& fixtures) {
  // Every reader gets every fixture it reads: the selector byte picks the reader.
  struct F {
    const char* file;
    std::vector<int> readers;
  };
  const std::vector<F> files = {{"hwloc-local-vm.xml", {0, 2, 5}},
                                {"hwloc-supermicro-x9drg-3gpu-ib.xml", {0, 5}},
                                {"nccl-4gpu-pcie-2nic.xml", {0, 2, 3}},
                                {"nccl-2socket-cpu-100g.xml", {0, 3}},
                                {"nccl-dgx-h100-like.xml", {0, 3}}};
  for (const F& f : files) {
    std::ifstream in(fixtures + "/" + f.file, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.empty()) {
      std::fprintf(stderr, "cannot read %s/%s\n", fixtures.c_str(), f.file);
      std::exit(1);
    }
    for (int r : f.readers) write("fuzz_topology", std::to_string(r) + "-" + f.file, std::string(1, char(r)) + text);
    if (std::string(f.file).rfind("nccl-4gpu", 0) == 0) {
      auto g = topology::parseTopology(text, f.file);
      if (!g.isOk()) std::exit(1);
      const std::string json = topology::graphToJson(g.value());
      write("fuzz_topology", "4-nccl-4gpu.json", std::string(1, '\4') + json);
      write("fuzz_topology", "1-nccl-4gpu.json", std::string(1, '\1') + json);
      write("fuzz_topology", "0-nccl-4gpu.json", std::string(1, '\0') + json);
    }
  }
}

void algoSeeds() {
  write("fuzz_algo_override", "ring", "allreduce:ring");
  write("fuzz_algo_override", "ranges", "allreduce:0-64K:tree,64K-inf:ring;broadcast:chain");
  write("fuzz_algo_override", "many", "allgather:0-1M:bruck,1M-inf:ring;reduce_scatter:ring;alltoall:pairwise");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR TOPOLOGY_FIXTURES_DIR\n");
    return 2;
  }
  gOut = argv[1];
  storeSeeds();
  wireSeeds();
  uniqueIdSeeds();
  topologySeeds(argv[2]);
  algoSeeds();
  return 0;
}
