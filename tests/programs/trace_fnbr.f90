! A traced test program (`use mpi`): ITERS rounds of MPI_NEIGHBOR_ALLTOALL
! of 3 integers per neighbour on a 1-D non-periodic cartesian communicator
! (rank r's neighbours r-1 and r+1, MPI_PROC_NULL at the ends), and of
! MPI_ALLTOALLW on MPI_COMM_WORLD: rank r sends rank i i+1 elements of
! MPI_INTEGER (i even) or MPI_DOUBLE_PRECISION (i odd).  The results are
! checked; the program stops with code 1 on a wrong value.  Each round
! also: rank 0 sends rank 1 5 integers (tag 7), taken with MPI_MPROBE +
! MPI_MRECV; rank 1 sends rank 0 6 doubles (tag 8), taken with MPI_IMPROBE
! (until found) + MPI_IMRECV + MPI_WAIT.
! tests/test_trace_nbr.py checks the trace against these figures.
program trace_fnbr
  use mpi
  implicit none
  integer, parameter :: iters = 2
  integer :: ierr, r, n, line, it, i, j, k, bad, anybad, off
  integer :: dims(1), sin(6), sout(6)
  logical :: periods(1)
  integer, allocatable :: scnt(:), sdsp(:), stypes(:), rcnt(:), rdsp(:), rtypes(:)
  character, allocatable :: sbuf(:), rbuf(:)
  integer :: iv, msg, req, five(5), st(MPI_STATUS_SIZE)
  double precision :: dv, six(6)
  logical :: found

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, r, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  dims(1) = n
  periods(1) = .false.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., line, ierr)
  allocate(scnt(n), sdsp(n), stypes(n), rcnt(n), rdsp(n), rtypes(n))
  bad = 0
  do it = 0, iters - 1
    do j = 0, 1
      do k = 1, 3
        sin(3 * j + k) = r * 100 + j * 10 + k + it
        sout(3 * j + k) = -1
      end do
    end do
    call MPI_Neighbor_alltoall(sin, 3, MPI_INTEGER, sout, 3, MPI_INTEGER, line, ierr)
    do k = 1, 3
      if (r > 0) then
        if (sout(k) /= (r - 1) * 100 + 10 + k + it) bad = 1
      end if
      if (r < n - 1) then
        if (sout(3 + k) /= (r + 1) * 100 + k + it) bad = 1
      end if
    end do

    off = 0
    do i = 0, n - 1
      scnt(i + 1) = i + 1
      sdsp(i + 1) = off
      if (mod(i, 2) == 1) then
        stypes(i + 1) = MPI_DOUBLE_PRECISION
        off = off + (i + 1) * 8
      else
        stypes(i + 1) = MPI_INTEGER
        off = off + (i + 1) * 4
      end if
    end do
    allocate(sbuf(off))
    do i = 0, n - 1
      do k = 0, i
        if (mod(i, 2) == 1) then
          dv = r * 10 + k + it
          sbuf(sdsp(i + 1) + 8 * k + 1:sdsp(i + 1) + 8 * k + 8) = transfer(dv, sbuf(1:8))
        else
          iv = r * 10 + k + it
          sbuf(sdsp(i + 1) + 4 * k + 1:sdsp(i + 1) + 4 * k + 4) = transfer(iv, sbuf(1:4))
        end if
      end do
    end do
    off = 0
    do i = 0, n - 1
      rcnt(i + 1) = r + 1
      rdsp(i + 1) = off
      if (mod(r, 2) == 1) then
        rtypes(i + 1) = MPI_DOUBLE_PRECISION
        off = off + (r + 1) * 8
      else
        rtypes(i + 1) = MPI_INTEGER
        off = off + (r + 1) * 4
      end if
    end do
    allocate(rbuf(off))
    call MPI_Alltoallw(sbuf, scnt, sdsp, stypes, rbuf, rcnt, rdsp, rtypes, MPI_COMM_WORLD, ierr)
    do j = 0, n - 1
      do k = 0, r
        if (mod(r, 2) == 1) then
          dv = transfer(rbuf(rdsp(j + 1) + 8 * k + 1:rdsp(j + 1) + 8 * k + 8), dv)
          if (dv /= j * 10 + k + it) bad = 1
        else
          iv = transfer(rbuf(rdsp(j + 1) + 4 * k + 1:rdsp(j + 1) + 4 * k + 4), iv)
          if (iv /= j * 10 + k + it) bad = 1
        end if
      end do
    end do
    deallocate(sbuf, rbuf)

    if (r == 0) then
      five = (/ 1, 2, 3, 4, 5 + it /)
      call MPI_Send(five, 5, MPI_INTEGER, 1, 7, MPI_COMM_WORLD, ierr)
      found = .false.
      do while (.not. found)
        call MPI_Improbe(1, 8, MPI_COMM_WORLD, found, msg, st, ierr)
      end do
      call MPI_Imrecv(six, 6, MPI_DOUBLE_PRECISION, msg, req, ierr)
      call MPI_Wait(req, st, ierr)
      if (six(6) /= 6.5d0 + it .or. st(MPI_SOURCE) /= 1) bad = 1
    else if (r == 1) then
      call MPI_Mprobe(0, 7, MPI_COMM_WORLD, msg, st, ierr)
      call MPI_Mrecv(five, 5, MPI_INTEGER, msg, MPI_STATUS_IGNORE, ierr)
      if (five(5) /= 5 + it) bad = 1
      six = (/ 1d0, 2d0, 3d0, 4d0, 5d0, 6.5d0 + it /)
      call MPI_Send(six, 6, MPI_DOUBLE_PRECISION, 0, 8, MPI_COMM_WORLD, ierr)
    end if
  end do
  call MPI_Comm_free(line, ierr)
  call MPI_Allreduce(bad, anybad, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
  if (anybad /= 0) stop 1
end program trace_fnbr
