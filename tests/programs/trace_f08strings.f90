! A traced Fortran 2008 (`use mpi_f08`) test program for the calls with
! string arguments and MPI_Comm_idup: MPI_Comm_dup of the world, named
! 'tiers-f08-dup' by MPI_Comm_set_name without ierror (trailing blanks in a
! longer variable) and read back with MPI_Comm_get_name; MPI_Comm_idup of
! the world (MPI_Wait), named 'tiers-f08-idup' with ierror; one
! MPI_Allreduce of 2 integers on each; MPI_File_open of the file given as
! the first argument, MPI_File_set_view (datarep 'native'),
! MPI_File_write_at of 4 integers at rank*16, MPI_File_close.  Exit status
! 1 on a wrong name or sum.  tests/test_trace_fortran_idup.py checks the trace.
program trace_f08strings
  use mpi_f08
  implicit none
  integer :: ierr, rank, n, a(2), b(2), w(4), rlen
  type(MPI_Comm) :: dup, dupi
  type(MPI_Request) :: req
  type(MPI_File) :: fh
  character(len=64) :: cname
  character(len=MPI_MAX_OBJECT_NAME) :: got
  character(len=512) :: path
  integer(kind=MPI_OFFSET_KIND) :: disp, offset
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, n)
  call get_command_argument(1, path)
  call MPI_Comm_dup(MPI_COMM_WORLD, dup)
  cname = 'tiers-f08-dup'
  call MPI_Comm_set_name(dup, cname)
  call MPI_Comm_get_name(dup, got, rlen, ierr)
  if (got(1:rlen) /= 'tiers-f08-dup') call exit(1)
  call MPI_Comm_idup(MPI_COMM_WORLD, dupi, req)
  call MPI_Wait(req, MPI_STATUS_IGNORE)
  call MPI_Comm_set_name(dupi, 'tiers-f08-idup', ierr)
  a = rank
  call MPI_Allreduce(a, b, 2, MPI_INTEGER, MPI_SUM, dup)
  if (any(b /= n * (n - 1) / 2)) call exit(1)
  call MPI_Allreduce(a, b, 2, MPI_INTEGER, MPI_SUM, dupi, ierr)
  if (any(b /= n * (n - 1) / 2)) call exit(1)
  call MPI_File_open(MPI_COMM_WORLD, trim(path), MPI_MODE_CREATE + MPI_MODE_WRONLY, &
                     MPI_INFO_NULL, fh, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 4)
  disp = 0
  call MPI_File_set_view(fh, disp, MPI_INTEGER, MPI_INTEGER, 'native', MPI_INFO_NULL)
  w = rank
  offset = rank * 4
  call MPI_File_write_at(fh, offset, w, 4, MPI_INTEGER, MPI_STATUS_IGNORE)
  call MPI_File_close(fh)
  call MPI_Comm_free(dupi)
  call MPI_Comm_free(dup)
  call MPI_Finalize()
end program trace_f08strings
