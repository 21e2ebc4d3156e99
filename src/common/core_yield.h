#pragma once
// Yielding the core while waiting, and knowing when not to. A wait that yields hands the
// core to whatever else is runnable on it. Where that is another rank that waits in turn
// (ranks that outnumber the cores), the yield mostly comes back within microseconds, and
// lets that rank make the progress this one waits for. Where it is a process that never
// waits (a data loader, a compile, another job on a shared node), the scheduler leaves the
// core with it for the rest of its time slice, milliseconds, and a rank that yields at every
// step of a collective loses a slice at each.
//
// So yields are timed. One that kept the core away for kLostSliceNs or more lost a slice;
// when kLostInWindow of the last kYieldWindow yields of this process did, something busy
// shares its cores, and yields pause: waits spin, then sleep, and the kernel wakes a
// sleeper as soon as its data comes. A pause ends on its own; one that starts again within
// its own length of the last one's end is twice as long (up to kMaxYieldPauseNs), so a busy
// neighbour that stays costs a few slices a second at most.
//
// The executor does this where each rank has a core (exec::WaitPolicy::pauseYields). Ranks
// that share cores lose the core to each other for a millisecond or more now and then
// (4 ranks on 2 cores: a few times a second at 64 KiB, more at 1 MiB, where a rank's step
// copies or reduces for longer); pausing on those cost up to a third of the busbw. There a
// lost slice counts only while something else keeps the CPUs busy (yieldShared).

#include <cstdint>

namespace braid {

// A yield that returns after this long lost the core for a time slice (a millisecond or
// more under Linux's schedulers) rather than to a rank that waits in turn.
constexpr int64_t kLostSliceNs = 500 * 1000;
// Yields pause when this many of the process's last kYieldWindow yields lost a slice.
constexpr int kLostInWindow = 2;
constexpr int kYieldWindow = 8;
// The first pause, and the longest.
constexpr int64_t kYieldPauseNs = 100 * 1000 * 1000;
constexpr int64_t kMaxYieldPauseNs = 1600 * 1000 * 1000;

// Whether yields are paused at `now` (nowNanos()).
bool yieldsPaused(int64_t now);

// Notes a yield that began at `before` and returned at `after`: true if it came back
// within kLostSliceNs. False if it lost a slice (the wait that made it should sleep now),
// and then yields pause if enough of the last ones lost a slice too.
bool noteYield(int64_t before, int64_t after);

// Yields the core once and notes how long that took (noteYield).
bool yieldCore();

// Yields the core once: false if that lost it for a slice. For ranks that share cores, where
// a long yield is most often another rank working: the loss is noted (and may pause yields)
// only while the kernel's accounts show the CPUs busy with something other than the job
// (common/foreign_load.h), when it is as likely a busy process's slice.
bool yieldShared();

// Gives the core up once where a wait has nothing to sleep on: a yield, or while yields are
// paused a nap of kNapNs, which the kernel ends on time whoever else is busy.
constexpr int64_t kNapNs = 20 * 1000;
void yieldOrNap();

// How many pauses this process has started (tests, diagnostics).
uint64_t yieldPausesStarted();

// Forgets every yield and pause (tests); the count above stays.
void resetYieldPause();

}  // namespace braid
