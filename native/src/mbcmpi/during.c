/*
 * libtiers-mbc-mpi: progress on the transport while this process is
 * inside a blocking MPI call that this library passes to MPI.
 *
 * A peer blocked in a long memory-based send to this process waits until
 * this process makes transport progress (it reads or drains the message,
 * or copies its half of a split copy).  If this process is meanwhile
 * inside a blocking MPI call that waits for that peer (MPI_Win_fence,
 * MPI_File_write_all, ...), neither moves on.  Collectives passed to MPI
 * are handed over as their non-blocking forms and polled with progress
 * (coll.c).  The calls of DURING_FUNCTIONS have no non-blocking form, or
 * one that not every MPI library has (MPI-IO's non-blocking collectives),
 * so they run while a helper thread of this library makes the progress:
 *
 *  - mbcmpi_during_begin wakes the helper (started at the first such call,
 *    with every signal blocked, so that the program's signals still reach
 *    its own threads); mbcmpi_during_end stops it before it returns.  The
 *    helper runs its progress rounds holding `mu`, and mbcmpi_during_end
 *    takes `mu` before it returns: exactly one thread is inside
 *    libtiers-mbc at a time, and every write of the helper is visible to
 *    the program's thread afterwards.
 *  - The helper calls no MPI function: it makes progress only on the
 *    peers reached through shared memory (mbc_progress_node), never on
 *    those of the RMA transport, and never calls the idle hook (whose
 *    MPI_Iprobe would be a call from a second thread in a program that
 *    runs MPI_THREAD_SINGLE to SERIALIZED).  Only this process's MPI call
 *    runs meanwhile, with the re-entry guard raised, so that the MPI
 *    library's own calls to MPI_ names (ROMIO's, say) pass straight
 *    through without touching the transport.
 *  - Between calls the helper sleeps on a condition variable; woken, it
 *    naps 20 us before its first round (a short call is over by then);
 *    while on, it spins for a few empty rounds, then naps (10 us, doubling
 *    up to 1 ms) until something happens.  MPI_Finalize stops it and joins it.
 *  - A transport failure seen by the helper is reported by the program's
 *    thread after the call, as every other failure of this library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "mbc_internal.h"
#include "mbcmpi.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_t helper;
static int started, on, quit, failed;
static char fail_msg[512];
static unsigned depth; /* nesting of the program thread's begin/end */

#define FIRST_NAP_NS 20000L

static void nap(long ns)
{
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

static void *helper_main(void *arg)
{
  (void)arg;
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* this thread's naps: 1 us slack */
  unsigned empty = 0;
  long ns = 10000;
  pthread_mutex_lock(&mu);
  for (;;) {
    if (!on && !quit) {
      while (!on && !quit)
        pthread_cond_wait(&wake, &mu);
      empty = 0;
      ns = 10000;
      if (!quit) {
        /* a call that returns within FIRST_NAP_NS (most fences and window
         * calls that nobody waits in) never shares its CPU with a round */
        pthread_mutex_unlock(&mu);
        nap(FIRST_NAP_NS);
        pthread_mutex_lock(&mu);
        continue;
      }
    }
    if (quit)
      break;
    int events = 0;
    for (struct mbcmpi_ctx *c = mbcmpi.ctxs; c && !failed; c = c->next)
      if (mbc_progress_node(c->mbc, &events) != TIERS_OK) {
        failed = 1;
        snprintf(fail_msg, sizeof fail_msg, "%s", tiers_last_error());
      }
    pthread_mutex_unlock(&mu);
    if (events) {
      empty = 0;
      ns = 10000;
    } else if (++empty > 16) {
      nap(ns);
      if (ns < 1000000)
        ns *= 2;
    } else {
      sched_yield();
    }
    pthread_mutex_lock(&mu);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

/* Starts the helper once; 0 when it cannot run (then the call runs
 * without it, as before this helper existed). */
static int start_helper(void)
{
  static int cannot;
  if (started)
    return 1;
  if (cannot)
    return 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&helper, NULL, helper_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    cannot = 1;
    fprintf(stderr, "tiers mbc: cannot start the progress thread (%s): a blocking MPI call "
                    "passed to MPI makes no transport progress\n",
            strerror(rc));
    return 0;
  }
  started = 1;
  return 1;
}

void mbcmpi_during_begin(void)
{
  ENTER();
  if (depth++ || !mbcmpi.ctxs || !start_helper())
    return;
  pthread_mutex_lock(&mu);
  on = 1;
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&mu);
}

void mbcmpi_during_end(const char *fn)
{
  if (--depth == 0 && started) {
    pthread_mutex_lock(&mu);
    on = 0;
    int bad = failed;
    pthread_mutex_unlock(&mu);
    if (bad) {
      tiers_error_set(TIERS_ERR_STATE, __FILE__, __LINE__, "%s", fail_msg);
      LEAVE();
      mbcmpi_fatal(fn, "memory-based messaging failed");
      return;
    }
  }
  LEAVE();
}

void mbcmpi_during_stop(void)
{
  if (!started)
    return;
  pthread_mutex_lock(&mu);
  quit = 1;
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&mu);
  pthread_join(helper, NULL);
  started = 0;
  quit = 0;
}

/* The wrapped calls: name, parameters, arguments. */
#define DURING_FUNCTIONS(X)                                                                   \
  X(Win_create, (void *base, MPI_Aint size, int unit, MPI_Info info, MPI_Comm comm,          \
                 MPI_Win *win), (base, size, unit, info, comm, win))                         \
  X(Win_allocate, (MPI_Aint size, int unit, MPI_Info info, MPI_Comm comm, void *baseptr,     \
                   MPI_Win *win), (size, unit, info, comm, baseptr, win))                    \
  X(Win_allocate_shared, (MPI_Aint size, int unit, MPI_Info info, MPI_Comm comm,             \
                          void *baseptr, MPI_Win *win), (size, unit, info, comm, baseptr, win)) \
  X(Win_create_dynamic, (MPI_Info info, MPI_Comm comm, MPI_Win *win), (info, comm, win))     \
  X(Win_free, (MPI_Win *win), (win))                                                         \
  X(Win_fence, (int assert, MPI_Win win), (assert, win))                                     \
  X(Win_start, (MPI_Group group, int assert, MPI_Win win), (group, assert, win))             \
  X(Win_complete, (MPI_Win win), (win))                                                      \
  X(Win_post, (MPI_Group group, int assert, MPI_Win win), (group, assert, win))              \
  X(Win_wait, (MPI_Win win), (win))                                                          \
  X(Win_lock, (int type, int rank, int assert, MPI_Win win), (type, rank, assert, win))      \
  X(Win_unlock, (int rank, MPI_Win win), (rank, win))                                        \
  X(Win_lock_all, (int assert, MPI_Win win), (assert, win))                                  \
  X(Win_unlock_all, (MPI_Win win), (win))                                                    \
  X(File_open, (MPI_Comm comm, const char *name, int amode, MPI_Info info, MPI_File *fh),    \
    (comm, name, amode, info, fh))                                                           \
  X(File_close, (MPI_File *fh), (fh))                                                        \
  X(File_sync, (MPI_File fh), (fh))                                                          \
  X(File_set_view, (MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype ftype,    \
                    const char *rep, MPI_Info info), (fh, disp, etype, ftype, rep, info))    \
  X(File_set_size, (MPI_File fh, MPI_Offset size), (fh, size))                               \
  X(File_preallocate, (MPI_File fh, MPI_Offset size), (fh, size))                            \
  X(File_set_atomicity, (MPI_File fh, int flag), (fh, flag))                                 \
  X(File_seek_shared, (MPI_File fh, MPI_Offset off, int whence), (fh, off, whence))          \
  X(File_read_all, (MPI_File fh, void *buf, int n, MPI_Datatype t, MPI_Status *s),           \
    (fh, buf, n, t, s))                                                                      \
  X(File_write_all, (MPI_File fh, const void *buf, int n, MPI_Datatype t, MPI_Status *s),    \
    (fh, buf, n, t, s))                                                                      \
  X(File_read_at_all, (MPI_File fh, MPI_Offset off, void *buf, int n, MPI_Datatype t,        \
                       MPI_Status *s), (fh, off, buf, n, t, s))                              \
  X(File_write_at_all, (MPI_File fh, MPI_Offset off, const void *buf, int n, MPI_Datatype t, \
                        MPI_Status *s), (fh, off, buf, n, t, s))                             \
  X(File_read_ordered, (MPI_File fh, void *buf, int n, MPI_Datatype t, MPI_Status *s),       \
    (fh, buf, n, t, s))                                                                      \
  X(File_write_ordered, (MPI_File fh, const void *buf, int n, MPI_Datatype t,                \
                         MPI_Status *s), (fh, buf, n, t, s))                                 \
  X(File_read_all_begin, (MPI_File fh, void *buf, int n, MPI_Datatype t), (fh, buf, n, t))   \
  X(File_write_all_begin, (MPI_File fh, const void *buf, int n, MPI_Datatype t),             \
    (fh, buf, n, t))                                                                         \
  X(File_read_at_all_begin, (MPI_File fh, MPI_Offset off, void *buf, int n, MPI_Datatype t), \
    (fh, off, buf, n, t))                                                                    \
  X(File_write_at_all_begin, (MPI_File fh, MPI_Offset off, const void *buf, int n,           \
                              MPI_Datatype t), (fh, off, buf, n, t))                         \
  X(File_read_ordered_begin, (MPI_File fh, void *buf, int n, MPI_Datatype t), (fh, buf, n, t)) \
  X(File_write_ordered_begin, (MPI_File fh, const void *buf, int n, MPI_Datatype t),         \
    (fh, buf, n, t))                                                                         \
  X(File_read_all_end, (MPI_File fh, void *buf, MPI_Status *s), (fh, buf, s))                \
  X(File_write_all_end, (MPI_File fh, const void *buf, MPI_Status *s), (fh, buf, s))         \
  X(File_read_at_all_end, (MPI_File fh, void *buf, MPI_Status *s), (fh, buf, s))             \
  X(File_write_at_all_end, (MPI_File fh, const void *buf, MPI_Status *s), (fh, buf, s))      \
  X(File_read_ordered_end, (MPI_File fh, void *buf, MPI_Status *s), (fh, buf, s))            \
  X(File_write_ordered_end, (MPI_File fh, const void *buf, MPI_Status *s), (fh, buf, s))     \
  X(Comm_connect, (const char *port, MPI_Info info, int root, MPI_Comm comm,                 \
                   MPI_Comm *newcomm), (port, info, root, comm, newcomm))                    \
  X(Comm_accept, (const char *port, MPI_Info info, int root, MPI_Comm comm,                  \
                  MPI_Comm *newcomm), (port, info, root, comm, newcomm))                     \
  X(Comm_join, (int fd, MPI_Comm *inter), (fd, inter))                                       \
  X(Intercomm_create, (MPI_Comm local, int local_leader, MPI_Comm bridge, int remote_leader, \
                       int tag, MPI_Comm *inter),                                            \
    (local, local_leader, bridge, remote_leader, tag, inter))

/* The MPI library's functions, found at load as mbcmpi.c finds its own. */
#define DURING_REAL(name, params, args) static __typeof__(PMPI_##name) *real_##name;
DURING_FUNCTIONS(DURING_REAL)
#undef DURING_REAL

__attribute__((constructor)) static void during_load(void)
{
#define DURING_RESOLVE(name, params, args) \
  real_##name = (__typeof__(PMPI_##name) *)dlsym(RTLD_NEXT, "PMPI_" #name);
  DURING_FUNCTIONS(DURING_RESOLVE)
#undef DURING_RESOLVE
}

/* Each wrapper: straight to MPI when the library is off or re-entered
 * (libtiers-mbc's own window calls come here under the re-entry guard),
 * else the call with the helper making progress. */
#define DURING_WRAP(name, params, args)                                                 \
  static int w_##name params                                                             \
  {                                                                                      \
    if (!real_##name) {                                                                  \
      fprintf(stderr, "tiers mbc: MPI_" #name ": the MPI library has no PMPI_" #name    \
                      "\n");                                                             \
      return MPI_ERR_INTERN;                                                             \
    }                                                                                    \
    if (!mbcmpi.active || mbcmpi.inside)                                                 \
      return real_##name args;                                                           \
    mbcmpi_during_begin();                                                               \
    int rc = real_##name args;                                                           \
    mbcmpi_during_end("MPI_" #name);                                                     \
    return rc;                                                                           \
  }                                                                                      \
  EXPORT(name)
DURING_FUNCTIONS(DURING_WRAP)
#undef DURING_WRAP
