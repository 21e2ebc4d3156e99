/* Runs under braidrun: every collective of the full set, point-to-point groups, split,
 * pre-multiplied sums, bitwise ops and bad input, through the C API, checking every element
 * against values computed here. Written in C99 to prove that braid.h is a pure C header.
 *
 *   braidrun -np 4 mp_full_set [section ...]      (default: every section)
 *
 * Prints "section NAME ok rank R" or "section NAME FAILED rank R" per section, so a caller
 * can tell which parts work; exits non-zero if any section failed. Every rank makes the
 * same sequence of braid calls whatever its data checks find, so one wrong section does
 * not desynchronise the next. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "braid/braid.h"

static braidComm_t comm = NULL;
static int rank = -1, n = 0;
static const char* section = "";
static int sectionFailures = 0;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d section %s: ", rank, section);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  ++sectionFailures;
}

/* A failed call ends the section: the failure is the same on every rank (or the
 * communicator is broken), so skipping the rest keeps the ranks in step. */
#define TRY(call)                                                                                   \
  do {                                                                                              \
    braidResult_t r_ = (call);                                                                      \
    if (r_ != braidSuccess) {                                                                       \
      fail("%s failed: %s: %s", #call, braidGetErrorString(r_), braidGetLastError(comm));           \
      return;                                                                                       \
    }                                                                                               \
  } while (0)

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* An int32 that depends on rank and index, exact in float and small enough that sums over
 * a few ranks stay exact. */
static int32_t val(int r, size_t i) { return (int32_t)((r * 131 + (int64_t)(i % 100003) * 7) % 1000) - 300; }

static void fill32(int32_t* p, size_t count, int32_t v) {
  for (size_t i = 0; i < count; ++i) p[i] = v;
}

/* Reports the first wrong element of a check and returns 1 if any was wrong. */
static int expectI32(const char* what, const int32_t* got, size_t i, int32_t want) {
  if (got[i] != want) {
    fail("%s: element %zu is %d, expected %d", what, i, (int)got[i], (int)want);
    return 1;
  }
  return 0;
}

static const size_t kCounts[] = {0, 1, 7, 4099, 100003};
#define NCOUNTS (sizeof(kCounts) / sizeof(kCounts[0]))

/* ---------------------------------------------------------------- reduce */

static void testReduce(void) {
  for (size_t ci = 0; ci < NCOUNTS; ++ci) {
    const size_t count = kCounts[ci];
    const int root = (int)(ci % (size_t)n);
    int32_t* s = xmalloc(count * 4);
    int32_t* d = xmalloc(count * 4);
    float* f = xmalloc(count * 4);
    double* a = xmalloc(count * 8);
    double* ad = xmalloc(count * 8);
    int64_t* p = xmalloc(count * 8);
    for (size_t i = 0; i < count; ++i) {
      s[i] = val(rank, i);
      f[i] = (float)val(rank, i);
      a[i] = (double)(rank * 2);
      ad[i] = -5.0;
      p[i] = (i + (size_t)rank) % 5 == 0 ? 2 : 1;
    }
    fill32(d, count, -7);
    /* int32 sum out of place; non-roots pass no receive buffer at all */
    TRY(braidReduce(s, rank == root ? d : NULL, count, braidInt32, braidSum, root, comm, NULL));
    if (rank == root)
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < n; ++r) want += val(r, i);
        if (expectI32("reduce sum", d, i, want)) break;
      }
    /* float max in place at the root */
    TRY(braidReduce(f, f, count, braidFloat32, braidMax, root, comm, NULL));
    if (rank == root)
      for (size_t i = 0; i < count; ++i) {
        int32_t want = val(0, i);
        for (int r = 1; r < n; ++r) want = val(r, i) > want ? val(r, i) : want;
        if (f[i] != (float)want) { fail("reduce max: element %zu is %g, expected %d", i, f[i], want); break; }
      }
    /* double avg out of place; a non-root's receive buffer must stay untouched */
    TRY(braidReduce(a, ad, count, braidFloat64, braidAvg, root, comm, NULL));
    for (size_t i = 0; i < count; ++i) {
      double want = rank == root ? (double)(n - 1) : -5.0;
      if (ad[i] != want) { fail("reduce avg: element %zu is %g, expected %g", i, ad[i], want); break; }
    }
    /* int64 prod in place: a 2 from every rank with (i + r) % 5 == 0 */
    TRY(braidReduce(p, p, count, braidInt64, braidProd, root, comm, NULL));
    if (rank == root)
      for (size_t i = 0; i < count; ++i) {
        int64_t want = 1;
        for (int r = 0; r < n; ++r) want *= (i + (size_t)r) % 5 == 0 ? 2 : 1;
        if (p[i] != want) { fail("reduce prod: element %zu is %lld, expected %lld", i, (long long)p[i], (long long)want); break; }
      }
    free(s); free(d); free(f); free(a); free(ad); free(p);
  }
}

/* ---------------------------------------------------------------- allgather */

static void testAllGather(void) {
  for (size_t ci = 0; ci < NCOUNTS; ++ci) {
    const size_t count = kCounts[ci];
    const size_t total = count * (size_t)n;
    int32_t* s = xmalloc(count * 4);
    int32_t* d = xmalloc(total * 4);
    for (size_t i = 0; i < count; ++i) s[i] = val(rank, i);
    fill32(d, total, -7);
    TRY(braidAllGather(s, d, count, braidInt32, comm, NULL));
    for (size_t i = 0; i < total; ++i)
      if (expectI32("allgather", d, i, val((int)(i / count), i % count))) break;
    /* in place: this rank's block already sits in the receive buffer */
    fill32(d, total, -7);
    for (size_t i = 0; i < count; ++i) d[(size_t)rank * count + i] = val(rank, i);
    TRY(braidAllGather(d + (size_t)rank * count, d, count, braidInt32, comm, NULL));
    for (size_t i = 0; i < total; ++i)
      if (expectI32("allgather in place", d, i, val((int)(i / count), i % count))) break;
    /* bytes, an odd count */
    uint8_t* b = xmalloc(count + 1);
    uint8_t* bd = xmalloc(total + 1);
    for (size_t i = 0; i < count; ++i) b[i] = (uint8_t)(rank * 31 + i);
    TRY(braidAllGather(b, bd, count, braidUint8, comm, NULL));
    for (size_t i = 0; i < total; ++i)
      if (bd[i] != (uint8_t)((int)(i / count) * 31 + i % count)) { fail("allgather uint8: element %zu", i); break; }
    free(s); free(d); free(b); free(bd);
  }
}

/* ---------------------------------------------------------------- reduce-scatter */

static void testReduceScatter(void) {
  for (size_t ci = 0; ci < NCOUNTS; ++ci) {
    const size_t count = kCounts[ci];
    const size_t total = count * (size_t)n;
    const size_t base = (size_t)rank * count;
    int32_t* s = xmalloc(total * 4);
    int32_t* d = xmalloc(count * 4);
    for (size_t i = 0; i < total; ++i) s[i] = val(rank, i);
    fill32(d, count, -7);
    TRY(braidReduceScatter(s, d, count, braidInt32, braidSum, comm, NULL));
    for (size_t i = 0; i < count; ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want += val(r, base + i);
      if (expectI32("reduce_scatter sum", d, i, want)) break;
    }
    /* float min in place: the result lands in this rank's block of the input */
    float* f = xmalloc(total * 4);
    for (size_t i = 0; i < total; ++i) f[i] = (float)val(rank, i);
    TRY(braidReduceScatter(f, f + base, count, braidFloat32, braidMin, comm, NULL));
    for (size_t i = 0; i < count; ++i) {
      int32_t want = val(0, base + i);
      for (int r = 1; r < n; ++r) want = val(r, base + i) < want ? val(r, base + i) : want;
      if (f[base + i] != (float)want) { fail("reduce_scatter min in place: element %zu", i); break; }
    }
    free(s); free(d); free(f);
  }
}

/* ---------------------------------------------------------------- alltoall */

static void testAllToAll(void) {
  for (size_t ci = 0; ci < NCOUNTS; ++ci) {
    const size_t count = kCounts[ci];
    const size_t total = count * (size_t)n;
    int32_t* s = xmalloc(total * 4);
    int32_t* d = xmalloc(total * 4);
    for (size_t i = 0; i < total; ++i) s[i] = val(rank, i);
    fill32(d, total, -7);
    TRY(braidAllToAll(s, d, count, braidInt32, comm, NULL));
    /* block i of mine is block `rank` of rank i's input */
    for (size_t i = 0; i < total; ++i)
      if (expectI32("alltoall", d, i, val((int)(i / count), (size_t)rank * count + i % count))) break;
    /* in place, int64 */
    int64_t* l = xmalloc(total * 8);
    for (size_t i = 0; i < total; ++i) l[i] = (int64_t)rank * 1000000007LL + (int64_t)i;
    TRY(braidAllToAll(l, l, count, braidInt64, comm, NULL));
    for (size_t i = 0; i < total; ++i) {
      int64_t want = (int64_t)(i / count) * 1000000007LL + (int64_t)((size_t)rank * count + i % count);
      if (l[i] != want) { fail("alltoall in place: element %zu", i); break; }
    }
    free(s); free(d); free(l);
  }
}

/* ---------------------------------------------------------------- gather / scatter */

static void testGather(void) {
  for (size_t ci = 0; ci < NCOUNTS; ++ci) {
    const size_t count = kCounts[ci];
    const size_t total = count * (size_t)n;
    const int root = (int)((ci + 1) % (size_t)n);
    int32_t* s = xmalloc(count * 4);
    int32_t* d = xmalloc(total * 4);
    for (size_t i = 0; i < count; ++i) s[i] = val(rank, i);
    fill32(d, total, -7);
    TRY(braidGather(s, rank == root ? d : NULL, count, braidInt32, root, comm, NULL));
    if (rank == root)
      for (size_t i = 0; i < total; ++i)
        if (expectI32("gather", d, i, val((int)(i / count), i % count))) break;
    /* in place: every rank's input is its own block of a full-size buffer */
    fill32(d, total, -7);
    for (size_t i = 0; i < count; ++i) d[(size_t)rank * count + i] = val(rank, i);
    TRY(braidGather(d + (size_t)rank * count, d, count, braidInt32, root, comm, NULL));
    if (rank == root)
      for (size_t i = 0; i < total; ++i)
        if (expectI32("gather in place", d, i, val((int)(i / count), i % count))) break;
    free(s); free(d);
  }
}

static void testScatter(void) {
  for (size_t ci = 0; ci < NCOUNTS; ++ci) {
    const size_t count = kCounts[ci];
    const size_t total = count * (size_t)n;
    const int root = (int)((ci + 2) % (size_t)n);
    int32_t* s = xmalloc(total * 4);
    int32_t* d = xmalloc(count * 4);
    for (size_t i = 0; i < total; ++i) s[i] = val((int)(i / (count ? count : 1)), i % (count ? count : 1));
    fill32(d, count, -7);
    /* non-roots pass no send buffer */
    TRY(braidScatter(rank == root ? s : NULL, d, count, braidInt32, root, comm, NULL));
    for (size_t i = 0; i < count; ++i)
      if (expectI32("scatter", d, i, val(rank, i))) break;
    /* in place at the root: its block stays where it is */
    fill32(d, count, -7);
    int32_t* out = rank == root ? s + (size_t)root * count : d;
    TRY(braidScatter(rank == root ? s : NULL, out, count, braidInt32, root, comm, NULL));
    for (size_t i = 0; i < count; ++i)
      if (expectI32("scatter in place", out, i, val(rank, i))) break;
    free(s); free(d);
  }
}

/* ---------------------------------------------------------------- v-variants */

static const size_t kVScales[] = {1, 1001, 70001};
#define NVSCALES (sizeof(kVScales) / sizeof(kVScales[0]))

static void testAllGatherV(void) {
  for (size_t si = 0; si < NVSCALES; ++si) {
    const size_t m = kVScales[si];
    size_t* counts = xmalloc((size_t)n * sizeof(size_t));
    size_t* displs = xmalloc((size_t)n * sizeof(size_t));
    /* uneven, rank 1 sends nothing, and blocks land in reverse rank order with gaps of 2 */
    for (int i = 0; i < n; ++i) counts[i] = (size_t)((i * 3 + 1) % 4) * m;
    size_t at = 0;
    for (int i = n - 1; i >= 0; --i) {
      displs[i] = at;
      at += counts[i] + 2;
    }
    const size_t extent = at;
    int32_t* s = xmalloc(counts[rank] * 4);
    int32_t* d = xmalloc(extent * 4);
    for (size_t k = 0; k < counts[rank]; ++k) s[k] = val(rank, k);
    for (int pass = 0; pass < 2; ++pass) {
      fill32(d, extent, -7);
      const int32_t* send = s;
      if (pass == 1) { /* in place */
        memcpy(d + displs[rank], s, counts[rank] * 4);
        send = d + displs[rank];
      }
      TRY(braidAllGatherV(send, counts[rank], d, counts, displs, braidInt32, comm, NULL));
      int bad = 0;
      for (int i = 0; i < n && !bad; ++i) {
        for (size_t k = 0; k < counts[i] && !bad; ++k) bad = expectI32("allgatherv", d, displs[i] + k, val(i, k));
        for (size_t g = 0; g < 2 && !bad; ++g) bad = expectI32("allgatherv gap", d, displs[i] + counts[i] + g, -7);
      }
    }
    free(counts); free(displs); free(s); free(d);
  }
}

static void testReduceScatterV(void) {
  for (size_t si = 0; si < NVSCALES; ++si) {
    const size_t m = kVScales[si];
    size_t* counts = xmalloc((size_t)n * sizeof(size_t));
    size_t total = 0, mine = 0;
    for (int i = 0; i < n; ++i) {
      counts[i] = (size_t)((i * 5 + 2) % 3) * m; /* rank 2 (if any) gets nothing */
      if (i == rank) mine = total;
      total += counts[i];
    }
    int32_t* s = xmalloc(total * 4);
    int32_t* d = xmalloc(counts[rank] * 4 + 4);
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < total; ++i) s[i] = val(rank, i);
      fill32(d, counts[rank], -7);
      int32_t* out = pass == 0 ? d : s + mine; /* pass 1: in place */
      TRY(braidReduceScatterV(s, out, counts, braidInt32, braidSum, comm, NULL));
      for (size_t k = 0; k < counts[rank]; ++k) {
        int32_t want = 0;
        for (int r = 0; r < n; ++r) want += val(r, mine + k);
        if (expectI32("reduce_scatterv", out, k, want)) break;
      }
    }
    free(counts); free(s); free(d);
  }
}

static int32_t a2avValue(int from, int to, size_t k) { return from * 1000000 + to * 10000 + (int32_t)(k % 10000); }

static void testAllToAllV(void) {
  for (size_t si = 0; si < NVSCALES; ++si) {
    const size_t m = kVScales[si];
    size_t* sc = xmalloc((size_t)n * sizeof(size_t));
    size_t* sd = xmalloc((size_t)n * sizeof(size_t));
    size_t* rc = xmalloc((size_t)n * sizeof(size_t));
    size_t* rd = xmalloc((size_t)n * sizeof(size_t));
    for (int j = 0; j < n; ++j) {
      sc[j] = (size_t)((rank + 2 * j) % 4) * m;  /* what this rank sends to j */
      rc[j] = (size_t)((j + 2 * rank) % 4) * m;  /* what j sends to this rank */
    }
    size_t at = 0; /* send blocks in reverse order, receive blocks in order with a gap of 1 */
    for (int j = n - 1; j >= 0; --j) { sd[j] = at; at += sc[j]; }
    const size_t sendExtent = at;
    at = 0;
    for (int j = 0; j < n; ++j) { rd[j] = at; at += rc[j] + 1; }
    const size_t recvExtent = at;
    int32_t* s = xmalloc(sendExtent * 4);
    int32_t* d = xmalloc(recvExtent * 4);
    for (int j = 0; j < n; ++j)
      for (size_t k = 0; k < sc[j]; ++k) s[sd[j] + k] = a2avValue(rank, j, k);
    fill32(d, recvExtent, -7);
    TRY(braidAllToAllV(s, sc, sd, d, rc, rd, braidInt32, comm, NULL));
    int bad = 0;
    for (int i = 0; i < n && !bad; ++i) {
      for (size_t k = 0; k < rc[i] && !bad; ++k) bad = expectI32("alltoallv", d, rd[i] + k, a2avValue(i, rank, k));
      if (!bad) bad = expectI32("alltoallv gap", d, rd[i] + rc[i], -7);
    }
    free(sc); free(sd); free(rc); free(rd); free(s); free(d);
  }
}

/* ---------------------------------------------------------------- barrier */

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void testBarrier(void) {
  TRY(braidBarrier(comm));
  TRY(braidBarrier(comm));
  /* The last rank arrives 300 ms late: nobody may leave before it arrived. */
  if (rank == n - 1) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  double t0 = nowMs();
  TRY(braidBarrier(comm));
  double waited = nowMs() - t0;
  if (rank != n - 1 && n > 1 && waited < 200) fail("barrier returned after %.0f ms, before the late rank arrived", waited);
  /* A barrier inside a group is a recorded collective like any other. */
  TRY(braidGroupStart());
  TRY(braidBarrier(comm));
  TRY(braidGroupEnd());
}

/* ---------------------------------------------------------------- point to point */

static uint8_t p2pByte(int from, int to, size_t k) { return (uint8_t)(from * 37 + to * 11 + k * 13 + (k >> 8)); }

static void testP2P(void) {
  /* Outside a group: pairs (0,1), (2,3), ... one direction, then the other. */
  const size_t pairCounts[] = {1, 70000};
  for (size_t ci = 0; ci < 2; ++ci) {
    const size_t count = pairCounts[ci];
    int32_t* b = xmalloc(count * 4);
    const int partner = rank ^ 1;
    if (partner < n) {
      for (int dir = 0; dir < 2; ++dir) {
        const int sender = dir == 0 ? (rank & ~1) : (rank | 1);
        if (rank == sender) {
          for (size_t k = 0; k < count; ++k) b[k] = val(rank, k);
          TRY(braidSend(b, count, braidInt32, partner, comm, NULL));
        } else {
          fill32(b, count, -7);
          TRY(braidRecv(b, count, braidInt32, partner, comm, NULL));
          for (size_t k = 0; k < count; ++k)
            if (expectI32("send/recv pair", b, k, val(partner, k))) break;
        }
      }
    }
    free(b);
  }

  /* One group: every rank sends to every rank (itself included) and receives from every
   * rank, sizes up to a few MB in total. */
  const size_t groupBytes[] = {0, 1, 4099, 300001, 1500007};
  for (size_t ci = 0; ci < sizeof(groupBytes) / sizeof(groupBytes[0]); ++ci) {
    const size_t bytes = groupBytes[ci];
    uint8_t** sb = xmalloc((size_t)n * sizeof(uint8_t*));
    uint8_t** rb = xmalloc((size_t)n * sizeof(uint8_t*));
    for (int j = 0; j < n; ++j) {
      sb[j] = xmalloc(bytes);
      rb[j] = xmalloc(bytes);
      for (size_t k = 0; k < bytes; ++k) sb[j][k] = p2pByte(rank, j, k);
      memset(rb[j], 0xee, bytes);
    }
    TRY(braidGroupStart());
    for (int j = 0; j < n; ++j) {
      /* alternate the order of sends and receives: the group must not care */
      if ((rank + j) % 2) {
        TRY(braidSend(sb[j], bytes, braidUint8, j, comm, NULL));
        TRY(braidRecv(rb[j], bytes, braidUint8, j, comm, NULL));
      } else {
        TRY(braidRecv(rb[j], bytes, braidUint8, j, comm, NULL));
        TRY(braidSend(sb[j], bytes, braidUint8, j, comm, NULL));
      }
    }
    TRY(braidGroupEnd());
    for (int i = 0; i < n; ++i)
      for (size_t k = 0; k < bytes; ++k)
        if (rb[i][k] != p2pByte(i, rank, k)) {
          fail("all-pairs group of %zu bytes: byte %zu from rank %d is %d, expected %d", bytes, k, i, rb[i][k],
               p2pByte(i, rank, k));
          break;
        }
    for (int j = 0; j < n; ++j) { free(sb[j]); free(rb[j]); }
    free(sb); free(rb);
  }

  /* Ring exchange (send to rank+1, receive from rank-1) in nested groups, two messages of
   * different types per direction, matched in issue order. */
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const size_t ringCounts[] = {1, 1000003};
  for (size_t ci = 0; ci < 2; ++ci) {
    const size_t count = ringCounts[ci];
    int64_t* s1 = xmalloc(count * 8);
    int64_t* r1 = xmalloc(count * 8);
    uint8_t s2[77], r2[77];
    for (size_t k = 0; k < count; ++k) { s1[k] = (int64_t)rank * 100000000LL + (int64_t)k; r1[k] = -1; }
    for (size_t k = 0; k < 77; ++k) { s2[k] = (uint8_t)(rank + k); r2[k] = 0; }
    TRY(braidGroupStart());
    TRY(braidSend(s1, count, braidInt64, next, comm, NULL));
    TRY(braidGroupStart());
    TRY(braidRecv(r1, count, braidInt64, prev, comm, NULL));
    TRY(braidSend(s2, 77, braidUint8, next, comm, NULL));
    TRY(braidGroupEnd()); /* inner: nothing runs yet */
    TRY(braidRecv(r2, 77, braidUint8, prev, comm, NULL));
    TRY(braidGroupEnd());
    for (size_t k = 0; k < count; ++k)
      if (r1[k] != (int64_t)prev * 100000000LL + (int64_t)k) { fail("ring int64: element %zu", k); break; }
    for (size_t k = 0; k < 77; ++k)
      if (r2[k] != (uint8_t)(prev + k)) { fail("ring uint8: element %zu", k); break; }
    free(s1); free(r1);
  }

  /* A collective and sends/receives in one group: the allreduce runs first, then the ring. */
  {
    int32_t x[5], y[5], z[5];
    for (int k = 0; k < 5; ++k) { x[k] = rank + k; y[k] = 0; z[k] = rank * 10 + k; }
    int32_t got[5] = {-1, -1, -1, -1, -1};
    TRY(braidGroupStart());
    TRY(braidAllReduce(x, y, 5, braidInt32, braidSum, comm, NULL));
    TRY(braidSend(z, 5, braidInt32, next, comm, NULL));
    TRY(braidRecv(got, 5, braidInt32, prev, comm, NULL));
    TRY(braidGroupEnd());
    for (int k = 0; k < 5; ++k) {
      if (y[k] != n * (n - 1) / 2 + n * k) { fail("allreduce in a group: element %d", k); break; }
      if (got[k] != prev * 10 + k) { fail("ring after an allreduce in a group: element %d", k); break; }
    }
  }
}

/* ---------------------------------------------------------------- split */

static void testSplit(void) {
  /* Even and odd ranks, keys reversing the order: child rank 0 is the highest old rank. */
  braidComm_t child = NULL;
  TRY(braidCommSplit(comm, rank % 2, n - rank, &child));
  if (!child) { fail("split with a color gave no communicator"); return; }
  int crank = -1, csize = -1, wantSize = 0, wantRank = 0, sum = 0;
  for (int r = rank % 2; r < n; r += 2) {
    ++wantSize;
    sum += r;
    if (r > rank) ++wantRank;
  }
  TRY(braidCommUserRank(child, &crank));
  TRY(braidCommCount(child, &csize));
  if (crank != wantRank || csize != wantSize)
    fail("split: child rank %d of %d, expected %d of %d", crank, csize, wantRank, wantSize);
  int32_t v[3] = {rank, rank, rank};
  if (braidAllReduce(v, v, 3, braidInt32, braidSum, child, NULL) != braidSuccess)
    fail("allreduce on the child: %s", braidGetLastError(child));
  else if (v[2] != sum)
    fail("allreduce on the child: %d, expected %d", v[2], sum);
  /* child root 0 is the highest old rank of this parity */
  int32_t top[2] = {rank, -rank};
  if (braidBroadcast(top, top, 2, braidInt32, 0, child, NULL) != braidSuccess)
    fail("broadcast on the child: %s", braidGetLastError(child));
  else {
    int highest = rank;
    for (int r = rank; r < n; r += 2) highest = r;
    if (top[0] != highest || top[1] != -highest) fail("broadcast on the child: %d, expected %d", top[0], highest);
  }
  /* old ranks gathered in child order: descending */
  int32_t* all = xmalloc((size_t)csize * 4);
  int32_t me = rank;
  if (braidAllGather(&me, all, 1, braidInt32, child, NULL) != braidSuccess)
    fail("allgather on the child: %s", braidGetLastError(child));
  else
    for (int i = 1; i < csize; ++i)
      if (all[i] >= all[i - 1]) { fail("allgather on the child: old ranks not in key order"); break; }
  free(all);
  /* One group over two communicators: each runs its own part. */
  {
    int32_t c1 = 1, p1 = rank, ringIn = -1, ringOut = rank * 3;
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    TRY(braidGroupStart());
    TRY(braidAllReduce(&c1, &c1, 1, braidInt32, braidSum, child, NULL));
    TRY(braidSend(&ringOut, 1, braidInt32, next, comm, NULL));
    TRY(braidRecv(&ringIn, 1, braidInt32, prev, comm, NULL));
    TRY(braidAllReduce(&p1, &p1, 1, braidInt32, braidMax, comm, NULL));
    TRY(braidGroupEnd());
    if (c1 != csize || p1 != n - 1 || ringIn != prev * 3)
      fail("group over parent and child: %d %d %d", (int)c1, (int)p1, (int)ringIn);
  }
  /* A pre-multiplied sum belongs to the communicator that created it. */
  float two = 2.0f;
  braidRedOp_t parentOp;
  TRY(braidRedOpCreatePreMulSum(&parentOp, &two, braidFloat32, comm));
  float one = 1.0f;
  braidResult_t r = braidAllReduce(&one, &one, 1, braidFloat32, parentOp, child, NULL);
  if (r != braidInvalidArgument || !strstr(braidGetLastError(child), "this communicator"))
    fail("the parent's premul op on the child gave %s: %s", braidGetErrorString(r), braidGetLastError(child));
  TRY(braidRedOpDestroy(parentOp, comm));
  TRY(braidCommDestroy(child));

  /* Rank 0 opts out: it gets NULL, the others a communicator of n-1 ranks. */
  braidComm_t rest = (braidComm_t)(uintptr_t)1;
  TRY(braidCommSplit(comm, rank == 0 ? BRAID_SPLIT_NOCOLOR : 7, 0, &rest));
  if (rank == 0) {
    if (rest != NULL) fail("BRAID_SPLIT_NOCOLOR gave a communicator");
  } else if (!rest) {
    fail("split with color 7 gave no communicator");
  } else {
    int rr = -1, rs = -1;
    TRY(braidCommUserRank(rest, &rr));
    TRY(braidCommCount(rest, &rs));
    if (rr != rank - 1 || rs != n - 1) fail("split without rank 0: rank %d of %d", rr, rs);
    float f = 1.0f;
    if (braidAllReduce(&f, &f, 1, braidFloat32, braidSum, rest, NULL) != braidSuccess || f != (float)(n - 1))
      fail("allreduce without rank 0: %g (%s)", f, braidGetLastError(rest));
    TRY(braidCommDestroy(rest));
  }
  /* The parent is still fine. */
  int32_t x = 1;
  TRY(braidAllReduce(&x, &x, 1, braidInt32, braidSum, comm, NULL));
  if (x != n) fail("parent allreduce after split: %d", x);
}

/* ---------------------------------------------------------------- pre-multiplied sums */

static uint16_t bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)(bits >> 16); /* exact for the small values used here */
}

static void testPreMulSum(void) {
  const size_t count = 5003;
  /* float32, a different scalar on every rank: sum over r of (r+1) * x */
  float scalar = (float)(rank + 1);
  braidRedOp_t op;
  TRY(braidRedOpCreatePreMulSum(&op, &scalar, braidFloat32, comm));
  if ((int)op < (int)braidNumOps) fail("premul op %d collides with a built-in op", (int)op);
  float* f = xmalloc(count * 4);
  float* g = xmalloc(count * 4);
  for (size_t i = 0; i < count; ++i) f[i] = (float)(i % 7);
  TRY(braidAllReduce(f, g, count, braidFloat32, op, comm, NULL));
  for (size_t i = 0; i < count; ++i)
    if (g[i] != (float)(i % 7) * (float)(n * (n + 1) / 2)) { fail("premul float allreduce: element %zu is %g", i, g[i]); break; }
  /* in place, the input itself is the user's and must come back as the result */
  TRY(braidAllReduce(f, f, count, braidFloat32, op, comm, NULL));
  if (f[6] != 6.0f * (float)(n * (n + 1) / 2)) fail("premul float allreduce in place: %g", f[6]);
  TRY(braidRedOpDestroy(op, comm));

  /* double 0.25 with reduce to the last rank */
  double quarter = 0.25;
  braidRedOp_t dop;
  TRY(braidRedOpCreatePreMulSum(&dop, &quarter, braidFloat64, comm));
  double* d = xmalloc(count * 8);
  double* dr = xmalloc(count * 8);
  for (size_t i = 0; i < count; ++i) d[i] = (double)(4 * (rank + (int)(i % 3)));
  TRY(braidReduce(d, dr, count, braidFloat64, dop, n - 1, comm, NULL));
  if (rank == n - 1)
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += (double)(r + (int)(i % 3));
      if (dr[i] != want) { fail("premul double reduce: element %zu is %g, expected %g", i, dr[i], want); break; }
    }

  /* int32 3 with reduce-scatter */
  int32_t three = 3;
  braidRedOp_t iop;
  TRY(braidRedOpCreatePreMulSum(&iop, &three, braidInt32, comm));
  int32_t* s = xmalloc(count * (size_t)n * 4);
  int32_t* o = xmalloc(count * 4);
  for (size_t i = 0; i < count * (size_t)n; ++i) s[i] = val(rank, i);
  TRY(braidReduceScatter(s, o, count, braidInt32, iop, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    int32_t want = 0;
    for (int r = 0; r < n; ++r) want += 3 * val(r, (size_t)rank * count + i);
    if (expectI32("premul int32 reduce_scatter", o, i, want)) break;
  }

  /* bfloat16 0.5: the scalar is read as the op's type */
  uint16_t half = bf16(0.5f);
  braidRedOp_t bop;
  TRY(braidRedOpCreatePreMulSum(&bop, &half, braidBFloat16, comm));
  uint16_t* b = xmalloc(count * 2);
  for (size_t i = 0; i < count; ++i) b[i] = bf16((float)(i % 3));
  TRY(braidAllReduce(b, b, count, braidBFloat16, bop, comm, NULL));
  for (size_t i = 0; i < count; ++i)
    if (b[i] != bf16((float)(i % 3) * 0.5f * (float)n)) { fail("premul bf16: element %zu is 0x%04x", i, b[i]); break; }

  /* a destroyed op is rejected */
  TRY(braidRedOpDestroy(dop, comm));
  braidResult_t r = braidAllReduce(d, d, count, braidFloat64, dop, comm, NULL);
  if (r != braidInvalidArgument || !strstr(braidGetLastError(comm), "destroyed"))
    fail("a destroyed premul op gave %s: %s", braidGetErrorString(r), braidGetLastError(comm));
  TRY(braidRedOpDestroy(iop, comm));
  TRY(braidRedOpDestroy(bop, comm));
  free(f); free(g); free(d); free(dr); free(s); free(o); free(b);
}

/* ---------------------------------------------------------------- bitwise ops */

static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Shared bits per index with a few rank-dependent flips, so and/or/xor all depend on
 * every rank. */
static uint64_t pattern(int r, size_t i) {
  uint64_t base = mix64(i);
  uint64_t h = mix64(((uint64_t)i << 20) ^ (uint64_t)r ^ 0x5bd1e995ull);
  return base ^ (1ull << (h % 64)) ^ (1ull << ((h >> 32) % 64)) ^ (h & 0x0101010101010101ull);
}

static uint64_t fold(braidRedOp_t op, size_t i) {
  uint64_t acc = pattern(0, i);
  for (int r = 1; r < n; ++r) {
    uint64_t v = pattern(r, i);
    acc = op == braidBitAnd ? (acc & v) : op == braidBitOr ? (acc | v) : (acc ^ v);
  }
  return acc;
}

static void testBitwise(void) {
  const braidRedOp_t ops[] = {braidBitAnd, braidBitOr, braidBitXor};
  const size_t count = 40009;
  uint8_t* b = xmalloc(count);
  int32_t* w = xmalloc(count * 4);
  uint64_t* q = xmalloc(count * 8);
  for (int oi = 0; oi < 3; ++oi) {
    const braidRedOp_t op = ops[oi];
    for (size_t i = 0; i < count; ++i) {
      b[i] = (uint8_t)pattern(rank, i);
      w[i] = (int32_t)(uint32_t)pattern(rank, i);
      q[i] = pattern(rank, i);
    }
    TRY(braidAllReduce(b, b, count, braidUint8, op, comm, NULL));
    TRY(braidAllReduce(w, w, count, braidInt32, op, comm, NULL));
    TRY(braidAllReduce(q, q, count, braidUint64, op, comm, NULL));
    for (size_t i = 0; i < count; ++i) {
      const uint64_t want = fold(op, i);
      if (b[i] != (uint8_t)want || w[i] != (int32_t)(uint32_t)want || q[i] != want) {
        fail("bitwise op %d allreduce: element %zu", (int)op, i);
        break;
      }
    }
  }
  /* xor through reduce-scatter and or through reduce */
  int64_t* s = xmalloc(count * (size_t)n * 8);
  int64_t* o = xmalloc(count * 8);
  for (size_t i = 0; i < count * (size_t)n; ++i) s[i] = (int64_t)pattern(rank, i);
  TRY(braidReduceScatter(s, o, count, braidInt64, braidBitXor, comm, NULL));
  for (size_t i = 0; i < count; ++i)
    if ((uint64_t)o[i] != fold(braidBitXor, (size_t)rank * count + i)) { fail("bxor reduce_scatter: element %zu", i); break; }
  for (size_t i = 0; i < count; ++i) w[i] = (int32_t)(uint32_t)pattern(rank, i);
  TRY(braidReduce(w, w, count, braidInt32, braidBitOr, 0, comm, NULL));
  if (rank == 0)
    for (size_t i = 0; i < count; ++i)
      if (w[i] != (int32_t)(uint32_t)fold(braidBitOr, i)) { fail("bor reduce: element %zu", i); break; }
  free(b); free(w); free(q); free(s); free(o);
}

/* ---------------------------------------------------------------- bad input */

static void expectBad(braidResult_t r, braidComm_t c, const char* word, const char* what) {
  const char* msg = braidGetLastError(c);
  if (r != braidInvalidArgument || !strstr(msg, word))
    fail("%s: got %s, message '%s' (wanted invalid argument naming '%s')", what, braidGetErrorString(r), msg, word);
  /* the message names the rank too, where a communicator is known */
  else if (c && !strstr(msg, "rank"))
    fail("%s: message '%s' does not name the rank", what, msg);
}

static void testBadInput(void) {
  float f[64];
  int32_t x[64];
  size_t counts[64], displs[64];
  memset(f, 0, sizeof f);
  memset(x, 0, sizeof x);
  for (int i = 0; i < 64; ++i) { counts[i] = 1; displs[i] = (size_t)i; }
  const size_t big = (size_t)PTRDIFF_MAX / 4 / (size_t)n + 1; /* fits one block, not n blocks of float */
  const float* fs = f;
  float* fr = f + 32;
  const braidStream_t stream = (braidStream_t)f;

  /* braidReduce (the root is this rank, so recvbuff is needed) */
  expectBad(braidReduce(NULL, fr, 4, braidFloat32, braidSum, rank, comm, NULL), comm, "sendbuff", "reduce NULL sendbuff");
  expectBad(braidReduce(fs, NULL, 4, braidFloat32, braidSum, rank, comm, NULL), comm, "recvbuff", "reduce NULL recvbuff at root");
  expectBad(braidReduce(fs, fr, 4, braidFloat32, braidSum, n, comm, NULL), comm, "root", "reduce root = n");
  expectBad(braidReduce(fs, fr, 4, braidFloat32, braidSum, -1, comm, NULL), comm, "root", "reduce root = -1");
  expectBad(braidReduce(fs, fr, 4, braidFloat32, braidBitAnd, 0, comm, NULL), comm, "op", "reduce band on float");
  expectBad(braidReduce(fs, fr, 4, braidFloat32, (braidRedOp_t)99, 0, comm, NULL), comm, "op", "reduce unknown op");
  expectBad(braidReduce(fs, fr, 4, (braidDataType_t)42, braidSum, 0, comm, NULL), comm, "datatype", "reduce bad dtype");
  expectBad(braidReduce(fs, fr, SIZE_MAX / 2, braidFloat32, braidSum, 0, comm, NULL), comm, "count", "reduce count overflow");
  expectBad(braidReduce(f, f + 1, 4, braidFloat32, braidSum, rank, comm, NULL), comm, "overlap", "reduce partial overlap");
  expectBad(braidReduce(fs, fr, 4, braidFloat32, braidSum, 0, comm, stream), comm, "stream", "reduce stream");
  /* braidAllGather */
  expectBad(braidAllGather(NULL, fr, 4, braidFloat32, comm, NULL), comm, "sendbuff", "allgather NULL sendbuff");
  expectBad(braidAllGather(fs, NULL, 4, braidFloat32, comm, NULL), comm, "recvbuff", "allgather NULL recvbuff");
  expectBad(braidAllGather(fs, fr, big, braidFloat32, comm, NULL), comm, "sendcount", "allgather count overflow");
  expectBad(braidAllGather(f + rank * 4 + 1, f, 4, braidFloat32, comm, NULL), comm, "overlap", "allgather partial overlap");
  expectBad(braidAllGather(fs, fr, 4, (braidDataType_t)-3, comm, NULL), comm, "datatype", "allgather bad dtype");
  /* braidReduceScatter */
  expectBad(braidReduceScatter(NULL, fr, 4, braidFloat32, braidSum, comm, NULL), comm, "sendbuff", "reduce_scatter NULL sendbuff");
  expectBad(braidReduceScatter(fs, NULL, 4, braidFloat32, braidSum, comm, NULL), comm, "recvbuff", "reduce_scatter NULL recvbuff");
  expectBad(braidReduceScatter(fs, fr, big, braidFloat32, braidSum, comm, NULL), comm, "recvcount", "reduce_scatter overflow");
  expectBad(braidReduceScatter(f, f + rank * 4 + 1, 4, braidFloat32, braidSum, comm, NULL), comm, "overlap", "reduce_scatter overlap");
  expectBad(braidReduceScatter(fs, fr, 4, braidFloat32, braidBitXor, comm, NULL), comm, "op", "reduce_scatter bxor on float");
  /* braidAllToAll */
  expectBad(braidAllToAll(NULL, fr, 4, braidFloat32, comm, NULL), comm, "sendbuff", "alltoall NULL sendbuff");
  expectBad(braidAllToAll(fs, NULL, 4, braidFloat32, comm, NULL), comm, "recvbuff", "alltoall NULL recvbuff");
  expectBad(braidAllToAll(fs, fr, big, braidFloat32, comm, NULL), comm, "count", "alltoall overflow");
  expectBad(braidAllToAll(f, f + 1, 4, braidFloat32, comm, NULL), comm, "overlap", "alltoall overlap");
  /* braidGather / braidScatter (root-only buffers at this rank as root) */
  expectBad(braidGather(fs, fr, 4, braidFloat32, n, comm, NULL), comm, "root", "gather root = n");
  expectBad(braidGather(NULL, fr, 4, braidFloat32, rank, comm, NULL), comm, "sendbuff", "gather NULL sendbuff");
  expectBad(braidGather(fs, NULL, 4, braidFloat32, rank, comm, NULL), comm, "recvbuff", "gather NULL recvbuff at root");
  expectBad(braidGather(f + rank * 4 + 1, f, 4, braidFloat32, rank, comm, NULL), comm, "overlap", "gather overlap at root");
  expectBad(braidGather(fs, fr, big, braidFloat32, 0, comm, NULL), comm, "count", "gather overflow");
  expectBad(braidScatter(fs, fr, 4, braidFloat32, -2, comm, NULL), comm, "root", "scatter root = -2");
  expectBad(braidScatter(NULL, fr, 4, braidFloat32, rank, comm, NULL), comm, "sendbuff", "scatter NULL sendbuff at root");
  expectBad(braidScatter(fs, NULL, 4, braidFloat32, 0, comm, NULL), comm, "recvbuff", "scatter NULL recvbuff");
  expectBad(braidScatter(f, f + rank * 4 + 1, 4, braidFloat32, rank, comm, NULL), comm, "overlap", "scatter overlap at root");
  /* braidAllGatherV */
  expectBad(braidAllGatherV(fs, 1, fr, NULL, displs, braidFloat32, comm, NULL), comm, "recvcounts", "allgatherv NULL recvcounts");
  expectBad(braidAllGatherV(fs, 1, fr, counts, NULL, braidFloat32, comm, NULL), comm, "displs", "allgatherv NULL displs");
  expectBad(braidAllGatherV(fs, 2, fr, counts, displs, braidFloat32, comm, NULL), comm, "recvcounts", "allgatherv sendcount mismatch");
  expectBad(braidAllGatherV(NULL, 1, fr, counts, displs, braidFloat32, comm, NULL), comm, "sendbuff", "allgatherv NULL sendbuff");
  expectBad(braidAllGatherV(fs, 1, NULL, counts, displs, braidFloat32, comm, NULL), comm, "recvbuff", "allgatherv NULL recvbuff");
  displs[n - 1] = SIZE_MAX - 1;
  expectBad(braidAllGatherV(fs, 1, fr, counts, displs, braidFloat32, comm, NULL), comm, "displs", "allgatherv displs overflow");
  displs[n - 1] = (size_t)(n - 1);
  /* braidReduceScatterV */
  expectBad(braidReduceScatterV(fs, fr, NULL, braidFloat32, braidSum, comm, NULL), comm, "recvcounts", "reduce_scatterv NULL recvcounts");
  expectBad(braidReduceScatterV(NULL, fr, counts, braidFloat32, braidSum, comm, NULL), comm, "sendbuff", "reduce_scatterv NULL sendbuff");
  expectBad(braidReduceScatterV(fs, fr, counts, braidFloat32, braidBitOr, comm, NULL), comm, "op", "reduce_scatterv bor on float");
  counts[0] = SIZE_MAX / 2;
  expectBad(braidReduceScatterV(fs, fr, counts, braidFloat32, braidSum, comm, NULL), comm, "recvcounts", "reduce_scatterv overflow");
  counts[0] = 1;
  /* braidAllToAllV */
  expectBad(braidAllToAllV(fs, NULL, displs, fr, counts, displs, braidFloat32, comm, NULL), comm, "sendcounts", "alltoallv NULL sendcounts");
  expectBad(braidAllToAllV(fs, counts, NULL, fr, counts, displs, braidFloat32, comm, NULL), comm, "sdispls", "alltoallv NULL sdispls");
  expectBad(braidAllToAllV(fs, counts, displs, fr, NULL, displs, braidFloat32, comm, NULL), comm, "recvcounts", "alltoallv NULL recvcounts");
  expectBad(braidAllToAllV(fs, counts, displs, fr, counts, NULL, braidFloat32, comm, NULL), comm, "rdispls", "alltoallv NULL rdispls");
  expectBad(braidAllToAllV(f, counts, displs, f + 1, counts, displs, braidFloat32, comm, NULL), comm, "overlap", "alltoallv overlap");
  expectBad(braidAllToAllV(f, counts, displs, f, counts, displs, braidFloat32, comm, NULL), comm, "in-place", "alltoallv in place");
  expectBad(braidAllToAllV(NULL, counts, displs, fr, counts, displs, braidFloat32, comm, NULL), comm, "sendbuff", "alltoallv NULL sendbuff");
  /* braidBarrier */
  expectBad(braidBarrier(NULL), NULL, "comm", "barrier NULL comm");
  /* braidSend / braidRecv */
  expectBad(braidSend(x, 4, braidInt32, n, comm, NULL), comm, "peer", "send peer = n");
  expectBad(braidSend(x, 4, braidInt32, -1, comm, NULL), comm, "peer", "send peer = -1");
  expectBad(braidSend(NULL, 4, braidInt32, 0, comm, NULL), comm, "sendbuff", "send NULL");
  expectBad(braidSend(x, 4, (braidDataType_t)99, 0, comm, NULL), comm, "datatype", "send bad dtype");
  expectBad(braidSend(x, SIZE_MAX / 2, braidInt32, 0, comm, NULL), comm, "count", "send overflow");
  expectBad(braidRecv(NULL, 4, braidInt32, 0, comm, NULL), comm, "recvbuff", "recv NULL");
  expectBad(braidRecv(x, 4, braidInt32, n + 5, comm, NULL), comm, "peer", "recv peer out of range");
  expectBad(braidRecv(x, 4, braidInt32, 0, comm, stream), comm, "stream", "recv stream");
  /* groups: an unmatched end, and a bad call recorded in a group comes back from the end */
  expectBad(braidGroupEnd(), NULL, "braidGroupStart", "braidGroupEnd without start");
  TRY(braidGroupStart());
  expectBad(braidSend(x, 4, braidInt32, n, comm, NULL), comm, "peer", "bad send in a group");
  TRY(braidRecv(x, 4, braidInt32, (rank + n - 1) % n, comm, NULL)); /* never runs: the group failed */
  expectBad(braidGroupEnd(), comm, "peer", "braidGroupEnd after a bad send");
  TRY(braidGroupStart());
  expectBad(braidAllGather(NULL, fr, 4, braidFloat32, comm, NULL), comm, "sendbuff", "bad allgather in a group");
  expectBad(braidGroupEnd(), comm, "sendbuff", "braidGroupEnd after a bad allgather");
  /* braidCommSplit */
  expectBad(braidCommSplit(comm, 0, 0, NULL), comm, "newcomm", "split NULL newcomm");
  braidComm_t child = NULL;
  expectBad(braidCommSplit(NULL, 0, 0, &child), NULL, "comm", "split NULL comm");
  /* pre-multiplied sums */
  float two = 2.0f;
  braidRedOp_t op;
  expectBad(braidRedOpCreatePreMulSum(NULL, &two, braidFloat32, comm), comm, "op", "premul NULL op");
  expectBad(braidRedOpCreatePreMulSum(&op, NULL, braidFloat32, comm), comm, "scalar", "premul NULL scalar");
  expectBad(braidRedOpCreatePreMulSum(&op, &two, (braidDataType_t)77, comm), comm, "datatype", "premul bad dtype");
  TRY(braidRedOpCreatePreMulSum(&op, &two, braidFloat32, comm));
  expectBad(braidAllReduce(x, x, 4, braidInt32, op, comm, NULL), comm, "datatype", "premul for float used on int32");
  expectBad(braidReduceScatter(fs, fr, 4, braidFloat64, op, comm, NULL), comm, "datatype", "premul for float used on double");
  TRY(braidRedOpDestroy(op, comm));
  expectBad(braidRedOpDestroy(op, comm), comm, "destroyed", "premul destroyed twice");
  expectBad(braidReduce(fs, fr, 4, braidFloat32, op, 0, comm, NULL), comm, "destroyed", "destroyed premul used");
  expectBad(braidRedOpDestroy(braidSum, comm), comm, "op", "destroy a built-in op");
  expectBad(braidRedOpDestroy((braidRedOp_t)12345, comm), comm, "op", "destroy an unknown op");

  /* Still usable: nothing above ran a collective. */
  for (int i = 0; i < 16; ++i) x[i] = 1;
  TRY(braidAllReduce(x, x, 16, braidInt32, braidSum, comm, NULL));
  if (x[15] != n) fail("communicator unusable after bad input");
}

/* ---------------------------------------------------------------- main */

typedef struct {
  const char* name;
  void (*run)(void);
} Section;

static const Section kSections[] = {
    {"reduce", testReduce},         {"allgather", testAllGather},   {"reduce_scatter", testReduceScatter},
    {"alltoall", testAllToAll},     {"gather", testGather},         {"scatter", testScatter},
    {"allgatherv", testAllGatherV}, {"reduce_scatterv", testReduceScatterV}, {"alltoallv", testAllToAllV},
    {"barrier", testBarrier},       {"p2p", testP2P},               {"split", testSplit},
    {"premulsum", testPreMulSum},   {"bitwise", testBitwise},       {"bad_input", testBadInput},
};

int main(int argc, char** argv) {
  if (braidCommInitFromEnv(&comm) != braidSuccess) {
    fprintf(stderr, "init failed: %s\n", braidGetLastError(NULL));
    return 1;
  }
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  int failed = 0;
  for (size_t s = 0; s < sizeof(kSections) / sizeof(kSections[0]); ++s) {
    int wanted = argc <= 1;
    for (int a = 1; a < argc; ++a) wanted |= strcmp(argv[a], kSections[s].name) == 0;
    if (!wanted) continue;
    section = kSections[s].name;
    sectionFailures = 0;
    kSections[s].run();
    printf("section %s %s rank %d\n", section, sectionFailures ? "FAILED" : "ok", rank);
    fflush(stdout);
    failed += sectionFailures != 0;
  }
  /* A child may outlive its parent: it keeps the store (and, on the rank that serves it, the
   * store server) alive. Split off everyone, destroy the parent, then use the child. */
  braidComm_t child = NULL;
  if (braidCommSplit(comm, 0, n - rank, &child) != braidSuccess || !child) {
    fprintf(stderr, "rank %d: split for the lifetime check failed: %s\n", rank, braidGetLastError(comm));
    return 1;
  }
  if (braidCommDestroy(comm) != braidSuccess) return 1;
  comm = child;
  int32_t x[3] = {rank, rank, rank};
  if (braidAllReduce(x, x, 3, braidInt32, braidSum, child, NULL) != braidSuccess || x[2] != n * (n - 1) / 2 ||
      braidBarrier(child) != braidSuccess) {
    fprintf(stderr, "rank %d: the child after its parent: %s\n", rank, braidGetLastError(child));
    return 1;
  }
  if (braidCommDestroy(child) != braidSuccess) return 1;
  printf("child after parent ok rank %d\n", rank);
  if (failed) return 1;
  printf("full set ok rank %d of %d\n", rank, n);
  return 0;
}
