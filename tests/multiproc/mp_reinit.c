/* Runs under a launcher: creates a communicator from the environment, checks an allreduce
 * and destroys it, ROUNDS times in one process (as hvd.shutdown() followed by hvd.init()
 * does); exits non-zero on any error or wrong element. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "braid/braid.h"

#define CHECK(call)                                                                        \
  do {                                                                                     \
    braidResult_t r_ = (call);                                                             \
    if (r_ != braidSuccess) {                                                              \
      fprintf(stderr, "rank %d round %d: %s failed: %s: %s\n", rank, round, #call,          \
              braidGetErrorString(r_), braidGetLastError(comm));                           \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  int rank = -1;
  int round = 0;
  for (; round < rounds; ++round) {
    braidComm_t comm = NULL;
    int n = 0;
    CHECK(braidCommInitFromEnv(&comm));
    CHECK(braidCommUserRank(comm, &rank));
    CHECK(braidCommCount(comm, &n));
    int64_t v[1000];
    for (int i = 0; i < 1000; ++i) v[i] = rank + round * i;
    CHECK(braidAllReduce(v, v, 1000, braidInt64, braidSum, comm, NULL));
    for (int i = 0; i < 1000; ++i) {
      int64_t want = (int64_t)n * (n - 1) / 2 + (int64_t)n * round * i;
      if (v[i] != want) {
        fprintf(stderr, "rank %d round %d: element %d is %lld, want %lld\n", rank, round, i, (long long)v[i],
                (long long)want);
        return 1;
      }
    }
    CHECK(braidCommDestroy(comm));
  }
  printf("reinit ok rank %d rounds %d\n", rank, rounds);
  return 0;
}
