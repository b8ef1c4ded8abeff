"""slurmctl: a Kubernetes operator that runs Slurm clusters whose nodes share one root filesystem."""

__version__ = "0.1.0"
