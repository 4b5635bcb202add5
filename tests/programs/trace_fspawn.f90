! A traced Fortran (`use mpi`) test program for MPI_Comm_spawn: the parent
! (1 rank) spawns one copy of itself, sends it 41, gets back 42, prints
! 'parent got 42' and ends with a barrier on the world; the child adds 1.
! tests/test_trace_fortran_idup.py checks the one-line refusal.
program trace_fspawn
  use mpi
  implicit none
  integer :: ierr, parent, child, x, errs(1)
  character(len=512) :: self
  call MPI_Init(ierr)
  call MPI_Comm_get_parent(parent, ierr)
  if (parent == MPI_COMM_NULL) then
    call get_command_argument(0, self)
    call MPI_Comm_spawn(trim(self), MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &
                        child, errs, ierr)
    x = 41
    call MPI_Send(x, 1, MPI_INTEGER, 0, 0, child, ierr)
    call MPI_Recv(x, 1, MPI_INTEGER, 0, 0, child, MPI_STATUS_IGNORE, ierr)
    print '(a,i0)', 'parent got ', x
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  else
    call MPI_Recv(x, 1, MPI_INTEGER, 0, 0, parent, MPI_STATUS_IGNORE, ierr)
    x = x + 1
    call MPI_Send(x, 1, MPI_INTEGER, 0, 0, parent, ierr)
  end if
  call MPI_Finalize(ierr)
end program trace_fspawn
