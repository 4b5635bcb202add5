! A traced Fortran (`use mpi`) test program for two of the added families:
! 3 x MPI_Iallreduce of 4 integers, each waited for; then a ring of
! persistent requests (Send_init to rank+1, Recv_init from rank-1, 4
! integers = 16 bytes), 5 x MPI_Startall + MPI_Waitall, MPI_Request_free;
! then a window of 8 integers and, in one fence epoch, MPI_Put of 4
! integers (16 bytes) to rank+1.
program trace_families_f
  use mpi
  implicit none
  integer :: ierr, rank, n, k, req, reqs(2)
  integer :: a(4), b(4), sbuf(4), rbuf(4), win, wbuf(8)
  integer(kind=MPI_ADDRESS_KIND) :: wsize, disp
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  a = rank
  do k = 1, 3
    call MPI_Iallreduce(a, b, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, req, ierr)
    call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
  end do
  sbuf = rank
  call MPI_Send_init(sbuf, 4, MPI_INTEGER, mod(rank + 1, n), 3, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Recv_init(rbuf, 4, MPI_INTEGER, mod(rank + n - 1, n), 3, MPI_COMM_WORLD, reqs(2), ierr)
  do k = 1, 5
    call MPI_Startall(2, reqs, ierr)
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  end do
  call MPI_Request_free(reqs(1), ierr)
  call MPI_Request_free(reqs(2), ierr)
  wbuf = -1
  wsize = 32
  disp = 0
  call MPI_Win_create(wbuf, wsize, 4, MPI_INFO_NULL, MPI_COMM_WORLD, win, ierr)
  call MPI_Win_fence(0, win, ierr)
  call MPI_Put(sbuf, 4, MPI_INTEGER, mod(rank + 1, n), disp, 4, MPI_INTEGER, win, ierr)
  call MPI_Win_fence(0, win, ierr)
  call MPI_Win_free(win, ierr)
  if (b(1) /= n * (n - 1) / 2 .or. rbuf(1) /= mod(rank + n - 1, n)) then
    print *, 'wrong result', b(1), rbuf(1)
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  call MPI_Finalize(ierr)
end program trace_families_f
