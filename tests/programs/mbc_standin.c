/*
 * A stand-in for libtiers-mbc-mpi.so that tests/test_mbc_run.py builds to
 * check the plumbing of `tiers mbc run` (preload, composition with the
 * tracer, statistics files) independently of the real library.  It carries
 * nothing: it counts what passes, in the real library's statistics format,
 * and hands every call to the MPI library.  Like the real library it
 * defines both the MPI_ and the PMPI_ names, so that a tracer preloaded in
 * front of it still lets it see the program's calls.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const long long limits[] = {0, 64, 1024, 16384, 262144, 4194304, -1};
#define NB 7
static long long msgs[NB], bytes[NB];
static long long wildcard, n_send, n_recv, n_isend, n_irecv, n_wait, n_barrier;

static void *real(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "mbc stand-in: %s not found\n", name);
    abort();
  }
  return f;
}

static void count(int n, MPI_Datatype t) {
  int sz = 0;
  int (*tsize)(MPI_Datatype, int *) = real("PMPI_Type_size");
  tsize(t, &sz);
  long long b = (long long)n * sz;
  int i = 0;
  while (i < NB - 1 && b > limits[i]) i++;
  msgs[i]++;
  bytes[i] += b;
}

#define BOTH(ret, name, params) \
  ret MPI_##name params __attribute__((alias("standin_" #name))); \
  ret PMPI_##name params __attribute__((alias("standin_" #name)));

int standin_Send(const void *buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
  int (*f)(const void *, int, MPI_Datatype, int, int, MPI_Comm) = real("PMPI_Send");
  n_send++;
  count(n, t);
  return f(buf, n, t, dest, tag, c);
}
BOTH(int, Send, (const void *, int, MPI_Datatype, int, int, MPI_Comm))

int standin_Isend(const void *buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c,
                  MPI_Request *r) {
  int (*f)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *) =
      real("PMPI_Isend");
  n_isend++;
  count(n, t);
  return f(buf, n, t, dest, tag, c, r);
}
BOTH(int, Isend, (const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *))

int standin_Recv(void *buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c,
                 MPI_Status *s) {
  int (*f)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *) = real("PMPI_Recv");
  n_recv++;
  if (src == MPI_ANY_SOURCE || tag == MPI_ANY_TAG) wildcard++;
  return f(buf, n, t, src, tag, c, s);
}
BOTH(int, Recv, (void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *))

int standin_Irecv(void *buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c,
                  MPI_Request *r) {
  int (*f)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *) = real("PMPI_Irecv");
  n_irecv++;
  if (src == MPI_ANY_SOURCE || tag == MPI_ANY_TAG) wildcard++;
  return f(buf, n, t, src, tag, c, r);
}
BOTH(int, Irecv, (void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *))

int standin_Wait(MPI_Request *r, MPI_Status *s) {
  int (*f)(MPI_Request *, MPI_Status *) = real("PMPI_Wait");
  n_wait++;
  return f(r, s);
}
BOTH(int, Wait, (MPI_Request *, MPI_Status *))

int standin_Barrier(MPI_Comm c) {
  int (*f)(MPI_Comm) = real("PMPI_Barrier");
  n_barrier++;
  return f(c);
}
BOTH(int, Barrier, (MPI_Comm))

int standin_Finalize(void) {
  int (*f)(void) = real("PMPI_Finalize");
  int (*crank)(MPI_Comm, int *) = real("PMPI_Comm_rank");
  int (*csize)(MPI_Comm, int *) = real("PMPI_Comm_size");
  const char *prefix = getenv("TIERS_MBC_MPI_STATS");
  if (prefix && *prefix) {
    int rank = 0, size = 1;
    crank(MPI_COMM_WORLD, &rank);
    csize(MPI_COMM_WORLD, &size);
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.json", prefix, rank);
    FILE *fp = fopen(path, "w");
    if (fp) {
      fprintf(fp, "{\"rank\":%d,\"size\":%d,\"buckets\":[", rank, size);
      for (int i = 0; i < NB; i++) {
        if (limits[i] < 0)
          fprintf(fp, "%s{\"max_bytes\":null", i ? "," : "");
        else
          fprintf(fp, "%s{\"max_bytes\":%lld", i ? "," : "", limits[i]);
        fprintf(fp, ",\"messages\":%lld,\"bytes\":%lld,\"remote_write\":0,\"fifo\":%lld}",
                msgs[i], bytes[i], msgs[i]);
      }
      fprintf(fp,
              "],\"unexpected\":0,\"wildcard_receives\":%lld,"
              "\"passed_to_mpi\":{\"MPI_Barrier\":%lld},"
              "\"carried\":{\"MPI_Send\":%lld,\"MPI_Recv\":%lld,\"MPI_Isend\":%lld,"
              "\"MPI_Irecv\":%lld,\"MPI_Wait\":%lld}}\n",
              wildcard, n_barrier, n_send, n_recv, n_isend, n_irecv, n_wait);
      fclose(fp);
    }
  }
  return f();
}
BOTH(int, Finalize, (void))
