#pragma once
// What a process of this host is doing, from /proc: a peer on the same host that is stopped
// (SIGSTOP, a debugger) or gone tells a stall from a slow peer without asking it anything.

#include <cstdint>

namespace braid {

// The state letter of process `pid` in /proc/<pid>/stat (R, S, D, T for stopped, t for
// stopped by a tracer, Z, ...), or 0 when there is no such process.
char processState(int64_t pid);

// What a state letter says: stopped (SIGSTOP, a debugger), or gone (no such process, a
// zombie, dead).
inline bool stateStopped(char state) { return state == 'T' || state == 't'; }
inline bool stateGone(char state) { return state == 0 || state == 'Z' || state == 'X'; }

// Which pid namespace this process's pids belong to (the inode of /proc/self/ns/pid), or 0
// where it cannot tell. Processes of one host compare pids, watch each other's (a pidfd,
// /proc/<pid>/stat) or signal them only when these agree: containers that share a host's
// name and /dev/shm but not its pids number their processes apart, each often as pid 1.
uint64_t pidNamespace();

// Which network namespace this process is in (the inode of /proc/self/ns/net), or 0 where it
// cannot tell. Ranks of one host name whose namespaces differ (ip netns, containers with
// networks of their own under one name) do not share a loopback interface.
uint64_t networkNamespace();

// Which /dev/shm this process sees (its file system's device number), or 0 where it cannot
// tell. Ranks of one host share POSIX shared memory only when these agree: a container
// started with the host's network but not its IPC (docker's default) has a /dev/shm of its own.
uint64_t sharedMemoryDevice();

// A number drawn at random once per process, and again in a forked child (one whose pid or
// pid namespace differs from the drawer's): it tells "the same process" where a pid cannot,
// since the same pid may be another process of another pid namespace. Never 0. Thread-safe.
uint64_t processToken();

}  // namespace braid
