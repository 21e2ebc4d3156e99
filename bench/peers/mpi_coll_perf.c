/*
 * mpi_coll_perf.c - Open MPI's collectives timed the way braid's *_perf tools time braid's.
 *
 *   mpirun -np 4 mpi_coll_perf -C allgather -b 1M -e 256M -f 4
 *   mpirun -np 4 --mca btl tcp,self --mca btl_tcp_if_include lo mpi_coll_perf -C all
 *
 * Collectives (-C, a comma list or "all"):
 *   allreduce       MPI_Allreduce               busbw = algbw * 2(n-1)/n
 *   broadcast       MPI_Bcast                   busbw = algbw
 *   reduce          MPI_Reduce                  busbw = algbw
 *   allgather       MPI_Allgather               busbw = algbw * (n-1)/n
 *   reduce_scatter  MPI_Reduce_scatter_block    busbw = algbw * (n-1)/n
 *   alltoall        MPI_Alltoall                busbw = algbw * (n-1)/n
 *   gather          MPI_Gather                  busbw = algbw * (n-1)/n
 *   scatter         MPI_Scatter                 busbw = algbw * (n-1)/n
 *   sendrecv        MPI_Sendrecv to rank+1, from rank-1 (a ring)   busbw = algbw
 *
 * Sizes follow nccl-tests (and braid's tools): for allreduce, broadcast, reduce and
 * sendrecv the size is one rank's message; for allgather, reduce_scatter, alltoall, gather
 * and scatter it is the whole (gathered / unscattered) buffer, n blocks of size/n each,
 * rounded down to whole elements per block. The table has the columns of braid's tools,
 * so the same awk reads both: 1 size (B), 2 count (the call's count argument), 3 type,
 * 4 redop, 5 root, 6 time (us), 7 algbw (GB/s), 8 busbw (GB/s), 9 #wrong, then 10 iters.
 * Only out of place is measured. GB = 1e9 B; algbw = size / time.
 *
 * time: each rank's mean per call over the timed loop (after a barrier), combined over the
 * ranks as -a says (nccl-tests' meaning: 0 rank 0's, 1 mean (default), 2 min, 3 max).
 *
 * Check (-c 1, default): after the timed loop the buffers are refilled (receive buffers with
 * a sentinel), the call is made once more and every element each rank should hold is
 * compared with a reference; #wrong is summed over ranks. Sizes, data and references are
 * coll_data.h's, shared with nccl_coll_perf.cc: small integers, exact in float, so any
 * order of reduction gives bit-exact results.
 *
 * Options: -b min bytes (1M), -e max bytes (256M), -f factor (2), -w warmup (5),
 *   -n iters (20), -S B: above B scale iterations by B/size (0 = never, default),
 *   -m min iters when scaling (3), -c 0|1 check (1), -a 0..3 time combining (1),
 *   -r root (0), -C collectives (allreduce). Sizes accept K/M/G suffixes.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_data.h"

static int rank, nranks;

static void run_once(int c, const float *s, float *r, Counts k, int root) {
  int cnt = (int)k.param;
  int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
  switch (c) {
    case ALLREDUCE: MPI_Allreduce(s, r, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BROADCAST:
      /* MPI_Bcast has one buffer: the root sends from its input, the others receive into
       * their receive buffers (no copy at the root, MPI's natural use). */
      MPI_Bcast(rank == root ? (void *)s : (void *)r, cnt, MPI_FLOAT, root, MPI_COMM_WORLD);
      break;
    case REDUCE: MPI_Reduce(s, r, cnt, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD); break;
    case ALLGATHER: MPI_Allgather(s, cnt, MPI_FLOAT, r, cnt, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(s, r, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case ALLTOALL: MPI_Alltoall(s, cnt, MPI_FLOAT, r, cnt, MPI_FLOAT, MPI_COMM_WORLD); break;
    case GATHER: MPI_Gather(s, cnt, MPI_FLOAT, r, cnt, MPI_FLOAT, root, MPI_COMM_WORLD); break;
    case SCATTER: MPI_Scatter(s, cnt, MPI_FLOAT, r, cnt, MPI_FLOAT, root, MPI_COMM_WORLD); break;
    case SENDRECV:
      MPI_Sendrecv(s, cnt, MPI_FLOAT, right, 7, r, cnt, MPI_FLOAT, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
  }
}

static double combine(double t, int average) {
  double out = t;
  if (average == 0 || nranks == 1) {
    MPI_Bcast(&out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return out;
  }
  MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, average == 2 ? MPI_MIN : average == 3 ? MPI_MAX : MPI_SUM,
                MPI_COMM_WORLD);
  return average == 1 ? out / nranks : out;
}

static void *alloc_touched(size_t bytes) {
  void *p = NULL;
  size_t rounded = ((bytes ? bytes : 1) + 4095) / 4096 * 4096;
  if (posix_memalign(&p, 4096, rounded)) return NULL;
  memset(p, 0, rounded);
  return p;
}

int main(int argc, char **argv) {
  size_t minb = 1u << 20, maxb = (size_t)256 << 20, scale_above = 0;
  int factor = 2, warmup = 5, iters = 20, min_iters = 3, check = 1, average = 1, root = 0, opt;
  const char *colls = "allreduce";

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  while ((opt = getopt(argc, argv, "b:e:f:w:n:S:m:c:a:r:C:h")) != -1) {
    switch (opt) {
      case 'b': minb = coll_parse_size(optarg); break;
      case 'e': maxb = coll_parse_size(optarg); break;
      case 'f': factor = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'S': scale_above = coll_parse_size(optarg); break;
      case 'm': min_iters = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'a': average = atoi(optarg); break;
      case 'r': root = atoi(optarg); break;
      case 'C': colls = optarg; break;
      default:
        if (rank == 0)
          fprintf(stderr, "usage: %s [-C coll,...|all] [-b min] [-e max] [-f factor] [-w warmup] [-n iters]\n"
                  "          [-S scale_above] [-m min_iters] [-c check] [-a 0|1|2|3] [-r root]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
  }
  if (factor < 2) factor = 2;
  if (minb < sizeof(float)) minb = sizeof(float);
  if (iters < 1) iters = 1;
  if (root < 0 || root >= nranks) {
    if (rank == 0) fprintf(stderr, "%s: root %d out of range for %d ranks\n", argv[0], root, nranks);
    MPI_Finalize();
    return 2;
  }

  int want[NCOLL] = {0};
  {
    char *list = strdup(colls), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      int found = 0;
      for (int c = 0; c < NCOLL; c++)
        if (!strcmp(t, "all") || !strcmp(t, kCollNames[c])) want[c] = found = 1;
      if (!found) {
        if (rank == 0) fprintf(stderr, "%s: unknown collective '%s'\n", argv[0], t);
        MPI_Finalize();
        return 2;
      }
    }
    free(list);
  }

  /* Buffers big enough for any collective at maxb: at most maxb/4 elements each side. */
  size_t maxcount = maxb / sizeof(float);
  float *sbuf = alloc_touched(maxcount * sizeof(float));
  float *rbuf = alloc_touched(maxcount * sizeof(float));
  if (!sbuf || !rbuf) {
    fprintf(stderr, "rank %d: cannot allocate 2 x %zu B\n", rank, maxcount * sizeof(float));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  if (rank == 0) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, '\n');
    if (nl) *nl = 0;
    printf("# mpi_coll_perf: %d ranks, out-of-place, float, warmup %d, iters %d, check %d, average %d\n",
           nranks, warmup, iters, check, average);
    printf("# library: %s\n", lib);
    printf("# time = mean per call (combined over ranks per -a); algbw = size/time; GB = 1e9 B\n");
    fflush(stdout);
  }

  int failed = 0;
  for (int c = 0; c < NCOLL; c++) {
    if (!want[c]) continue;
    if (rank == 0) coll_print_head(c, "MPI");
    double bus_sum = 0;
    int nsizes = 0;
    size_t last_param = (size_t)-1;
    for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
      Counts k = coll_counts(c, bytes / sizeof(float), nranks);
      if (k.param == 0 || k.param == last_param) continue;
      last_param = k.param;
      size_t size = (k.send > k.recv ? k.send : k.recv) * sizeof(float);
      int n_it = iters, n_wu = warmup;
      if (scale_above && size > scale_above) {
        n_it = (int)((double)iters * scale_above / size);
        n_wu = (int)((double)warmup * scale_above / size);
        if (n_it < min_iters) n_it = min_iters;
        if (n_wu < 1) n_wu = 1;
      }

      coll_fill_input(c, sbuf, k, rank, nranks);
      for (int w = 0; w < n_wu; w++) run_once(c, sbuf, rbuf, k, root);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int it = 0; it < n_it; it++) run_once(c, sbuf, rbuf, k, root);
      double dt = combine((MPI_Wtime() - t0) / n_it, average);

      long long wrong = -1;
      if (check) {
        long long mine;
        coll_fill_input(c, sbuf, k, rank, nranks);
        for (size_t i = 0; i < k.recv; i++) rbuf[i] = -12345.0f;
        run_once(c, sbuf, rbuf, k, root);
        mine = coll_check_output(c, rbuf, k, root, rank, nranks, 0);
        MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (wrong) failed = 1;
      }
      if (rank == 0) {
        bus_sum += coll_print_row(c, size, k.param, root, dt, wrong, n_it, nranks);
        nsizes++;
      }
    }
    if (rank == 0) printf("# Avg bus bandwidth (%s): %g over %d sizes\n", kCollNames[c], nsizes ? bus_sum / nsizes : 0.0, nsizes);
  }
  if (rank == 0) {
    printf("# Out of bounds values : %s\n", failed ? "FAILED" : "OK");
    fflush(stdout);
  }
  free(sbuf);
  free(rbuf);
  MPI_Finalize();
  return failed ? 1 : 0;
}
