! A traced Fortran (`use mpi`) test program for the calls with string
! arguments: MPI_Comm_dup of the world, named with MPI_Comm_set_name
! ('tiers-fortran-dup', with trailing blanks in a longer variable), one
! MPI_Allreduce of 2 integers on it; then MPI_File_open of the file given
! as the first argument (collective, every rank), MPI_File_set_view with
! datarep 'native', MPI_File_write_at of 4 integers at rank*16,
! MPI_File_close.  tests/test_trace_fstrings.py checks the trace.
program trace_fstrings
  use mpi
  implicit none
  integer :: ierr, rank, dup, fh, a(2), b(2), w(4)
  character(len=64) :: cname
  character(len=512) :: path
  integer(kind=MPI_OFFSET_KIND) :: disp, offset
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call get_command_argument(1, path)
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  cname = 'tiers-fortran-dup'
  call MPI_Comm_set_name(dup, cname, ierr)
  a = rank
  call MPI_Allreduce(a, b, 2, MPI_INTEGER, MPI_SUM, dup, ierr)
  call MPI_File_open(MPI_COMM_WORLD, trim(path), MPI_MODE_CREATE + MPI_MODE_WRONLY, &
                     MPI_INFO_NULL, fh, ierr)
  if (ierr /= MPI_SUCCESS) call MPI_Abort(MPI_COMM_WORLD, 4, ierr)
  disp = 0
  call MPI_File_set_view(fh, disp, MPI_INTEGER, MPI_INTEGER, 'native', MPI_INFO_NULL, ierr)
  w = rank
  offset = rank * 4
  call MPI_File_write_at(fh, offset, w, 4, MPI_INTEGER, MPI_STATUS_IGNORE, ierr)
  call MPI_File_close(fh, ierr)
  call MPI_Comm_free(dup, ierr)
  call MPI_Finalize(ierr)
end program trace_fstrings
