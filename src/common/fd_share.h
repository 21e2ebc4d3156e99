#pragma once
// Handing a file descriptor to another process of the same host and user: a Unix socket and
// SCM_RIGHTS, as CUDA's shareable memory handles (cuMem with POSIX file descriptors) and
// other fd-backed memory must travel. A process publishes a descriptor and gets a ticket, a
// short string it passes on by any channel (the job's store); a process that holds the
// ticket fetches a descriptor of the same open file with fetchFd.
//
// The publisher answers on an abstract Unix socket of its own (its network namespace's, so
// ranks in other network namespaces cannot reach it) from one thread, which runs while
// anything is published and stops when the last descriptor is withdrawn. It hands a
// descriptor out only to a process of its own user (SO_PEERCRED) that quotes the ticket's
// secret, 128 random bits: another user cannot have it, and a process of the same user must
// have read the ticket. Publish for as long as peers need to fetch, then withdraw.

#include <cstdint>
#include <string>

#include "common/status.h"

namespace braid {

// Publishes a duplicate of `fd` (the caller keeps and closes its own) and returns its ticket:
// letters, digits and dots only, so it fits in names separated by ':' or '|'.
StatusOr<std::string> publishFd(int fd);

// Stops handing out the descriptor of `ticket` and closes the duplicate. Unknown tickets
// (already withdrawn, another process's) are ignored.
void withdrawFd(const std::string& ticket);

// A descriptor of the open file `ticket` names (close-on-exec; the caller closes it), or why
// not: a malformed ticket, no such publisher on this host, a withdrawn descriptor, a wrong
// secret, another user, or no answer within `timeoutMs`.
StatusOr<int> fetchFd(const std::string& ticket, int timeoutMs);

// How many descriptors this process publishes now (tests).
size_t publishedFds();

}  // namespace braid
