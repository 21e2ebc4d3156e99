#pragma once
// Names of braid's POSIX shared-memory segments: "/braid-<creator pid>-<16 random hex
// digits>". Nobody outside the job can predict one (a stranger who pre-creates a name braid
// is about to use cannot make init fail), and the pid says whose it is, so that a launcher
// can remove what a rank killed during init left behind.

#include <sys/types.h>

#include <string>

namespace braid {

// A fresh name for a segment this process creates: its pid and 64 bits from getrandom.
std::string newSegmentName();

// Whether `name` has the form above (with or without the leading '/').
bool isSegmentName(const std::string& name);

// Unlinks every segment that process `pid` created and left in /dev/shm (one of this
// user's: others' are not ours to remove, and shm_unlink refuses them). Returns how many.
int removeSegmentsOf(pid_t pid);

}  // namespace braid
