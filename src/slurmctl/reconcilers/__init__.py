"""One reconciler per Slurm component, all keyed by the SlurmCluster; `registry.COMPONENTS` declares them."""

from slurmctl.reconcilers.registry import COMPONENTS, planned_objects, register

__all__ = ["COMPONENTS", "planned_objects", "register"]
