/* ref_npb_cg.h: what the two NPB-method CG reference programs share.
 *
 * Written from the published description of the NAS Parallel Benchmarks CG
 * kernel (NAS reports RNR-94-007 and NAS-95-020, and the NPB 2/3 reports):
 *
 *   - the class parameters na, nonzer, niter, shift and rcond = 0.1, and the
 *     reference zeta of each class;
 *   - the random numbers: x <- 5^13 x mod 2^46, returned as x 2^-46, seed
 *     314159265, advanced once before the matrix is made;
 *   - the matrix: A = sum_i size_i v_i v_i^T + (rcond - shift) I, where v_i
 *     has nonzer random values at distinct random positions (a position is
 *     (int)(nn1 u), nn1 the smallest power of two >= na, and is drawn again
 *     when it is >= na or already taken; each value is drawn before its
 *     position) plus 0.5 at position i, and size_i = rcond^(i/na) by
 *     repeated multiplication; entries with the same (row, column) are
 *     summed in the order of i;
 *   - the benchmark: x = 1, one untimed outer iteration, x = 1 again, then
 *     niter times [25 CG steps on A z = x, zeta = shift + 1/(x.z),
 *     x = z/||z||], timed; verified when |zeta - ref|/ref <= 1e-10;
 *   - Mop/s = 2 niter na (3 + nonzer(nonzer+1) + 25 (5 + nonzer(nonzer+1))
 *     + 3) / time / 1e6.
 *
 * Everything here is static: the file is included by ref_cg_omp.c and
 * ref_cg_mpi.c, which are compiled by bench/cg_classes/run.  It is an
 * anchor, independent of tiers' own CG (native/apps/cg.c).
 */
#ifndef REF_NPB_CG_H
#define REF_NPB_CG_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPB_RCOND 0.1
#define NPB_CG_STEPS 25
#define NPB_EPSILON 1.0e-10
#define NPB_SEED 314159265ULL
#define NPB_MULT 1220703125ULL /* 5^13 */
#define NPB_MASK46 ((1ULL << 46) - 1)

typedef struct {
    char name;
    long na;
    int nonzer;
    int niter;
    double shift;
    double zeta_ref;
} npb_class;

static const npb_class npb_classes[] = {
    {'S', 1400, 7, 15, 10.0, 8.5971775078648},
    {'W', 7000, 8, 15, 12.0, 10.362595087124},
    {'A', 14000, 11, 15, 20.0, 17.130235054029},
    {'B', 75000, 13, 75, 60.0, 22.712745482631},
};

/* One block of the matrix in compressed rows: rows [row0, row0 + nrows),
 * columns [col0, col0 + ncols), column indices local (global - col0) and
 * ascending in each row. */
typedef struct {
    long row0, nrows, col0, ncols;
    long nnz;
    long *rowstr; /* nrows + 1 */
    int *colidx;
    double *a;
} npb_block;

/* The options both programs take.  Returns 0, or 2 after printing one
 * error line (when `say` is non-zero) for bad usage. */
typedef struct {
    const npb_class *klass;
    int niter;
} npb_options;

static int npb_parse(int argc, char **argv, const char *prog, int say, npb_options *o)
{
    o->klass = &npb_classes[0];
    o->niter = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = NULL;
        if (i + 1 < argc)
            val = argv[i + 1];
        if (strcmp(arg, "--class") == 0 && val) {
            o->klass = NULL;
            for (size_t k = 0; k < sizeof npb_classes / sizeof npb_classes[0]; k++)
                if (strlen(val) == 1 && (val[0] == npb_classes[k].name ||
                                         val[0] == npb_classes[k].name + ('a' - 'A')))
                    o->klass = &npb_classes[k];
            if (!o->klass) {
                if (say)
                    fprintf(stderr, "%s: error: --class must be S, W, A or B (got '%s')\n",
                            prog, val);
                return 2;
            }
            i++;
        } else if (strcmp(arg, "--niter") == 0 && val) {
            char *end;
            errno = 0;
            long n = strtol(val, &end, 10);
            if (errno || *end || end == val || n < 1 || n > 100000) {
                if (say)
                    fprintf(stderr, "%s: error: --niter must be a count from 1 to 100000 "
                            "(got '%s')\n", prog, val);
                return 2;
            }
            o->niter = (int)n;
            i++;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (say)
                printf("usage: %s [--class S|W|A|B] [--niter N]\n"
                       "NPB CG by NPB's published method; prints one JSON line; exit 3 when "
                       "zeta misses the class's reference value (as with any --niter other "
                       "than the class's)\n", prog);
            return 1;
        } else {
            if (say)
                fprintf(stderr, "%s: error: unknown or incomplete option '%s' (use --class "
                        "S|W|A|B, --niter N)\n", prog, arg);
            return 2;
        }
    }
    if (o->niter < 0)
        o->niter = o->klass->niter;
    return 0;
}

static double npb_randlc(uint64_t *x)
{
    /* only the low 46 bits of the product matter, so the 64-bit wrap is harmless */
    *x = (*x * NPB_MULT) & NPB_MASK46;
    return ldexp((double)*x, -46);
}

/* The outer-product vectors v_0 .. v_{na-1}: vector i has len[i] entries,
 * positions pos[i * stride ..] and values val[i * stride ..]. */
typedef struct {
    long na;
    int stride;
    int *len;
    long *pos;
    double *val;
} npb_vectors;

static void npb_vectors_free(npb_vectors *v)
{
    free(v->len);
    free(v->pos);
    free(v->val);
    memset(v, 0, sizeof *v);
}

static int npb_make_vectors(const npb_class *k, npb_vectors *v)
{
    long na = k->na;
    int nz = k->nonzer;
    uint64_t seed = NPB_SEED;
    long nn1 = 1;
    while (nn1 < na)
        nn1 *= 2;
    v->na = na;
    v->stride = nz + 1;
    v->len = malloc(sizeof(int) * (size_t)na);
    v->pos = malloc(sizeof(long) * (size_t)na * (size_t)v->stride);
    v->val = malloc(sizeof(double) * (size_t)na * (size_t)v->stride);
    if (!v->len || !v->pos || !v->val) {
        npb_vectors_free(v);
        return -1;
    }
    (void)npb_randlc(&seed); /* NPB advances the generator once before makea */
    for (long i = 0; i < na; i++) {
        long *pos = v->pos + i * v->stride;
        double *val = v->val + i * v->stride;
        int n = 0;
        while (n < nz) {
            double value = npb_randlc(&seed);
            double where = npb_randlc(&seed);
            long p = (long)((double)nn1 * where);
            if (p >= na)
                continue;
            int taken = 0;
            for (int e = 0; e < n; e++)
                taken |= pos[e] == p;
            if (taken)
                continue;
            pos[n] = p;
            val[n] = value;
            n++;
        }
        /* 0.5 on the diagonal position i: replaces a drawn value there, else appended */
        int set = 0;
        for (int e = 0; e < n; e++)
            if (pos[e] == i) {
                val[e] = 0.5;
                set = 1;
            }
        if (!set) {
            pos[n] = i;
            val[n] = 0.5;
            n++;
        }
        v->len[i] = n;
    }
    return 0;
}

static int npb_cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void npb_block_free(npb_block *b)
{
    free(b->rowstr);
    free(b->colidx);
    free(b->a);
    memset(b, 0, sizeof *b);
}

/* The block rows [row0, row0+nrows) x columns [col0, col0+ncols) of NPB's
 * matrix for class k.  Each entry is the sum, in the order of i, of
 * v_i[col] (size_i v_i[row]), plus rcond - shift on the diagonal at the
 * vector i = row.  Returns 0, or -1 when memory runs out. */
static int npb_makea(const npb_class *k, long row0, long nrows, long col0, long ncols,
                     npb_block *b)
{
    npb_vectors v;
    memset(b, 0, sizeof *b);
    if (npb_make_vectors(k, &v))
        return -1;
    long na = k->na;
    int rc = -1;
    long *count = calloc((size_t)nrows + 1, sizeof(long));
    long *fill = NULL, *ccol = NULL, *mark = NULL, *cols = NULL;
    double *cval = NULL, *acc = NULL;
    if (!count)
        goto out;
    /* contributions per row of the block */
    for (long i = 0; i < na; i++) {
        const long *pos = v.pos + i * v.stride;
        int incols = 0;
        for (int e = 0; e < v.len[i]; e++)
            incols += pos[e] >= col0 && pos[e] < col0 + ncols;
        for (int e = 0; e < v.len[i]; e++)
            if (pos[e] >= row0 && pos[e] < row0 + nrows)
                count[pos[e] - row0 + 1] += incols;
    }
    for (long j = 0; j < nrows; j++)
        count[j + 1] += count[j];
    long total = count[nrows];
    fill = malloc(sizeof(long) * (size_t)(nrows + 1));
    ccol = malloc(sizeof(long) * (size_t)(total ? total : 1));
    cval = malloc(sizeof(double) * (size_t)(total ? total : 1));
    acc = calloc((size_t)ncols, sizeof(double));
    mark = malloc(sizeof(long) * (size_t)ncols);
    cols = malloc(sizeof(long) * (size_t)(ncols ? ncols : 1));
    if (!fill || !ccol || !cval || !acc || !mark || !cols)
        goto out;
    memcpy(fill, count, sizeof(long) * (size_t)(nrows + 1));
    /* the contributions, row by row in the order of i */
    double ratio = pow(NPB_RCOND, 1.0 / (double)na);
    double size = 1.0;
    for (long i = 0; i < na; i++) {
        const long *pos = v.pos + i * v.stride;
        const double *val = v.val + i * v.stride;
        for (int e = 0; e < v.len[i]; e++) {
            long row = pos[e];
            if (row < row0 || row >= row0 + nrows)
                continue;
            double scale = size * val[e];
            for (int f = 0; f < v.len[i]; f++) {
                long col = pos[f];
                if (col < col0 || col >= col0 + ncols)
                    continue;
                double va = val[f] * scale;
                if (col == row && row == i)
                    va = va + NPB_RCOND - k->shift;
                long at = fill[row - row0]++;
                ccol[at] = col - col0;
                cval[at] = va;
            }
        }
        size *= ratio;
    }
    /* sum equal columns in that order, then sort each row's columns */
    b->row0 = row0;
    b->nrows = nrows;
    b->col0 = col0;
    b->ncols = ncols;
    b->rowstr = malloc(sizeof(long) * (size_t)(nrows + 1));
    if (!b->rowstr)
        goto out;
    for (long c = 0; c < ncols; c++)
        mark[c] = -1;
    long nnz = 0;
    for (long j = 0; j < nrows; j++) { /* first pass: distinct columns per row */
        long n = 0;
        for (long at = count[j]; at < count[j + 1]; at++)
            if (mark[ccol[at]] != j) {
                mark[ccol[at]] = j;
                n++;
            }
        nnz += n;
    }
    b->nnz = nnz;
    b->colidx = malloc(sizeof(int) * (size_t)(nnz ? nnz : 1));
    b->a = malloc(sizeof(double) * (size_t)(nnz ? nnz : 1));
    if (!b->colidx || !b->a)
        goto out;
    for (long c = 0; c < ncols; c++)
        mark[c] = -1;
    nnz = 0;
    for (long j = 0; j < nrows; j++) {
        long n = 0;
        for (long at = count[j]; at < count[j + 1]; at++) {
            long c = ccol[at];
            if (mark[c] != j) {
                mark[c] = j;
                acc[c] = 0.0;
                cols[n++] = c;
            }
            acc[c] += cval[at];
        }
        qsort(cols, (size_t)n, sizeof(long), npb_cmp_long);
        b->rowstr[j] = nnz;
        for (long e = 0; e < n; e++) {
            b->colidx[nnz] = (int)cols[e];
            b->a[nnz] = acc[cols[e]];
            nnz++;
        }
    }
    b->rowstr[nrows] = nnz;
    rc = 0;
out:
    if (rc)
        npb_block_free(b);
    free(count);
    free(fill);
    free(ccol);
    free(cval);
    free(acc);
    free(mark);
    free(cols);
    npb_vectors_free(&v);
    return rc;
}

static double npb_mops(const npb_class *k, int niter, double seconds)
{
    double z = (double)k->nonzer * (k->nonzer + 1);
    double ops = 2.0 * niter * (double)k->na * (3.0 + z + NPB_CG_STEPS * (5.0 + z) + 3.0);
    return seconds > 0 ? ops / seconds / 1e6 : 0.0;
}

/* The one JSON line both programs print. */
static void npb_report(const char *prog, const npb_class *k, int niter, int procs, int threads,
                       int nprows, int npcols, long nnz, double zeta, double rnorm,
                       double seconds)
{
    double err = fabs(zeta - k->zeta_ref) / k->zeta_ref;
    int ok = err <= NPB_EPSILON;
    printf("{\"program\": \"%s\", \"class\": \"%c\", \"na\": %ld, \"nonzer\": %d, "
           "\"niter\": %d, \"shift\": %.1f, \"procs\": %d, \"threads\": %d, "
           "\"grid\": [%d, %d], \"nnz\": %ld, \"zeta\": %.15e, \"zeta_reference\": %.15e, "
           "\"zeta_rel_error\": %.3e, \"verified\": %s, \"rnorm\": %.6e, \"time_s\": %.6f, "
           "\"mops\": %.3f}\n",
           prog, k->name, k->na, k->nonzer, niter, k->shift, procs, threads, nprows, npcols,
           nnz, zeta, k->zeta_ref, err, ok ? "true" : "false", rnorm, seconds,
           npb_mops(k, niter, seconds));
    fflush(stdout);
}

static int npb_verified(const npb_class *k, double zeta)
{
    return fabs(zeta - k->zeta_ref) / k->zeta_ref <= NPB_EPSILON;
}

#endif
