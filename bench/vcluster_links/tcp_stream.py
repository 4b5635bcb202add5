"""A plain TCP stream between two nodes of a tiers vcluster: the anchor.

  python3 tcp_stream.py recv ADDR PORT           # in the receiving node
  python3 tcp_stream.py send ADDR PORT BYTES     # in the sending node
  python3 tcp_stream.py pong ADDR PORT           # in the answering node
  python3 tcp_stream.py ping ADDR PORT ROUNDS    # in the asking node

recv prints one JSON line: the bytes received and the seconds from the
first to the last byte.  ping prints the mean round-trip time of ROUNDS
8-byte ping-pongs (after 100 warm-up ones) in microseconds.  Only the
addresses given are used: the nodes' own subnet.
"""

import json
import socket
import sys
import time

CHUNK = 1 << 20


def recv(addr, port):
    with socket.create_server((addr, port)) as srv:
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            total, first = 0, None
            buf = bytearray(CHUNK)
            while True:
                n = conn.recv_into(buf)
                if not n:
                    break
                if first is None:
                    first = time.perf_counter()
                total += n
            last = time.perf_counter()
    print(json.dumps({"bytes": total, "seconds": last - first}), flush=True)


def send(addr, port, nbytes):
    data = b"\0" * CHUNK
    with socket.create_connection((addr, port)) as s:
        left = nbytes
        while left > 0:
            s.sendall(data[:min(left, CHUNK)])
            left -= CHUNK


def pong(addr, port):
    with socket.create_server((addr, port)) as srv:
        print("ready", flush=True)
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                msg = conn.recv(8)
                if not msg:
                    break
                conn.sendall(msg)


def ping(addr, port, rounds):
    with socket.create_connection((addr, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(100 + rounds):
            if i == 100:
                t0 = time.perf_counter()
            s.sendall(b"12345678")
            got = 0
            while got < 8:
                got += len(s.recv(8 - got))
        t = time.perf_counter() - t0
    print(json.dumps({"rounds": rounds, "rtt_us": t / rounds * 1e6}), flush=True)


if __name__ == "__main__":
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "recv":
        recv(addr, port)
    elif mode == "send":
        send(addr, port, int(sys.argv[4]))
    elif mode == "pong":
        pong(addr, port)
    else:
        ping(addr, port, int(sys.argv[4]))
