! A traced Fortran test program (`use mpi`, Open MPI's mpif90): what it
! sends is known exactly (tests/test_trace.py computes the same numbers).
! Runs on any even number of ranks >= 2.
!   1. blocking pairs (2k, 2k+1): 4 exchanges of 512 doubles each way
!   2. non-blocking ring: 2 x (Irecv from left, Isend 100 integers to right,
!      Waitall with MPI_STATUSES_IGNORE), then once 50 integers with a
!      statuses array
!   3. Irecv 7 doubles from the pair partner, Send 7 to it, Wait with a status
!   4. wildcard receives: rank 0 takes 5*r integers with tag r from each r > 0
!   5. collectives on MPI_COMM_WORLD: Barrier, then Sendrecv (6 integers to
!      the right, from the left, MPI_STATUS_IGNORE), Bcast (50 doubles), Allreduce
!      in place (10 integers), Gather (the root in place), Reduce (3 doubles)
!   6. sub-communicators: split by rank parity, Allreduce (5 doubles) and
!      one Send (3 doubles) inside, Comm_free
program trace_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, peer, left, right, k, n, color
  integer :: req(2), st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 2)
  integer :: sub, srank, ssize
  double precision :: big(512), small(7), d(50), s3(3), r3(3), s5(5), r5(5)
  integer :: iout(100), iin(100), wild(1000), v(10), six(6), sixin(6)
  integer, allocatable :: g(:)

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
  peer = ieor(rank, 1)
  left = mod(rank + nprocs - 1, nprocs)
  right = mod(rank + 1, nprocs)

  big = 1.0d0
  do k = 1, 4
    if (mod(rank, 2) == 0) then
      call MPI_SEND(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, ierr)
      call MPI_RECV(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, &
                    MPI_STATUS_IGNORE, ierr)
    else
      call MPI_RECV(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, &
                    MPI_STATUS_IGNORE, ierr)
      call MPI_SEND(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, ierr)
    end if
  end do

  iout = rank
  do k = 1, 2
    call MPI_IRECV(iin, 100, MPI_INTEGER, left, 2, MPI_COMM_WORLD, req(1), ierr)
    call MPI_ISEND(iout, 100, MPI_INTEGER, right, 2, MPI_COMM_WORLD, req(2), ierr)
    call MPI_WAITALL(2, req, MPI_STATUSES_IGNORE, ierr)
  end do
  call MPI_IRECV(iin, 50, MPI_INTEGER, left, 3, MPI_COMM_WORLD, req(1), ierr)
  call MPI_ISEND(iout, 50, MPI_INTEGER, right, 3, MPI_COMM_WORLD, req(2), ierr)
  call MPI_WAITALL(2, req, sts, ierr)
  if (sts(MPI_SOURCE, 1) /= left .or. sts(MPI_TAG, 1) /= 3) then
    print *, 'trace_f: wrong status from MPI_WAITALL'
    call MPI_ABORT(MPI_COMM_WORLD, 3, ierr)
  end if

  small = 2.0d0
  call MPI_IRECV(small, 7, MPI_DOUBLE_PRECISION, peer, 4, MPI_COMM_WORLD, req(1), ierr)
  call MPI_SEND(small, 7, MPI_DOUBLE_PRECISION, peer, 4, MPI_COMM_WORLD, ierr)
  call MPI_WAIT(req(1), st, ierr)
  if (st(MPI_SOURCE) /= peer) then
    print *, 'trace_f: wrong status from MPI_WAIT'
    call MPI_ABORT(MPI_COMM_WORLD, 3, ierr)
  end if

  wild = 0
  if (rank == 0) then
    do k = 1, nprocs - 1
      call MPI_RECV(wild, 1000, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &
                    st, ierr)
      call MPI_GET_COUNT(st, MPI_INTEGER, n, ierr)
      if (n /= 5 * st(MPI_SOURCE) .or. st(MPI_TAG) /= st(MPI_SOURCE)) then
        print *, 'trace_f: wrong wildcard message'
        call MPI_ABORT(MPI_COMM_WORLD, 3, ierr)
      end if
    end do
  else
    call MPI_SEND(wild, 5 * rank, MPI_INTEGER, 0, rank, MPI_COMM_WORLD, ierr)
  end if

  d = 0.0d0
  v = 1
  s3 = 1.0d0
  allocate(g(nprocs))
  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  ! after the barrier, so that rank 0's wildcard receives cannot take it
  six = rank
  call MPI_SENDRECV(six, 6, MPI_INTEGER, right, 6, sixin, 6, MPI_INTEGER, left, 6, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  call MPI_BCAST(d, 50, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
  call MPI_ALLREDUCE(MPI_IN_PLACE, v, 10, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (v(1) /= nprocs) then
    print *, 'trace_f: wrong MPI_ALLREDUCE result'
    call MPI_ABORT(MPI_COMM_WORLD, 3, ierr)
  end if
  if (rank == 0) then
    g(1) = 0
    call MPI_GATHER(MPI_IN_PLACE, 0, MPI_INTEGER, g, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  else
    call MPI_GATHER(rank, 1, MPI_INTEGER, g, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  end if
  call MPI_REDUCE(s3, r3, 3, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD, ierr)

  color = mod(rank, 2)
  call MPI_COMM_SPLIT(MPI_COMM_WORLD, color, rank, sub, ierr)
  call MPI_COMM_RANK(sub, srank, ierr)
  call MPI_COMM_SIZE(sub, ssize, ierr)
  s5 = 1.0d0
  call MPI_ALLREDUCE(s5, r5, 5, MPI_DOUBLE_PRECISION, MPI_SUM, sub, ierr)
  if (ssize >= 2) then
    if (srank == 0) then
      call MPI_SEND(s5, 3, MPI_DOUBLE_PRECISION, 1, 5, sub, ierr)
    else if (srank == 1) then
      call MPI_RECV(r5, 3, MPI_DOUBLE_PRECISION, 0, 5, sub, MPI_STATUS_IGNORE, ierr)
    end if
  end if
  call MPI_COMM_FREE(sub, ierr)

  call MPI_FINALIZE(ierr)
end program trace_f
