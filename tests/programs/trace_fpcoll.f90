! A traced Fortran (`use mpi` with Open MPI's `use mpi_ext`) test program
! for persistent collectives: MPIX_Bcast_init of 10 integers from rank 0,
! MPIX_Allreduce_init of 4 integers, MPIX_Barrier_init; ITERS rounds of
! MPI_Startall of the first two + MPI_Waitall, then MPI_Start + MPI_Wait of
! the barrier; results checked (exit status 1 if wrong).
! tests/test_trace_pcoll.py checks the trace.
program trace_fpcoll
  use mpi
  use mpi_ext
  implicit none
  integer, parameter :: iters = 3
  integer :: ierr, rank, n, it, i, req(2), bar, bc(10), a(4), s(4)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  call MPIX_Bcast_init(bc, 10, MPI_INTEGER, 0, MPI_COMM_WORLD, MPI_INFO_NULL, req(1), ierr)
  call MPIX_Allreduce_init(a, s, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &
                           req(2), ierr)
  call MPIX_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, bar, ierr)
  do it = 1, iters
    bc = -1
    if (rank == 0) bc = [(100 * it + i, i = 1, 10)]
    a = rank + it
    call MPI_Startall(2, req, ierr)
    call MPI_Waitall(2, req, MPI_STATUSES_IGNORE, ierr)
    if (any(bc /= [(100 * it + i, i = 1, 10)])) call exit(1)
    if (any(s /= n * (n - 1) / 2 + n * it)) call exit(1)
    call MPI_Start(bar, ierr)
    call MPI_Wait(bar, MPI_STATUS_IGNORE, ierr)
  end do
  call MPI_Request_free(req(1), ierr)
  call MPI_Request_free(req(2), ierr)
  call MPI_Request_free(bar, ierr)
  call MPI_Finalize(ierr)
end program trace_fpcoll
