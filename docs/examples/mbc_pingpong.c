/*
 * mbc_pingpong.c: a ping-pong over tiers memory-based messaging.
 *
 * Ranks 0 and 1 send a message back and forth ROUNDS times for each size;
 * rank 1 adds 1 to every byte before sending it back, so rank 0 can check
 * that each round trip carried the right data.  Any other ranks only take
 * part in the create/destroy collectives.
 *
 * Build and run against an installed tiers (docs/c-api.md):
 *   export PKG_CONFIG_PATH=$(tiers config --pkgconfig-path)
 *   cc mbc_pingpong.c $(pkg-config --cflags --libs tiers-mbc) -o mbc_pingpong
 *   mpirun -n 2 ./mbc_pingpong
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <tiers/mbc.h>

#define ROUNDS 100

/* On a tiers error: say what failed and stop every rank (a program may
 * exit; the library never does). */
#define CHECK(call)                                                        \
  do {                                                                     \
    int rc_ = (call);                                                      \
    if (rc_ != TIERS_OK) {                                                 \
      fprintf(stderr, "mbc_pingpong: %s: %s (%s)\n", #call,                \
              tiers_strerror(rc_), tiers_last_error());                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                        \
    }                                                                      \
  } while (0)

int main(int argc, char **argv) {
  static const size_t sizes[] = {0, 1, 8, 1024, 65536, 1 << 20};
  const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
  MPI_Init(&argc, &argv);

  tiers_mbc_options_t opts;
  tiers_mbc_t mbc = NULL;
  CHECK(tiers_mbc_options_init(&opts));
  CHECK(tiers_mbc_create(MPI_COMM_WORLD, &opts, &mbc));
  int rank, size;
  CHECK(tiers_mbc_rank(mbc, &rank, &size));
  if (size < 2) {
    if (rank == 0)
      fprintf(stderr, "mbc_pingpong: needs at least 2 ranks\n");
    tiers_mbc_destroy(&mbc);
    MPI_Finalize();
    return 2;
  }

  unsigned char *buf = malloc(sizes[nsizes - 1]);
  long bad = 0;
  for (int s = 0; s < nsizes && rank < 2; s++) {
    const size_t n = sizes[s];
    for (int r = 0; r < ROUNDS; r++) {
      tiers_mbc_status_t st;
      if (rank == 0) {
        for (size_t i = 0; i < n; i++)
          buf[i] = (unsigned char)(i + r);
        CHECK(tiers_mbc_send(mbc, buf, n, 1, s));
        CHECK(tiers_mbc_recv(mbc, buf, n, 1, s, &st));
        for (size_t i = 0; i < n; i++)
          bad += buf[i] != (unsigned char)(i + r + 1);
        bad += st.bytes != n || st.source != 1 || st.tag != s;
      } else {
        CHECK(tiers_mbc_recv(mbc, buf, n, 0, s, &st));
        for (size_t i = 0; i < n; i++)
          buf[i]++;
        CHECK(tiers_mbc_send(mbc, buf, n, 0, s));
      }
    }
    if (rank == 0)
      printf("size %zu: %d round trips, %s\n", n, ROUNDS, bad ? "WRONG DATA" : "data ok");
  }

  const char *transport = "?";
  CHECK(tiers_mbc_transport_name(mbc, &transport));
  if (rank == 0)
    printf("ranks %d, transport %s, errors %ld\n", size, transport, bad);
  free(buf);
  CHECK(tiers_mbc_destroy(&mbc));
  MPI_Finalize();
  return bad ? 1 : 0;
}
