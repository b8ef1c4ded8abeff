"""A torchrun-style rendezvous across Slurm nodes, in plain sockets: rank 0 listens on the first node of the job by
its Slurm node name, every other rank connects to it by that name, each sends a value, and rank 0 answers all with
the sum (the shape of PyTorch's c10d TCPStore rendezvous and an allreduce). Run one task per node:

    srun -N2 --ntasks-per-node=1 python3 rendezvous.py

with MASTER_ADDR set as docs/examples/rendezvous.sbatch does. Prints one line per rank: rank, host, world size, sum.
"""

from __future__ import annotations

import os
import socket
import sys
import time

RANK = int(os.environ["SLURM_PROCID"])
WORLD = int(os.environ["SLURM_NTASKS"])
MASTER = (os.environ["MASTER_ADDR"], int(os.environ.get("MASTER_PORT", "29500")))
DEADLINE = time.monotonic() + float(os.environ.get("RENDEZVOUS_TIMEOUT", "60"))
VALUE = RANK + 1  # what each rank contributes; the sum is WORLD * (WORLD + 1) / 2


def read_line(conn: socket.socket) -> str:
    return conn.makefile("r").readline().strip()


def leader() -> int:
    """Rank 0: bound to the address MASTER_ADDR resolves to (its own node's), until every other rank has reported."""
    with socket.create_server(MASTER) as server:
        server.settimeout(max(DEADLINE - time.monotonic(), 0.1))
        peers = []
        total = VALUE
        while len(peers) < WORLD - 1:
            conn, _ = server.accept()
            total += int(read_line(conn).split()[1])
            peers.append(conn)
        for conn in peers:
            with conn:
                conn.sendall(f"{total}\n".encode())
        return total


def follower() -> int:
    """Any other rank: connects to MASTER_ADDR by name, retrying while rank 0 is not listening yet."""
    while True:
        try:
            conn = socket.create_connection(MASTER, timeout=5)
            break
        except OSError:
            if time.monotonic() > DEADLINE:
                raise
            time.sleep(0.2)
    with conn:
        conn.sendall(f"{RANK} {VALUE}\n".encode())
        return int(read_line(conn))


total = leader() if RANK == 0 else follower()
sys.stdout.write(f"rank {RANK} on {socket.gethostname()}: world {WORLD}, sum {total}, master {MASTER[0]}\n")
