"""Point-to-point with mpi4py, for tests/test_mbc_programs.py: pickled
objects and numpy buffers in a ring, sendrecv, MPI_ANY_SOURCE and
MPI_ANY_TAG receives with their status, probe before a receive of an
unknown size.  Rank 0 prints what every rank saw, in rank order."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
lines = []

# objects around the ring (even ranks send first)
obj = {"from": rank, "items": list(range(rank + 3))}
if rank % 2 == 0:
    comm.send(obj, dest=right, tag=11)
    got = comm.recv(source=left, tag=11)
else:
    got = comm.recv(source=left, tag=11)
    comm.send(obj, dest=right, tag=11)
lines.append(f"object from {got['from']}: {got['items']}")

# buffers of several sizes with Sendrecv
for n in (0, 1, 100, 5000, 70000):
    out = np.arange(n, dtype=np.float64) * (rank + 1)
    inb = np.empty(n, dtype=np.float64)
    comm.Sendrecv(out, dest=right, sendtag=n % 1000, recvbuf=inb, source=left,
                  recvtag=n % 1000)
    lines.append(f"sendrecv {n}: sum {inb.sum():.6g}")

# wildcards: every rank sends two tagged messages to rank 0
if rank == 0:
    seen = []
    st = MPI.Status()
    for _ in range(2 * (size - 1)):
        data = np.empty(4, dtype=np.int64)
        comm.Recv(data, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        assert data[0] == st.Get_source() and data[1] == st.Get_tag()
        assert st.Get_count(MPI.INT64_T) == 4
        seen.append((st.Get_source(), st.Get_tag(), int(data[2])))
    lines.append(f"wildcard receives: {sorted(seen)}")
else:
    for tag in (3, 4):
        comm.Send(np.array([rank, tag, rank * tag, 0], dtype=np.int64), dest=0, tag=tag)
comm.Barrier()   # no later message may meet rank 0's MPI_ANY_TAG receives

# probe for the size, then receive
if rank == 0:
    for _ in range(size - 1):
        st = MPI.Status()
        comm.Probe(source=MPI.ANY_SOURCE, tag=21, status=st)
        n = st.Get_count(MPI.DOUBLE)
        buf = np.empty(n, dtype=np.float64)
        comm.Recv(buf, source=st.Get_source(), tag=21)
        lines.append(f"probed {n} doubles from {st.Get_source()}: {buf.sum():.6g}")
    lines.sort()
else:
    comm.Send(np.full(rank * 10, 0.5), dest=0, tag=21)

everything = comm.gather(lines, root=0)
if rank == 0:
    for r, ls in enumerate(everything):
        for ln in ls:
            print(f"rank {r}: {ln}")
