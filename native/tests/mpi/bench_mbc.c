/*
 * tiers-mbc-bench: the measurements of seed 001 Tables 1 and 2 and of the
 * NICAM barrier (seed 004), for the memory-based layer (tiers/mbc.h) and
 * for plain MPI in the same process, alternating size by size and round by
 * round so that both see the same machine load.
 *
 *   mpirun -n P tiers-mbc-bench [--what rtt,bw,barrier] [--sizes LIST]
 *                               [--bw-sizes LIST] [--rounds R] [--scale F]
 *                               [--transport auto|shm|rma]
 *
 *   rtt      round-trip time between ranks 0 and 1: blocking send then
 *            blocking receive (osu_latency's method), microseconds per round
 *            trip; default sizes 0,4,16,64,256,1024,4096
 *   bw       streaming bandwidth from rank 0 to rank 1: windows of 64
 *            non-blocking sends against 64 posted receives closed by a
 *            4-byte acknowledgement (osu_bw's method), MB/s (10^6 B/s);
 *            default sizes 4 B .. 1 MiB in powers of 4
 *            and, when ranks 0 and 1 share a node, the floor: a round trip
 *            of two bare flag stores in a shared window ("rtt_flag_us")
 *   barrier  microseconds per barrier over all P ranks
 *
 * Ranks other than 0 and 1 wait in rtt and bw.  Rank 0 prints one JSON
 * document, schema "tiers.mbc-bench/1", with every round's figure for both
 * (lists "mbc" and "mpi" per size) so that the caller takes medians.
 * --scale multiplies the iteration counts (0.1 for a quick check).
 */
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/tool.h"
#include "tiers/mbc.h"

enum { WINDOW = 64 };

static int rank, size;
static double scale = 1.0;

static void die_rc(int rc, const char *what)
{
  if (rc != TIERS_OK) {
    fprintf(stderr, "tiers-mbc-bench: error: rank %d: %s: %s\n", rank, what, tiers_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static long iters_for(long base)
{
  long n = (long)((double)base * scale);
  return n < 2 ? 2 : n;
}

/* Seconds per round trip of n bytes between ranks 0 and 1. */
static double rtt_mbc(tiers_mbc_t m, unsigned char *s, unsigned char *r, size_t n, long iters)
{
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (rank == 0) {
      die_rc(tiers_mbc_send(m, s, n, 1, 1), "send");
      die_rc(tiers_mbc_recv(m, r, n, 1, 1, NULL), "recv");
    } else if (rank == 1) {
      die_rc(tiers_mbc_recv(m, r, n, 0, 1, NULL), "recv");
      die_rc(tiers_mbc_send(m, s, n, 0, 1), "send");
    }
  }
  return (MPI_Wtime() - t0) / (double)iters;
}

static double rtt_mpi(unsigned char *s, unsigned char *r, size_t n, long iters)
{
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(s, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(r, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(r, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(s, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) / (double)iters;
}

/* The floor under any shared-memory message: a round trip of two flag
 * stores, each spun on by the other process, in a shared window (ranks 0
 * and 1 on one node; NaN otherwise). */
static double rtt_flag(long iters)
{
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int nr, same = 0;
  MPI_Comm_rank(node, &nr);
  if (rank <= 1)
    same = nr == rank; /* ranks 0 and 1 are node ranks 0 and 1 */
  int both = 0;
  MPI_Allreduce(&same, &both, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  double res = 0.0 / 0.0;
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

/* Bytes per second streamed from rank 0 to rank 1. */
static double bw_mbc(tiers_mbc_t m, unsigned char *s, unsigned char *r, size_t n, long iters)
{
  tiers_mbc_request_t q[WINDOW];
  unsigned char ack[4] = {0};
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    if (rank == 0) {
      for (int w = 0; w < WINDOW; w++)
        die_rc(tiers_mbc_isend(m, s, n, 1, 2, &q[w]), "isend");
      die_rc(tiers_mbc_waitall(m, WINDOW, q, NULL), "waitall");
      die_rc(tiers_mbc_recv(m, ack, sizeof ack, 1, 3, NULL), "recv ack");
    } else if (rank == 1) {
      for (int w = 0; w < WINDOW; w++)
        die_rc(tiers_mbc_irecv(m, r, n, 0, 2, &q[w]), "irecv");
      die_rc(tiers_mbc_waitall(m, WINDOW, q, NULL), "waitall");
      die_rc(tiers_mbc_send(m, ack, sizeof ack, 0, 3), "send ack");
    }
  }
  return (double)n * WINDOW * (double)iters / (MPI_Wtime() - t0);
}

static double bw_mpi(unsigned char *s, unsigned char *r, size_t n, long iters)
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
        MPI_Isend(s, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &q[w]);
      MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
      MPI_Recv(ack, 4, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      for (int w = 0; w < WINDOW; w++)
        MPI_Irecv(r, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &q[w]);
      MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
      MPI_Send(ack, 4, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
    }
  }
  return (double)n * WINDOW * (double)iters / (MPI_Wtime() - t0);
}

static double barrier_mbc(tiers_mbc_t m, long iters)
{
  long skip = iters / 10 + 1;
  double t0 = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (long i = 0; i < iters + skip; i++) {
    if (i == skip)
      t0 = MPI_Wtime();
    die_rc(tiers_mbc_barrier(m), "barrier");
  }
  return (MPI_Wtime() - t0) / (double)iters;
}

static double barrier_mpi(long iters)
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

/* Every rank uses rank 0's figure (rank 0 times the whole exchange). */
static double from0(double v)
{
  MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return v;
}

static void usage(void)
{
  tiers_tool_fail("usage: tiers-mbc-bench [--what rtt,bw,barrier] [--sizes LIST] "
                  "[--bw-sizes LIST] [--rounds R] [--scale F] [--transport auto|shm|rma]");
}

/* A comma-separated list of byte counts >= 0 ("0,8,64"): the library's
 * int lists start at 1, and a 0 B message is the figure most asked for. */
static int parse_sizes(const char *text, long **out)
{
  if (!text || !*text)
    return -1;
  int n = 1;
  for (const char *c = text; *c; c++)
    n += *c == ',';
  long *v = malloc(sizeof(long) * (size_t)n);
  char *copy = strdup(text);
  if (!v || !copy) {
    free(v);
    free(copy);
    return -1;
  }
  int k = 0;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    if (k == n || tiers_parse_long(item, &v[k]) != 0 || v[k] > (1L << 30)) {
      free(v);
      free(copy);
      return -1;
    }
    k++;
  }
  free(copy);
  /* strtok_r skips empty items: "1,,2" has fewer items than commas + 1 */
  if (k != n) {
    free(v);
    return -1;
  }
  *out = v;
  return n;
}

static void json_series(tiers_json_t *j, const char *key, const long *sizes, int ns, int rounds,
                        const double *mbc, const double *mpi, const char *unit)
{
  tiers_json_key(j, key);
  tiers_json_object_begin(j);
  tiers_json_kv_string(j, "unit", unit);
  tiers_json_key(j, "rows");
  tiers_json_array_begin(j);
  for (int i = 0; i < ns; i++) {
    tiers_json_object_begin(j);
    tiers_json_kv_int(j, "bytes", sizes[i]);
    tiers_json_kv_double_array(j, "mbc", mbc + (size_t)i * rounds, (size_t)rounds);
    tiers_json_kv_double_array(j, "mpi", mpi + (size_t)i * rounds, (size_t)rounds);
    tiers_json_object_end(j);
  }
  tiers_json_array_end(j);
  tiers_json_object_end(j);
}

int main(int argc, char **argv)
{
  tiers_tool_init(argv[0]);
  tiers_tool_help(argc, argv,
                  "usage: mpirun -n P tiers-mbc-bench [--what rtt,bw,barrier] [--sizes LIST]\n"
                  "           [--bw-sizes LIST] [--rounds R] [--scale F] "
                  "[--transport auto|shm|rma]\n"
                  "Round trip, bandwidth and barrier of tiers memory-based messaging and\n"
                  "of MPI side by side; prints a tiers.mbc-bench/1 document.\n");
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *what = "rtt,bw,barrier";
  const char *transport = NULL;
  long *rs = NULL, *bs = NULL;
  int nrs = -1, nbs = -1;
  long rounds = 3;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      usage();
    if (!strcmp(a, "--what"))
      what = v;
    else if (!strcmp(a, "--sizes")) {
      if ((nrs = parse_sizes(v, &rs)) < 0)
        tiers_tool_fail("--sizes needs a list of byte counts >= 0 (got %s)", v);
    } else if (!strcmp(a, "--bw-sizes")) {
      if ((nbs = parse_sizes(v, &bs)) < 0)
        tiers_tool_fail("--bw-sizes needs a list of byte counts >= 0 (got %s)", v);
    } else if (!strcmp(a, "--rounds")) {
      if (tiers_parse_long(v, &rounds) || rounds < 1 || rounds > 1000)
        tiers_tool_fail("--rounds needs a count 1..1000 (got %s)", v);
    } else if (!strcmp(a, "--scale")) {
      if (tiers_parse_double(v, &scale) || !(scale > 0) || scale > 100)
        tiers_tool_fail("--scale needs a factor in (0, 100] (got %s)", v);
    } else if (!strcmp(a, "--transport")) {
      if (strcmp(v, "auto") && strcmp(v, "shm") && strcmp(v, "rma"))
        tiers_tool_fail("--transport must be auto, shm or rma (got %s)", v);
      transport = v;
    } else
      usage();
    i++;
  }
  int do_rtt = strstr(what, "rtt") != NULL, do_bw = strstr(what, "bw") != NULL,
      do_bar = strstr(what, "barrier") != NULL;
  if (!do_rtt && !do_bw && !do_bar)
    tiers_tool_fail("--what must name rtt, bw and/or barrier (got %s)", what);
  if ((do_rtt || do_bw) && size < 2)
    tiers_tool_fail("rtt and bw need at least 2 ranks");
  if (nrs < 0) {
    static const long def[] = {0, 4, 16, 64, 256, 1024, 4096};
    nrs = 7;
    rs = malloc(sizeof def);
    memcpy(rs, def, sizeof def);
  }
  if (nbs < 0) {
    nbs = 10;
    bs = malloc(sizeof(long) * 10);
    for (int i = 0; i < 10; i++)
      bs[i] = 4L << (2 * i); /* 4 B .. 1 MiB */
  }
  long maxb = 8;
  for (int i = 0; i < nrs; i++)
    maxb = rs[i] > maxb ? rs[i] : maxb;
  for (int i = 0; i < nbs; i++)
    maxb = bs[i] > maxb ? bs[i] : maxb;
  unsigned char *s = malloc((size_t)maxb), *r = malloc((size_t)maxb);
  if (!s || !r)
    tiers_tool_fail("out of memory for %ld-byte buffers", maxb);
  for (long i = 0; i < maxb; i++)
    s[i] = r[i] = (unsigned char)i;

  tiers_mbc_options_t o;
  die_rc(tiers_mbc_options_init(&o), "options");
  if (transport)
    o.transport = !strcmp(transport, "rma")   ? TIERS_MBC_TRANSPORT_RMA
                  : !strcmp(transport, "shm") ? TIERS_MBC_TRANSPORT_SHM
                                              : TIERS_MBC_TRANSPORT_AUTO;
  tiers_mbc_t m;
  die_rc(tiers_mbc_create(MPI_COMM_WORLD, &o, &m), "tiers_mbc_create");

  double *rtt[2], *bw[2], bar[2][1000], flag[1000];
  for (int k = 0; k < 2; k++) {
    rtt[k] = calloc((size_t)(nrs * rounds), sizeof(double));
    bw[k] = calloc((size_t)(nbs * rounds), sizeof(double));
  }
  for (long rd = 0; rd < rounds; rd++) {
    int mbc_first = rd % 2 == 0; /* alternate who goes first */
    if (do_rtt)
      flag[rd] = from0(rtt_flag(iters_for(200000))) * 1e6;
    for (int i = 0; do_rtt && i < nrs; i++) {
      long it = iters_for(rs[i] > 8192 ? 2000 : 20000);
      for (int k = 0; k < 2; k++) {
        int is_mbc = (k == 0) == mbc_first;
        double t = is_mbc ? rtt_mbc(m, s, r, (size_t)rs[i], it) : rtt_mpi(s, r, (size_t)rs[i], it);
        rtt[is_mbc ? 0 : 1][i * rounds + rd] = from0(t) * 1e6;
      }
    }
    for (int i = 0; do_bw && i < nbs; i++) {
      long it = iters_for(bs[i] >= 65536 ? 20 : 200);
      for (int k = 0; k < 2; k++) {
        int is_mbc = (k == 0) == mbc_first;
        double b = is_mbc ? bw_mbc(m, s, r, (size_t)bs[i], it) : bw_mpi(s, r, (size_t)bs[i], it);
        bw[is_mbc ? 0 : 1][i * rounds + rd] = from0(b) / 1e6;
      }
    }
    if (do_bar) {
      long it = iters_for(20000);
      for (int k = 0; k < 2; k++) {
        int is_mbc = (k == 0) == mbc_first;
        double t = is_mbc ? barrier_mbc(m, it) : barrier_mpi(it);
        bar[is_mbc ? 0 : 1][rd] = from0(t) * 1e6;
      }
    }
  }
  tiers_mbc_stats_t st;
  die_rc(tiers_mbc_stats(m, TIERS_MBC_GLOBAL, &st), "stats");
  const char *tname = NULL;
  die_rc(tiers_mbc_transport_name(m, &tname), "transport name");
  char tbuf[32];
  snprintf(tbuf, sizeof tbuf, "%s", tname);
  die_rc(tiers_mbc_destroy(&m), "destroy");
  if (rank == 0) {
    tiers_json_t j;
    tiers_json_init(&j, stdout);
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "schema", "tiers.mbc-bench/1");
    tiers_json_kv_int(&j, "ranks", size);
    tiers_json_kv_int(&j, "rounds", rounds);
    tiers_json_kv_double(&j, "scale", scale);
    tiers_json_kv_string(&j, "transport", tbuf);
    tiers_json_kv_int(&j, "direct_available", st.direct_available);
    tiers_json_kv_double(&j, "direct_share", st.direct_share);
    if (do_rtt) {
      json_series(&j, "rtt", rs, nrs, (int)rounds, rtt[0], rtt[1], "us");
      if (flag[0] == flag[0])
        tiers_json_kv_double_array(&j, "rtt_flag_us", flag, (size_t)rounds);
    }
    if (do_bw)
      json_series(&j, "bw", bs, nbs, (int)rounds, bw[0], bw[1], "MB/s");
    if (do_bar) {
      tiers_json_key(&j, "barrier");
      tiers_json_object_begin(&j);
      tiers_json_kv_string(&j, "unit", "us");
      tiers_json_kv_double_array(&j, "mbc", bar[0], (size_t)rounds);
      tiers_json_kv_double_array(&j, "mpi", bar[1], (size_t)rounds);
      tiers_json_object_end(&j);
    }
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  for (int k = 0; k < 2; k++) {
    free(rtt[k]);
    free(bw[k]);
  }
  free(s);
  free(r);
  free(rs);
  free(bs);
  MPI_Finalize();
  return 0;
}
