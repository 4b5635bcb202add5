! Fortran (`use mpi`) point-to-point under libtiers-mbc-mpi
! (tests/test_mbc_mpi.py): every rank sends to rank 0, which receives with
! MPI_ANY_SOURCE and MPI_ANY_TAG and checks status and count; after a
! barrier, a ring
! of non-blocking calls completed with MPI_Waitall.  Prints "fortran ok"
! on rank 0 when every check held.
program mbcmpi_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, i, src, cnt, seen, bad, next, prev
  integer :: status(MPI_STATUS_SIZE), stats(MPI_STATUS_SIZE, 2), reqs(2)
  double precision :: buf(8), ring_out(4), ring_in(4)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  bad = 0
  if (rank == 0) then
    seen = 0
    do i = 1, nprocs - 1
      buf = -1.0d0
      call MPI_Recv(buf, 8, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, MPI_ANY_TAG, &
                    MPI_COMM_WORLD, status, ierr)
      src = status(MPI_SOURCE)
      call MPI_Get_count(status, MPI_DOUBLE_PRECISION, cnt, ierr)
      if (cnt /= src + 1) bad = bad + 1
      if (status(MPI_TAG) /= 100 + src) bad = bad + 1
      if (buf(1) /= dble(src) * 10.0d0) bad = bad + 1
      seen = seen + src
    end do
    if (seen /= nprocs * (nprocs - 1) / 2) bad = bad + 1
  else
    buf = dble(rank) * 10.0d0
    call MPI_Send(buf, rank + 1, MPI_DOUBLE_PRECISION, 0, 100 + rank, MPI_COMM_WORLD, ierr)
  end if
  ! the ring starts after rank 0 took every wildcard message
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  next = mod(rank + 1, nprocs)
  prev = mod(rank + nprocs - 1, nprocs)
  ring_out = dble(rank) + 0.25d0
  ring_in = -1.0d0
  call MPI_Irecv(ring_in, 4, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(ring_out, 4, MPI_DOUBLE_PRECISION, next, 7, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, stats, ierr)
  if (ring_in(4) /= dble(prev) + 0.25d0) bad = bad + 1
  if (stats(MPI_SOURCE, 1) /= prev) bad = bad + 1
  if (reqs(1) /= MPI_REQUEST_NULL .or. reqs(2) /= MPI_REQUEST_NULL) bad = bad + 1
  call MPI_Allreduce(MPI_IN_PLACE, bad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (bad == 0) then
      print '(a)', 'fortran ok'
    else
      print '(a,i0)', 'fortran failed checks: ', bad
    end if
  end if
  call MPI_Finalize(ierr)
end program mbcmpi_f
