"""One reconciler per Slurm component, all keyed by the SlurmCluster."""

from slurmctl.reconcilers.setup import register

__all__ = ["register"]
