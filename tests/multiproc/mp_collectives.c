/* Runs under braidrun: allreduce and broadcast through the C API for several sizes, types
 * and ops, checking every element; exits non-zero on any mismatch or error. Written in C99
 * to prove that braid.h is a pure C header. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braid/braid.h"

#define CHECK(call)                                                                       \
  do {                                                                                    \
    braidResult_t r_ = (call);                                                            \
    if (r_ != braidSuccess) {                                                             \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, #call, braidGetErrorString(r_), \
              braidGetLastError(comm));                                                   \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main(void) {
  braidComm_t comm = NULL;
  int rank = -1, n = 0;
  CHECK(braidCommInitFromEnv(&comm));
  CHECK(braidCommUserRank(comm, &rank));
  CHECK(braidCommCount(comm, &n));
  static const size_t counts[] = {0, 1, 5, 4099, 262147, 3000001};
  int wrong = 0;
  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ++ci) {
    size_t count = counts[ci];
    float* f = malloc(count * sizeof(float) + 4);
    float* g = malloc(count * sizeof(float) + 4);
    int64_t* l = malloc(count * sizeof(int64_t) + 8);
    double* d = malloc(count * sizeof(double) + 8);
    for (size_t i = 0; i < count; ++i) {
      f[i] = (float)((rank + 1) * (int)(i % 13));
      l[i] = (int64_t)(rank * 1000 + (int64_t)(i % 97));
      d[i] = rank == (int)(count % (size_t)n) ? (double)i * 0.5 : -1.0;
    }
    /* float sum, out of place */
    CHECK(braidAllReduce(f, g, count, braidFloat32, braidSum, comm, NULL));
    for (size_t i = 0; i < count; ++i)
      if (g[i] != (float)((int)(i % 13) * n * (n + 1) / 2)) { ++wrong; break; }
    /* int64 max, in place */
    CHECK(braidAllReduce(l, l, count, braidInt64, braidMax, comm, NULL));
    for (size_t i = 0; i < count; ++i)
      if (l[i] != (int64_t)((n - 1) * 1000 + (int64_t)(i % 97))) { ++wrong; break; }
    /* float avg, in place */
    for (size_t i = 0; i < count; ++i) f[i] = (float)(rank * 2);
    CHECK(braidAllReduce(f, f, count, braidFloat32, braidAvg, comm, NULL));
    for (size_t i = 0; i < count; ++i)
      if (f[i] != (float)(n - 1)) { ++wrong; break; }
    /* double broadcast from a rank that depends on the count */
    int root = (int)(count % (size_t)n);
    CHECK(braidBroadcast(d, d, count, braidFloat64, root, comm, NULL));
    for (size_t i = 0; i < count; ++i)
      if (d[i] != (double)i * 0.5) { ++wrong; break; }
    free(f); free(g); free(l); free(d);
  }
  CHECK(braidCommDestroy(comm));
  if (wrong) {
    fprintf(stderr, "rank %d: %d checks failed\n", rank, wrong);
    return 1;
  }
  printf("collectives ok rank %d of %d\n", rank, n);
  return 0;
}
