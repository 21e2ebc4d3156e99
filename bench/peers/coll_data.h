/*
 * coll_data.h - what the peer harnesses (mpi_coll_perf.c, nccl_coll_perf.cc, ccl_coll_perf.cc) share, so that
 * every library is sized, fed and checked alike: nccl-tests' element counts and
 * bus-bandwidth factors, the input data and the expected output of every collective.
 * Plain C99, static functions only; `rank` and `nranks` are the caller's.
 *
 * The data are small integers, exact in float, so any order of reduction gives bit-exact
 * sums:
 *   reductions: rank r contributes (r+1)*((i%7)+1) at element i;
 *   data movement: element i of rank r's block for rank d is ((r*31 + (d+1)*7 + i) % 1021),
 *   d = -1 for a message that is not one rank's block.
 */
#ifndef BRAID_BENCH_COLL_DATA_H_
#define BRAID_BENCH_COLL_DATA_H_

#include <stddef.h>
#include <stdlib.h>

enum { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCE_SCATTER, ALLTOALL, GATHER, SCATTER, SENDRECV, NCOLL };
static const char *const kCollNames[NCOLL] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                                               "alltoall", "gather", "scatter", "sendrecv"};
static const char *const kBusText[NCOLL] = {"2(n-1)/n", "1", "1", "(n-1)/n", "(n-1)/n", "(n-1)/n", "(n-1)/n",
                                            "(n-1)/n", "1"};

/* "8", "1.5K", "64M", "2G" (powers of 1024, as nccl-tests' parsesize). */
static size_t coll_parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'k': case 'K': v *= 1024.0; break;
    case 'm': case 'M': v *= 1024.0 * 1024.0; break;
    case 'g': case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
  }
  return v > 0 ? (size_t)v : 0;
}

static double coll_bus_factor(int c, int n) {
  if (n <= 1) return c == BROADCAST || c == REDUCE || c == SENDRECV ? 1.0 : 0.0;
  switch (c) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case BROADCAST: case REDUCE: case SENDRECV: return 1.0;
    default: return (double)(n - 1) / n;
  }
}

/* Element counts of one call, as nccl-tests' getCollByteCount defines them. */
typedef struct {
  size_t send, recv, param; /* elements in this rank's send / receive buffer, the count argument */
} Counts;

static Counts coll_counts(int c, size_t count, int nranks) {
  Counts k;
  size_t per = count / (size_t)nranks;
  switch (c) {
    case ALLGATHER: case GATHER: k.send = per; k.recv = per * nranks; k.param = per; break;
    case REDUCE_SCATTER: case SCATTER: k.send = per * nranks; k.recv = per; k.param = per; break;
    case ALLTOALL: k.send = k.recv = per * nranks; k.param = per; break;
    default: k.send = k.recv = k.param = count; break;
  }
  return k;
}

static float coll_red_in(int r, size_t i) { return (float)((r + 1) * (int)((i % 7) + 1)); }
static float coll_red_out(int nranks, size_t i) { return (float)(nranks * (nranks + 1) / 2) * (float)((i % 7) + 1); }
/* Element i of the block rank `src` provides for rank `dst` (dst = -1: the whole message). */
static float coll_mv(int src, int dst, size_t i) { return (float)((src * 31 + (dst + 1) * 7 + i) % 1021); }

/* Fills this rank's send buffer for collective c. */
static void coll_fill_input(int c, float *s, Counts k, int rank, int nranks) {
  size_t per = k.param, i;
  int d;
  switch (c) {
    case ALLREDUCE: case REDUCE: case REDUCE_SCATTER:
      for (i = 0; i < k.send; i++) s[i] = coll_red_in(rank, i);
      break;
    case ALLTOALL: case SCATTER: /* block d goes to rank d */
      for (d = 0; d < nranks; d++)
        for (i = 0; i < per; i++) s[d * per + i] = coll_mv(rank, d, i);
      break;
    default: /* allgather, gather, broadcast, sendrecv */
      for (i = 0; i < k.send; i++) s[i] = coll_mv(rank, -1, i);
      break;
  }
}

/* Mismatching elements in this rank's receive buffer. A broadcast's root is checked only
 * when its receive buffer gets the data too (`root_receives`: NCCL's out-of-place broadcast;
 * MPI_Bcast has one buffer). */
static long long coll_check_output(int c, const float *r, Counts k, int root, int rank, int nranks, int root_receives) {
  long long wrong = 0;
  size_t per = k.param, i;
  int left = (rank - 1 + nranks) % nranks, s;
  switch (c) {
    case ALLREDUCE:
      for (i = 0; i < k.recv; i++) wrong += r[i] != coll_red_out(nranks, i);
      break;
    case REDUCE:
      if (rank == root)
        for (i = 0; i < k.recv; i++) wrong += r[i] != coll_red_out(nranks, i);
      break;
    case REDUCE_SCATTER: /* this rank's block of the sum: elements rank*per .. */
      for (i = 0; i < per; i++) wrong += r[i] != coll_red_out(nranks, rank * per + i);
      break;
    case BROADCAST:
      if (rank != root || root_receives)
        for (i = 0; i < k.recv; i++) wrong += r[i] != coll_mv(root, -1, i);
      break;
    case SENDRECV:
      for (i = 0; i < k.recv; i++) wrong += r[i] != coll_mv(left, -1, i);
      break;
    case ALLGATHER:
      for (s = 0; s < nranks; s++)
        for (i = 0; i < per; i++) wrong += r[s * per + i] != coll_mv(s, -1, i);
      break;
    case GATHER:
      if (rank == root)
        for (s = 0; s < nranks; s++)
          for (i = 0; i < per; i++) wrong += r[s * per + i] != coll_mv(s, -1, i);
      break;
    case ALLTOALL:
      for (s = 0; s < nranks; s++)
        for (i = 0; i < per; i++) wrong += r[s * per + i] != coll_mv(s, rank, i);
      break;
    case SCATTER:
      for (i = 0; i < per; i++) wrong += r[i] != coll_mv(root, rank, i);
      break;
  }
  return wrong;
}

#endif /* BRAID_BENCH_COLL_DATA_H_ */
