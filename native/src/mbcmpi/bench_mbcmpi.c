/*
 * tiers-mbc-mpi-bench: plain MPI, no tiers API: osu_latency's and osu_bw's
 * methods and the barrier, plus the flag-store floor, so that the same
 * program runs once on the MPI library and once with libtiers-mbc-mpi
 * preloaded (bench/mbc_vs_mpi/run --interpose does both, round by round).
 *
 *   mpirun -n 2 tiers-mbc-mpi-bench [--rounds R] [--scale F]
 *
 *   rtt      round trip between ranks 0 and 1, blocking send then blocking
 *            receive, microseconds; sizes 0,4,16,64,256,1024,4096
 *   bw       rank 0 -> 1, windows of 64 MPI_Isend against 64 MPI_Irecv
 *            closed by a 4-byte acknowledgement, MB/s; 4 B .. 1 MiB
 *   floor    a round trip of two bare flag stores in an MPI-3 shared
 *            window, microseconds (the floor under any shared-memory message)
 *   barrier  MPI_Barrier over all ranks, microseconds
 *   coll     MPI_Bcast (root 0) and MPI_Allreduce (MPI_DOUBLE, MPI_SUM) of
 *            8, 64, 512 and 4096 bytes over all ranks, microseconds
 *            (the figures behind libtiers-mbc-mpi's choice table)
 *
 * Rank 0 prints one JSON document (schema "tiers.mbc-mpi-bench/1") with
 * every round's figure, so that the caller takes medians.
 */
#include <math.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 64 };

static int rank, size;
static double scale = 1.0;

static long iters_for(long base)
{
  long n = (long)((double)base * scale);
  return n < 2 ? 2 : n;
}

static double rtt(unsigned char *s, unsigned char *r, int n, long iters)
{
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(s, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(r, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(r, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(s, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) / (double)iters;
}

static double bw(unsigned char *s, unsigned char *r, int n, long iters)
{
  MPI_Request q[WINDOW];
  unsigned char ack[4] = {0};
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (rank == 0) {
      for (int w = 0; w < WINDOW; w++)
        MPI_Isend(s, n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &q[w]);
      MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
      MPI_Recv(ack, 4, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      for (int w = 0; w < WINDOW; w++)
        MPI_Irecv(r, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &q[w]);
      MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
      MPI_Send(ack, 4, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
    }
  }
  return (double)n * WINDOW * (double)iters / (MPI_Wtime() - t0);
}

/* Two bare flag stores spun on by the other process (ranks 0 and 1 on one
 * node; NaN otherwise). */
static double floor_rtt(long iters)
{
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int nr, same = 0, both = 0;
  MPI_Comm_rank(node, &nr);
  if (rank <= 1)
    same = nr == rank;
  MPI_Allreduce(&same, &both, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  double res = NAN;
  if (both == 2) {
    MPI_Win win;
    _Atomic long *flags;
    MPI_Win_allocate_shared(nr == 0 ? 512 : 0, 1, MPI_INFO_NULL, node, &flags, &win);
    MPI_Aint sz;
    int du;
    MPI_Win_shared_query(win, 0, &sz, &du, &flags);
    _Atomic long *mine = flags + 16 * (rank & 1), *other = flags + 16 * (1 - (rank & 1));
    if (rank <= 1)
      atomic_store(mine, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    long skip = iters / 10 + 1;
    double t0 = 0;
    for (long i = 1; rank <= 1 && i <= iters + skip; i++) {
      if (i == skip + 1)
        t0 = MPI_Wtime();
      if (rank == 0) {
        atomic_store_explicit(other, i, memory_order_release);
        while (atomic_load_explicit(mine, memory_order_acquire) != i)
          ;
      } else {
        while (atomic_load_explicit(mine, memory_order_acquire) != i)
          ;
        atomic_store_explicit(other, i, memory_order_release);
      }
    }
    res = (MPI_Wtime() - t0) / (double)iters;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
  }
  MPI_Comm_free(&node);
  return res;
}

static double barrier(long iters)
{
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return (MPI_Wtime() - t0) / (double)iters;
}

static double coll(int allreduce, int bytes, long iters)
{
  int n = bytes / (int)sizeof(double);
  double *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (allreduce)
      MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    else
      MPI_Bcast(a, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  double t = (MPI_Wtime() - t0) / (double)iters;
  free(a);
  free(b);
  return t;
}

/* rank 0's figure, as every rank's (rank 0 prints) */
static double from0(double v)
{
  MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return v;
}

static void print_list(const char *key, const double *v, int n, double mul)
{
  printf("\"%s\":[", key);
  for (int i = 0; i < n; i++)
    printf(isnan(v[i]) ? "%snull" : "%s%.6g", i ? "," : "", v[i] * mul);
  printf("]");
}

int main(int argc, char **argv)
{
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tiers-mbc-mpi-bench [--rounds R] [--scale F]\n"
             "Plain-MPI round trip (osu_latency method), streaming bandwidth (osu_bw method),\n"
             "barrier and the flag-store floor, as JSON; bench/mbc_vs_mpi/run runs it with and\n"
             "without libtiers-mbc-mpi.so preloaded.  Needs at least 2 ranks.\n");
      return 0;
    }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = 3;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = (int)strtol(argv[++i], &end, 10);
    } else if (!strcmp(argv[i], "--scale") && i + 1 < argc) {
      scale = strtod(argv[++i], &end);
    } else {
      if (rank == 0)
        fprintf(stderr, "tiers-mbc-mpi-bench: error: usage: tiers-mbc-mpi-bench [--rounds R] "
                        "[--scale F]\n");
      MPI_Finalize();
      return 2;
    }
    if (!end || *end || rounds < 1 || rounds > 1000 || !(scale > 0 && scale <= 100)) {
      if (rank == 0)
        fprintf(stderr, "tiers-mbc-mpi-bench: error: --rounds 1..1000, --scale in (0, 100]\n");
      MPI_Finalize();
      return 2;
    }
  }
  if (size < 2) {
    if (rank == 0)
      fprintf(stderr, "tiers-mbc-mpi-bench: error: needs at least 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  static const int rs[] = {0, 4, 16, 64, 256, 1024, 4096};
  static const int bs[] = {4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
  enum { NR = sizeof rs / sizeof rs[0], NB = sizeof bs / sizeof bs[0] };
  unsigned char *s = calloc(1 << 20, 1), *r = calloc(1 << 20, 1);
  double *rt = calloc((size_t)(NR * rounds), sizeof *rt), *bwv = calloc((size_t)(NB * rounds), sizeof *bwv);
  double *fl = calloc((size_t)rounds, sizeof *fl), *bar = calloc((size_t)rounds, sizeof *bar);
  static const int cs[] = {8, 64, 512, 4096};
  enum { NC = sizeof cs / sizeof cs[0] };
  double *cv = calloc((size_t)(2 * NC * rounds), sizeof *cv);
  for (int rd = 0; rd < rounds; rd++) {
    fl[rd] = from0(floor_rtt(iters_for(20000)));
    for (int i = 0; i < NR; i++)
      rt[i * rounds + rd] = from0(rtt(s, r, rs[i], iters_for(10000)));
    for (int i = 0; i < NB; i++) {
      long it = iters_for(bs[i] >= 65536 ? 20 : 200);
      bwv[i * rounds + rd] = from0(bw(s, r, bs[i], it));
    }
    bar[rd] = from0(barrier(iters_for(10000)));
    for (int k = 0; k < 2 * NC; k++)
      cv[k * rounds + rd] = from0(coll(k >= NC, cs[k % NC], iters_for(5000)));
  }
  if (rank == 0) {
    printf("{\"schema\":\"tiers.mbc-mpi-bench/1\",\"ranks\":%d,\"rounds\":%d,", size, rounds);
    print_list("floor_us", fl, rounds, 1e6);
    printf(",\"rtt\":[");
    for (int i = 0; i < NR; i++) {
      printf("%s{\"bytes\":%d,", i ? "," : "", rs[i]);
      print_list("us", &rt[i * rounds], rounds, 1e6);
      printf("}");
    }
    printf("],\"bw\":[");
    for (int i = 0; i < NB; i++) {
      printf("%s{\"bytes\":%d,", i ? "," : "", bs[i]);
      print_list("MBps", &bwv[i * rounds], rounds, 1e-6);
      printf("}");
    }
    printf("],");
    print_list("barrier_us", bar, rounds, 1e6);
    printf(",\"coll\":[");
    for (int k = 0; k < 2 * NC; k++) {
      printf("%s{\"op\":\"%s\",\"bytes\":%d,", k ? "," : "", k >= NC ? "allreduce" : "bcast",
             cs[k % NC]);
      print_list("us", &cv[k * rounds], rounds, 1e6);
      printf("}");
    }
    printf("]}\n");
  }
  free(s);
  free(r);
  free(rt);
  free(bwv);
  free(fl);
  free(bar);
  free(cv);
  MPI_Finalize();
  return 0;
}
