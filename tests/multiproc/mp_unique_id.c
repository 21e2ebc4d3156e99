/* braidGetUniqueId + braidCommInitRank without a launcher: the parent creates the id, forks
 * N ranks that inherit it, and each checks an allreduce. Usage: mp_unique_id N
 *
 * mp_unique_id N rank0-joins: the parent forks ranks 1..N-1 and joins as rank 0 itself; if
 * its init fails it exits at once, as a program does, taking the id's store with it. Each
 * rank prints why its own init failed. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "braid/braid.h"

/* Rank r of n: joins through the id and checks an allreduce; 0 if all went well. */
static int runRank(braidUniqueId id, int n, int r) {
  braidComm_t comm;
  if (braidCommInitRank(&comm, n, id, r) != braidSuccess) {
    fprintf(stderr, "rank %d init: %s\n", r, braidGetLastError(NULL));
    return 1;
  }
  double v[3] = {r, 2.0 * r, 1.0};
  if (braidAllReduce(v, v, 3, braidFloat64, braidSum, comm, NULL) != braidSuccess) return 1;
  double want = n * (n - 1) / 2.0;
  int ok = v[0] == want && v[1] == 2 * want && v[2] == n;
  braidCommDestroy(comm);
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3;
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) {
    fprintf(stderr, "braidGetUniqueId: %s\n", braidGetLastError(NULL));
    return 1;
  }
  if (argc > 2) {
    for (int r = 1; r < n; ++r)
      if (fork() == 0) _exit(runRank(id, n, r));
    return runRank(id, n, 0);
  }
  for (int r = 0; r < n; ++r)
    if (fork() == 0) _exit(runRank(id, n, r));
  int bad = 0;
  for (int r = 0; r < n; ++r) {
    int st = 0;
    wait(&st);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++bad;
  }
  if (bad) return 1;
  printf("unique id ok\n");
  return 0;
}
