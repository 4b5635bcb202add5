"""Communicators with mpi4py, for tests/test_mbc_programs.py: split by
parity, a ring and a reduction inside each half, a duplicate, a 1-D
periodic Cartesian communicator with shifts, and a split by key order.
Rank 0 prints what every rank saw, in rank order."""

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
lines = []

half = world.Split(color=rank % 2, key=-rank)        # reversed order inside
hr, hs = half.Get_rank(), half.Get_size()
val = np.array([rank * 1.5])
total = np.empty(1)
half.Allreduce(val, total, op=MPI.SUM)
lines.append(f"half {rank % 2}: rank {hr} of {hs}, sum {total[0]:g}")
if hs > 1:
    got = np.empty(1)
    half.Sendrecv(val, dest=(hr + 1) % hs, recvbuf=got, source=(hr - 1) % hs)
    lines.append(f"half ring got {got[0]:g}")

dup = half.Dup()
x = dup.bcast(f"from world rank {rank}" if dup.Get_rank() == 0 else None, root=0)
lines.append(f"dup bcast: {x}")
dup.Free()

cart = world.Create_cart([size], periods=[True])
src, dst = cart.Shift(0, 1)
buf = np.empty(3, dtype=np.int32)
cart.Sendrecv(np.array([rank] * 3, dtype=np.int32), dest=dst, recvbuf=buf, source=src)
lines.append(f"cart shift from {src}: {buf.tolist()}")
coords = cart.Get_coords(cart.Get_rank())
lines.append(f"cart coords {coords}")

pairs = world.Split(color=rank // 2, key=rank)
s = pairs.allreduce(rank, op=MPI.MAX)
lines.append(f"pair {rank // 2}: max {s}")
for c in (half, cart, pairs):
    c.Free()

everything = world.gather(lines, root=0)
if rank == 0:
    for r, ls in enumerate(everything):
        for ln in ls:
            print(f"rank {r}: {ln}")
