/* Non-blocking mode (braidConfig_t.blocking = 0) under braidrun: usage mp_nonblocking MODE
 *   ok:    init returns braidInProgress and is polled to braidSuccess; a call on the joining
 *          communicator is refused; 8 allreduces and a send/receive group are issued back to
 *          back without waiting (each returns braidInProgress or braidSuccess), polled to
 *          completion with braidCommGetAsyncError, and checked. Prints "OK rank=R polls=P".
 *   stop:  as ok, then rank 1 stops itself while the others have an allreduce in flight;
 *          config.timeoutSeconds = 2 (BRAID_TIMEOUT is not set), so the survivors' poll turns
 *          to braidTimeout naming rank 1. Prints "ASYNC rank=R code=C failed_rank=F ms=T".
 * Any unexpected result prints "BAD ..." and exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "braid/braid.h"

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void pause1ms(void) {
  struct timespec ts = {0, 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls until the communicator has nothing in progress; returns the final state. */
static braidResult_t settle(braidComm_t comm, int* polls) {
  braidResult_t state = braidInProgress;
  while (state == braidInProgress) {
    if (braidCommGetAsyncError(comm, &state) != braidSuccess) return braidInternalError;
    ++*polls;
    if (state == braidInProgress) pause1ms();
  }
  return state;
}

#define BAD(...)                 \
  do {                           \
    printf("BAD " __VA_ARGS__);  \
    printf("\n");                \
    fflush(stdout);              \
    return 1;                    \
  } while (0)

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "ok";
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (!strcmp(mode, "stop")) config.timeoutSeconds = 2;
  braidComm_t comm = NULL;
  braidResult_t rc = braidCommInitFromEnvConfig(&comm, &config);
  if (rc != braidInProgress && rc != braidSuccess) BAD("init returned %d: %s", (int)rc, braidGetLastError(NULL));
  if (!comm) BAD("init set no communicator");
  int polls = 0, rank = -1, nranks = 0;
  if (rc == braidInProgress) {
    /* Nothing else may use it while it joins. */
    braidResult_t early = braidCommUserRank(comm, &rank);
    if (early != braidSuccess && early != braidInvalidArgument) BAD("a call while joining returned %d", (int)early);
  }
  if ((rc = settle(comm, &polls)) != braidSuccess) BAD("init ended with %d: %s", (int)rc, braidGetLastError(comm));
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &nranks);

  enum { kCalls = 8, kCount = 100000 };
  float* bufs = malloc(sizeof(float) * kCalls * kCount);
  for (int c = 0; c < kCalls; ++c)
    for (int j = 0; j < kCount; ++j) bufs[c * kCount + j] = (float)(rank + c + j % 5);
  int inProgress = 0;
  for (int c = 0; c < kCalls; ++c) {
    rc = braidAllReduce(bufs + c * kCount, bufs + c * kCount, kCount, braidFloat32, braidSum, comm, NULL);
    if (rc == braidInProgress) ++inProgress;
    else if (rc != braidSuccess) BAD("allreduce %d returned %d: %s", c, (int)rc, braidGetLastError(comm));
  }
  /* A ring exchange in one group: every rank sends to the next and receives from the previous. */
  int token = rank * 10, got = -1;
  braidGroupStart();
  braidSend(&token, 1, braidInt32, (rank + 1) % nranks, comm, NULL);
  braidRecv(&got, 1, braidInt32, (rank + nranks - 1) % nranks, comm, NULL);
  rc = braidGroupEnd();
  if (rc != braidInProgress && rc != braidSuccess) BAD("group returned %d: %s", (int)rc, braidGetLastError(NULL));
  if ((rc = settle(comm, &polls)) != braidSuccess) BAD("calls ended with %d: %s", (int)rc, braidGetLastError(comm));
  for (int c = 0; c < kCalls; ++c)
    for (int j = 0; j < kCount; j += 997) {
      float want = (float)(nranks * (nranks - 1) / 2 + nranks * (c + j % 5));
      if (bufs[c * kCount + j] != want) BAD("rank %d call %d element %d: %g, want %g", rank, c, j, bufs[c * kCount + j], want);
    }
  if (got != ((rank + nranks - 1) % nranks) * 10) BAD("rank %d received %d", rank, got);
  printf("OK rank=%d polls=%d in_progress=%d\n", rank, polls, inProgress);
  fflush(stdout);

  if (!strcmp(mode, "stop")) {
    if (rank == 1) {
      raise(SIGSTOP);
      return 0;
    }
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
    double t0 = nowMs();
    rc = braidAllReduce(bufs, bufs, kCount, braidFloat32, braidSum, comm, NULL);
    if (rc != braidInProgress && rc != braidSuccess) BAD("allreduce returned %d", (int)rc);
    rc = settle(comm, &polls);
    const char* msg = braidGetLastError(comm);
    const char* fr = strstr(msg, "failed rank ");
    printf("ASYNC rank=%d code=%d failed_rank=%d ms=%.0f\n", rank, (int)rc, fr ? atoi(fr + strlen("failed rank ")) : -1,
           nowMs() - t0);
    fflush(stdout);
    braidCommAbort(comm);
    free(bufs);
    return 0;
  }
  braidCommDestroy(comm);
  free(bufs);
  return 0;
}
