"""Nonblocking messages with mpi4py, for tests/test_mbc_programs.py:
Isend/Irecv with Waitall, Waitany over receives from every rank,
Testall polling, persistent requests (Send_init/Recv_init/Startall),
Iprobe and Issend.  Rank 0 prints what every rank saw, in rank order."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
lines = []

# halo exchange in both directions, receives posted first
sizes = (1, 257, 40000)
recvs, sends, bufs = [], [], []
for k, n in enumerate(sizes):
    for d, src in enumerate((left, right)):
        b = np.empty(n, dtype=np.float64)
        bufs.append(b)
        recvs.append(comm.Irecv(b, source=src, tag=10 * k + d))
for k, n in enumerate(sizes):
    for d, dst in enumerate((right, left)):
        sends.append(comm.Isend(np.full(n, rank + 0.25 * k), dest=dst, tag=10 * k + d))
MPI.Request.Waitall(recvs + sends)
lines.append("halo sums " + " ".join(f"{b.sum():.6g}" for b in bufs))

# Waitany over one receive from each other rank
others = [r for r in range(size) if r != rank]
inb = {r: np.empty(2, dtype=np.int64) for r in others}
reqs = [comm.Irecv(inb[r], source=r, tag=5) for r in others]
sreqs = [comm.Isend(np.array([rank, r], dtype=np.int64), dest=r, tag=5) for r in others]
done = []
for _ in others:
    i = MPI.Request.Waitany(reqs)
    done.append(others[i])
MPI.Request.Waitall(sreqs)
lines.append("waitany got " + " ".join(f"{r}:{inb[r].tolist()}" for r in sorted(done)))

# Testall polling on an Issend pair
rb = np.empty(1000, dtype=np.int32)
pair = [comm.Irecv(rb, source=left, tag=7),
        comm.Issend(np.arange(1000, dtype=np.int32) + rank, dest=right, tag=7)]
polls = 0
while not MPI.Request.Testall(pair):
    polls += 1
lines.append(f"testall sum {int(rb.sum())}")

# persistent requests, three rounds
sb = np.zeros(16, dtype=np.float64)
pb = np.empty(16, dtype=np.float64)
ps = comm.Send_init(sb, dest=right, tag=9)
pr = comm.Recv_init(pb, source=left, tag=9)
acc = 0.0
for it in range(3):
    sb[:] = rank * 100 + it
    MPI.Prequest.Startall([pr, ps])
    MPI.Request.Waitall([pr, ps])
    acc += pb.sum()
ps.Free()
pr.Free()
lines.append(f"persistent sum {acc:g}")

# Iprobe until a message is there
req = comm.Isend(np.array([rank * 7], dtype=np.int64), dest=right, tag=33)
st = MPI.Status()
while not comm.Iprobe(source=MPI.ANY_SOURCE, tag=33, status=st):
    pass
got = np.empty(1, dtype=np.int64)
comm.Recv(got, source=st.Get_source(), tag=33)
req.Wait()
lines.append(f"iprobe from {st.Get_source()}: {int(got[0])}")

everything = comm.gather(lines, root=0)
if rank == 0:
    for r, ls in enumerate(everything):
        for ln in ls:
            print(f"rank {r}: {ln}")
