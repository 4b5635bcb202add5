/*
 * Step 1 and step 4 of the hybrid model (tiers/hybrid.h, part 3): the
 * Cartesian block decomposition and the face halo exchange with
 * non-blocking messages, optionally overlapped with computation
 * (tiers_halo_begin / tiers_halo_end).  Only the master thread calls MPI.
 */
#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "team_internal.h"

/* ---------------------------------------------------------------------- */
/* Decomposition */

int tiers_decomp_create(tiers_team_t team, int ndims, const long *global, int *dims, int exact,
                        tiers_decomp_t *d)
{
  if (!team || !global || !dims || !d)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_decomp_create: NULL argument");
  if (ndims != 2 && ndims != 3)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_decomp_create: ndims must be 2 or 3 (got %d)", ndims);
  static const char axis_name[] = "xyz";
  for (int a = 0; a < ndims; a++) {
    if (global[a] < 1)
      TIERS_ERROR(TIERS_ERR_ARG, "the grid needs at least 1 point along %c (got %ld)",
                  axis_name[a], global[a]);
    if (dims[a] < 0)
      TIERS_ERROR(TIERS_ERR_ARG, "negative process count %d along %c", dims[a], axis_name[a]);
  }
  int fixed = 1, free_axes = 0;
  for (int a = 0; a < ndims; a++) {
    if (dims[a] > 0)
      fixed *= dims[a];
    else
      free_axes++;
  }
  if (free_axes > 0) {
    if (team->size % fixed != 0)
      TIERS_ERROR(TIERS_ERR_ARG, "the given process counts (product %d) do not divide the %d "
                  "processes", fixed, team->size);
    if (MPI_Dims_create(team->size, ndims, dims) != MPI_SUCCESS)
      TIERS_ERROR(TIERS_ERR_MPI, "MPI_Dims_create failed for %d processes", team->size);
  }
  int product = 1;
  for (int a = 0; a < ndims; a++)
    product *= dims[a];
  if (product != team->size)
    TIERS_ERROR(TIERS_ERR_ARG, "a process grid of %d (%d x %d%s%.0d) does not match the %d "
                "processes", product, dims[0], dims[1], ndims == 3 ? " x " : "",
                ndims == 3 ? dims[2] : 0, team->size);
  for (int a = 0; a < ndims; a++) {
    if (dims[a] > global[a])
      TIERS_ERROR(TIERS_ERR_ARG, "%d processes along %c exceed its %ld grid points", dims[a],
                  axis_name[a], global[a]);
    if (exact && global[a] % dims[a] != 0)
      TIERS_ERROR(TIERS_ERR_ARG, "%d processes along %c do not divide its %ld grid points",
                  dims[a], axis_name[a], global[a]);
  }

  memset(d, 0, sizeof *d);
  d->ndims = ndims;
  for (int a = 0; a < TIERS_DECOMP_MAX_DIMS; a++) {
    d->global[a] = a < ndims ? global[a] : 1;
    d->dims[a] = a < ndims ? dims[a] : 1;
  }
  /* Row-major with the last axis fastest, as MPI_Cart_create. */
  int r = team->rank;
  for (int a = TIERS_DECOMP_MAX_DIMS - 1; a >= 0; a--) {
    d->coords[a] = r % d->dims[a];
    r /= d->dims[a];
  }
  int stride = 1;
  for (int a = TIERS_DECOMP_MAX_DIMS - 1; a >= 0; a--) {
    TIERS_CALL(tiers_split_range(d->global[a], d->dims[a], d->coords[a], &d->lo[a], &d->hi[a]));
    d->local[a] = d->hi[a] - d->lo[a];
    d->neighbor[a][0] = d->coords[a] > 0 ? team->rank - stride : MPI_PROC_NULL;
    d->neighbor[a][1] = d->coords[a] < d->dims[a] - 1 ? team->rank + stride : MPI_PROC_NULL;
    stride *= d->dims[a];
  }
  return TIERS_OK;
}

/* ---------------------------------------------------------------------- */
/* Halo exchange */

#define FACES (2 * TIERS_DECOMP_MAX_DIMS)

struct tiers_halo {
  tiers_team_t team;
  tiers_decomp_t d;
  long s0, s1, g2;           /* strides of the ghosted array; g2: k offset (0 in 2-D) */
  size_t face_len[FACES];    /* points per face, face = 2 * axis + side */
  double *send[FACES], *recv[FACES];
  MPI_Request req[2 * FACES];
  int nreq;
  int active;                /* begun and not yet ended */
  const double *field;       /* the field of the exchange in flight */
  int begin_rc;              /* the master's result of begin, read at end */
  int use_msgr;              /* messages through msgr instead of MPI */
  tiers_halo_messenger_t msgr;
  void *mreq[2 * FACES];
};

static inline size_t at(const struct tiers_halo *h, long i, long j, long k)
{
  return (size_t)((i + 1) + h->s0 * ((j + 1) + h->s1 * (k + h->g2)));
}

/* Copies the points of the plane index[axis] == fixed (block coordinates;
 * -1 and local are ghost planes) between the field and buf. */
static void plane_copy(const struct tiers_halo *h, int axis, long fixed, double *field,
                       double *buf, int to_buf)
{
  const long *n = h->d.local;
  long k0 = 0, k1 = n[2], j0 = 0, j1 = n[1], i0 = 0, i1 = n[0];
  if (axis == 0) { i0 = fixed; i1 = fixed + 1; }
  if (axis == 1) { j0 = fixed; j1 = fixed + 1; }
  if (axis == 2) { k0 = fixed; k1 = fixed + 1; }
  size_t m = 0;
  for (long k = k0; k < k1; k++)
    for (long j = j0; j < j1; j++) {
      if (axis == 0) {
        size_t p = at(h, i0, j, k);
        if (to_buf)
          buf[m++] = field[p];
        else
          field[p] = buf[m++];
      } else {
        size_t p = at(h, i0, j, k);
        if (to_buf)
          memcpy(buf + m, field + p, (size_t)(i1 - i0) * sizeof *buf);
        else
          memcpy(field + p, buf + m, (size_t)(i1 - i0) * sizeof *buf);
        m += (size_t)(i1 - i0);
      }
    }
}

int tiers_halo_create(tiers_halo_t *out, tiers_team_t team, const tiers_decomp_t *d)
{
  if (!out || !team || !d || (d->ndims != 2 && d->ndims != 3))
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_halo_create: invalid arguments");
  struct tiers_halo *h = calloc(1, sizeof *h);
  if (!h)
    TIERS_ERROR(TIERS_ERR_NOMEM, "tiers_halo_create: out of memory");
  h->team = team;
  h->d = *d;
  h->s0 = d->local[0] + 2;
  h->s1 = d->local[1] + 2;
  h->g2 = d->ndims == 3 ? 1 : 0;
  for (int a = 0; a < d->ndims; a++) {
    size_t len = 1;
    for (int b = 0; b < d->ndims; b++)
      if (b != a)
        len *= (size_t)d->local[b];
    for (int s = 0; s < 2; s++) {
      int f = 2 * a + s;
      h->face_len[f] = len;
      if (d->neighbor[a][s] == MPI_PROC_NULL)
        continue;
      h->send[f] = malloc(len * sizeof(double));
      h->recv[f] = malloc(len * sizeof(double));
      if (!h->send[f] || !h->recv[f]) {
        tiers_halo_destroy(&h);
        TIERS_ERROR(TIERS_ERR_NOMEM, "tiers_halo_create: out of memory for %zu-point faces",
                    len);
      }
    }
  }
  *out = h;
  return TIERS_OK;
}

int tiers_halo_destroy(tiers_halo_t *halo)
{
  if (!halo || !*halo)
    return TIERS_OK;
  for (int f = 0; f < FACES; f++) {
    free((*halo)->send[f]);
    free((*halo)->recv[f]);
  }
  free(*halo);
  *halo = NULL;
  return TIERS_OK;
}

int tiers_halo_set_messenger(tiers_halo_t h, const tiers_halo_messenger_t *msgr)
{
  if (!h)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_halo_set_messenger: NULL halo");
  if (h->active)
    TIERS_ERROR(TIERS_ERR_STATE, "tiers_halo_set_messenger: an exchange is in flight");
  if (!msgr) {
    h->use_msgr = 0;
    return TIERS_OK;
  }
  if (!msgr->irecv || !msgr->isend || !msgr->waitall)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_halo_set_messenger: the messenger lacks a call");
  h->msgr = *msgr;
  h->use_msgr = 1;
  return TIERS_OK;
}

/* Master, with a messenger: as post() below. */
static int post_msgr(struct tiers_halo *h, double *field)
{
  tiers_halo_messenger_t *m = &h->msgr;
  h->nreq = 0;
  for (int a = 0; a < h->d.ndims; a++)
    for (int s = 0; s < 2; s++) {
      int f = 2 * a + s, peer = h->d.neighbor[a][s];
      if (peer == MPI_PROC_NULL)
        continue;
      TIERS_CALL(m->irecv(m->ctx, h->recv[f], h->face_len[f] * sizeof(double), peer, 2 * a + s,
                          &h->mreq[h->nreq++]));
    }
  for (int a = 0; a < h->d.ndims; a++)
    for (int s = 0; s < 2; s++) {
      int f = 2 * a + s, peer = h->d.neighbor[a][s];
      if (peer == MPI_PROC_NULL)
        continue;
      plane_copy(h, a, s == 0 ? 0 : h->d.local[a] - 1, field, h->send[f], 1);
      TIERS_CALL(m->isend(m->ctx, h->send[f], h->face_len[f] * sizeof(double), peer,
                          2 * a + (1 - s), &h->mreq[h->nreq++]));
    }
  return TIERS_OK;
}

/* Master: pack every face and post the messages.  Tag 2*axis+side names
 * the ghost face the message fills at the receiver. */
static int post(struct tiers_halo *h, double *field)
{
  if (h->use_msgr)
    return post_msgr(h, field);
  MPI_Comm comm = tiers_team_comm(h->team);
  h->nreq = 0;
  for (int a = 0; a < h->d.ndims; a++)
    for (int s = 0; s < 2; s++) {
      int f = 2 * a + s, peer = h->d.neighbor[a][s];
      if (peer == MPI_PROC_NULL)
        continue;
      int len = (int)h->face_len[f];
      /* The message from the lower neighbour fills my lower ghost (tag 2a),
       * the one from the upper neighbour my upper ghost (tag 2a+1). */
      if (MPI_Irecv(h->recv[f], len, MPI_DOUBLE, peer, 2 * a + s, comm,
                    &h->req[h->nreq++]) != MPI_SUCCESS)
        return TIERS_ERR_MPI;
    }
  for (int a = 0; a < h->d.ndims; a++)
    for (int s = 0; s < 2; s++) {
      int f = 2 * a + s, peer = h->d.neighbor[a][s];
      if (peer == MPI_PROC_NULL)
        continue;
      plane_copy(h, a, s == 0 ? 0 : h->d.local[a] - 1, field, h->send[f], 1);
      /* My lower face fills the lower neighbour's upper ghost, and back. */
      if (MPI_Isend(h->send[f], (int)h->face_len[f], MPI_DOUBLE, peer, 2 * a + (1 - s), comm,
                    &h->req[h->nreq++]) != MPI_SUCCESS)
        return TIERS_ERR_MPI;
    }
  return TIERS_OK;
}

/* Master: wait for the messages and unpack the ghosts. */
static int complete(struct tiers_halo *h, double *field)
{
  if (h->use_msgr)
    TIERS_CALL(h->msgr.waitall(h->msgr.ctx, h->nreq, h->mreq));
  else if (MPI_Waitall(h->nreq, h->req, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    return TIERS_ERR_MPI;
  h->nreq = 0;
  for (int a = 0; a < h->d.ndims; a++)
    for (int s = 0; s < 2; s++) {
      int f = 2 * a + s;
      if (h->d.neighbor[a][s] != MPI_PROC_NULL)
        plane_copy(h, a, s == 0 ? -1 : h->d.local[a], field, h->recv[f], 0);
    }
  return TIERS_OK;
}

int tiers_halo_begin(tiers_halo_t h, double *field)
{
  if (!h || !field)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_halo_begin: NULL argument");
  int in_region;
  TIERS_CALL(tiers_team_in_region(h->team, &in_region));
  int master = omp_get_thread_num() == 0;
  tiers_phase_t previous = TIERS_PHASE_COUNT;
  if (in_region) {
    previous = tiers_team_phase(h->team, TIERS_PHASE_SYNC);
    tiers_team_sync(h->team); /* every thread's writes to field are done */
  }
  if (master) {
    if (h->active) {
      h->begin_rc = TIERS_ERR_STATE;
    } else {
      tiers_phase_t p = tiers_team_phase(h->team, TIERS_PHASE_COMM);
      if (previous == TIERS_PHASE_COUNT)
        previous = p;
      h->begin_rc = post(h, field);
      h->active = 1;
      h->field = field;
    }
  }
  tiers_team_phase_restore(h->team, previous);
  return TIERS_OK; /* failures are reported by tiers_halo_end, in every thread */
}

int tiers_halo_end(tiers_halo_t h, double *field)
{
  if (!h || !field)
    TIERS_ERROR(TIERS_ERR_ARG, "tiers_halo_end: NULL argument");
  int in_region;
  TIERS_CALL(tiers_team_in_region(h->team, &in_region));
  int master = omp_get_thread_num() == 0;
  tiers_phase_t previous = tiers_team_phase(h->team, TIERS_PHASE_COMM);
  if (master) {
    int rc = h->active ? h->begin_rc : TIERS_ERR_STATE;
    if (h->active && rc == TIERS_OK && field != h->field)
      rc = TIERS_ERR_ARG;
    if (h->active && rc != TIERS_ERR_ARG) {
      int done = complete(h, field);
      if (rc == TIERS_OK)
        rc = done;
      h->active = 0;
    }
    h->team->shared_rc = rc;
  }
  int rc;
  if (in_region) {
    tiers_team_phase(h->team, TIERS_PHASE_SYNC);
    tiers_team_sync(h->team); /* the ghosts are visible to every thread */
  }
  rc = h->team->shared_rc;
  tiers_team_phase_restore(h->team, previous);
  if (rc == TIERS_ERR_STATE)
    TIERS_ERROR(rc, "tiers_halo_end without a matching tiers_halo_begin");
  if (rc == TIERS_ERR_ARG)
    TIERS_ERROR(rc, "tiers_halo_end on another field than tiers_halo_begin's");
  if (rc != TIERS_OK)
    TIERS_ERROR(rc, "the halo exchange failed in MPI");
  return TIERS_OK;
}

int tiers_halo_exchange(tiers_halo_t h, double *field)
{
  TIERS_CALL(tiers_halo_begin(h, field));
  return tiers_halo_end(h, field);
}
