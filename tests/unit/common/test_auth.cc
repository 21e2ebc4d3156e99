// SHA-256 and HMAC-SHA256 against published vectors, and how a job key is read.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "common/auth.h"
#include "common/sha256.h"
#include "support/catch.h"

using namespace braid;

namespace {

std::string hex(const Digest& d) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += std::string{kDigits[b >> 4], kDigits[b & 15]};
  return s;
}

std::string unhex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

// A file in a fresh temporary folder with `mode`; removed with the folder by the caller.
std::string writeFile(const std::string& dir, const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  REQUIRE(chmod(path.c_str(), mode) == 0);
  return path;
}

}  // namespace

TEST_CASE("sha256: FIPS 180-4 examples", "[common][auth]") {
  CHECK(hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces so that every buffering path runs.
  Sha256 s;
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  for (size_t piece = 1; left > 0; piece = piece % 983 + 13) {
    const size_t n = std::min(left, piece);
    s.update(chunk.data(), n);
    left -= n;
  }
  CHECK(hex(s.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundary (55, 56, 63, 64 bytes) against the one-shot hash.
  for (size_t n : {55, 56, 63, 64, 65, 119, 120}) {
    Sha256 a;
    const std::string m(n, 'q');
    for (char c : m) a.update(&c, 1);
    INFO(n);
    CHECK(a.finish() == sha256(m));
  }
}

TEST_CASE("hmac-sha256: RFC 4231 test cases", "[common][auth]") {
  CHECK(hex(hmacSha256(std::string(20, '\x0b'), {"Hi There"})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(hmacSha256("Jefe", {"what do ya want ", "for nothing?"})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmacSha256(std::string(20, '\xaa'), {std::string(50, '\xdd')})) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(hex(hmacSha256(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), {std::string(50, '\xcd')})) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // A key longer than a block is hashed first.
  CHECK(hex(hmacSha256(std::string(131, '\xaa'), {"Test Using Larger Than Block-Size Key - Hash Key First"})) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("auth key: hex, passphrase, and what is refused", "[common][auth]") {
  const std::string h = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
  auto k = parseAuthKey("  " + h + "\n", "test");
  REQUIRE(k.isOk());
  CHECK(k.value().present);
  CHECK(k.value().hex() == "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  // A passphrase is hashed: the same one gives the same key, another one another key.
  auto p1 = parseAuthKey("correct horse battery staple", "test");
  auto p2 = parseAuthKey("correct horse battery staple", "test");
  auto p3 = parseAuthKey("correct horse battery stapler", "test");
  REQUIRE(p1.isOk());
  CHECK(p1.value().bytes == p2.value().bytes);
  CHECK(p1.value().bytes != p3.value().bytes);
  CHECK(p1.value().fingerprint().size() == 8);
  CHECK(p1.value().fingerprint() != p3.value().fingerprint());
  auto shortOne = parseAuthKey("secret", "BRAID_AUTH_KEY");
  REQUIRE_FALSE(shortOne.isOk());
  CHECK(shortOne.status().code() == Code::kInvalidArgument);
  CHECK(shortOne.status().message().find("BRAID_AUTH_KEY") != std::string::npos);
  CHECK(shortOne.status().message().find("16") != std::string::npos);
  CHECK(randomAuthKey().bytes != randomAuthKey().bytes);
}

TEST_CASE("auth key: from the environment and from a file only its owner reads", "[common][auth]") {
  char tmpl[] = "/tmp/braid-auth-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  const std::string h(64, 'a');
  std::map<std::string, std::string> env;
  auto get = [&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };

  auto none = authKeyFromEnv(get);
  REQUIRE(none.isOk());
  CHECK_FALSE(none.value().present);

  env["BRAID_AUTH_KEY"] = h;
  auto fromVar = authKeyFromEnv(get);
  REQUIRE(fromVar.isOk());
  CHECK(fromVar.value().hex() == h);

  env.clear();
  env["BRAID_AUTH_KEY_FILE"] = writeFile(dir, "good", h + "\n", 0600);
  auto fromFile = authKeyFromEnv(get);
  INFO(fromFile.status().toString());
  REQUIRE(fromFile.isOk());
  CHECK(fromFile.value().bytes == fromVar.value().bytes);

  env["BRAID_AUTH_KEY"] = h;
  auto both = authKeyFromEnv(get);
  CHECK(both.status().message().find("both") != std::string::npos);
  env.erase("BRAID_AUTH_KEY");

  struct Bad {
    std::string path;
    const char* says;
  };
  std::vector<Bad> bad = {
      {writeFile(dir, "group-readable", h, 0640), "mode 0640"},
      {writeFile(dir, "world-readable", h, 0604), "mode 0604"},
      {writeFile(dir, "short", "abc", 0600), "characters"},
      {writeFile(dir, "large", std::string(kMaxKeyFileBytes + 1, 'k'), 0600), "bytes"},
      {dir + "/missing", "cannot be opened"},
      {dir, "not a regular file"},
  };
  REQUIRE(symlink((dir + "/good").c_str(), (dir + "/link").c_str()) == 0);
  bad.push_back({dir + "/link", "cannot be opened"});  // a symlink could point anywhere
  for (const Bad& b : bad) {
    env["BRAID_AUTH_KEY_FILE"] = b.path;
    auto r = authKeyFromEnv(get);
    INFO(b.path << ": " << r.status().toString());
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find(b.path) != std::string::npos);
    CHECK(r.status().message().find(b.says) != std::string::npos);
  }
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("auth proofs: labels and parts keep proofs apart", "[common][auth]") {
  const AuthKey k = randomAuthKey();
  const Digest a = authProof(k, "role A", {"x", "yz"});
  CHECK(checkAuthProof(a, std::string_view(reinterpret_cast<const char*>(a.data()), a.size())));
  CHECK(authProof(k, "role B", {"x", "yz"}) != a);
  CHECK(authProof(k, "role A", {"xy", "z"}) != a);  // lengths are part of what is signed
  CHECK(authProof(randomAuthKey(), "role A", {"x", "yz"}) != a);
  CHECK_FALSE(checkAuthProof(a, "short"));
  std::string flipped(reinterpret_cast<const char*>(a.data()), a.size());
  flipped[31] ^= 1;
  CHECK_FALSE(checkAuthProof(a, flipped));
  // What a refused peer is told, and the log says: no proof at all, or a wrong one.
  const std::string_view good(reinterpret_cast<const char*>(a.data()), a.size());
  CHECK(authRefusal(a, good, "its hello").empty());
  CHECK(authRefusal(a, std::string(32, '\0'), "its hello") ==
        "authentication failed: its hello has no key and this job has one");
  CHECK(authRefusal(a, flipped, "its hello") == "authentication failed: its hello does not prove this job's key");
}
