! A 1 MiB MPI_Send facing the receiver's MPI_Win_fence, from Fortran
! (`use mpi`): ranks pair up (2k receives from 2k+1), three rounds; the
! receiver checks every byte after the fence.  Prints "checks N failed F"
! on rank 0 (sums over ranks).  See mbcmpi_progress.c.
program mbcmpi_progress_f
  use mpi
  implicit none
  integer, parameter :: n = 1048576, rounds = 3
  integer :: ierr, rank, size, peer, win, req, r, i
  integer :: mine(2), all(2)
  integer(kind=MPI_ADDRESS_KIND) :: wsize
  double precision :: x
  integer(kind=1), allocatable :: buf(:)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  allocate(buf(n))
  if (mod(rank, 2) == 0) then
    peer = rank + 1
  else
    peer = rank - 1
  end if
  if (peer >= size) peer = MPI_PROC_NULL
  wsize = 8
  call MPI_Win_create(x, wsize, 8, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  mine = 0
  do r = 1, rounds
    if (peer /= MPI_PROC_NULL .and. mod(rank, 2) == 0) then
      buf = 0
      call MPI_Irecv(buf, n, MPI_BYTE, peer, r, MPI_COMM_WORLD, req, ierr)
      call MPI_Win_fence(0, win, ierr)
      call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
      mine(1) = mine(1) + 1
      do i = 1, n
        if (buf(i) /= pattern(i, r, peer)) then
          mine(2) = mine(2) + 1
          exit
        end if
      end do
    else if (peer /= MPI_PROC_NULL) then
      do i = 1, n
        buf(i) = pattern(i, r, rank)
      end do
      call MPI_Send(buf, n, MPI_BYTE, peer, r, MPI_COMM_WORLD, ierr)
      call MPI_Win_fence(0, win, ierr)
    else
      call MPI_Win_fence(0, win, ierr)
    end if
  end do
  call MPI_Win_free(win, ierr)
  call MPI_Reduce(mine, all, 2, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a,i0,a,i0)', 'checks ', all(1), ' failed ', all(2)
  call MPI_Finalize(ierr)

contains

  integer(kind=1) function pattern(i, r, src)
    integer, intent(in) :: i, r, src
    pattern = int(mod(i * 7 + r * 13 + src * 31, 256) - 128, kind=1)
  end function pattern

end program mbcmpi_progress_f
