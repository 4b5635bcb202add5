! Fortran 2008 (`use mpi_f08`) point-to-point under libtiers-mbc-mpi
! (tests/test_mbc_mpi.py): every rank sends to rank 0, which receives with
! MPI_ANY_SOURCE and MPI_ANY_TAG and checks status and count; after a
! barrier, a ring of non-blocking calls completed with MPI_Waitall.
! Prints "f08 ok" on rank 0 when every check held.
program mbcmpi_f08
  use mpi_f08
  implicit none
  integer :: rank, nprocs, i, src, cnt, seen, bad, next, prev
  type(MPI_Status) :: status, stats(2)
  type(MPI_Request) :: reqs(2)
  integer :: buf(6), ring_out(3), ring_in(3)

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  bad = 0
  if (rank == 0) then
    seen = 0
    do i = 1, nprocs - 1
      buf = -1
      call MPI_Recv(buf, 6, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, status)
      src = status%MPI_SOURCE
      call MPI_Get_count(status, MPI_INTEGER, cnt)
      if (cnt /= src + 1) bad = bad + 1
      if (status%MPI_TAG /= 200 + src) bad = bad + 1
      if (buf(1) /= src * 3) bad = bad + 1
      seen = seen + src
    end do
    if (seen /= nprocs * (nprocs - 1) / 2) bad = bad + 1
  else
    buf = rank * 3
    call MPI_Send(buf, rank + 1, MPI_INTEGER, 0, 200 + rank, MPI_COMM_WORLD)
  end if
  call MPI_Barrier(MPI_COMM_WORLD)
  next = mod(rank + 1, nprocs)
  prev = mod(rank + nprocs - 1, nprocs)
  ring_out = rank + 1000
  ring_in = -1
  call MPI_Irecv(ring_in, 3, MPI_INTEGER, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, reqs(1))
  call MPI_Isend(ring_out, 3, MPI_INTEGER, next, 9, MPI_COMM_WORLD, reqs(2))
  call MPI_Waitall(2, reqs, stats)
  if (ring_in(3) /= prev + 1000) bad = bad + 1
  if (stats(1)%MPI_SOURCE /= prev) bad = bad + 1
  if (reqs(1) /= MPI_REQUEST_NULL .or. reqs(2) /= MPI_REQUEST_NULL) bad = bad + 1
  call MPI_Allreduce(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) then
    if (bad == 0) then
      print '(a)', 'f08 ok'
    else
      print '(a,i0)', 'f08 failed checks: ', bad
    end if
  end if
  call MPI_Finalize()
end program mbcmpi_f08
