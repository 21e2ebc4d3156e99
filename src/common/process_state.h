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

}  // namespace braid
