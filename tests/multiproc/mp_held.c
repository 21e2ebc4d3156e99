/* A rank held in another communicator, under braidrun with 3 ranks. Usage: mp_held LATE [MS]
 * or mp_held swap
 * Ranks 0 and 1 also form a split communicator. After a warm-up on both, rank 0 stops itself
 * (SIGSTOP); rank 1 then calls an allreduce on the split communicator, where it waits for
 * rank 0, while rank 2 calls a broadcast rooted at rank 1 on the world, where it waits for
 * rank 1 only. Rank 2's error must name rank 0 (the stopped one), not rank 1, which is alive
 * but held elsewhere. Rank LATE (1 or 2; 0 for neither) makes its call MS (2500) milliseconds
 * after the other: with 1, rank 1 still waits in the split communicator when rank 2 times out
 * (with BRAID_TIMEOUT=3); with 2, it has failed there already; with 0, it is reporting its
 * own timeout then. Each survivor prints
 *   RESULT rank=R comm=world|split code=C failed_rank=F
 * and its error on stderr; rank 1 stays alive 3 * MS after its own error, as a job handling
 * it would, then both destroy and exit 1.
 * swap: no rank stops; rank 0 calls the world's broadcast where the others expect it to call
 * the split communicator's allreduce first (rank 1 waits for it there): a deadlock across
 * communicators, which ranks 0 and 1 must report as such.
 * cycle: ranks 1 and 2 form two split communicators, A and B; rank 0 calls a broadcast rooted
 * at rank 1 on the world, while, 1.5 s later, rank 1 calls an allreduce on A and rank 2 one
 * on B: ranks 1 and 2 deadlock each other, and rank 0, which waits for rank 1 and times out
 * first, must say so (a deadlock among other ranks). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "braid/braid.h"

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int report(int rank, const char* name, braidResult_t r, braidComm_t comm) {
  const char* msg = braidGetLastError(comm);
  const char* fr = strstr(msg, "failed rank ");
  printf("RESULT rank=%d comm=%s code=%d failed_rank=%d\n", rank, name, (int)r,
         fr ? atoi(fr + strlen("failed rank ")) : -1);
  fprintf(stderr, "rank %d (%s): %s\n", rank, name, msg);
  fflush(stdout);
  return 1;
}

int main(int argc, char** argv) {
  const int swap = argc > 1 && !strcmp(argv[1], "swap");
  const int cycle = argc > 1 && !strcmp(argv[1], "cycle");
  const int late = argc > 1 ? atoi(argv[1]) : 1;
  const int ms = argc > 2 ? atoi(argv[2]) : 2500;
  braidComm_t world = NULL, split = NULL;
  if (braidCommInitFromEnv(&world) != braidSuccess) {
    fprintf(stderr, "init: %s\n", braidGetLastError(NULL));
    return 2;
  }
  int rank = -1, n = 0;
  braidCommUserRank(world, &rank);
  braidCommCount(world, &n);
  if (n != 3) {
    fprintf(stderr, "mp_held runs with 3 ranks, not %d\n", n);
    return 2;
  }
  /* Without cycle: ranks 0 and 1 in `split`. With it: ranks 1 and 2 in `split` (A) and `other` (B). */
  braidComm_t other = NULL;
  const int color = cycle ? (rank > 0 ? 0 : BRAID_SPLIT_NOCOLOR) : (rank < 2 ? 0 : BRAID_SPLIT_NOCOLOR);
  if (braidCommSplit(world, color, rank, &split) != braidSuccess ||
      (cycle && braidCommSplit(world, color, rank, &other) != braidSuccess)) {
    fprintf(stderr, "split: %s\n", braidGetLastError(world));
    return 2;
  }
  float buf[1024] = {0};
  float out[1024];
  braidResult_t r = braidAllReduce(buf, out, 1024, braidFloat32, braidSum, world, NULL);
  if (r == braidSuccess && split) r = braidAllReduce(buf, out, 1024, braidFloat32, braidSum, split, NULL);
  if (r == braidSuccess && other) r = braidAllReduce(buf, out, 1024, braidFloat32, braidSum, other, NULL);
  if (r != braidSuccess) {
    fprintf(stderr, "warm-up: %s\n", braidGetLastError(world));
    return 2;
  }
  r = braidBarrier(world);
  if (r != braidSuccess) return 2;
  int rc = 0;
  if (cycle) {
    if (rank == 0) {
      r = braidBroadcast(buf, out, 1024, braidFloat32, 1, world, NULL);
      if (r != braidSuccess) rc = report(rank, "world", r, world);
    } else {
      sleepMs(1500);
      braidComm_t c = rank == 1 ? split : other;
      r = braidAllReduce(buf, out, 1024, braidFloat32, braidSum, c, NULL);
      if (r != braidSuccess) rc = report(rank, rank == 1 ? "A" : "B", r, c);
    }
    sleepMs(3000);  /* every rank answers the others' questions meanwhile */
  } else if (swap) {
    if (rank == 1) {
      r = braidAllReduce(buf, out, 1024, braidFloat32, braidSum, split, NULL);
      if (r != braidSuccess) rc = report(rank, "split", r, split);
    } else {
      r = braidBroadcast(buf, out, 1024, braidFloat32, 1, world, NULL);
      if (r != braidSuccess) rc = report(rank, "world", r, world);
    }
    sleepMs(3000);  /* every rank answers the others' questions meanwhile */
  } else if (rank == 0) {
    printf("FAULT rank=0\n");
    fflush(stdout);
    raise(SIGSTOP);
  } else if (rank == 1) {
    if (late == 1) sleepMs(ms);
    r = braidAllReduce(buf, out, 1024, braidFloat32, braidSum, split, NULL);
    if (r != braidSuccess) rc = report(rank, "split", r, split);
    sleepMs(3 * ms);
  } else {
    if (late == 2) sleepMs(ms);
    r = braidBroadcast(buf, out, 1024, braidFloat32, 1, world, NULL);
    if (r != braidSuccess) rc = report(rank, "world", r, world);
  }
  if (other) braidCommDestroy(other);
  if (split) braidCommDestroy(split);
  braidCommDestroy(world);
  return rc;
}
