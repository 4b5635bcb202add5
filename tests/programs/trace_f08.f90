! A traced Fortran 2008 test program (`use mpi_f08`): the same messages as
! trace_f.f90, so tests/test_trace.py's fortran_expected() holds for both;
! some calls pass ierror and some leave it out (it is OPTIONAL in mpi_f08).
! Runs on any even number of ranks >= 2.
program trace_f08
  use mpi_f08
  implicit none
  integer :: ierr, rank, nprocs, peer, left, right, k, n, color
  type(MPI_Request) :: req(2)
  type(MPI_Status) :: st, sts(2)
  type(MPI_Comm) :: sub
  integer :: srank, ssize
  double precision :: big(512), small(7), d(50), s3(3), r3(3), s5(5), r5(5)
  integer :: iout(100), iin(100), wild(1000), v(10), six(6), sixin(6)
  integer, allocatable :: g(:)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  peer = ieor(rank, 1)
  left = mod(rank + nprocs - 1, nprocs)
  right = mod(rank + 1, nprocs)

  big = 1.0d0
  do k = 1, 4
    if (mod(rank, 2) == 0) then
      call MPI_Send(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, ierr)
      call MPI_Recv(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    else
      call MPI_Recv(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, &
                    ierr)
      call MPI_Send(big, 512, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD)
    end if
  end do

  iout = rank
  do k = 1, 2
    call MPI_Irecv(iin, 100, MPI_INTEGER, left, 2, MPI_COMM_WORLD, req(1))
    call MPI_Isend(iout, 100, MPI_INTEGER, right, 2, MPI_COMM_WORLD, req(2))
    call MPI_Waitall(2, req, MPI_STATUSES_IGNORE)
  end do
  call MPI_Irecv(iin, 50, MPI_INTEGER, left, 3, MPI_COMM_WORLD, req(1), ierr)
  call MPI_Isend(iout, 50, MPI_INTEGER, right, 3, MPI_COMM_WORLD, req(2), ierr)
  call MPI_Waitall(2, req, sts, ierr)
  if (sts(1)%MPI_SOURCE /= left .or. sts(1)%MPI_TAG /= 3) then
    print *, 'trace_f08: wrong status from MPI_Waitall'
    call MPI_Abort(MPI_COMM_WORLD, 3)
  end if

  small = 2.0d0
  call MPI_Irecv(small, 7, MPI_DOUBLE_PRECISION, peer, 4, MPI_COMM_WORLD, req(1))
  call MPI_Send(small, 7, MPI_DOUBLE_PRECISION, peer, 4, MPI_COMM_WORLD)
  call MPI_Wait(req(1), st)
  if (st%MPI_SOURCE /= peer) then
    print *, 'trace_f08: wrong status from MPI_Wait'
    call MPI_Abort(MPI_COMM_WORLD, 3)
  end if

  wild = 0
  if (rank == 0) then
    do k = 1, nprocs - 1
      call MPI_Recv(wild, 1000, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, st)
      call MPI_Get_count(st, MPI_INTEGER, n)
      if (n /= 5 * st%MPI_SOURCE .or. st%MPI_TAG /= st%MPI_SOURCE) then
        print *, 'trace_f08: wrong wildcard message'
        call MPI_Abort(MPI_COMM_WORLD, 3)
      end if
    end do
  else
    call MPI_Send(wild, 5 * rank, MPI_INTEGER, 0, rank, MPI_COMM_WORLD)
  end if

  d = 0.0d0
  v = 1
  s3 = 1.0d0
  allocate(g(nprocs))
  call MPI_Barrier(MPI_COMM_WORLD)
  six = rank
  call MPI_Sendrecv(six, 6, MPI_INTEGER, right, 6, sixin, 6, MPI_INTEGER, left, 6, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  call MPI_Bcast(d, 50, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(MPI_IN_PLACE, v, 10, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (v(1) /= nprocs) then
    print *, 'trace_f08: wrong MPI_Allreduce result'
    call MPI_Abort(MPI_COMM_WORLD, 3)
  end if
  if (rank == 0) then
    g(1) = 0
    call MPI_Gather(MPI_IN_PLACE, 0, MPI_INTEGER, g, 1, MPI_INTEGER, 0, MPI_COMM_WORLD)
  else
    call MPI_Gather(rank, 1, MPI_INTEGER, g, 1, MPI_INTEGER, 0, MPI_COMM_WORLD)
  end if
  call MPI_Reduce(s3, r3, 3, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD)

  color = mod(rank, 2)
  call MPI_Comm_split(MPI_COMM_WORLD, color, rank, sub)
  call MPI_Comm_rank(sub, srank)
  call MPI_Comm_size(sub, ssize)
  s5 = 1.0d0
  call MPI_Allreduce(s5, r5, 5, MPI_DOUBLE_PRECISION, MPI_SUM, sub)
  if (ssize >= 2) then
    if (srank == 0) then
      call MPI_Send(s5, 3, MPI_DOUBLE_PRECISION, 1, 5, sub)
    else if (srank == 1) then
      call MPI_Recv(r5, 3, MPI_DOUBLE_PRECISION, 0, 5, sub, MPI_STATUS_IGNORE)
    end if
  end if
  call MPI_Comm_free(sub)

  call MPI_Finalize()
end program trace_f08
