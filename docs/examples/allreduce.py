"""An MPI allreduce across Slurm nodes with mpi4py: every rank contributes its rank + 1 and prints the sum, with the
node it ran on. Run it one task per node, through Slurm's PMIx or under mpirun (docs/examples/allreduce.sbatch):

    srun --mpi=pmix python3 allreduce.py srun

Prints one line per rank: "<launcher> rank R of N on HOST: sum S".
"""

from __future__ import annotations

import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
total = world.allreduce(world.Get_rank() + 1, op=MPI.SUM)
launcher = sys.argv[1] if len(sys.argv) > 1 else "mpi"
rank, size, host = world.Get_rank(), world.Get_size(), MPI.Get_processor_name()
sys.stdout.write(f"{launcher} rank {rank} of {size} on {host}: sum {total}\n")
sys.stdout.flush()
