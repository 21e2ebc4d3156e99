#pragma once
// Names of braid's POSIX shared-memory segments: "/braid-<creator pid>-<8 hex digits: the
// creator's pid namespace>-<16 random hex digits>". Nobody outside the job can predict one (a
// stranger who pre-creates a name braid is about to use cannot make init fail), and the pid
// with its namespace says whose it is, so that a launcher can remove what a rank killed
// during init left behind. The namespace matters where ranks run in pid namespaces of their
// own (containers that share /dev/shm): there the same pid names different processes, and a
// launcher that saw one of them die must not remove the others' segments.

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace braid {

// A fresh name for a segment this process creates: its pid, its pid namespace's tag and 64
// bits from getrandom.
std::string newSegmentName();

// The tag of this process's pid namespace in segment names: the low 32 bits of the inode of
// /proc/self/ns/pid (0 where /proc cannot say).
uint32_t pidNamespaceTag();

// Whether `name` has the form above (with or without the leading '/').
bool isSegmentName(const std::string& name);

// Unlinks every segment that process `pid` of the pid namespace tagged `ns` created and left
// in /dev/shm (one of this user's: others' are not ours to remove, and shm_unlink refuses
// them). A child that this process started and that stayed in its pid namespace has this
// process's tag. Returns how many.
int removeSegmentsOf(pid_t pid, uint32_t ns = pidNamespaceTag());

}  // namespace braid
