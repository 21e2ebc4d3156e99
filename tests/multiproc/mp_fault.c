/* Fault injection under braidrun. Usage: mp_fault MODE VICTIM ITER [COUNT]
 *   MODE: kill (SIGKILL), stop (SIGSTOP), exit (_exit(3)), abort (braidCommAbort),
 *         initkill (SIGKILL ITER milliseconds after starting, while joining)
 * Every rank runs allreduces of COUNT floats in a loop; the victim injects the fault at
 * iteration ITER. With initkill the rank is read from RANK (or BRAID_RANK) before joining,
 * and rank MP_LATE_RANK, if set, starts joining MP_LATE_MS milliseconds late, so the others
 * wait for it inside the join when the victim dies. Each survivor prints one line:
 *   RESULT rank=R code=C failed_rank=F elapsed_ms=T
 * where C is the braidResult_t of the call that failed, F the rank named in its error and T
 * how long that call took, then "DESTROYED rank=R ms=T" with how long braidCommDestroy took.
 * Survivors then exit with status 1, as a job that lost a peer
 * would, which lets braidrun stop a rank that is still stalled. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "braid/braid.h"

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void* killLater(void* arg) {
  sleepMs(*(int*)arg);
  raise(SIGKILL);
  return NULL;
}

static int envInt(const char* name, int dflt) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s kill|stop|exit|abort VICTIM ITER [COUNT]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  int victim = atoi(argv[2]);
  int iter = atoi(argv[3]);
  size_t count = argc > 4 ? (size_t)atol(argv[4]) : (size_t)1 << 20;
  braidComm_t comm = NULL;
  int rank = -1;
  double start = nowMs();
  if (!strcmp(mode, "initkill")) {
    int me = envInt("RANK", envInt("BRAID_RANK", -1));
    if (me == envInt("MP_LATE_RANK", -1)) sleepMs(envInt("MP_LATE_MS", 0));
    start = nowMs();
    pthread_t t;
    if (me == victim) pthread_create(&t, NULL, killLater, &iter);
  }
  braidResult_t ir = braidCommInitFromEnv(&comm);
  if (ir != braidSuccess) {
    const char* msg = braidGetLastError(NULL);
    const char* fr = strstr(msg, "failed rank ");
    printf("RESULT rank=%d code=%d failed_rank=%d elapsed_ms=%.0f\n", envInt("RANK", envInt("BRAID_RANK", -1)),
           (int)ir, fr ? atoi(fr + strlen("failed rank ")) : -1, nowMs() - start);
    fprintf(stderr, "init failed: %s\n", msg);
    return 1;
  }
  braidCommUserRank(comm, &rank);
  float* buf = calloc(count, sizeof(float));
  for (int i = 0; i < 1000000; ++i) {
    if (rank == victim && i == iter) {
      if (!strcmp(mode, "kill")) raise(SIGKILL);
      if (!strcmp(mode, "stop")) raise(SIGSTOP);
      if (!strcmp(mode, "exit")) _exit(3);
      if (!strcmp(mode, "abort")) {
        braidCommAbort(comm);
        printf("ABORTED rank=%d\n", rank);
        return 0;
      }
    }
    double t0 = nowMs();
    braidResult_t r = braidAllReduce(buf, buf, count, braidFloat32, braidSum, comm, NULL);
    if (r != braidSuccess) {
      double t1 = nowMs();
      const char* msg = braidGetLastError(comm);
      const char* fr = strstr(msg, "failed rank ");
      int failed = fr ? atoi(fr + strlen("failed rank ")) : -1;
      printf("RESULT rank=%d code=%d failed_rank=%d elapsed_ms=%.0f\n", rank, (int)r, failed, t1 - t0);
      fprintf(stderr, "rank %d: %s\n", rank, msg);
      fflush(stdout);
      t1 = nowMs();
      braidCommDestroy(comm);
      printf("DESTROYED rank=%d ms=%.0f\n", rank, nowMs() - t1);
      return 1;
    }
  }
  printf("NOFAULT rank=%d\n", rank);
  braidCommDestroy(comm);
  return 1;
}
