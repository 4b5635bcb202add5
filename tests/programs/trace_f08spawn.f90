! A traced Fortran 2008 (`use mpi_f08`) test program for MPI_Comm_spawn, as
! trace_fspawn.f90: the parent (1 rank) spawns one copy of itself (without
! ierror), sends it 41, gets back 42, prints 'parent got 42' and ends with a
! barrier on the world; the child adds 1.
! tests/test_trace_fortran_idup.py checks the one-line refusal.
program trace_f08spawn
  use mpi_f08
  implicit none
  integer :: x, errs(1)
  type(MPI_Comm) :: parent, child
  character(len=512) :: self
  call MPI_Init()
  call MPI_Comm_get_parent(parent)
  if (parent == MPI_COMM_NULL) then
    call get_command_argument(0, self)
    call MPI_Comm_spawn(trim(self), MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &
                        child, errs)
    x = 41
    call MPI_Send(x, 1, MPI_INTEGER, 0, 0, child)
    call MPI_Recv(x, 1, MPI_INTEGER, 0, 0, child, MPI_STATUS_IGNORE)
    print '(a,i0)', 'parent got ', x
    call MPI_Barrier(MPI_COMM_WORLD)
  else
    call MPI_Recv(x, 1, MPI_INTEGER, 0, 0, parent, MPI_STATUS_IGNORE)
    x = x + 1
    call MPI_Send(x, 1, MPI_INTEGER, 0, 0, parent)
  end if
  call MPI_Finalize()
end program trace_f08spawn
