! A traced Fortran (`use mpi`) test program: MPI_Comm_idup of the world and
! of a sub-communicator (the ranks of one parity, from MPI_Comm_split), the
! first completed by MPI_Wait, the second by MPI_Waitall; the world's
! duplicate named 'tiers-fidup' with MPI_Comm_set_name; then one
! MPI_Allreduce of 3 integers on each new communicator, whose sums are
! checked (exit status 1 if wrong).  tests/test_trace_fortran_idup.py checks
! the archive's communicators.
program trace_fidup
  use mpi
  implicit none
  integer :: ierr, rank, n, half, dupw, duph, req(1)
  integer :: v(3), w(3), k
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half, ierr)
  call MPI_Comm_idup(MPI_COMM_WORLD, dupw, req(1), ierr)
  call MPI_Wait(req(1), MPI_STATUS_IGNORE, ierr)
  call MPI_Comm_idup(half, duph, req(1), ierr)
  call MPI_Waitall(1, req, MPI_STATUSES_IGNORE, ierr)
  call MPI_Comm_set_name(dupw, 'tiers-fidup', ierr)
  v = [1, 2, 3]
  call MPI_Allreduce(v, w, 3, MPI_INTEGER, MPI_SUM, dupw, ierr)
  if (any(w /= v * n)) call exit(1)
  call MPI_Allreduce(v, w, 3, MPI_INTEGER, MPI_SUM, duph, ierr)
  k = n / 2
  if (mod(rank, 2) == 0) k = (n + 1) / 2
  if (any(w /= v * k)) call exit(1)
  call MPI_Comm_free(duph, ierr)
  call MPI_Comm_free(dupw, ierr)
  call MPI_Comm_free(half, ierr)
  call MPI_Finalize(ierr)
end program trace_fidup
