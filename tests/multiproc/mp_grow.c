/* braidCommGetGrowId + braidCommGrow without a launcher: the parent forks N ranks and M new
 * processes, then creates a unique id for the N; rank 0 makes a grow id for N+M ranks, shares
 * it with the other ranks (a broadcast) and with the parent (a pipe), which hands it to the M
 * new processes, and they join with it.
 * All N+M check an allreduce on the grown communicator, its size, their rank and its epoch;
 * then a new process that reuses the id for a taken rank must be refused.
 * Usage: mp_grow N M [badsetting]. Exits 0 when every check held. With badsetting the first
 * new rank has a malformed BRAID_NSLOTS: every process's grow must fail (each prints
 * GROWFAIL and its reason), and it exits 0 when all did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "braid/braid.h"

static int checkGrown(braidComm_t grown, int wantRank, int total) {
  int rank = -1, size = 0, epoch = -1;
  braidCommUserRank(grown, &rank);
  braidCommCount(grown, &size);
  braidCommGetEpoch(grown, &epoch);
  double v[2] = {rank, 1.0};
  if (braidAllReduce(v, v, 2, braidFloat64, braidSum, grown, NULL) != braidSuccess) {
    fprintf(stderr, "rank %d: allreduce: %s\n", wantRank, braidGetLastError(grown));
    return 1;
  }
  int ok = rank == wantRank && size == total && epoch == 1 && v[0] == total * (total - 1) / 2.0 && v[1] == total;
  if (!ok) fprintf(stderr, "rank %d: rank %d size %d epoch %d sum %g count %g\n", wantRank, rank, size, epoch, v[0], v[1]);
  printf("GROWN rank=%d size=%d epoch=%d ok=%d\n", rank, size, epoch, ok);
  fflush(stdout);
  braidCommDestroy(grown);
  return ok ? 0 : 1;
}

/* A grow that failed: the reason, and exit status 3. */
static void growFailed(const char* who, int rank, braidComm_t comm) {
  printf("GROWFAIL %s %d: %s\n", who, rank, braidGetLastError(comm));
  fflush(stdout);
  _exit(3);
}

/* Reads one id from `fd` (written whole: 128 bytes is below PIPE_BUF). */
static int readId(int fd, braidUniqueId* id) { return read(fd, id, sizeof *id) == (ssize_t)sizeof *id; }

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  int m = argc > 2 ? atoi(argv[2]) : 2;
  int badSetting = argc > 3 && strcmp(argv[3], "badsetting") == 0;
  /* Every process is forked before the parent makes the unique id, whose store runs on a
   * thread: a child forked while another thread holds an allocator's lock inherits it held
   * (under AddressSanitizer a new rank hung so in its first allocation). The ids go through
   * pipes: the unique id to the first N, rank 0's grow id back, and it on to the M new. */
  int idPipe[2], growOut[2], growIn[2];
  if (pipe(idPipe) != 0 || pipe(growOut) != 0 || pipe(growIn) != 0) return 1;
  for (int r = 0; r < n; ++r) {
    if (fork() == 0) {
      close(idPipe[1]);
      close(growOut[0]);
      close(growIn[0]);
      close(growIn[1]);
      braidUniqueId id;
      if (!readId(idPipe[0], &id)) _exit(1);
      braidComm_t comm;
      if (braidCommInitRank(&comm, n, id, r) != braidSuccess) {
        fprintf(stderr, "rank %d init: %s\n", r, braidGetLastError(NULL));
        _exit(1);
      }
      braidUniqueId grow;
      memset(&grow, 0, sizeof grow);
      if (r == 0) {
        if (braidCommGetGrowId(comm, n + m, &grow) != braidSuccess) {
          fprintf(stderr, "grow id: %s\n", braidGetLastError(comm));
          _exit(1);
        }
        if (write(growOut[1], &grow, sizeof grow) != (ssize_t)sizeof grow) _exit(1);
      }
      close(growOut[1]);
      if (braidBroadcast(&grow, &grow, sizeof grow, braidUint8, 0, comm, NULL) != braidSuccess) _exit(1);
      braidComm_t grown;
      if (braidCommGrow(comm, n + m, &grow, -1, &grown) != braidSuccess) growFailed("rank", r, comm);
      braidCommDestroy(comm);
      _exit(checkGrown(grown, r, n + m));
    }
  }
  for (int r = n; r < n + m; ++r) {
    if (fork() == 0) {
      close(idPipe[0]);
      close(idPipe[1]);
      close(growOut[0]);
      close(growOut[1]);
      close(growIn[1]);
      if (badSetting && r == n) setenv("BRAID_NSLOTS", "abc", 1);
      braidUniqueId grow;
      if (!readId(growIn[0], &grow)) _exit(1);
      braidComm_t grown;
      if (braidCommGrow(NULL, n + m, &grow, r, &grown) != braidSuccess) growFailed("new rank", r, NULL);
      _exit(checkGrown(grown, r, n + m));
    }
  }
  close(idPipe[0]);
  close(growOut[1]);
  close(growIn[0]);
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) {
    fprintf(stderr, "braidGetUniqueId: %s\n", braidGetLastError(NULL));
    return 1;
  }
  for (int r = 0; r < n; ++r)
    if (write(idPipe[1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
  close(idPipe[1]);
  braidUniqueId grow;
  if (!readId(growOut[0], &grow)) {
    fprintf(stderr, "no grow id from rank 0\n");
    close(growIn[1]);  /* the new ranks read an end, not an id, and exit */
    return 1;
  }
  for (int r = n; r < n + m; ++r)
    if (write(growIn[1], &grow, sizeof grow) != (ssize_t)sizeof grow) return 1;
  close(growIn[1]);
  int failed = 0, growFailures = 0, status = 0;
  while (wait(&status) > 0) {
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    growFailures += WIFEXITED(status) && WEXITSTATUS(status) == 3;
  }
  if (badSetting) {
    printf("GROWFAILURES %d of %d\n", growFailures, n + m);
    return growFailures == n + m ? 0 : 1;
  }
  /* The id is single-use: a latecomer claiming a taken rank is refused, at once. */
  braidComm_t late = NULL;
  braidResult_t rc = braidCommGrow(NULL, n + m, &grow, n, &late);
  const char* msg = braidGetLastError(NULL);
  int refused = rc == braidInvalidArgument && strstr(msg, "taken already") != NULL;
  printf("LATE rc=%d refused=%d (%s)\n", (int)rc, refused, msg);
  /* A plain unique id is not a grow id, and a grow id is not a unique id for init. */
  rc = braidCommGrow(NULL, n + m, &id, n, &late);
  int plainRefused = rc == braidInvalidArgument && strstr(braidGetLastError(NULL), "not a grow id") != NULL;
  braidComm_t wrong = NULL;
  rc = braidCommInitRank(&wrong, n + m, grow, 0);
  int growRefused = rc == braidInvalidArgument && strstr(braidGetLastError(NULL), "is a grow id") != NULL;
  printf("KINDS plain_refused=%d grow_refused=%d\n", plainRefused, growRefused);
  return failed || !refused || !plainRefused || !growRefused ? 1 : 0;
}
