#include "bootstrap/job_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace braid::bootstrap {

namespace {

constexpr size_t kMaxJobFileBytes = 16 * 1024;

bool alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

Status checkDir(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0)
    return Status(Code::kInvalidArgument, "job folder " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return Status(Code::kInvalidArgument, "job folder " + dir + " is not a directory");
  if (st.st_uid != geteuid())
    return Status(Code::kInvalidArgument, "job folder " + dir + " belongs to another user (uid " +
                                              std::to_string(st.st_uid) + ")");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return Status(Code::kInvalidArgument,
                  "job folder " + dir + " is open to other users (mode " + mode + "); it must be 0700");
  }
  return Status::ok();
}

}  // namespace

StatusOr<std::string> jobFileDir(bool create) {
  const char* env = std::getenv("BRAID_RUNTIME_DIR");
  const std::string dir = env && *env ? std::string(env) : "/tmp/braid-" + std::to_string(geteuid());
  if (create && mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status(Code::kInvalidArgument, "job folder " + dir + ": " + std::strerror(errno));
  BRAID_RETURN_IF_ERROR(checkDir(dir));
  return dir;
}

std::string formatJobFile(const JobFile& job) {
  std::string cmd = job.command;
  std::replace(cmd.begin(), cmd.end(), '\n', ' ');
  return "pid=" + std::to_string(job.pid) + "\nstore=" + job.store + "\nkey=" + (job.key.present ? job.key.hex() : "") +
         "\ntls=" + (job.tls ? "1" : "0") + "\nnp=" + std::to_string(job.np) + "\nstarted=" +
         std::to_string(job.started) + "\ncommand=" + cmd + "\n";
}

StatusOr<JobFile> parseJobFile(const std::string& text, const std::string& path) {
  JobFile j;
  j.path = path;
  std::istringstream in(text);
  std::string line;
  auto bad = [&](const std::string& why) { return Status(Code::kInvalidArgument, "job file " + path + ": " + why); };
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return bad("line '" + line + "' has no '='");
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    char* end = nullptr;
    if (k == "pid") {
      j.pid = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (v.empty() || *end || j.pid <= 0) return bad("pid '" + v + "' is not a process id");
    } else if (k == "store") {
      if (v.find(':') == std::string::npos) return bad("store '" + v + "' is not host:port");
      j.store = v;
    } else if (k == "key") {
      if (!v.empty()) {
        auto key = parseAuthKey(v, "job file " + path);
        if (!key.isOk()) return key.status();
        j.key = key.value();
      }
    } else if (k == "tls") {
      j.tls = v == "1";
    } else if (k == "np") {
      j.np = std::atoi(v.c_str());
    } else if (k == "started") {
      j.started = std::atoll(v.c_str());
    } else if (k == "command") {
      j.command = v;
    }
  }
  if (j.pid <= 0) return bad("no pid");
  if (j.store.empty()) return bad("no store");
  return j;
}

StatusOr<std::string> writeJobFile(const JobFile& job) {
  BRAID_ASSIGN_OR_RETURN(std::string dir, jobFileDir(true));
  const std::string path = dir + "/job-" + std::to_string(job.pid);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A braidrun that died without removing it had this pid.
    unlink(path.c_str());
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) return Status(Code::kSystemError, "job file " + path + ": " + std::strerror(errno));
  const std::string text = formatJobFile(job);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) {
    unlink(path.c_str());
    return Status(Code::kSystemError, "job file " + path + ": short write");
  }
  return path;
}

StatusOr<std::vector<JobFile>> listJobFiles(int pid) {
  BRAID_ASSIGN_OR_RETURN(std::string dir, jobFileDir(false));
  std::vector<JobFile> jobs;
  DIR* d = opendir(dir.c_str());
  if (!d) return Status(Code::kSystemError, "job folder " + dir + ": " + std::strerror(errno));
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("job-", 0) != 0) continue;
    const int filePid = std::atoi(name.c_str() + 4);
    if (pid > 0 && filePid != pid) continue;
    const std::string path = dir + "/" + name;
    if (!alive(filePid)) {
      unlink(path.c_str());
      continue;
    }
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    std::string text;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077) &&
        static_cast<size_t>(st.st_size) <= kMaxJobFileBytes) {
      text.resize(static_cast<size_t>(st.st_size));
      if (::read(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) text.clear();
    }
    close(fd);
    if (text.empty()) continue;
    auto j = parseJobFile(text, path);
    if (j.isOk()) jobs.push_back(std::move(j).value());
  }
  closedir(d);
  std::sort(jobs.begin(), jobs.end(), [](const JobFile& a, const JobFile& b) {
    return a.started != b.started ? a.started < b.started : a.pid < b.pid;
  });
  return jobs;
}

}  // namespace braid::bootstrap
