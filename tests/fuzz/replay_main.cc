// The fuzz targets without libFuzzer (a gcc build): runs LLVMFuzzerTestOneInput once on
// every file named on the command line, or in the folders named, so the seed corpora are
// checked by every build's test suite. The coverage-guided runs are scripts/fuzz.sh's.

#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_check.h"

namespace {

int runFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0, failed = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st {};
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "no such file or folder: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      failed += runFile(argv[i]);
      ++files;
      continue;
    }
    DIR* d = opendir(argv[i]);
    std::vector<std::string> names;
    while (dirent* e = d ? readdir(d) : nullptr)
      if (e->d_name[0] != '.') names.push_back(std::string(argv[i]) + "/" + e->d_name);
    if (d) closedir(d);
    for (const std::string& n : names) {
      failed += runFile(n);
      ++files;
    }
  }
  // Random inputs too, from a fixed seed, so that a target with few seeds still sees noise.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  std::vector<uint8_t> buf;
  for (int i = 0; i < 2000; ++i) {
    buf.resize(i % 300);
    for (auto& b : buf) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<uint8_t>(x);
    }
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("%d inputs replayed, 2000 random inputs, %d unreadable\n", files, failed);
  return failed || files == 0 ? 1 : 0;
}
