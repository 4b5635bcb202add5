/*
 * tiers-cg: the NAS Parallel Benchmarks CG kernel (seed 004 §5 ran it at
 * class A in flat and hybrid modes), and a conjugate gradient solve of a
 * Matrix Market file, in the COMPaS hybrid model.
 *
 *   mpirun -n P tiers-cg [--class S|W|A|B] [--quick] [--threads T]
 *       [--pin none|compact|scatter] [--comm mpi|mbc]
 *   mpirun -n P tiers-cg --matrix FILE.mtx [--tol 1e-10] [--iters K]
 *       [--solution FILE] [--threads T] [--pin ...] [--comm mpi|mbc]
 *
 * ## NPB CG (written from the NPB 2/3 specification, NAS report 95-020)
 *
 * The matrix is NPB's makea: a random sparse symmetric positive definite
 * matrix of order na,
 *     A = sum_i size_i v_i v_i^T + (rcond - shift) I,  rcond = 0.1,
 * where v_i (i = 1..na) is a sparse vector of nonzer random entries at
 * random positions plus the entry 0.5 at position i, size_i = rcond^((i-1)
 * /na), and every random number comes from NPB's linear congruential
 * generator randlc (x <- 5^13 x mod 2^46, value x / 2^46) seeded with
 * 314159265 and advanced once before makea, exactly as NPB does.  The
 * duplicates of every entry are summed in NPB's order (by i), so the
 * matrix equals NPB's bit for bit.
 *
 * The benchmark is the inverse power method: niter times, 25 iterations of
 * unpreconditioned CG solve A z = x (conj_grad), then
 *     zeta = shift + 1 / (x . z),   x = z / ||z||,
 * after one untimed warm-up iteration from x = (1, ..., 1).  The final
 * zeta must match NPB's reference within a relative 1e-10; a miss exits 3
 * and says by how much.  The timed part is the niter outer iterations.
 *
 * Figure of merit: NPB's Mop/s,
 *     2 niter na (3 + nonzer (nonzer+1) + 25 (5 + nonzer (nonzer+1)) + 3)
 *       / time / 1e6,
 * the formula of the NPB 3.3 reference implementation (NPB3.3-SER/CG/cg.f,
 * and identically NPB3.3-MPI and the NPB 2.3 C versions, just after the
 * timed loop), with time the slowest process's time of the timed part (the
 * document's time_s).
 *
 * Classes (na, nonzer, niter, shift, reference zeta):
 *     S   1400   7  15  10   8.5971775078648
 *     W   7000   8  15  12  10.362595087124
 *     A  14000  11  15  20  17.130235054029
 *     B  75000  13  75  60  22.712745482631
 *
 * ## Distribution (COMPaS steps 1-5)
 *
 * Step 1: block rows.  Process p owns rows [r0, r1) of A (tiers_split_range)
 * with their global column indices; every process runs the (cheap,
 * sequential) generator in full and keeps its rows.  Step 2: the owned rows
 * are split again over the process's thread team.  Step 3: each thread
 * does the matrix-vector product and the vector updates of its rows.
 * Step 4: the product needs the whole direction vector p, so after every
 * update of p the master thread gathers it with one MPI_Allgatherv (NPB's
 * MPI version uses a 2-D process grid and a transpose exchange instead;
 * block rows keep the messages in one collective whose volume, na doubles
 * per process and iteration, is easy to reason about; at 2 processes the
 * 1 x 2 grid moves the same na/2 doubles per step with the same three
 * synchronisations, and tiers' block rows ran ahead of the 1 x 2 grid
 * reference of bench/cg_classes).  Dot products are
 * hybrid reductions (reduce_sum: team sum in thread order, then one
 * MPI_Allreduce; the sums of tiers_team_allreduce_double with one or two
 * team barriers instead of three).  All communication goes through two
 * functions, exchange_vector() and reduce_sum(), so that another messaging
 * layer can replace them.
 *
 * Speed: the timed part is 98% sparse product, whose loop is bound by the
 * latency of one chain of additions and by the loads, not by the flops;
 * matvec() sums each row in four interleaved partial sums (two-wide
 * vectors), in an order fixed by the row alone, and reads the columns as
 * 16-bit gaps where they fit (10 bytes of matrix a nonzero, not 12).
 * With threads, the matrix is copied into arrays first touched by the
 * threads that read it.
 *
 * --comm mbc replaces them with tiers' memory-based layer (tiers/mbc.h,
 * seed 001): exchange_vector() posts a receive of every other process's
 * block straight into its place in v, then sends this process's block to
 * every other process (non-blocking, one waitall: receives posted first,
 * so blocks of 16 KiB and more can go by direct remote write), and
 * reduce_sum() adds the team's parts in thread order, then calls
 * tiers_mbc_allreduce (which sums in rank order).  The vectors exchanged
 * are the same bytes in both modes; the dot products agree bit for bit
 * at 1 and 2 processes and within rounding beyond (MPI chooses its own
 * summation order), so zeta agrees with the MPI run within 1e-12 and
 * still verifies.  Outside the iteration (row distribution of --matrix,
 * the nonzero count and the slowest time of the report) MPI is used in
 * both modes.
 *
 * ## Matrix Market solve (--matrix)
 *
 * Reads a "matrix coordinate real|integer general|symmetric" file on rank 0
 * (duplicates are summed; a symmetric file lists the lower triangle), checks
 * that it is square, symmetric and has a positive diagonal, sends every
 * process its rows, and solves A x = b with b = (1, ..., 1) by CG from
 * x = 0 until ||r|| <= tol ||b|| (default tol 1e-10, at most --iters
 * iterations, default 10 n + 100).  A non-positive p.Ap during the
 * iteration means the matrix is not positive definite: one line, exit 2.
 * Verification recomputes the residual b - A x explicitly; it must be
 * below 10 tol (the updated residual drifts from the true one by
 * rounding).  Figure of merit: Mflop/s, counting 2 nnz + 10 n flops per
 * iteration.  --solution FILE writes x, one value per line (%.17g).
 *
 * Output: the tiers.app/1 document of hybrid_app.h.  "result" holds, for
 * NPB: class, na, nonzer, niter, shift, nnz, zeta, zeta_reference,
 * zeta_rel_error, rnorm, the per-iteration rnorm and zeta and matvec_s
 * (slowest master thread's seconds in the product, part of compute_s).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "hybrid_app.h"

#define NPB_RCOND 0.1
#define NPB_CGITMAX 25
#define NPB_EPSILON 1e-10
#define NPB_SEED 314159265ULL
#define NPB_MULT 1220703125ULL /* 5^13 */

typedef struct npb_class {
  const char *name;
  long na;
  int nonzer;
  int niter;
  double shift;
  double zeta; /* NPB's verification value */
} npb_class_t;

static const npb_class_t CLASSES[] = {
    {"S", 1400, 7, 15, 10.0, 8.5971775078648},
    {"W", 7000, 8, 15, 12.0, 10.362595087124},
    {"A", 14000, 11, 15, 20.0, 17.130235054029},
    {"B", 75000, 13, 75, 60.0, 22.712745482631},
};
#define NCLASSES (sizeof CLASSES / sizeof CLASSES[0])

/* ====================================================================== */
/* NPB's random numbers and makea. */

/* randlc: x <- a x mod 2^46, returns x / 2^46.  NPB computes this exactly
 * in double precision by splitting into 23-bit halves; integers give the
 * same values (a < 2^31, x < 2^46: a * (x mod 2^23) < 2^54). */
static double randlc(uint64_t *x, uint64_t a)
{
  const uint64_t m23 = (1ULL << 23) - 1, m46 = (1ULL << 46) - 1;
  uint64_t lo = *x & m23, hi = *x >> 23;
  uint64_t cross = (a * hi) & m23; /* (a hi 2^23) mod 2^46 = cross 2^23 */
  *x = (a * lo + (cross << 23)) & m46;
  return (double)*x * 0x1p-46;
}

/* The outer-product vectors of makea: for i = 0..n-1, cnt[i] entries at
 * idx[i*w..] (0-based positions) with values val[i*w..], w = nonzer + 1. */
typedef struct outer_vectors {
  long n;
  int w;
  int *cnt;
  int *idx;
  double *val;
} outer_vectors_t;

/* NPB's sprnvc + vecset for every i, in NPB's order (one generator). */
static int make_vectors(long n, int nonzer, outer_vectors_t *ov)
{
  ov->n = n;
  ov->w = nonzer + 1;
  ov->cnt = malloc((size_t)n * sizeof *ov->cnt);
  ov->idx = malloc((size_t)n * (size_t)ov->w * sizeof *ov->idx);
  ov->val = malloc((size_t)n * (size_t)ov->w * sizeof *ov->val);
  if (!ov->cnt || !ov->idx || !ov->val)
    return -1;
  uint64_t tran = NPB_SEED;
  randlc(&tran, NPB_MULT); /* NPB: zeta = randlc(tran, amult) before makea */
  long nn1 = 1;            /* smallest power of two not below n (at least 2) */
  do
    nn1 *= 2;
  while (nn1 < n);
  for (long i = 0; i < n; i++) {
    int *iv = ov->idx + i * ov->w;
    double *v = ov->val + i * ov->w;
    int nzv = 0;
    while (nzv < nonzer) { /* sprnvc: nonzer distinct random positions */
      double vecelt = randlc(&tran, NPB_MULT);
      double vecloc = randlc(&tran, NPB_MULT);
      long pos = (long)(nn1 * vecloc); /* NPB's icnvrt, 0-based here */
      if (pos >= n)
        continue;
      int seen = 0;
      for (int k = 0; k < nzv; k++)
        seen |= iv[k] == pos;
      if (seen)
        continue;
      v[nzv] = vecelt;
      iv[nzv++] = (int)pos;
    }
    int set = 0; /* vecset: entry i becomes 0.5 */
    for (int k = 0; k < nzv; k++)
      if (iv[k] == i) {
        v[k] = 0.5;
        set = 1;
      }
    if (!set) {
      v[nzv] = 0.5;
      iv[nzv++] = (int)i;
    }
    ov->cnt[i] = nzv;
  }
  return 0;
}

static void free_vectors(outer_vectors_t *ov)
{
  free(ov->cnt);
  free(ov->idx);
  free(ov->val);
}

/* ====================================================================== */
/* The distributed matrix: this process's block of rows, CSR. */

typedef struct csr {
  long n;          /* order of the matrix */
  long r0, r1;     /* this process's rows */
  int64_t *rowptr; /* r1 - r0 + 1 offsets */
  int *col;        /* global column indices, ascending within a row */
  double *val;
  /* setup_run: when no row has two consecutive columns 65536 or more
   * apart, the columns as 16-bit gaps (col is then NULL): first[i] is row
   * i's first column and gap[k] = col[k] - col[k-1] (0 at a row's first
   * entry), 2 bytes of index traffic per nonzero instead of 4 */
  uint16_t *gap;
  int *first;
} csr_t;

static void csr_free(csr_t *A)
{
  free(A->rowptr);
  free(A->col);
  free(A->val);
  free(A->gap);
  free(A->first);
  A->rowptr = NULL;
  A->col = NULL;
  A->val = NULL;
  A->gap = NULL;
  A->first = NULL;
}

static int cmp_int(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* NPB's sparse for rows [r0, r1): the triples of every outer product,
 * duplicates summed in the order of i (NPB's order), columns sorted.
 * Returns 0, or -1 when memory runs out. */
static int assemble_npb(const outer_vectors_t *ov, double shift, long r0, long r1, csr_t *A)
{
  long n = ov->n, nrows = r1 - r0;
  int rc = -1;
  int64_t *start = calloc((size_t)nrows + 1, sizeof *start);
  int *tcol = NULL, *list = NULL;
  double *tval = NULL, *acc = NULL;
  unsigned char *mark = NULL;
  A->n = n;
  A->r0 = r0;
  A->r1 = r1;
  A->rowptr = calloc((size_t)nrows + 1, sizeof *A->rowptr);
  if (!start || !A->rowptr)
    goto out;
  /* count the triples of every row */
  for (long i = 0; i < n; i++) {
    const int *iv = ov->idx + i * ov->w;
    for (int a = 0; a < ov->cnt[i]; a++)
      if (iv[a] >= r0 && iv[a] < r1)
        start[iv[a] - r0 + 1] += ov->cnt[i];
  }
  for (long j = 0; j < nrows; j++)
    start[j + 1] += start[j];
  int64_t ntrip = start[nrows];
  tcol = malloc((size_t)(ntrip ? ntrip : 1) * sizeof *tcol);
  tval = malloc((size_t)(ntrip ? ntrip : 1) * sizeof *tval);
  int64_t *fill = malloc(((size_t)nrows + 1) * sizeof *fill);
  if (!tcol || !tval || !fill) {
    free(fill);
    goto out;
  }
  memcpy(fill, start, ((size_t)nrows + 1) * sizeof *fill);
  /* the triples in generation order: row j = iv[a], column iv[b],
   * value v[b] * (size v[a]), plus rcond - shift on the diagonal of the
   * i-th product (NPB adds it to that product's (i, i) term) */
  double size = 1.0, ratio = pow(NPB_RCOND, 1.0 / (double)n);
  for (long i = 0; i < n; i++) {
    const int *iv = ov->idx + i * ov->w;
    const double *v = ov->val + i * ov->w;
    for (int a = 0; a < ov->cnt[i]; a++) {
      long j = iv[a];
      if (j < r0 || j >= r1)
        continue;
      double scale = size * v[a];
      for (int b = 0; b < ov->cnt[i]; b++) {
        double va = v[b] * scale;
        if (iv[b] == j && j == i)
          va = va + NPB_RCOND - shift;
        int64_t at = fill[j - r0]++;
        tcol[at] = iv[b];
        tval[at] = va;
      }
    }
    size *= ratio;
  }
  free(fill);
  /* sum the duplicates of every row in that order, then sort the columns */
  acc = calloc((size_t)n, sizeof *acc);
  mark = calloc((size_t)n, 1);
  list = malloc((size_t)n * sizeof *list);
  if (!acc || !mark || !list)
    goto out;
  int64_t nnz = 0;
  for (long j = 0; j < nrows; j++) { /* first pass: distinct columns */
    int cnt = 0;
    for (int64_t k = start[j]; k < start[j + 1]; k++)
      if (!mark[tcol[k]]) {
        mark[tcol[k]] = 1;
        list[cnt++] = tcol[k];
      }
    for (int k = 0; k < cnt; k++)
      mark[list[k]] = 0;
    nnz += cnt;
  }
  A->col = malloc((size_t)(nnz ? nnz : 1) * sizeof *A->col);
  A->val = malloc((size_t)(nnz ? nnz : 1) * sizeof *A->val);
  if (!A->col || !A->val)
    goto out;
  int64_t out_at = 0;
  for (long j = 0; j < nrows; j++) {
    int cnt = 0;
    for (int64_t k = start[j]; k < start[j + 1]; k++) {
      int c = tcol[k];
      if (!mark[c]) {
        mark[c] = 1;
        list[cnt++] = c;
      }
      acc[c] += tval[k];
    }
    qsort(list, (size_t)cnt, sizeof *list, cmp_int);
    A->rowptr[j] = out_at;
    for (int k = 0; k < cnt; k++) {
      int c = list[k];
      A->col[out_at] = c;
      A->val[out_at++] = acc[c];
      acc[c] = 0.0;
      mark[c] = 0;
    }
  }
  A->rowptr[nrows] = out_at;
  rc = 0;
out:
  free(start);
  free(tcol);
  free(tval);
  free(acc);
  free(mark);
  free(list);
  return rc;
}

/* ====================================================================== */
/* Matrix Market files (read on rank 0). */

typedef struct mm_matrix {
  long n;
  int symmetric; /* the file's symmetry: 1 symmetric, 0 general */
  int64_t *rowptr; /* n + 1 */
  int *col;
  double *val;
} mm_matrix_t;

static void mm_free(mm_matrix_t *m)
{
  free(m->rowptr);
  free(m->col);
  free(m->val);
  memset(m, 0, sizeof *m);
}

static int lower_equal(const char *a, const char *b)
{
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return 0;
  return *a == *b;
}

static int blank_line(const char *s)
{
  for (; *s; s++)
    if (!isspace((unsigned char)*s))
      return 0;
  return 1;
}

typedef struct triple {
  long r, c;
  double v;
} triple_t;

static int cmp_triple(const void *a, const void *b)
{
  const triple_t *x = a, *y = b;
  if (x->r != y->r)
    return (x->r > y->r) - (x->r < y->r);
  return (x->c > y->c) - (x->c < y->c);
}

/* Value of entry (r, c) of the CSR matrix m, or NAN when not stored. */
static double mm_entry(const mm_matrix_t *m, long r, long c)
{
  int64_t lo = m->rowptr[r], hi = m->rowptr[r + 1];
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (m->col[mid] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < m->rowptr[r + 1] && m->col[lo] == c ? m->val[lo] : NAN;
}

#define MM_FAIL(...)                          \
  do {                                        \
    snprintf(err, errlen, __VA_ARGS__);       \
    goto fail;                                \
  } while (0)

/* Reads, checks and assembles a Matrix Market file.  Returns 0, or -1
 * with a one-line reason in err. */
static int mm_read(const char *path, mm_matrix_t *m, char *err, size_t errlen)
{
  memset(m, 0, sizeof *m);
  triple_t *t = NULL;
  char *line = NULL;
  size_t cap = 0;
  long lineno = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  char w[5][64];
  if (getline(&line, &cap, f) < 0)
    MM_FAIL("%s is empty, not a Matrix Market file", path);
  lineno = 1;
  if (sscanf(line, "%63s %63s %63s %63s %63s", w[0], w[1], w[2], w[3], w[4]) != 5 ||
      !lower_equal(w[0], "%%MatrixMarket") || !lower_equal(w[1], "matrix"))
    MM_FAIL("%s is not a Matrix Market matrix file (its first line must be "
            "\"%%%%MatrixMarket matrix coordinate real general|symmetric\")", path);
  if (!lower_equal(w[2], "coordinate"))
    MM_FAIL("%s is in %s format: only coordinate (sparse) files are supported", path, w[2]);
  if (!lower_equal(w[3], "real") && !lower_equal(w[3], "integer") &&
      !lower_equal(w[3], "double"))
    MM_FAIL("%s has %s entries: only real or integer matrices are supported", path, w[3]);
  if (lower_equal(w[4], "symmetric"))
    m->symmetric = 1;
  else if (!lower_equal(w[4], "general"))
    MM_FAIL("%s is %s: only general or symmetric matrices are supported", path, w[4]);
  long rows = -1, cols = -1, entries = -1;
  while (getline(&line, &cap, f) >= 0) {
    lineno++;
    if (line[0] == '%' || blank_line(line))
      continue;
    char extra[8];
    if (sscanf(line, "%ld %ld %ld %7s", &rows, &cols, &entries, extra) != 3 || rows < 1 ||
        cols < 1 || entries < 0)
      MM_FAIL("%s line %ld: malformed size line (want: ROWS COLUMNS ENTRIES)", path, lineno);
    break;
  }
  if (rows < 0)
    MM_FAIL("%s has no size line", path);
  if (rows != cols)
    MM_FAIL("%s is not square: %ld x %ld (CG needs a square matrix)", path, rows, cols);
  if (rows > INT32_MAX)
    MM_FAIL("%s has %ld rows, more than this solver's %d", path, rows, INT32_MAX);
  size_t cap_t = (size_t)entries * (m->symmetric ? 2 : 1);
  t = malloc((cap_t ? cap_t : 1) * sizeof *t);
  if (!t)
    MM_FAIL("out of memory for the %ld entries of %s", entries, path);
  size_t nt = 0;
  long got = 0;
  while (got < entries && getline(&line, &cap, f) >= 0) {
    lineno++;
    if (line[0] == '%' || blank_line(line))
      continue;
    char *p = line, *end;
    errno = 0;
    long r = strtol(p, &end, 10);
    int ok = end != p;
    p = end;
    long c = strtol(p, &end, 10);
    ok = ok && end != p;
    p = end;
    double v = strtod(p, &end);
    ok = ok && end != p && errno == 0 && blank_line(end);
    if (!ok)
      MM_FAIL("%s line %ld: malformed entry (want: ROW COLUMN VALUE)", path, lineno);
    if (r < 1 || r > rows || c < 1 || c > cols)
      MM_FAIL("%s line %ld: entry (%ld, %ld) is outside the %ld x %ld matrix", path, lineno, r,
              c, rows, cols);
    if (!isfinite(v))
      MM_FAIL("%s line %ld: value is not finite", path, lineno);
    if (m->symmetric && c > r)
      MM_FAIL("%s line %ld: entry (%ld, %ld) above the diagonal in a symmetric file (list "
              "the lower triangle)", path, lineno, r, c);
    t[nt++] = (triple_t){r - 1, c - 1, v};
    if (m->symmetric && r != c)
      t[nt++] = (triple_t){c - 1, r - 1, v};
    got++;
  }
  if (got < entries)
    MM_FAIL("%s ends after %ld of its %ld entries", path, got, entries);
  while (getline(&line, &cap, f) >= 0) {
    lineno++;
    if (line[0] != '%' && !blank_line(line))
      MM_FAIL("%s line %ld: more entries than the %ld its size line announces", path, lineno,
              entries);
  }
  fclose(f);
  f = NULL;
  /* CSR: sorted, duplicates summed */
  qsort(t, nt, sizeof *t, cmp_triple);
  m->n = rows;
  m->rowptr = calloc((size_t)rows + 1, sizeof *m->rowptr);
  m->col = malloc((nt ? nt : 1) * sizeof *m->col);
  m->val = malloc((nt ? nt : 1) * sizeof *m->val);
  if (!m->rowptr || !m->col || !m->val)
    MM_FAIL("out of memory assembling %s", path);
  size_t k = 0;
  for (size_t i = 0; i < nt; i++) {
    if (k > 0 && t[i].r == t[i - 1].r && t[i].c == t[i - 1].c) {
      m->val[k - 1] += t[i].v;
      continue;
    }
    m->col[k] = (int)t[i].c;
    m->val[k++] = t[i].v;
    m->rowptr[t[i].r + 1]++;
  }
  for (long r = 0; r < rows; r++)
    m->rowptr[r + 1] += m->rowptr[r];
  free(t);
  t = NULL;
  /* symmetric, with a positive diagonal */
  for (long r = 0; r < rows; r++) {
    double d = mm_entry(m, r, r);
    if (isnan(d))
      MM_FAIL("%s is not positive definite: row %ld has no diagonal entry", path, r + 1);
    if (!(d > 0))
      MM_FAIL("%s is not positive definite: diagonal entry A(%ld,%ld) = %.6g is not positive",
              path, r + 1, r + 1, d);
    for (int64_t q = m->rowptr[r]; q < m->rowptr[r + 1]; q++) {
      long c = m->col[q];
      double a = m->val[q], b = mm_entry(m, c, r);
      double tol = 1e-12 * fmax(fabs(a), fabs(b));
      if (isnan(b) || fabs(a - b) > tol)
        MM_FAIL("%s is not symmetric: A(%ld,%ld) = %.17g but A(%ld,%ld) = %.17g (CG needs a "
                "symmetric matrix)", path, r + 1, c + 1, a, c + 1, r + 1, isnan(b) ? 0.0 : b);
    }
  }
  free(line);
  return 0;
fail:
  if (f)
    fclose(f);
  free(line);
  free(t);
  mm_free(m);
  return -1;
}

/* Rank 0 sends every process its rows [r0, r1) of m; the others receive.
 * Collective over comm. */
static int distribute_rows(const mm_matrix_t *m, long n, MPI_Comm comm, csr_t *A)
{
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  long r0, r1;
  tiers_split_range(n, size, rank, &r0, &r1);
  long nrows = r1 - r0;
  A->n = n;
  A->r0 = r0;
  A->r1 = r1;
  A->rowptr = malloc(((size_t)nrows + 1) * sizeof *A->rowptr);
  int bad = !A->rowptr;
  if (rank == 0) {
    for (int p = size - 1; p >= 0; p--) {
      long p0, p1;
      tiers_split_range(n, size, p, &p0, &p1);
      int64_t base = m->rowptr[p0], nnz = m->rowptr[p1] - base;
      if (p == 0) {
        A->col = malloc((size_t)(nnz ? nnz : 1) * sizeof *A->col);
        A->val = malloc((size_t)(nnz ? nnz : 1) * sizeof *A->val);
        bad |= !A->col || !A->val;
        if (bad)
          break;
        for (long r = 0; r <= nrows; r++)
          A->rowptr[r] = m->rowptr[p0 + r] - base;
        memcpy(A->col, m->col + base, (size_t)nnz * sizeof *A->col);
        memcpy(A->val, m->val + base, (size_t)nnz * sizeof *A->val);
        continue;
      }
      int64_t *rp = malloc(((size_t)(p1 - p0) + 1) * sizeof *rp);
      if (!rp)
        return -1;
      for (long r = 0; r <= p1 - p0; r++)
        rp[r] = m->rowptr[p0 + r] - base;
      MPI_Send(rp, (int)(p1 - p0 + 1), MPI_INT64_T, p, 10, comm);
      MPI_Send(m->col + base, (int)nnz, MPI_INT, p, 11, comm);
      MPI_Send(m->val + base, (int)nnz, MPI_DOUBLE, p, 12, comm);
      free(rp);
    }
  } else {
    if (!A->rowptr)
      return -1;
    MPI_Recv(A->rowptr, (int)(nrows + 1), MPI_INT64_T, 0, 10, comm, MPI_STATUS_IGNORE);
    int64_t nnz = A->rowptr[nrows];
    A->col = malloc((size_t)(nnz ? nnz : 1) * sizeof *A->col);
    A->val = malloc((size_t)(nnz ? nnz : 1) * sizeof *A->val);
    if (!A->col || !A->val)
      return -1;
    MPI_Recv(A->col, (int)nnz, MPI_INT, 0, 11, comm, MPI_STATUS_IGNORE);
    MPI_Recv(A->val, (int)nnz, MPI_DOUBLE, 0, 12, comm, MPI_STATUS_IGNORE);
  }
  return bad ? -1 : 0;
}

/* ====================================================================== */
/* The shared state of a run and its communication. */

/* One thread's values in a reduction, on a cache line of its own. */
#define CG_REDUCE_MAX 2
typedef struct cg_slot {
  _Alignas(64) double v[CG_REDUCE_MAX];
  unsigned long gen;
} cg_slot_t;

typedef struct cg_run {
  csr_t A;
  long nloc; /* r1 - r0 */
  int nprocs, nthreads;
  tiers_barrier_t bar; /* the team's own barrier (no MPI) */
  MPI_Comm comm;
  int *counts, *displs; /* rows per process, for MPI_Allgatherv */
  app_t *app;           /* messaging mode */
  tiers_mbc_t mbc;      /* --comm mbc: the vector exchange; else NULL */
  tiers_mbc_request_t *reqs; /* 2 (nprocs - 1) */
  /* vectors: "full" ones have n entries (this process writes its rows,
   * exchange_vector() fills in the rest); the others have nloc */
  double *x, *z, *p; /* full */
  double *q, *r;     /* local */
  int rc;            /* first error, shared */
  double matvec_s;   /* master thread's seconds in matvec */
  /* reduce_sum(): every thread's partial sums, and the process-level
   * result, in two alternating sets (see reduce_sum) */
  cg_slot_t *red_part; /* [2][nthreads] */
  cg_slot_t red_out[2];
  cg_slot_t *red_gen;  /* [nthreads]: each thread's count of reductions */
  int *col_new;        /* setup_run: the matrix being placed by its threads */
  double *val_new;
  uint16_t *gap_new;
  int *first_new;
  /* NPB */
  int niter;
  double shift;
  double zeta, rnorm;
  double *zeta_hist, *rnorm_hist;
  int record;
  /* Matrix Market solve */
  double tol;
  long maxit, iters;
  double res_rec, bnorm, pAp_bad;
  int not_spd, converged;
} cg_run_t;

/* A team-only barrier, charged to synchronisation time. */
static void team_sync(cg_run_t *R, tiers_team_t team)
{
  if (R->nthreads == 1)
    return;
  tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_SYNC);
  tiers_barrier_wait(R->bar);
  if (prev != TIERS_PHASE_COUNT)
    tiers_team_phase(team, prev);
}

/* The allgather of v over mbc (master thread): every other process's
 * block received in place, mine sent to every other process. */
static int allgather_mbc(cg_run_t *R, double *v)
{
  int me = R->app->rank, n = 0;
  for (int p = 0; p < R->nprocs; p++)
    if (p != me)
      TIERS_CALL(tiers_mbc_irecv(R->mbc, v + R->displs[p], (size_t)R->counts[p] * sizeof *v,
                                 p, 0, &R->reqs[n++]));
  for (int k = 1; k < R->nprocs; k++) { /* start with the next rank: spreads the load */
    int p = (me + k) % R->nprocs;
    TIERS_CALL(tiers_mbc_isend(R->mbc, v + R->displs[me], (size_t)R->counts[me] * sizeof *v,
                               p, 0, &R->reqs[n++]));
  }
  return tiers_mbc_waitall(R->mbc, n, R->reqs, NULL);
}

/* Communication 1: after every thread wrote its rows of the full vector
 * v, make all of v valid on every thread of every process (team barrier,
 * MPI_Allgatherv in place by the master, or its point-to-point form over
 * mbc, team barrier). */
static int exchange_vector(cg_run_t *R, tiers_team_t team, int t, double *v)
{
  team_sync(R, team);
  if (R->nprocs > 1) {
    if (t == 0) {
      tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_COMM);
      int rc = TIERS_OK;
      if (R->mbc)
        rc = allgather_mbc(R, v);
      else if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v, R->counts, R->displs,
                              MPI_DOUBLE, R->comm) != MPI_SUCCESS)
        rc = TIERS_ERR_MPI;
      if (rc != TIERS_OK && R->rc == TIERS_OK)
        R->rc = rc;
      tiers_team_phase(team, prev);
    }
    team_sync(R, team);
  }
  return R->rc;
}

/* The process-level step of a reduction (master thread): MPI_Allreduce,
 * or tiers_mbc_allreduce with --comm mbc (it sums in rank order). */
static int reduce_procs(cg_run_t *R, tiers_team_t team, double *v, int count)
{
  if (R->nprocs == 1)
    return TIERS_OK;
  tiers_phase_t prev = tiers_team_phase(team, TIERS_PHASE_COMM);
  int rc;
  if (R->mbc)
    rc = tiers_mbc_allreduce(R->mbc, v, v, count, TIERS_MBC_DOUBLE, TIERS_MBC_SUM);
  else
    rc = MPI_Allreduce(MPI_IN_PLACE, v, count, MPI_DOUBLE, MPI_SUM, R->comm) == MPI_SUCCESS
             ? TIERS_OK : TIERS_ERR_MPI;
  if (prev != TIERS_PHASE_COUNT)
    tiers_team_phase(team, prev);
  return rc;
}

/* Communication 2: the sums over all threads and processes of @p count
 * (<= CG_REDUCE_MAX) partial values: the team's parts added in thread
 * order, then one process-level reduction (reduce_procs).  The same sums
 * in the same order as tiers_team_allreduce_double / app_allreduce_double,
 * with fewer team barriers: each thread publishes its part in one of two
 * alternating sets of slots, so a set is rewritten only two reductions
 * later, after a barrier that every reader of it has passed.  One process:
 * one barrier, after which every thread adds the parts itself.  Several:
 * the master adds them and reduces across the processes between two
 * barriers.  One thread: no barrier at all. */
static int reduce_sum(cg_run_t *R, tiers_team_t team, int t, const double *partial, double *sum,
                      int count)
{
  if (R->nthreads == 1) {
    for (int i = 0; i < count; i++)
      sum[i] = partial[i];
    return reduce_procs(R, team, sum, count);
  }
  unsigned long gen = R->red_gen[t].gen++;
  cg_slot_t *parts = R->red_part + (gen & 1) * (unsigned long)R->nthreads;
  for (int i = 0; i < count; i++)
    parts[t].v[i] = partial[i];
  if (R->nprocs == 1) {
    team_sync(R, team);
    for (int i = 0; i < count; i++) {
      double acc = parts[0].v[i];
      for (int u = 1; u < R->nthreads; u++)
        acc += parts[u].v[i];
      sum[i] = acc;
    }
    return TIERS_OK;
  }
  cg_slot_t *out = &R->red_out[gen & 1];
  team_sync(R, team);
  if (t == 0) {
    for (int i = 0; i < count; i++) {
      double acc = parts[0].v[i];
      for (int u = 1; u < R->nthreads; u++)
        acc += parts[u].v[i];
      out->v[i] = acc;
    }
    int rc = reduce_procs(R, team, out->v, count);
    if (rc != TIERS_OK && R->rc == TIERS_OK)
      R->rc = rc;
  }
  team_sync(R, team);
  for (int i = 0; i < count; i++)
    sum[i] = out->v[i];
  return R->rc;
}

/* Two doubles as one value (GCC and Clang vector extension: SSE2 on
 * x86-64, NEON on AArch64); aligned(8) lets it sit at any double. */
typedef double cg_v2d __attribute__((vector_size(16), aligned(8)));

/* out[i] = (A v)_i for the local rows [lo, hi).  The product is bound by
 * the latency of its additions and the loads, not by the flops: each row
 * is summed in four interleaved partial sums (entries k, k+1, k+2, k+3 of
 * every group of four, as two pairs of two-wide sums) that are added at
 * the end of the row, (s0 + s2) + (s1 + s3), then the last (< 4) entries
 * in order.  The order depends on the row only, so every decomposition
 * into processes and threads gives the same q bit for bit. */
static void matvec_gaps(const csr_t *A, const double *restrict v, double *restrict out,
                        long lo, long hi)
{
  const int64_t *rp = A->rowptr;
  const uint16_t *gap = A->gap;
  const double *val = A->val;
  for (long i = lo; i < hi; i++) {
    int64_t k = rp[i], end = rp[i + 1];
    long c = A->first[i];
    cg_v2d s01 = {0.0, 0.0}, s23 = {0.0, 0.0};
    for (; k + 4 <= end; k += 4) {
      const uint16_t *g = gap + k;
      long c0 = c + g[0], c1 = c0 + g[1], c2 = c1 + g[2], c3 = c2 + g[3];
      c = c3;
      cg_v2d x01 = {v[c0], v[c1]}, x23 = {v[c2], v[c3]};
      cg_v2d a01, a23;
      memcpy(&a01, val + k, sizeof a01);
      memcpy(&a23, val + k + 2, sizeof a23);
      s01 += a01 * x01;
      s23 += a23 * x23;
    }
    cg_v2d s = s01 + s23;
    double sum = s[0] + s[1];
    for (; k < end; k++) {
      c += gap[k];
      sum += val[k] * v[c];
    }
    out[i] = sum;
  }
}

static void matvec(const csr_t *A, const double *restrict v, double *restrict out, long lo,
                   long hi)
{
  if (A->gap) { /* the same products and sums, from 16-bit column gaps */
    matvec_gaps(A, v, out, lo, hi);
    return;
  }
  const int64_t *rp = A->rowptr;
  const int *col = A->col;
  const double *val = A->val;
  for (long i = lo; i < hi; i++) {
    int64_t k = rp[i], end = rp[i + 1];
    cg_v2d s01 = {0.0, 0.0}, s23 = {0.0, 0.0};
    for (; k + 4 <= end; k += 4) {
      const int *c = col + k;
      cg_v2d x01 = {v[c[0]], v[c[1]]}, x23 = {v[c[2]], v[c[3]]};
      cg_v2d a01, a23;
      memcpy(&a01, val + k, sizeof a01);
      memcpy(&a23, val + k + 2, sizeof a23);
      s01 += a01 * x01;
      s23 += a23 * x23;
    }
    cg_v2d s = s01 + s23;
    double sum = s[0] + s[1];
    for (; k < end; k++)
      sum += val[k] * v[col[k]];
    out[i] = sum;
  }
}

static void timed_matvec(cg_run_t *R, int t, const double *v, double *out, long lo, long hi)
{
  double t0 = t == 0 ? tiers_now() : 0.0;
  matvec(&R->A, v, out, lo, hi);
  if (t == 0)
    R->matvec_s += tiers_now() - t0;
}

/* ====================================================================== */
/* NPB CG: conj_grad and the inverse power method. */

#define CHECK(expr)               \
  do {                            \
    int rc_ = (expr);             \
    if (rc_ != TIERS_OK)          \
      return rc_;                 \
  } while (0)

/* 25 CG iterations on A z = x from z = 0 (local rows [lo, hi) of this
 * thread); *rnorm = ||x - A z||. */
static int conj_grad(cg_run_t *R, tiers_team_t team, int t, long lo, long hi, double *rnorm)
{
  const long r0 = R->A.r0;
  double *x = R->x + r0, *z = R->z + r0, *p = R->p + r0, *q = R->q, *r = R->r;
  double part, rho, d;
  part = 0.0;
  for (long i = lo; i < hi; i++) {
    q[i] = 0.0;
    z[i] = 0.0;
    r[i] = x[i];
    p[i] = r[i];
    part += r[i] * r[i];
  }
  CHECK(reduce_sum(R, team, t, &part, &rho, 1));
  for (int cgit = 0; cgit < NPB_CGITMAX; cgit++) {
    CHECK(exchange_vector(R, team, t, R->p));
    timed_matvec(R, t, R->p, q, lo, hi);
    part = 0.0;
    for (long i = lo; i < hi; i++)
      part += p[i] * q[i];
    CHECK(reduce_sum(R, team, t, &part, &d, 1));
    double alpha = rho / d, rho0 = rho;
    part = 0.0;
    for (long i = lo; i < hi; i++) {
      z[i] += alpha * p[i];
      r[i] -= alpha * q[i];
      part += r[i] * r[i];
    }
    CHECK(reduce_sum(R, team, t, &part, &rho, 1));
    double beta = rho / rho0;
    for (long i = lo; i < hi; i++)
      p[i] = r[i] + beta * p[i];
  }
  /* ||x - A z||, explicitly */
  CHECK(exchange_vector(R, team, t, R->z));
  timed_matvec(R, t, R->z, r, lo, hi);
  part = 0.0;
  for (long i = lo; i < hi; i++) {
    double e = x[i] - r[i];
    part += e * e;
  }
  double sum;
  CHECK(reduce_sum(R, team, t, &part, &sum, 1));
  *rnorm = sqrt(sum);
  return TIERS_OK;
}

/* R->niter outer iterations of the inverse power method from the current x. */
static int npb_body(tiers_team_t team, int t, void *arg)
{
  cg_run_t *R = arg;
  long lo, hi;
  CHECK(tiers_team_split(team, R->nloc, t, &lo, &hi));
  double *x = R->x + R->A.r0, *z = R->z + R->A.r0;
  for (int it = 0; it < R->niter; it++) {
    double rnorm;
    CHECK(conj_grad(R, team, t, lo, hi, &rnorm));
    double part[2] = {0.0, 0.0}, norm[2];
    for (long i = lo; i < hi; i++) {
      part[0] += x[i] * z[i];
      part[1] += z[i] * z[i];
    }
    CHECK(reduce_sum(R, team, t, part, norm, 2));
    double inv = 1.0 / sqrt(norm[1]);
    double zeta = R->shift + 1.0 / norm[0];
    for (long i = lo; i < hi; i++)
      x[i] = inv * z[i];
    if (t == 0) {
      R->zeta = zeta;
      R->rnorm = rnorm;
      if (R->record) {
        R->zeta_hist[it] = zeta;
        R->rnorm_hist[it] = rnorm;
      }
    }
  }
  return TIERS_OK;
}

/* x = (1, ..., 1) on the thread's rows (also the first touch). */
static int ones_body(tiers_team_t team, int t, void *arg)
{
  cg_run_t *R = arg;
  long lo, hi;
  CHECK(tiers_team_split(team, R->nloc, t, &lo, &hi));
  for (long i = lo; i < hi; i++) {
    R->x[R->A.r0 + i] = 1.0;
    R->z[R->A.r0 + i] = R->p[R->A.r0 + i] = 0.0;
    R->q[i] = R->r[i] = 0.0;
  }
  return TIERS_OK;
}

/* Writes the thread's rows of the matrix into the new arrays (its columns
 * as gaps, or copied; its values when there are several threads), so
 * that their pages are placed (first touch) where the thread runs. */
static int touch_body(tiers_team_t team, int t, void *arg)
{
  cg_run_t *R = arg;
  long lo, hi;
  CHECK(tiers_team_split(team, R->nloc, t, &lo, &hi));
  const csr_t *A = &R->A;
  int64_t k0 = A->rowptr[lo], k1 = A->rowptr[hi];
  if (R->gap_new) {
    for (long i = lo; i < hi; i++) {
      int64_t a = A->rowptr[i], b = A->rowptr[i + 1];
      R->first_new[i] = b > a ? A->col[a] : 0;
      for (int64_t k = a; k < b; k++)
        R->gap_new[k] = (uint16_t)(k > a ? A->col[k] - A->col[k - 1] : 0);
    }
  } else if (R->col_new && k1 > k0) {
    memcpy(R->col_new + k0, A->col + k0, (size_t)(k1 - k0) * sizeof *R->col_new);
  }
  if (R->val_new && k1 > k0)
    memcpy(R->val_new + k0, A->val + k0, (size_t)(k1 - k0) * sizeof *R->val_new);
  return TIERS_OK;
}

/* ====================================================================== */
/* Matrix Market: CG on A x = (1, ..., 1). */

static int solve_body(tiers_team_t team, int t, void *arg)
{
  cg_run_t *R = arg;
  long lo, hi;
  CHECK(tiers_team_split(team, R->nloc, t, &lo, &hi));
  const long r0 = R->A.r0;
  double *x = R->x + r0, *p = R->p + r0, *q = R->q, *r = R->r;
  double part = 0.0, rho, bb;
  for (long i = lo; i < hi; i++) {
    x[i] = 0.0;
    r[i] = 1.0; /* b - A 0 */
    p[i] = 1.0;
    part += 1.0;
  }
  CHECK(reduce_sum(R, team, t, &part, &bb, 1));
  rho = bb;
  const double stop = R->tol * R->tol * bb;
  long k = 0;
  int not_spd = 0;
  double bad = 0.0;
  while (rho > stop && k < R->maxit) {
    CHECK(exchange_vector(R, team, t, R->p));
    timed_matvec(R, t, R->p, q, lo, hi);
    part = 0.0;
    for (long i = lo; i < hi; i++)
      part += p[i] * q[i];
    double d;
    CHECK(reduce_sum(R, team, t, &part, &d, 1));
    if (!(d > 0.0)) { /* every thread sees the same d */
      not_spd = 1;
      bad = d;
      break;
    }
    double alpha = rho / d, rho0 = rho;
    part = 0.0;
    for (long i = lo; i < hi; i++) {
      x[i] += alpha * p[i];
      r[i] -= alpha * q[i];
      part += r[i] * r[i];
    }
    CHECK(reduce_sum(R, team, t, &part, &rho, 1));
    double beta = rho / rho0;
    for (long i = lo; i < hi; i++)
      p[i] = r[i] + beta * p[i];
    k++;
  }
  if (t == 0) {
    R->iters = k;
    R->not_spd = not_spd;
    R->pAp_bad = bad;
    R->converged = !not_spd && rho <= stop;
    R->res_rec = sqrt(rho / bb);
    R->bnorm = sqrt(bb);
  }
  return TIERS_OK;
}

/* The true residual ||b - A x|| / ||b|| (x full afterwards). */
static int residual_body(tiers_team_t team, int t, void *arg)
{
  cg_run_t *R = arg;
  long lo, hi;
  CHECK(tiers_team_split(team, R->nloc, t, &lo, &hi));
  CHECK(exchange_vector(R, team, t, R->x));
  matvec(&R->A, R->x, R->q, lo, hi);
  double part = 0.0, sum;
  for (long i = lo; i < hi; i++) {
    double e = 1.0 - R->q[i];
    part += e * e;
  }
  CHECK(reduce_sum(R, team, t, &part, &sum, 1));
  if (t == 0)
    R->res_rec = sqrt(sum) / R->bnorm; /* reused: now the true residual */
  return TIERS_OK;
}

/* ====================================================================== */

static const npb_class_t *find_class(const char *name)
{
  for (size_t c = 0; c < NCLASSES; c++)
    if (strlen(name) == 1 && toupper((unsigned char)name[0]) == CLASSES[c].name[0])
      return &CLASSES[c];
  return NULL;
}

/* Vectors and the Allgatherv layout; fails collectively. */
static void setup_run(app_t *app, cg_run_t *R)
{
  tiers_team_t team = app->team;
  app_comm(app); /* --comm mbc: the layer, before anything else uses it */
  R->app = app;
  R->mbc = app->mbc;
  R->nprocs = app->size;
  R->nthreads = tiers_team_nthreads(team);
  R->comm = tiers_team_comm(team);
  R->nloc = R->A.r1 - R->A.r0;
  long n = R->A.n;
  R->counts = malloc((size_t)R->nprocs * sizeof *R->counts);
  R->displs = malloc((size_t)R->nprocs * sizeof *R->displs);
  R->x = malloc((size_t)n * sizeof(double));
  R->z = malloc((size_t)n * sizeof(double));
  R->p = malloc((size_t)n * sizeof(double));
  R->q = malloc((size_t)(R->nloc ? R->nloc : 1) * sizeof(double));
  R->r = malloc((size_t)(R->nloc ? R->nloc : 1) * sizeof(double));
  R->reqs = calloc((size_t)(2 * R->nprocs), sizeof *R->reqs);
  R->red_part = aligned_alloc(64, sizeof(cg_slot_t) * 2 * (size_t)R->nthreads);
  R->red_gen = aligned_alloc(64, sizeof(cg_slot_t) * (size_t)R->nthreads);
  int bad = !R->counts || !R->displs || !R->x || !R->z || !R->p || !R->q || !R->r || !R->reqs ||
            !R->red_part || !R->red_gen;
  if (!bad) {
    memset(R->red_part, 0, sizeof(cg_slot_t) * 2 * (size_t)R->nthreads);
    memset(R->red_gen, 0, sizeof(cg_slot_t) * (size_t)R->nthreads);
  }
  app_check(app, bad, "out of memory for the vectors of a matrix of order %ld", n);
  for (int p = 0; p < R->nprocs; p++) {
    long lo, hi;
    tiers_split_range(n, R->nprocs, p, &lo, &hi);
    R->counts[p] = (int)(hi - lo);
    R->displs[p] = (int)lo;
  }
  app_check(app, tiers_barrier_create(&R->bar, R->nthreads) != TIERS_OK, "%s",
            tiers_last_error());
  int rc = tiers_team_parallel(team, ones_body, R);
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
  /* the matrix into arrays first touched by the threads that read them,
   * its columns as 16-bit gaps where they fit */
  int64_t nnz = R->A.rowptr[R->nloc];
  int fits = 1;
  for (long i = 0; i < R->nloc && fits; i++)
    for (int64_t k = R->A.rowptr[i] + 1; k < R->A.rowptr[i + 1]; k++)
      if (R->A.col[k] - R->A.col[k - 1] > UINT16_MAX) {
        fits = 0;
        break;
      }
  if (fits || R->nthreads > 1) {
    size_t n1 = (size_t)(nnz ? nnz : 1);
    if (fits) {
      R->gap_new = malloc(n1 * sizeof *R->gap_new);
      R->first_new = malloc((size_t)(R->nloc ? R->nloc : 1) * sizeof *R->first_new);
    } else {
      R->col_new = malloc(n1 * sizeof *R->col_new);
    }
    if (R->nthreads > 1)
      R->val_new = malloc(n1 * sizeof *R->val_new);
    app_check(app, (fits ? !R->gap_new || !R->first_new : !R->col_new) ||
              (R->nthreads > 1 && !R->val_new),
              "out of memory for a matrix of %" PRId64 " nonzeros", nnz);
    rc = tiers_team_parallel(team, touch_body, R);
    app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
    free(R->A.col);
    R->A.col = R->col_new;
    R->A.gap = R->gap_new;
    R->A.first = R->first_new;
    if (R->val_new) {
      free(R->A.val);
      R->A.val = R->val_new;
    }
    R->col_new = NULL;
    R->val_new = NULL;
    R->gap_new = NULL;
    R->first_new = NULL;
  }
}

static void free_run(cg_run_t *R)
{
  csr_free(&R->A);
  free(R->counts);
  free(R->displs);
  free(R->x);
  free(R->z);
  free(R->p);
  free(R->q);
  free(R->r);
  free(R->reqs);
  free(R->red_part);
  free(R->red_gen);
  free(R->zeta_hist);
  free(R->rnorm_hist);
  tiers_barrier_destroy(&R->bar);
}

static int64_t global_nnz(const csr_t *A, MPI_Comm comm)
{
  int64_t mine = A->rowptr[A->r1 - A->r0], all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, comm);
  return all;
}

static double slowest(double mine, MPI_Comm comm)
{
  double all = mine;
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, comm);
  return all;
}

/* How p travels, for the document. */
static const char *distribution(tiers_mbc_t mbc)
{
  return mbc ? "block rows, point-to-point blocks of p over mbc"
             : "block rows, MPI_Allgatherv of p";
}

/* NPB's operation count (see the header). */
static double npb_ops(const npb_class_t *c)
{
  double nz1 = (double)c->nonzer * (c->nonzer + 1);
  return 2.0 * c->niter * (double)c->na * (3.0 + nz1 + 25.0 * (5.0 + nz1) + 3.0);
}

static void run_npb(app_t *app, const npb_class_t *cls)
{
  cg_run_t R;
  memset(&R, 0, sizeof R);
  long r0, r1;
  tiers_split_range(cls->na, app->size, app->rank, &r0, &r1);
  outer_vectors_t ov;
  memset(&ov, 0, sizeof ov);
  int bad = make_vectors(cls->na, cls->nonzer, &ov) != 0 ||
            assemble_npb(&ov, cls->shift, r0, r1, &R.A) != 0;
  free_vectors(&ov);
  app_check(app, bad, "out of memory generating the class %s matrix", cls->name);
  setup_run(app, &R);
  tiers_team_t team = app->team;
  int64_t nnz = global_nnz(&R.A, MPI_COMM_WORLD);

  /* one untimed iteration (NPB: page tables and code), then x = 1 again */
  R.niter = 1;
  R.shift = cls->shift;
  int rc = tiers_team_parallel(team, npb_body, &R);
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
  rc = tiers_team_parallel(team, ones_body, &R);
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());

  R.niter = cls->niter;
  R.record = 1;
  R.zeta_hist = calloc((size_t)cls->niter, sizeof(double));
  R.rnorm_hist = calloc((size_t)cls->niter, sizeof(double));
  app_check(app, !R.zeta_hist || !R.rnorm_hist, "out of memory");
  R.matvec_s = 0.0;
  tiers_team_barrier(team);
  tiers_team_timers_reset(team);
  if (app->mbc)
    tiers_mbc_stats_reset(app->mbc); /* Table 3 statistics of the timed part */
  double t0 = tiers_now();
  rc = tiers_team_parallel(team, npb_body, &R);
  double elapsed = tiers_now() - t0;
  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);
  app_comm_stats(app); /* the layer's Table 3 figures of the timed part */
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());

  double time_s = slowest(elapsed, MPI_COMM_WORLD);
  double matvec_s = slowest(R.matvec_s, MPI_COMM_WORLD);
  double err = fabs(R.zeta - cls->zeta) / cls->zeta;
  int passed = err <= NPB_EPSILON;
  char why[256] = "";
  if (!passed)
    snprintf(why, sizeof why, "zeta = %.13f differs from NPB's class %s value %.13f by a "
             "relative %.3g (allowed: %g)", R.zeta, cls->name, cls->zeta, err, NPB_EPSILON);

  tiers_json_t j;
  app_json_head(app, &j, elapsed, times);
  if (app->rank == 0) {
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "mode", "npb");
    tiers_json_kv_string(&j, "class", cls->name);
    tiers_json_kv_bool(&j, "quick", app->opts.quick);
    tiers_json_kv_string(&j, "distribution", distribution(R.mbc));
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "class", cls->name);
    tiers_json_kv_int(&j, "na", cls->na);
    tiers_json_kv_int(&j, "nonzer", cls->nonzer);
    tiers_json_kv_int(&j, "niter", cls->niter);
    tiers_json_kv_int(&j, "cg_iterations", NPB_CGITMAX);
    tiers_json_kv_double(&j, "shift", cls->shift);
    tiers_json_kv_int(&j, "nnz", nnz);
    tiers_json_kv_double(&j, "zeta", R.zeta);
    tiers_json_kv_double(&j, "zeta_reference", cls->zeta);
    tiers_json_kv_double(&j, "zeta_rel_error", err);
    tiers_json_kv_double(&j, "rnorm", R.rnorm);
    tiers_json_kv_double_array(&j, "zeta_per_iteration", R.zeta_hist, (size_t)cls->niter);
    tiers_json_kv_double_array(&j, "rnorm_per_iteration", R.rnorm_hist, (size_t)cls->niter);
    tiers_json_kv_double(&j, "operations", npb_ops(cls));
    tiers_json_kv_double(&j, "matvec_s", matvec_s);
    tiers_json_object_end(&j);
    app_json_merit(&j, "Mop/s", npb_ops(cls) / 1e6, time_s, "Mop/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_double(&j, "zeta_rel_error", err);
    tiers_json_kv_double(&j, "epsilon", NPB_EPSILON);
    tiers_json_object_end(&j);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  free_run(&R);
  app_finish(app, passed, why);
}

static void run_matrix(app_t *app, const char *path, double tol, long maxit,
                       const char *solution)
{
  cg_run_t R;
  memset(&R, 0, sizeof R);
  mm_matrix_t m;
  memset(&m, 0, sizeof m);
  char err[512] = "";
  int bad = 0;
  if (app->rank == 0)
    bad = mm_read(path, &m, err, sizeof err) != 0;
  app_check(app, bad, "%s", err);
  long meta[2] = {m.n, m.symmetric};
  MPI_Bcast(meta, 2, MPI_LONG, 0, MPI_COMM_WORLD);
  long n = meta[0];
  app_check(app, n < app->size, "%s has %ld rows, fewer than the %d processes: every process "
            "needs at least one row", path, n, app->size);
  int64_t most = 0; /* the largest block's nonzeros travel as one int count */
  for (int p = 0; app->rank == 0 && p < app->size; p++) {
    long lo, hi;
    tiers_split_range(n, app->size, p, &lo, &hi);
    most = m.rowptr[hi] - m.rowptr[lo] > most ? m.rowptr[hi] - m.rowptr[lo] : most;
  }
  app_check(app, most > INT32_MAX, "%s has %" PRId64 " nonzeros in one process's rows, more "
            "than an MPI count holds: use more processes", path, most);
  bad = distribute_rows(&m, n, MPI_COMM_WORLD, &R.A) != 0;
  app_check(app, bad, "out of memory distributing %s", path);
  mm_free(&m);
  setup_run(app, &R);
  tiers_team_t team = app->team;
  int64_t nnz = global_nnz(&R.A, MPI_COMM_WORLD);
  R.tol = tol;
  R.maxit = maxit > 0 ? maxit : 10 * n + 100;

  tiers_team_barrier(team);
  tiers_team_timers_reset(team);
  if (app->mbc)
    tiers_mbc_stats_reset(app->mbc); /* Table 3 statistics of the timed part */
  double t0 = tiers_now();
  int rc = tiers_team_parallel(team, solve_body, &R);
  double elapsed = tiers_now() - t0;
  double times[TIERS_PHASE_COUNT];
  tiers_team_times(team, times);
  app_comm_stats(app); /* the layer's Table 3 figures of the timed part */
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
  app_check(app, R.not_spd, "%s is not positive definite: p.Ap = %.6g <= 0 at CG iteration %ld",
            path, R.pAp_bad, R.iters + 1);
  double res_updated = R.res_rec;
  rc = tiers_team_parallel(team, residual_body, &R);
  app_check(app, rc != TIERS_OK, "%s", tiers_last_error());
  double res_true = R.res_rec;
  double time_s = slowest(elapsed, MPI_COMM_WORLD);
  double matvec_s = slowest(R.matvec_s, MPI_COMM_WORLD);

  double xmin = INFINITY, xmax = -INFINITY, xsum = 0.0;
  for (long i = 0; i < n; i++) {
    xmin = fmin(xmin, R.x[i]);
    xmax = fmax(xmax, R.x[i]);
    xsum += R.x[i];
  }
  int wrote = 1;
  if (app->rank == 0 && solution) {
    FILE *f = fopen(solution, "w");
    wrote = f != NULL;
    for (long i = 0; f && i < n; i++)
      wrote &= fprintf(f, "%.17g\n", R.x[i]) > 0;
    if (f)
      wrote &= fclose(f) == 0;
    if (!wrote)
      snprintf(err, sizeof err, "cannot write the solution to %s: %s", solution,
               strerror(errno));
  }
  app_check(app, !wrote, "%s", err);

  int passed = R.converged && res_true <= 10.0 * tol;
  char why[256] = "";
  if (!R.converged)
    snprintf(why, sizeof why, "CG did not converge: relative residual %.3g after %ld "
             "iterations (tolerance %.3g; raise --iters or --tol)", res_updated, R.iters, tol);
  else if (!passed)
    snprintf(why, sizeof why, "the recomputed residual ||b - Ax||/||b|| = %.3g exceeds 10 x "
             "the tolerance %.3g", res_true, tol);
  double flops = (double)R.iters * (2.0 * (double)nnz + 10.0 * (double)n);

  tiers_json_t j;
  app_json_head(app, &j, elapsed, times);
  if (app->rank == 0) {
    tiers_json_key(&j, "params");
    tiers_json_object_begin(&j);
    tiers_json_kv_string(&j, "mode", "matrix");
    tiers_json_kv_string(&j, "matrix", path);
    tiers_json_kv_double(&j, "tol", tol);
    tiers_json_kv_int(&j, "max_iterations", R.maxit);
    tiers_json_kv_string(&j, "distribution", distribution(R.mbc));
    tiers_json_object_end(&j);
    tiers_json_key(&j, "result");
    tiers_json_object_begin(&j);
    tiers_json_kv_int(&j, "n", n);
    tiers_json_kv_int(&j, "nnz", nnz);
    tiers_json_kv_string(&j, "symmetry", meta[1] ? "symmetric" : "general");
    tiers_json_kv_int(&j, "iterations", R.iters);
    tiers_json_kv_bool(&j, "converged", R.converged);
    tiers_json_kv_double(&j, "residual", res_true);
    tiers_json_kv_double(&j, "residual_updated", res_updated);
    tiers_json_kv_double(&j, "x_min", xmin);
    tiers_json_kv_double(&j, "x_max", xmax);
    tiers_json_kv_double(&j, "x_sum", xsum);
    tiers_json_kv_double(&j, "matvec_s", matvec_s);
    if (solution)
      tiers_json_kv_string(&j, "solution", solution);
    tiers_json_object_end(&j);
    app_json_merit(&j, "Mflop/s", flops / 1e6, time_s, "Mflop/s");
    tiers_json_key(&j, "verification");
    tiers_json_object_begin(&j);
    tiers_json_kv_bool(&j, "passed", passed);
    tiers_json_kv_bool(&j, "converged", R.converged);
    tiers_json_kv_double(&j, "residual", res_true);
    tiers_json_kv_double(&j, "allowed", 10.0 * tol);
    tiers_json_object_end(&j);
    tiers_json_object_end(&j);
    tiers_json_finish(&j);
  }
  free_run(&R);
  app_finish(app, passed, why);
}

int main(int argc, char **argv)
{
  app_t app;
  app_init(&app, "tiers-cg", &argc, &argv);
  const char *klass = NULL, *matrix = NULL, *solution = NULL;
  double tol = 1e-10;
  long maxit = 0;
  int tol_given = 0;
  for (int i = 1; i < argc; i++) {
    if (app_common_option(&app, argc, argv, &i))
      continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--class") == 0) {
      app_check(&app, !v, "--class needs S, W, A or B");
      klass = v;
      i++;
    } else if (strcmp(a, "--matrix") == 0) {
      app_check(&app, !v, "--matrix needs a Matrix Market file");
      matrix = v;
      i++;
    } else if (strcmp(a, "--solution") == 0) {
      app_check(&app, !v, "--solution needs a file name");
      solution = v;
      i++;
    } else if (strcmp(a, "--tol") == 0) {
      app_check(&app, !v || tiers_parse_double(v, &tol) != 0 || !(tol > 0) || tol >= 1,
                "--tol needs a number between 0 and 1 (got %s)", v ? v : "nothing");
      tol_given = 1;
      i++;
    } else if (strcmp(a, "--iters") == 0) {
      app_check(&app, !v || tiers_parse_long(v, &maxit) != 0 || maxit < 1,
                "--iters needs a positive number (got %s)", v ? v : "nothing");
      i++;
    } else {
      app_check(&app, 1, "unknown option %s (see tiers-cg --help)", a);
    }
  }
  app_check(&app, app.opts.grid[0] != 0, "cg distributes block rows: --grid does not apply");
  app_check(&app, app.opts.overlap, "cg has no halo exchange to overlap (--overlap)");
  app_check(&app, klass && matrix, "--class and --matrix exclude each other");
  app_check(&app, !matrix && (solution || maxit || tol_given),
            "--solution, --iters and --tol apply to --matrix only (an NPB class fixes its "
            "iterations)");
  const npb_class_t *cls = NULL;
  if (!matrix) {
    cls = find_class(klass ? klass : "S");
    app_check(&app, !cls, "unknown class %s (known: S, W, A, B)", klass);
    app_check(&app, cls->na < app.size, "class %s has %ld rows, fewer than the %d processes",
              cls->name, cls->na, app.size);
  }
  app_team(&app, MPI_COMM_WORLD);
  if (matrix)
    run_matrix(&app, matrix, tol, maxit, solution);
  run_npb(&app, cls);
  return 0;
}
