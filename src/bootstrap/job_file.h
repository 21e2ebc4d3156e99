#pragma once
// Where a running braidrun job's store is, for tools of the same user (braid-info --status):
// braidrun writes a small file per job into a private folder — the store's address, the job
// key, the command — and removes it when it ends. The folder is $BRAID_RUNTIME_DIR or
// /tmp/braid-<uid>, made 0700; a folder that is not a real directory owned by this user with
// no group or other access is not used (nothing is written or read there).

#include <string>
#include <vector>

#include "common/auth.h"
#include "common/status.h"

namespace braid::bootstrap {

struct JobFile {
  int pid = 0;            // braidrun's
  std::string store;      // "host:port", or the etcd URL and prefix of ranks whose store is etcd
  AuthKey key;            // absent when the job runs without one
  bool tls = false;
  int np = 0;
  long long started = 0;  // unix seconds
  std::string command;
  std::string path;       // where it was read from
};

// The folder job files live in, checked as above (kInvalidArgument saying what is wrong).
StatusOr<std::string> jobFileDir(bool create);
// Writes `job` as <dir>/job-<pid> (mode 0600, created exclusively, replacing a stale file of
// a dead pid). Returns the path.
StatusOr<std::string> writeJobFile(const JobFile& job);
// The text of a job file, and back; kInvalidArgument naming the field for a bad one.
std::string formatJobFile(const JobFile& job);
StatusOr<JobFile> parseJobFile(const std::string& text, const std::string& path);
// Every job file in the folder whose braidrun still runs (files of dead ones are removed),
// oldest first; `pid` > 0: only that job's.
StatusOr<std::vector<JobFile>> listJobFiles(int pid = 0);

}  // namespace braid::bootstrap
