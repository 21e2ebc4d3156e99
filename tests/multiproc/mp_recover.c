/* A training loop that loses ranks and goes on: usage mp_recover STEPS [COUNT].
 * MP_VICTIMS="R:S[:MODE],..." makes rank R (its rank at start) kill itself (MODE kill, the
 * default) or stop itself (stop) when it reaches global step S, or kill itself after that
 * step's allreduce succeeded and before it votes (novote: no survivor's collective sees it
 * go, only the agreement), or kill itself after a vote at step S that counted failed ranks,
 * before it joins the shrink (noshrink: the survivors' shrink waits for a rank that the vote
 * counted alive), or kill itself before the first grow after step S (nogrow: the others
 * wait for it in the grown communicator), or stop itself (SIGSTOP) where novote kills
 * (stopvote: the survivors wait in their agreement for a vote that does not come), or kill
 * itself 300 ms after it reached step S (late: after a victim
 * stopped at the same step, when that is rank 0, serving the store, the store's standby has
 * not taken over yet). MP_HOST_PER_RANK=1 gives every rank a host of its own
 * (BRAID_HOST_ID), as if each ran on another machine: no shared memory, no pidfd to watch.
 * MP_STEP_MS=T sleeps T ms after every step (a job that lasts while hosts come and go).
 * MP_GROW_AT="S:M": once global step S is done, rank 0 makes a grow id for M more ranks
 * (braidCommGetGrowId), shares it with the others (a broadcast) and starts M new processes of
 * this program that join with it (braidCommGrow(NULL, ...), named by their new rank, which
 * is also their host's with MP_HOST_PER_RANK), while the others grow with it too; the new
 * ones then go on as a replacement does.
 *
 * Every step allreduces (average) a synthetic gradient that is the same on every rank, votes
 * with braidCommAgree on whether the step succeeded everywhere, and applies it only then.
 * When the vote names failed ranks, the survivors shrink them away and redo the step on the
 * new communicator. So however many ranks are lost, the survivors finish exactly STEPS
 * global steps, and their parameters equal those of a run without failures, which each rank
 * computes on its own to check. Under braidrun --max-np, braidrun starts a replacement for
 * each lost rank (BRAID_ELASTIC_JOIN=1); the running ranks fold "a replacement waits" into
 * their vote, admit it after the step with braidCommGrowJoiners, and hand it the step count
 * and the parameters with a broadcast, so it finishes the remaining steps with them and
 * prints the same FINAL line ("GROWN rank=R step=S from=N to=M epoch=E mono_ms=M
 * old_destroy_ms=D" per grow, D what destroying the communicator it grew from took; a
 * replacement is named by its process index, BRAID_REPLACEMENT; it prints "JOINED rank=R
 * newrank=Q size=M step=S epoch=E mono_ms=M" once admitted).
 * Each survivor prints
 *   SHRUNK rank=R step=S from=N to=M failed=F1,F2 ms=T mono_ms=M
 * per shrink (T: from the vote to the new communicator; M: when, on the host's monotonic
 * clock, which the victim's "FAULT rank=R step=S mono_ms=M" line also uses; a shrink that
 * fails because a rank the vote counted alive died before joining it prints "SHRINKFAIL
 * rank=R step=S: why", and the step is voted again), then
 *   FINAL rank=R newrank=Q size=M steps=S checksum=C match=1 same=1
 * and, once braidCommDestroy returned, "DESTROYED rank=R ms=T" (what the destroy took: the
 * rank serving the store waits there for the others to leave), and exits 0; a rank that
 * cannot go on prints ERROR and exits 1. */
#include <signal.h>
#include <spawn.h>
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

/* The fault this rank injects at `step`, if any: 0 none, 1 kill, 2 stop, 3 kill before voting,
 * 4 late, 5 kill before shrinking, 6 kill before growing, 7 stop before voting. */
static int faultAt(int rank, int step) {
  const char* v = getenv("MP_VICTIMS");
  if (!v) return 0;
  while (*v) {
    int r = -1, s = -1, n = 0;
    char mode[16] = "kill";
    if (sscanf(v, "%d:%d%n", &r, &s, &n) < 2) return 0;
    v += n;
    if (*v == ':') {
      int m = 0;
      if (sscanf(v, ":%15[a-z]%n", mode, &m) < 1) return 0;
      v += m;
    }
    if (r == rank && s == step)
      return strcmp(mode, "stop") == 0       ? 2
             : strcmp(mode, "novote") == 0   ? 3
             : strcmp(mode, "late") == 0     ? 4
             : strcmp(mode, "noshrink") == 0 ? 5
             : strcmp(mode, "nogrow") == 0   ? 6
             : strcmp(mode, "stopvote") == 0 ? 7
                                             : 1;
    if (*v == ',') ++v;
  }
  return 0;
}

/* The gradient of step `s`: small integers, the same on every rank, so their average is
 * exact whatever the number of ranks. */
static float grad(int s, size_t j) { return (float)((s + (int)(j % 13)) % 7 + 1); }

extern char** environ;

/* MP_GROW_AT's step and number of new ranks; 0 when not set. */
static int growAt(int* more) {
  const char* v = getenv("MP_GROW_AT");
  int s = 0, m = 0;
  if (!v || sscanf(v, "%d:%d", &s, &m) != 2 || s <= 0 || m <= 0) return 0;
  *more = m;
  return s;
}

static void toHex(const braidUniqueId* id, char* out) {
  for (size_t i = 0; i < sizeof id->internal; ++i) sprintf(out + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static int fromHex(const char* in, braidUniqueId* id) {
  if (strlen(in) != 2 * sizeof id->internal) return 0;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (sscanf(in + 2 * i, "%2x", &v) != 1) return 0;
    id->internal[i] = (char)v;
  }
  return 1;
}

/* Starts new process `rank` of a grown communicator of `size`: this program again, with the
 * grow id and its rank in its environment (posix_spawn: this process has threads). */
static int spawnGrown(char** argv, const char* idHex, int rank, int size) {
  size_t n = 0;
  while (environ[n]) ++n;
  char** env = calloc(n + 4, sizeof(char*));
  char vars[3][600];
  snprintf(vars[0], sizeof vars[0], "MP_GROW_ID=%s", idHex);
  snprintf(vars[1], sizeof vars[1], "MP_GROW_RANK=%d", rank);
  snprintf(vars[2], sizeof vars[2], "MP_GROW_SIZE=%d", size);
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (strncmp(environ[i], "MP_GROW_", 8) != 0) env[k++] = environ[i];
  env[k++] = vars[0];
  env[k++] = vars[1];
  env[k++] = vars[2];
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, env);
  free(env);
  return rc == 0;
}

static int fail(int rank, const char* what, braidResult_t rc, braidComm_t comm) {
  printf("ERROR rank=%d %s: %s (%s)\n", rank, what, braidGetErrorString(rc), braidGetLastError(comm));
  fflush(stdout);
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s STEPS [COUNT]\n", argv[0]);
    return 2;
  }
  const int steps = atoi(argv[1]);
  const size_t count = argc > 2 ? (size_t)atol(argv[2]) : 65536;
  braidComm_t comm = NULL;
  const char* perHost = getenv("MP_HOST_PER_RANK");
  const char* envRank = getenv("BRAID_RANK") ? getenv("BRAID_RANK") : getenv("RANK"); /* braidrun, torchrun */
  if (perHost && !strcmp(perHost, "1") && envRank) {
    char host[64];
    snprintf(host, sizeof host, "mp-host-%s", envRank);
    setenv("BRAID_HOST_ID", host, 1);
  }
  const char* joinVar = getenv("BRAID_ELASTIC_JOIN");
  const char* growVar = getenv("MP_GROW_ID");
  const int grownRank = growVar && getenv("MP_GROW_RANK") ? atoi(getenv("MP_GROW_RANK")) : -1;
  const int joiner = (joinVar && !strcmp(joinVar, "1")) || grownRank >= 0;
  braidResult_t rc;
  if (grownRank >= 0) {
    /* Started by rank 0 with a grow id: joins the running ranks' grown communicator. */
    braidUniqueId gid;
    if (!fromHex(growVar, &gid)) return fail(grownRank, "MP_GROW_ID", braidInvalidArgument, NULL);
    if (perHost && !strcmp(perHost, "1")) {
      char host[64];
      snprintf(host, sizeof host, "mp-host-%d", grownRank);
      setenv("BRAID_HOST_ID", host, 1);
    }
    rc = braidCommGrow(NULL, getenv("MP_GROW_SIZE") ? atoi(getenv("MP_GROW_SIZE")) : 0, &gid, grownRank, &comm);
    if (rc != braidSuccess) return fail(grownRank, "grow", rc, NULL);
  } else {
    rc = braidCommInitFromEnv(&comm);
    if (rc != braidSuccess) return fail(-1, "init", rc, NULL);
  }
  int rank = 0, nranks = 0;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &nranks);
  /* A replacement is named by its process index (BRAID_RANK) in the output, a process
   * started with a grow id by its first rank. */
  const int origRank = grownRank >= 0 ? grownRank
                       : joiner && getenv("BRAID_REPLACEMENT") ? atoi(getenv("BRAID_REPLACEMENT"))
                                                               : rank;
  int growMore = 0;
  const int growStep = grownRank >= 0 ? 0 : growAt(&growMore);
  float* params = calloc(count, sizeof(float));
  float* expect = calloc(count, sizeof(float));
  float* buf = calloc(count, sizeof(float));
  int* failed = calloc((size_t)nranks, sizeof(int));
  for (int s = 0; s < steps; ++s)
    for (size_t j = 0; j < count; ++j) expect[j] -= 0.5f * grad(s, j);

  int step = 0, retries = 0, shrinkRetries = 0;
  const int stepMs = getenv("MP_STEP_MS") ? atoi(getenv("MP_STEP_MS")) : 0;
  double state[2] = {0, 0};
  if (joiner) {
    /* Admitted into a grown communicator: the others hand over where they are. */
    rc = braidBroadcast(state, state, 2, braidFloat64, 0, comm, NULL);
    if (rc == braidSuccess) rc = braidBroadcast(params, params, count, braidFloat32, 0, comm, NULL);
    if (rc != braidSuccess) return fail(origRank, "state broadcast", rc, comm);
    step = (int)state[0];
    int epoch = -1;
    braidCommGetEpoch(comm, &epoch);
    printf("JOINED rank=%d newrank=%d size=%d step=%d epoch=%d mono_ms=%.3f\n", origRank, rank, nranks, step, epoch,
           nowMs());
    fflush(stdout);
    free(failed);
    failed = calloc((size_t)nranks, sizeof(int));
  }
  while (step < steps) {
    int fault = faultAt(origRank, step);
    if (fault == 4) { /* late: a victim stopped at the same step has stopped by then */
      struct timespec late = {0, 300 * 1000 * 1000};
      nanosleep(&late, NULL);
    }
    if (fault == 1 || fault == 2 || fault == 4) {
      printf("FAULT rank=%d step=%d mono_ms=%.3f\n", origRank, step, nowMs());
      fflush(stdout);
      raise(fault == 2 ? SIGSTOP : SIGKILL);
    }
    for (size_t j = 0; j < count; ++j) buf[j] = grad(step, j);
    rc = braidAllReduce(buf, buf, count, braidFloat32, braidAvg, comm, NULL);
    if (fault == 3 || fault == 7) {
      printf("FAULT rank=%d step=%d mono_ms=%.3f\n", origRank, step, nowMs());
      fflush(stdout);
      raise(fault == 7 ? SIGSTOP : SIGKILL);
    }
    /* Bit 0: this step succeeded here; bit 1: no replacement is waiting to be admitted. */
    int waiting = 0;
    braidCommGetJoiners(comm, &waiting);
    int vote = (rc == braidSuccess) | (waiting == 0) << 1;
    double t0 = nowMs();
    braidResult_t arc = braidCommAgree(comm, &vote);
    if (arc != braidSuccess) return fail(origRank, "agree", arc, comm);
    int nfailed = 0;
    braidCommGetFailedRanks(comm, failed, nranks, &nfailed);
    const int ok = vote & 1;
    if (fault == 5 && (!ok || nfailed > 0)) {
      printf("FAULT rank=%d step=%d mono_ms=%.3f\n", origRank, step, nowMs());
      fflush(stdout);
      raise(SIGKILL);
    }
    if (ok && nfailed == 0) {
      for (size_t j = 0; j < count; ++j) params[j] -= 0.5f * buf[j];
      ++step;
      retries = 0;
      if (stepMs > 0) {
        struct timespec ts = {stepMs / 1000, (long)(stepMs % 1000) * 1000000L};
        nanosleep(&ts, NULL);
      }
      const int growNow = step == growStep;
      if (!(vote & 2) || growNow) {
        braidComm_t grown = NULL;
        braidResult_t grc;
        int nogrow = 0; /* the first grow at or after its step */
        for (int s = 0; s < step && !nogrow; ++s) nogrow = faultAt(origRank, s) == 6;
        if (nogrow) {
          printf("FAULT rank=%d step=%d mono_ms=%.3f\n", origRank, step - 1, nowMs());
          fflush(stdout);
          raise(SIGKILL);
        }
        if (growNow) {
          braidUniqueId gid;
          memset(&gid, 0, sizeof gid);
          grc = rank == 0 ? braidCommGetGrowId(comm, nranks + growMore, &gid) : braidSuccess;
          if (grc == braidSuccess) grc = braidBroadcast(&gid, &gid, sizeof gid, braidUint8, 0, comm, NULL);
          if (grc != braidSuccess) return fail(origRank, "grow id", grc, comm);
          if (rank == 0) {
            char hex[2 * sizeof gid.internal + 1];
            toHex(&gid, hex);
            for (int r = nranks; r < nranks + growMore; ++r)
              if (!spawnGrown(argv, hex, r, nranks + growMore)) return fail(origRank, "spawn", braidSystemError, comm);
          }
          grc = braidCommGrow(comm, nranks + growMore, &gid, -1, &grown);
          if (grc != braidSuccess) return fail(origRank, "grow", grc, comm);
        } else {
          grc = braidCommGrowJoiners(comm, &grown);
        }
        if (grc != braidSuccess) {
          /* A replacement that died while being admitted fails the grow; the communicator
           * the ranks had is still whole, so they go on with it. */
          printf("GROWFAIL rank=%d step=%d: %s\n", origRank, step, braidGetLastError(comm));
          fflush(stdout);
        }
        if (grown) {
          /* MP_LATE_DESTROY_MS: rank 1 destroys the old communicator that much later than the
           * others, as a rank busy elsewhere would. */
          if (origRank == 1 && getenv("MP_LATE_DESTROY_MS")) {
            long late = atol(getenv("MP_LATE_DESTROY_MS"));
            struct timespec ts = {late / 1000, (late % 1000) * 1000000L};
            nanosleep(&ts, NULL);
          }
          const double destroyStart = nowMs();
          braidCommDestroy(comm);
          const double oldDestroyMs = nowMs() - destroyStart;
          comm = grown;
          int newSize = 0, epoch = -1;
          braidCommUserRank(comm, &rank);
          braidCommCount(comm, &newSize);
          braidCommGetEpoch(comm, &epoch);
          state[0] = step;
          rc = braidBroadcast(state, state, 2, braidFloat64, 0, comm, NULL);
          if (rc == braidSuccess) rc = braidBroadcast(params, params, count, braidFloat32, 0, comm, NULL);
          if (rc != braidSuccess) return fail(origRank, "state broadcast", rc, comm);
          printf("GROWN rank=%d step=%d from=%d to=%d epoch=%d mono_ms=%.3f old_destroy_ms=%.0f\n", origRank, step, nranks,
                 newSize, epoch, nowMs(), oldDestroyMs);
          fflush(stdout);
          nranks = newSize;
          free(failed);
          failed = calloc((size_t)nranks, sizeof(int));
        }
      }
      continue;
    }
    /* Every rank voted, and one failed its allreduce anyway (a peer's error that named no
     * dead rank): the step is redone on a fresh communicator of the same ranks. */
    if (nfailed == 0 && ++retries > 3) return fail(origRank, "allreduce", rc, comm);
    braidComm_t next = NULL;
    braidResult_t src = braidCommShrink(comm, failed, nfailed, &next, BRAID_SHRINK_ABORT);
    if (src == braidRemoteError && ++shrinkRetries <= 3) {
      /* A rank the vote counted alive died before it joined the shrink: the step is voted
       * again (the shrink revoked the communicator, so its allreduce fails at once), and
       * that vote counts it too. */
      printf("SHRINKFAIL rank=%d step=%d: %s\n", origRank, step, braidGetLastError(comm));
      fflush(stdout);
      continue;
    }
    if (src != braidSuccess) return fail(origRank, "shrink", src, comm);
    shrinkRetries = 0;
    braidCommDestroy(comm);
    comm = next;
    int newSize = 0;
    braidCommUserRank(comm, &rank);
    braidCommCount(comm, &newSize);
    printf("SHRUNK rank=%d step=%d from=%d to=%d failed=", origRank, step, nranks, newSize);
    for (int i = 0; i < nfailed; ++i) printf("%s%d", i ? "," : "", failed[i]);
    printf(" ms=%.0f mono_ms=%.3f\n", nowMs() - t0, nowMs());
    fflush(stdout);
    nranks = newSize;
  }
  /* Every survivor must hold the same parameters: compare checksums through the communicator. */
  double sum = 0;
  int match = 1;
  for (size_t j = 0; j < count; ++j) {
    sum += params[j];
    if (params[j] != expect[j]) match = 0;
  }
  double lo = sum, hi = sum;
  braidAllReduce(&lo, &lo, 1, braidFloat64, braidMin, comm, NULL);
  rc = braidAllReduce(&hi, &hi, 1, braidFloat64, braidMax, comm, NULL);
  if (rc != braidSuccess) return fail(origRank, "final allreduce", rc, comm);
  printf("FINAL rank=%d newrank=%d size=%d steps=%d checksum=%.3f match=%d same=%d\n", origRank, rank, nranks, step,
         sum, match, lo == hi);
  fflush(stdout);
  const double destroyStart = nowMs();
  braidCommDestroy(comm);
  printf("DESTROYED rank=%d ms=%.0f\n", origRank, nowMs() - destroyStart);
  fflush(stdout);
  free(params);
  free(expect);
  free(buf);
  free(failed);
  return match && lo == hi ? 0 : 1;
}
