// braidrun's job files, through which braid-info --status finds a running job's store.

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "bootstrap/job_file.h"
#include "support/catch.h"

using namespace braid;
using namespace braid::bootstrap;

namespace {

// A fresh folder named by BRAID_RUNTIME_DIR for the test's lifetime.
struct RuntimeDir {
  std::string path;
  RuntimeDir() {
    char tmpl[] = "/tmp/braid-jobfile-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
    setenv("BRAID_RUNTIME_DIR", path.c_str(), 1);
  }
  ~RuntimeDir() {
    unsetenv("BRAID_RUNTIME_DIR");
    std::system(("rm -rf " + path).c_str());
  }
};

}  // namespace

TEST_CASE("job files: written 0600, read back, and files of dead braidruns removed", "[jobfile]") {
  RuntimeDir dir;
  JobFile job;
  job.pid = static_cast<int>(getpid());
  job.store = "127.0.0.1:4242";
  job.key = randomAuthKey();
  job.tls = true;
  job.np = 4;
  job.started = 1700000000;
  job.command = "python train.py\n--steps 10";
  auto path = writeJobFile(job);
  REQUIRE(path.isOk());
  struct stat st;
  REQUIRE(stat(path.value().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  // A job file whose braidrun has exited (a child that is gone by now).
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  job.pid = dead;
  REQUIRE(writeJobFile(job).isOk());

  auto jobs = listJobFiles();
  REQUIRE(jobs.isOk());
  REQUIRE(jobs.value().size() == 1);
  const JobFile& j = jobs.value()[0];
  CHECK(j.pid == static_cast<int>(getpid()));
  CHECK(j.store == "127.0.0.1:4242");
  CHECK(j.key.present);
  CHECK(j.key.hex() == job.key.hex());
  CHECK(j.tls);
  CHECK(j.np == 4);
  CHECK(j.command == "python train.py --steps 10");
  CHECK(access((dir.path + "/job-" + std::to_string(dead)).c_str(), F_OK) != 0);
  CHECK(listJobFiles(static_cast<int>(getpid())).value().size() == 1);
  CHECK(listJobFiles(dead).value().empty());
}

TEST_CASE("job files: a folder others may open is neither written nor read", "[jobfile]") {
  RuntimeDir dir;
  REQUIRE(chmod(dir.path.c_str(), 0755) == 0);
  JobFile job;
  job.pid = static_cast<int>(getpid());
  job.store = "127.0.0.1:1";
  auto w = writeJobFile(job);
  REQUIRE_FALSE(w.isOk());
  CHECK(w.status().message().find("open to other users (mode 755)") != std::string::npos);
  CHECK_FALSE(listJobFiles().isOk());
}

TEST_CASE("job files: malformed text is refused naming the field", "[jobfile]") {
  CHECK(parseJobFile("store=h:1\n", "f").status().message().find("no pid") != std::string::npos);
  CHECK(parseJobFile("pid=-3\nstore=h:1\n", "f").status().message().find("pid '-3'") != std::string::npos);
  CHECK(parseJobFile("pid=3\nstore=nohost\n", "f").status().message().find("not host:port") != std::string::npos);
  CHECK(parseJobFile("pid=3\nstore=h:1\nkey=short\n", "f").status().code() == Code::kInvalidArgument);
  CHECK(parseJobFile("pid=3\ngarbage\n", "f").status().message().find("has no '='") != std::string::npos);
  auto ok = parseJobFile("pid=3\nstore=h:1\nkey=\n", "f");
  REQUIRE(ok.isOk());
  CHECK_FALSE(ok.value().key.present);
}
