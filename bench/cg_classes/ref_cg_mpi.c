/* ref_cg_mpi.c: NPB CG in the structure of NPB's MPI reference version.
 *
 * The P processes (P a power of two) form NPB's 2-D grid of nprows x npcols
 * processes, npcols = nprows when P is a power of four and 2 nprows
 * otherwise (1 x 1, 1 x 2, 2 x 2, 2 x 4, ...).  Process (row, col) holds the
 * block of the matrix at row block `row` and column block `col`.  The
 * vectors x, z, p, q, r live in the column layout: a process holds the
 * entries of its column block (the processes of one grid column hold the
 * same entries).  Row block b covers the rows of column blocks b
 * (npcols = nprows) or 2b and 2b + 1 (npcols = 2 nprows).
 *
 * q = A p in three parts, as in NPB:
 *   1. w = (the process's block) x (its part of p): a row-block vector;
 *   2. the reduce exchange: w is summed across the processes of the grid
 *      row by pairwise exchanges with the partners col ^ 1, col ^ 2, ...
 *      When npcols = 2 nprows the first exchange halves w (each process
 *      sends the half it does not keep and adds the half it keeps: it keeps
 *      half col % 2); every other exchange sends the whole (kept) vector;
 *   3. the transpose exchange: the summed vector goes to the process that
 *      needs it in the column layout, (col, row) when the grid is square and
 *      (col / 2, 2 row + col % 2) when it is not; a process that is its own
 *      partner copies it (on 1 and 2 processes no transpose message moves).
 * Dot products are local sums over the column block summed across the grid
 * row by the same pairwise exchanges.  Every process of a grid row gets the
 * same sums (each exchange adds two numbers in either order), so zeta is the
 * same everywhere.  The matrix generator (ref_npb_cg.h) runs in full on
 * every process, which keeps its block.  The time is the slowest process's.
 *
 *   mpirun -n P ref_cg_mpi [--class S|W|A|B] [--niter N]
 *
 * prints one JSON line on rank 0 (zeta, verification, time, Mop/s) and exits
 * 0 when zeta verifies, 3 when it does not, 2 on bad usage or a process
 * count that is not a power of two.  Written from NPB's published method as
 * an anchor for bench/cg_classes/run; it shares nothing with tiers' CG.
 */
#include "ref_npb_cg.h"

#include <mpi.h>

static const char *PROG = "ref_cg_mpi";

typedef struct {
    int me, nprocs, nprows, npcols, prow, pcol;
    long row0, nrows; /* my row block */
    long col0, ncols; /* my column block */
    int steps;        /* log2(npcols): exchanges in a row reduction */
    int halve;        /* npcols = 2 nprows: the first exchange halves w */
    long keep0, keep; /* the part of w I keep after the halving exchange */
    long give0, give; /* the part I send in it */
    int transpose;    /* my transpose partner's rank */
    const long *rowstr;
    const int *colidx;
    const double *a;
    double *w, *wbuf; /* row-block work vectors */
} grid;

/* rows of row block b: an even split of na over nprows */
static void row_block(long na, int parts, int b, long *start, long *len)
{
    long base = na / parts, extra = na % parts;
    *len = base + (b < extra);
    *start = b * base + (b < extra ? b : extra);
}

/* column block c: row block c (square grid) or half c % 2 of row block c / 2 */
static void col_block(long na, const grid *g, int c, long *start, long *len)
{
    if (!g->halve) {
        row_block(na, g->nprows, c, start, len);
        return;
    }
    long s, l;
    row_block(na, g->nprows, c / 2, &s, &l);
    long first = l / 2;
    *start = c % 2 ? s + first : s;
    *len = c % 2 ? l - first : first;
}

static int setup_grid(long na, int me, int nprocs, grid *g)
{
    memset(g, 0, sizeof *g);
    int l2 = 0;
    while ((1 << l2) < nprocs)
        l2++;
    if ((1 << l2) != nprocs)
        return -1;
    g->me = me;
    g->nprocs = nprocs;
    g->npcols = 1 << ((l2 + 1) / 2);
    g->nprows = 1 << (l2 / 2);
    g->prow = me / g->npcols;
    g->pcol = me % g->npcols;
    g->halve = g->npcols != g->nprows;
    g->steps = (l2 + 1) / 2;
    row_block(na, g->nprows, g->prow, &g->row0, &g->nrows);
    col_block(na, g, g->pcol, &g->col0, &g->ncols);
    if (g->halve) {
        long first = g->nrows / 2;
        int mine = g->pcol % 2;
        g->keep0 = mine ? first : 0;
        g->keep = mine ? g->nrows - first : first;
        g->give0 = mine ? 0 : first;
        g->give = mine ? first : g->nrows - first;
        g->transpose = (g->pcol / 2) * g->npcols + 2 * g->prow + g->pcol % 2;
    } else {
        g->keep0 = 0;
        g->keep = g->nrows;
        g->transpose = g->pcol * g->npcols + g->prow;
    }
    return 0;
}

static int row_partner(const grid *g, int bit)
{
    return g->prow * g->npcols + (g->pcol ^ bit);
}

/* Sum `n` doubles across the grid row, in place (pairwise exchanges). */
static void row_sum(const grid *g, double *v, int n)
{
    double in[2];
    for (int bit = 1; bit < g->npcols; bit <<= 1) {
        MPI_Sendrecv(v, n, MPI_DOUBLE, row_partner(g, bit), 1, in, n, MPI_DOUBLE,
                     row_partner(g, bit), 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < n; i++)
            v[i] += in[i];
    }
}

static double dot(const grid *g, const double *u, const double *v)
{
    double s = 0.0;
    for (long j = 0; j < g->ncols; j++)
        s += u[j] * v[j];
    row_sum(g, &s, 1);
    return s;
}

/* out = A in, both in the column layout. */
static void matvec(grid *g, const double *in, double *out)
{
    double *w = g->w, *buf = g->wbuf;
    for (long j = 0; j < g->nrows; j++) {
        double sum = 0.0;
        for (long k = g->rowstr[j]; k < g->rowstr[j + 1]; k++)
            sum += g->a[k] * in[g->colidx[k]];
        w[j] = sum;
    }
    /* the reduce exchange across the grid row */
    int bit = 1;
    if (g->halve) {
        int peer = row_partner(g, 1);
        MPI_Sendrecv(w + g->give0, (int)g->give, MPI_DOUBLE, peer, 2, buf + g->keep0,
                     (int)g->keep, MPI_DOUBLE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (long j = g->keep0; j < g->keep0 + g->keep; j++)
            w[j] += buf[j];
        bit = 2;
    }
    for (; bit < g->npcols; bit <<= 1) {
        int peer = row_partner(g, bit);
        MPI_Sendrecv(w + g->keep0, (int)g->keep, MPI_DOUBLE, peer, 3, buf + g->keep0,
                     (int)g->keep, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (long j = g->keep0; j < g->keep0 + g->keep; j++)
            w[j] += buf[j];
    }
    /* the transpose exchange into the column layout */
    if (g->transpose == g->me) {
        memcpy(out, w + g->keep0, sizeof(double) * (size_t)g->keep);
    } else {
        MPI_Sendrecv(w + g->keep0, (int)g->keep, MPI_DOUBLE, g->transpose, 4, out,
                     (int)g->ncols, MPI_DOUBLE, g->transpose, 4, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
}

/* 25 CG steps on A z = x from z = 0; returns ||x - A z||. */
static double conj_grad(grid *g, const double *x, double *z, double *p, double *q, double *r)
{
    const long n = g->ncols;
    for (long j = 0; j < n; j++) {
        q[j] = 0.0;
        z[j] = 0.0;
        r[j] = x[j];
        p[j] = x[j];
    }
    double rho = dot(g, r, r);
    for (int step = 0; step < NPB_CG_STEPS; step++) {
        matvec(g, p, q);
        double d = dot(g, p, q);
        double alpha = rho / d;
        double rho0 = rho;
        double part = 0.0;
        for (long j = 0; j < n; j++) {
            z[j] += alpha * p[j];
            r[j] -= alpha * q[j];
            part += r[j] * r[j];
        }
        row_sum(g, &part, 1);
        rho = part;
        double beta = rho / rho0;
        for (long j = 0; j < n; j++)
            p[j] = r[j] + beta * p[j];
    }
    matvec(g, z, r);
    double s = 0.0;
    for (long j = 0; j < n; j++) {
        double e = x[j] - r[j];
        s += e * e;
    }
    row_sum(g, &s, 1);
    return sqrt(s);
}

static double normalise(const grid *g, double *x, const double *z)
{
    double t[2] = {0.0, 0.0};
    for (long j = 0; j < g->ncols; j++) {
        t[0] += x[j] * z[j];
        t[1] += z[j] * z[j];
    }
    row_sum(g, t, 2);
    double scale = 1.0 / sqrt(t[1]);
    for (long j = 0; j < g->ncols; j++)
        x[j] = scale * z[j];
    return t[0];
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    npb_options opt;
    int prc = npb_parse(argc, argv, PROG, me == 0, &opt);
    if (prc) {
        MPI_Finalize();
        return prc == 1 ? 0 : prc;
    }
    const npb_class *k = opt.klass;
    grid g;
    if (setup_grid(k->na, me, nprocs, &g)) {
        if (me == 0)
            fprintf(stderr, "%s: error: the number of processes must be a power of two "
                    "(got %d)\n", PROG, nprocs);
        MPI_Finalize();
        return 2;
    }
    if (g.ncols < 1) {
        if (me == 0)
            fprintf(stderr, "%s: error: class %c has too few rows for %d processes\n", PROG,
                    k->name, nprocs);
        MPI_Finalize();
        return 2;
    }
    npb_block b;
    int bad = npb_makea(k, g.row0, g.nrows, g.col0, g.ncols, &b) != 0;
    double *vec = malloc(sizeof(double) * (size_t)(5 * g.ncols + 2 * g.nrows));
    bad |= vec == NULL;
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad) {
        if (me == 0)
            fprintf(stderr, "%s: error: out of memory making the class %c matrix\n", PROG,
                    k->name);
        MPI_Finalize();
        return 1;
    }
    g.rowstr = b.rowstr;
    g.colidx = b.colidx;
    g.a = b.a;
    const long n = g.ncols;
    double *x = vec, *z = vec + n, *p = vec + 2 * n, *q = vec + 3 * n, *r = vec + 4 * n;
    g.w = vec + 5 * n;
    g.wbuf = g.w + g.nrows;

    /* one untimed iteration, as NPB does, then start again from x = 1 */
    for (long j = 0; j < n; j++)
        x[j] = 1.0;
    (void)conj_grad(&g, x, z, p, q, r);
    (void)normalise(&g, x, z);
    for (long j = 0; j < n; j++)
        x[j] = 1.0;

    MPI_Barrier(MPI_COMM_WORLD);
    double zeta = 0.0, rnorm = 0.0;
    double t0 = MPI_Wtime();
    for (int it = 0; it < opt.niter; it++) {
        rnorm = conj_grad(&g, x, z, p, q, r);
        double xz = normalise(&g, x, z);
        zeta = k->shift + 1.0 / xz;
    }
    double mine = MPI_Wtime() - t0, seconds = 0.0;
    MPI_Reduce(&mine, &seconds, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long nnz = 0;
    MPI_Reduce(&b.nnz, &nnz, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0)
        npb_report(PROG, k, opt.niter, nprocs, 1, g.nprows, g.npcols, nnz, zeta, rnorm,
                   seconds);
    int ok = npb_verified(k, zeta);
    npb_block_free(&b);
    free(vec);
    MPI_Finalize();
    return ok ? 0 : 3;
}
