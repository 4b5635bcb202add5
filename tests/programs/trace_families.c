/* A traced test program using the MPI families beyond point-to-point and
 * blocking collectives, with sizes the test knows (tests/test_trace_families.py).
 * Usage: trace_families FILE   (FILE: a scratch file for MPI-IO)
 *   non-blocking collectives  3 x (Iallreduce of 4 doubles, Ibcast of 10 ints
 *                             from root 0, Ibarrier), each waited for
 *   persistent requests       a ring: Send_init to rank+1 and Recv_init from
 *                             rank-1 of 16 bytes, 5 x Startall + Waitall,
 *                             then Request_free of both
 *   one-sided                 Win_create of 64 ints; in one fence epoch Put of
 *                             4 ints to rank+1, Get of 2 ints from rank+1,
 *                             Accumulate of 1 int to rank 0; Win_free
 *   MPI-IO                    File_open, write_at_all of 100 bytes at
 *                             rank*100, read_at of 50 bytes, File_close
 *   communicators             Comm_split (even/odd, named "tiers-even" and
 *                             "tiers-odd" by Comm_set_name), Comm_dup_with_info,
 *                             Comm_create_group (ranks 0 and 1 of the world),
 *                             Cart_create (1-D) and Cart_sub; all freed */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 2) {
    if (rank == 0)
      fprintf(stderr, "usage: trace_families FILE\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Request r[2];
  double d[4] = { 1, 2, 3, 4 }, dsum[4];
  int ints[10] = { 0 };
  for (int k = 0; k < 3; k++) {
    MPI_Iallreduce(d, dsum, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Ibcast(ints, 10, MPI_INT, 0, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Ibarrier(MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
  }

  char sbuf[16] = "persistent", rbuf[16];
  MPI_Send_init(sbuf, 16, MPI_CHAR, (rank + 1) % n, 7, MPI_COMM_WORLD, &r[0]);
  MPI_Recv_init(rbuf, 16, MPI_CHAR, (rank + n - 1) % n, 7, MPI_COMM_WORLD, &r[1]);
  for (int k = 0; k < 5; k++) {
    MPI_Startall(2, r);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
  }
  MPI_Request_free(&r[0]);
  MPI_Request_free(&r[1]);

  int winbuf[64] = { 0 }, src[4] = { 1, 2, 3, 4 }, got[2], one = 1;
  MPI_Win win;
  MPI_Win_create(winbuf, sizeof winbuf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_fence(0, win);
  MPI_Put(src, 4, MPI_INT, (rank + 1) % n, 0, 4, MPI_INT, win);
  MPI_Get(got, 2, MPI_INT, (rank + 1) % n, 8, 2, MPI_INT, win);
  MPI_Accumulate(&one, 1, MPI_INT, 0, 20, 1, MPI_INT, MPI_SUM, win);
  MPI_Win_fence(0, win);
  MPI_Win_free(&win);

  char block[100];
  memset(block, 'a' + rank % 26, sizeof block);
  MPI_File fh;
  MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
  MPI_File_write_at_all(fh, (MPI_Offset)rank * 100, block, 100, MPI_CHAR, MPI_STATUS_IGNORE);
  MPI_File_read_at(fh, (MPI_Offset)rank * 100, block, 50, MPI_CHAR, MPI_STATUS_IGNORE);
  MPI_File_close(&fh);

  MPI_Comm half, dup, pair = MPI_COMM_NULL, cart, sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Comm_set_name(half, rank % 2 ? "tiers-odd" : "tiers-even");
  MPI_Comm_dup_with_info(half, MPI_INFO_NULL, &dup);
  MPI_Group world, two;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int first[2] = { 0, 1 };
  MPI_Group_incl(world, 2, first, &two);
  if (rank < 2)
    MPI_Comm_create_group(MPI_COMM_WORLD, two, 5, &pair);
  int dims[1] = { n }, periods[1] = { 0 }, keep[1] = { 0 };
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
  MPI_Cart_sub(cart, keep, &sub);
  MPI_Comm_free(&sub);
  MPI_Comm_free(&cart);
  if (pair != MPI_COMM_NULL)
    MPI_Comm_free(&pair);
  MPI_Group_free(&two);
  MPI_Group_free(&world);
  MPI_Comm_free(&dup);
  MPI_Comm_free(&half);
  MPI_Finalize();
  return 0;
}
