/*
 * coll_data.h - what the peer harnesses (mpi_coll_perf.c, nccl_coll_perf.cc, ccl_coll_perf.cc) share, so that
 * every library is sized, fed, checked and printed alike: nccl-tests' element counts and
 * bus-bandwidth factors, the input data and the expected output of every collective, and
 * the table's lines.
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
#include <stdio.h>
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

/* The table of collective c as `lib` runs it: its heading (rank 0 prints it). The columns
 * are braid's tools': 1 size (B), 2 count, 3 type, 4 redop, 5 root, 6 time (us), 7 algbw
 * (GB/s), 8 busbw (GB/s), 9 #wrong, then 10 iters. */
static void coll_print_head(int c, const char *lib) {
  printf("#\n# collective: %s (%s), busbw = algbw * %s\n", kCollNames[c], lib, kBusText[c]);
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s %6s\n", "size", "count", "type", "redop", "root", "time",
         "algbw", "busbw", "#wrong", "iters");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
         "(GB/s)", "", "");
  fflush(stdout);
}

/* One row of that table: `size` bytes, the call's count `param`, `seconds` a call, `wrong`
 * elements summed over ranks (negative: not checked, N/A). Returns the row's busbw. */
static double coll_print_row(int c, size_t size, size_t param, int root, double seconds, long long wrong, int iters,
                             int nranks) {
  const int has_root = c == BROADCAST || c == REDUCE || c == GATHER || c == SCATTER;
  const int has_op = c == ALLREDUCE || c == REDUCE || c == REDUCE_SCATTER;
  const double algbw = (double)size / seconds / 1e9, busbw = algbw * coll_bus_factor(c, nranks), us = seconds * 1e6;
  char w[32];
  if (wrong < 0) snprintf(w, sizeof w, "N/A");
  else snprintf(w, sizeof w, "%lld", wrong);
  printf("%12zu  %12zu  %8s  %6s  %6d  %7.*f  %6.2f  %6.2f  %5s %6d\n", size, param, "float", has_op ? "sum" : "none",
         has_root ? root : -1, us >= 10000 ? 0 : us >= 100 ? 1 : 2, us, algbw, busbw, w, iters);
  fflush(stdout);
  return busbw;
}

#endif /* BRAID_BENCH_COLL_DATA_H_ */
