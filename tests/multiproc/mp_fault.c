/* Fault injection under braidrun. Usage: mp_fault MODE VICTIM ITER [COUNT]
 *   MODE: kill (SIGKILL), stop (SIGSTOP), exit (_exit(3)), abort (braidCommAbort),
 *         initkill (SIGKILL ITER milliseconds after starting, while joining),
 *         external (no rank injects anything: the fault comes from outside, a network link
 *         taken down, and the loop runs until a call fails),
 *         none (ITER iterations without a fault, then "DONE rank=R" and exit 0: a job that
 *         must not fail, say across a slow link),
 *         hold (as none, but every rank prints "HOLD rank=R" at iteration ITER and waits
 *         there until the file MP_HOLD_FILE exists, up to 120 s, then runs ITER more
 *         iterations: something changed from outside meanwhile, such as a slower link, is in
 *         place for the rest of the job),
 *         compute (the victim's own thread is away for MP_COMPUTE_MS milliseconds, 60000 by
 *         default, as in a long step of its own, then goes on: the others wait for it; every
 *         rank ends as with none three iterations later)
 * Every rank prints "RUNNING rank=R" once its first call has completed.
 * Every rank runs allreduces of COUNT floats in a loop; the victim injects the fault at
 * iteration ITER. With initkill the rank is read from RANK (or BRAID_RANK) before joining,
 * and rank MP_LATE_RANK, if set, starts joining MP_LATE_MS milliseconds late, so the others
 * wait for it inside the join when the victim dies.
 * MP_COLL picks the collective (allreduce, the default; broadcast, allgather, reduce_scatter,
 * alltoall, and reduce, gather, scatter with the root moving as broadcast's; sendrecv, a ring
 * exchange in one group: a send to the next rank and a receive from the previous; split, a
 * braidCommSplit into even and odd ranks whose halves are destroyed at once); MP_CHECK=1
 * checks every result, reduce's and gather's at the root (a wrong one prints "WRONG rank=R
 * iter=I" and exits 2). The victim prints "FAULT rank=R mono_ms=T" just before its fault, T on the host's
 * monotonic clock, which the survivors' RESULT lines also carry (scripts/chaos.sh measures
 * fault-to-error times with them). Each survivor prints one line:
 *   RESULT rank=R code=C failed_rank=F elapsed_ms=T mono_ms=M
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
  int nranks = 1;
  braidCommCount(comm, &nranks);
  const char* coll = getenv("MP_COLL") && *getenv("MP_COLL") ? getenv("MP_COLL") : "allreduce";
  const int check = envInt("MP_CHECK", 0);
  /* Large enough for every collective's input and output (alltoall: n blocks of count). */
  float* in = calloc(count * (size_t)nranks, sizeof(float));
  float* out = calloc(count * (size_t)nranks, sizeof(float));
  for (int i = 0; i < 1000000; ++i) {
    if (!strcmp(mode, "hold") && i == iter) {
      printf("HOLD rank=%d\n", rank);
      fflush(stdout);
      const char* f = getenv("MP_HOLD_FILE");
      for (int w = 0; f && w < 12000 && access(f, F_OK) != 0; ++w) sleepMs(10);
    }
    if ((!strcmp(mode, "none") && i == iter) || (!strcmp(mode, "hold") && i == 2 * iter) ||
        (!strcmp(mode, "compute") && i == iter + 3)) {
      printf("DONE rank=%d\n", rank);
      braidCommDestroy(comm);
      return 0;
    }
    if (rank == victim && i == iter && strcmp(mode, "external") != 0) {
      printf("FAULT rank=%d mono_ms=%.3f\n", rank, nowMs());
      fflush(stdout);
      if (!strcmp(mode, "kill")) raise(SIGKILL);
      if (!strcmp(mode, "stop")) raise(SIGSTOP);
      if (!strcmp(mode, "exit")) _exit(3);
      if (!strcmp(mode, "compute")) sleepMs(envInt("MP_COMPUTE_MS", 60000));
      if (!strcmp(mode, "abort")) {
        braidCommAbort(comm);
        printf("ABORTED rank=%d\n", rank);
        return 0;
      }
    }
    /* Small integers, exact in float: element j of rank r's input is r + i + j % 7. */
    if (check)
      for (size_t j = 0; j < count * (size_t)nranks; ++j) in[j] = (float)(rank + i % 5 + (int)(j % 7));
    double t0 = nowMs();
    braidResult_t r;
    if (!strcmp(coll, "broadcast")) r = braidBroadcast(in, out, count, braidFloat32, i % nranks, comm, NULL);
    else if (!strcmp(coll, "allgather")) r = braidAllGather(in, out, count, braidFloat32, comm, NULL);
    else if (!strcmp(coll, "reduce_scatter")) r = braidReduceScatter(in, out, count, braidFloat32, braidSum, comm, NULL);
    else if (!strcmp(coll, "alltoall")) r = braidAllToAll(in, out, count, braidFloat32, comm, NULL);
    else if (!strcmp(coll, "reduce")) r = braidReduce(in, out, count, braidFloat32, braidSum, i % nranks, comm, NULL);
    else if (!strcmp(coll, "gather")) r = braidGather(in, out, count, braidFloat32, i % nranks, comm, NULL);
    else if (!strcmp(coll, "scatter")) r = braidScatter(in, out, count, braidFloat32, i % nranks, comm, NULL);
    else if (!strcmp(coll, "split")) {
      braidComm_t half = NULL;
      r = braidCommSplit(comm, rank % 2, rank, &half);
      if (half) braidCommDestroy(half);
    } else if (!strcmp(coll, "sendrecv")) {
      braidGroupStart();
      braidSend(in, count, braidFloat32, (rank + 1) % nranks, comm, NULL);
      braidRecv(out, count, braidFloat32, (rank + nranks - 1) % nranks, comm, NULL);
      r = braidGroupEnd();
    } else r = braidAllReduce(in, out, count, braidFloat32, braidSum, comm, NULL);
    /* Rooted collectives that leave the output only at the root check it there. */
    const int rootOnly = !strcmp(coll, "reduce") || !strcmp(coll, "gather");
    if (r == braidSuccess && check && (!rootOnly || rank == i % nranks)) {
      for (size_t j = 0; j < count; ++j) {
        const float base = (float)(i % 5 + (int)(j % 7));
        float want = 0;
        size_t at = j;
        if (!strcmp(coll, "broadcast")) {
          want = (float)(i % nranks) + base;
        } else if (!strcmp(coll, "allgather")) {
          at = (size_t)(i % nranks) * count + j; /* block of rank i % nranks */
          want = (float)(i % nranks) + base;
        } else if (!strcmp(coll, "alltoall")) {
          /* Block s of the output came from rank s, its block `rank`: elements rank*count + j. */
          int src = i % nranks;
          at = (size_t)src * count + j;
          want = (float)(src + i % 5 + (int)(((size_t)rank * count + j) % 7));
        } else if (!strcmp(coll, "gather")) {
          /* Block s of the root's output is rank s's input. */
          int src = (int)(j % (size_t)nranks);
          at = (size_t)src * count + j;
          want = (float)(src + i % 5 + (int)(j % 7));
        } else if (!strcmp(coll, "scatter")) {
          /* Block `rank` of the root's input: elements rank*count + j. */
          want = (float)(i % nranks + i % 5 + (int)(((size_t)rank * count + j) % 7));
        } else if (!strcmp(coll, "sendrecv")) {
          want = (float)((rank + nranks - 1) % nranks) + base; /* the previous rank's input */
        } else if (!strcmp(coll, "reduce_scatter")) {
          size_t g = (size_t)rank * count + j;
          want = (float)nranks * (float)(i % 5 + (int)(g % 7)) + (float)(nranks * (nranks - 1) / 2);
        } else {
          want = (float)nranks * base + (float)(nranks * (nranks - 1) / 2);
        }
        if (out[at] != want) {
          printf("WRONG rank=%d iter=%d at=%zu got=%g want=%g\n", rank, i, at, out[at], want);
          fflush(stdout);
          return 2;
        }
      }
    }
    if (r == braidSuccess && i == 0) {
      printf("RUNNING rank=%d\n", rank);
      fflush(stdout);
    }
    if (r != braidSuccess) {
      double t1 = nowMs();
      const char* msg = braidGetLastError(comm);
      const char* fr = strstr(msg, "failed rank ");
      int failed = fr ? atoi(fr + strlen("failed rank ")) : -1;
      printf("RESULT rank=%d code=%d failed_rank=%d elapsed_ms=%.0f mono_ms=%.3f\n", rank, (int)r, failed, t1 - t0, t1);
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
