/* ref_cg_omp.c: NPB CG in the structure of NPB's OpenMP reference version.
 *
 * One process; the threads share every loop over the rows with a static
 * schedule (a thread gets one contiguous block of rows, the same in every
 * loop), and the dot products are OpenMP reductions.  One parallel region
 * covers a whole conj_grad call, so the 25 steps pay only the barriers at
 * the ends of the work-shared loops.  The matrix is made on one thread
 * (NPB's generator, ref_npb_cg.h) and copied into its final arrays by the
 * threads that will read it (first touch), which is where the setup ends.
 *
 *   OMP_NUM_THREADS=T ref_cg_omp [--class S|W|A|B] [--niter N]
 *
 * prints one JSON line (zeta, verification, time, Mop/s; ref_npb_cg.h) and
 * exits 0 when zeta verifies, 3 when it does not, 2 on bad usage.  Written
 * from NPB's published method as an anchor for bench/cg_classes/run; it
 * shares nothing with tiers' CG.
 */
#include "ref_npb_cg.h"

#include <omp.h>

static const char *PROG = "ref_cg_omp";

typedef struct {
    long n;
    const long *rowstr;
    const int *colidx;
    const double *a;
} matrix;

/* 25 CG steps on A z = x from z = 0; returns ||x - A z||. */
static double conj_grad(const matrix *m, const double *x, double *z, double *p, double *q,
                        double *r)
{
    const long n = m->n;
    const long *rowstr = m->rowstr;
    const int *colidx = m->colidx;
    const double *a = m->a;
    double rho = 0.0, rho0 = 0.0, d = 0.0, resid = 0.0;

#pragma omp parallel default(none) shared(n, rowstr, colidx, a, x, z, p, q, r, rho, rho0, d, resid)
    {
#pragma omp for schedule(static)
        for (long j = 0; j < n; j++) {
            q[j] = 0.0;
            z[j] = 0.0;
            r[j] = x[j];
            p[j] = x[j];
        }
#pragma omp for schedule(static) reduction(+ : rho)
        for (long j = 0; j < n; j++)
            rho += r[j] * r[j];

        for (int step = 0; step < NPB_CG_STEPS; step++) {
#pragma omp single
            {
                rho0 = rho;
                rho = 0.0;
                d = 0.0;
            }
            /* q = A p */
#pragma omp for schedule(static)
            for (long j = 0; j < n; j++) {
                double sum = 0.0;
                for (long k = rowstr[j]; k < rowstr[j + 1]; k++)
                    sum += a[k] * p[colidx[k]];
                q[j] = sum;
            }
#pragma omp for schedule(static) reduction(+ : d)
            for (long j = 0; j < n; j++)
                d += p[j] * q[j];
            const double alpha = rho0 / d;
#pragma omp for schedule(static) reduction(+ : rho)
            for (long j = 0; j < n; j++) {
                z[j] += alpha * p[j];
                r[j] -= alpha * q[j];
                rho += r[j] * r[j];
            }
            const double beta = rho / rho0;
#pragma omp for schedule(static)
            for (long j = 0; j < n; j++)
                p[j] = r[j] + beta * p[j];
        }
        /* the residual ||x - A z||, computed explicitly as NPB does */
#pragma omp for schedule(static)
        for (long j = 0; j < n; j++) {
            double sum = 0.0;
            for (long k = rowstr[j]; k < rowstr[j + 1]; k++)
                sum += a[k] * z[colidx[k]];
            r[j] = sum;
        }
#pragma omp for schedule(static) reduction(+ : resid)
        for (long j = 0; j < n; j++) {
            double e = x[j] - r[j];
            resid += e * e;
        }
    }
    return sqrt(resid);
}

/* One outer iteration after conj_grad: x.z and z.z, then x = z/||z||. */
static double normalise(long n, double *x, const double *z)
{
    double xz = 0.0, zz = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : xz, zz)
    for (long j = 0; j < n; j++) {
        xz += x[j] * z[j];
        zz += z[j] * z[j];
    }
    const double scale = 1.0 / sqrt(zz);
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++)
        x[j] = scale * z[j];
    return xz;
}

static void set_ones(long n, double *x)
{
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++)
        x[j] = 1.0;
}

int main(int argc, char **argv)
{
    npb_options opt;
    int prc = npb_parse(argc, argv, PROG, 1, &opt);
    if (prc)
        return prc == 1 ? 0 : prc;
    const npb_class *k = opt.klass;
    const long n = k->na;

    npb_block gen;
    if (npb_makea(k, 0, n, 0, n, &gen)) {
        fprintf(stderr, "%s: error: out of memory making the class %c matrix\n", PROG, k->name);
        return 1;
    }
    long *rowstr = malloc(sizeof(long) * (size_t)(n + 1));
    int *colidx = malloc(sizeof(int) * (size_t)gen.nnz);
    double *a = malloc(sizeof(double) * (size_t)gen.nnz);
    double *vec = malloc(sizeof(double) * (size_t)n * 5);
    if (!rowstr || !colidx || !a || !vec) {
        fprintf(stderr, "%s: error: out of memory for the class %c arrays\n", PROG, k->name);
        return 1;
    }
    memcpy(rowstr, gen.rowstr, sizeof(long) * (size_t)(n + 1));
    double *x = vec, *z = vec + n, *p = vec + 2 * n, *q = vec + 3 * n, *r = vec + 4 * n;
    /* first touch: each thread writes the rows (and their vector entries) it will use */
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) {
        for (long e = rowstr[j]; e < rowstr[j + 1]; e++) {
            colidx[e] = gen.colidx[e];
            a[e] = gen.a[e];
        }
        x[j] = z[j] = p[j] = q[j] = r[j] = 0.0;
    }
    const long nnz = gen.nnz;
    npb_block_free(&gen);
    matrix m = {n, rowstr, colidx, a};

    /* one untimed iteration, as NPB does, then start again from x = 1 */
    set_ones(n, x);
    (void)conj_grad(&m, x, z, p, q, r);
    (void)normalise(n, x, z);
    set_ones(n, x);

    double zeta = 0.0, rnorm = 0.0;
    double t0 = omp_get_wtime();
    for (int it = 0; it < opt.niter; it++) {
        rnorm = conj_grad(&m, x, z, p, q, r);
        double xz = normalise(n, x, z);
        zeta = k->shift + 1.0 / xz;
    }
    double seconds = omp_get_wtime() - t0;

    npb_report(PROG, k, opt.niter, 1, omp_get_max_threads(), 1, 1, nnz, zeta, rnorm, seconds);
    free(rowstr);
    free(colidx);
    free(a);
    free(vec);
    return npb_verified(k, zeta) ? 0 : 3;
}
