/*
 * A long send facing a blocking MPI call that libtiers-mbc-mpi passes to
 * MPI.  Ranks pair up (2k receives from 2k+1; an odd last rank only takes
 * part in the calls).  Each round the sender sends BYTES with MPI_Send
 * and then enters the call; the receiver posts MPI_Irecv, enters the same
 * call, and only after it calls MPI_Wait.  The program is valid MPI (the
 * MPI library's progress inside the call completes the send); a library
 * that makes no progress of its own transport during the call hangs it.
 *
 *   mbcmpi_progress MODE BYTES ORDER [FOLDER]
 *   MODE:  fence (MPI_Win_fence), pscw (MPI_Win_post/start/complete/wait,
 *          both directions), io (MPI_File_open, MPI_File_write_at_all,
 *          MPI_File_close into FOLDER; rank 0 checks the file), dup
 *          (MPI_Comm_dup and MPI_Comm_free)
 *   ORDER: posted (the receive is posted before the message leaves) or
 *          sent (the message leaves before the receive is posted)
 * Prints "checks N failed F" on rank 0 (sums over ranks), exits 1 on a
 * failed check.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tiers_check.h"

#define ROUNDS 3
#define BLOCK 4096

static unsigned char pattern(size_t i, int round, int src)
{
  return (unsigned char)(i * 7 + (size_t)round * 13 + (size_t)src * 31 + 1);
}

static void pause_ms(int ms)
{
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 4 || (!strcmp(argv[1], "io") && argc < 5)) {
    if (rank == 0)
      fprintf(stderr, "usage: mbcmpi_progress fence|pscw|io|dup BYTES posted|sent [FOLDER]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *mode = argv[1];
  size_t bytes = strtoul(argv[2], NULL, 10);
  int sent_first = !strcmp(argv[3], "sent");
  int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  if (peer >= size)
    peer = MPI_PROC_NULL;
  int receiver = rank % 2 == 0;
  unsigned char *buf = malloc(bytes ? bytes : 1);

  double winval[2] = {0, 0};
  MPI_Win win = MPI_WIN_NULL;
  MPI_Group pair = MPI_GROUP_NULL;
  if (!strcmp(mode, "fence") || !strcmp(mode, "pscw")) {
    MPI_Win_create(winval, sizeof winval, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    if (peer != MPI_PROC_NULL)
      MPI_Group_incl(world, 1, &peer, &pair);
    MPI_Group_free(&world);
    if (!strcmp(mode, "fence"))
      MPI_Win_fence(0, win);
  }
  char path[4096] = "";
  if (!strcmp(mode, "io"))
    snprintf(path, sizeof path, "%s/progress.dat", argv[4]);

  for (int round = 0; round < ROUNDS; round++) {
    MPI_Request req = MPI_REQUEST_NULL;
    if (peer != MPI_PROC_NULL && receiver) {
      memset(buf, 0, bytes);
      if (sent_first)
        pause_ms(50); /* the message is there before the receive */
      MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, round, MPI_COMM_WORLD, &req);
    } else if (peer != MPI_PROC_NULL) {
      for (size_t i = 0; i < bytes; i++)
        buf[i] = pattern(i, round, rank);
      if (!sent_first)
        pause_ms(50); /* the receive is posted before the message leaves */
      MPI_Send(buf, (int)bytes, MPI_BYTE, peer, round, MPI_COMM_WORLD);
    }

    if (!strcmp(mode, "fence")) {
      if (peer != MPI_PROC_NULL && !receiver)
        MPI_Put(&(double){round + 1.0}, 1, MPI_DOUBLE, peer, 0, 1, MPI_DOUBLE, win);
      MPI_Win_fence(0, win);
      if (peer != MPI_PROC_NULL && receiver) {
        tiers_tally(winval[0] == round + 1.0);
      }
      /* the read above lies in an epoch of its own: after the first fence
       * the sender may already put the next round's value (MPI leaves a
       * target's load of a location that a put of the same epoch updates
       * undefined), and does when a transport that progresses on its own
       * lets it finish the next send while the receiver waits for a CPU */
      MPI_Win_fence(0, win);
    } else if (!strcmp(mode, "pscw") && peer != MPI_PROC_NULL) {
      /* even rounds: the receiver is the target (MPI_Win_wait waits for
       * the sender's MPI_Win_complete); odd rounds: its origin
       * (MPI_Win_start/complete wait for the sender's MPI_Win_post) */
      int target = (round % 2 == 0) == receiver;
      if (target) {
        MPI_Win_post(pair, 0, win);
        MPI_Win_wait(win);
        tiers_tally(winval[1] == round + 1.0);
      } else {
        MPI_Win_start(pair, 0, win);
        MPI_Put(&(double){round + 1.0}, 1, MPI_DOUBLE, peer, 1, 1, MPI_DOUBLE, win);
        MPI_Win_complete(win);
      }
    } else if (!strcmp(mode, "io")) {
      unsigned char block[BLOCK];
      for (size_t i = 0; i < BLOCK; i++)
        block[i] = pattern(i, round, rank);
      MPI_File fh;
      MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
      MPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK, block, BLOCK, MPI_BYTE,
                            MPI_STATUS_IGNORE);
      MPI_File_close(&fh);
      if (rank == 0) {
        FILE *f = fopen(path, "rb");
        for (int r = 0; r < size; r++) {
          size_t got = f ? fread(block, 1, BLOCK, f) : 0;
          size_t bad = got != BLOCK;
          for (size_t i = 0; i < got; i++)
            bad += block[i] != pattern(i, round, r);
          tiers_tally(bad == 0);
        }
        if (f)
          fclose(f);
      }
    } else if (!strcmp(mode, "dup")) {
      MPI_Comm dup;
      MPI_Comm_dup(MPI_COMM_WORLD, &dup);
      int dsize;
      MPI_Comm_size(dup, &dsize);
      tiers_tally(dsize == size);
      MPI_Comm_free(&dup);
    }

    if (req != MPI_REQUEST_NULL) {
      MPI_Status st;
      MPI_Wait(&req, &st);
      int count = -1;
      MPI_Get_count(&st, MPI_BYTE, &count);
      size_t bad = (size_t)count != bytes || st.MPI_SOURCE != peer || st.MPI_TAG != round;
      for (size_t i = 0; i < bytes; i++)
        bad += buf[i] != pattern(i, round, peer);
      tiers_tally(bad == 0);
    }
  }

  if (win != MPI_WIN_NULL)
    MPI_Win_free(&win);
  if (pair != MPI_GROUP_NULL)
    MPI_Group_free(&pair);
  long failed = tiers_check_summary();
  free(buf);
  MPI_Finalize();
  return failed ? 1 : 0;
}
