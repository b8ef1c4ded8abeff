"""One reconciler per Slurm component, all keyed by the SlurmCluster; `registry.COMPONENTS` declares them."""

from slurmctl.reconcilers.registry import COMPONENTS, desired_objects, planned_objects, register

__all__ = ["COMPONENTS", "desired_objects", "planned_objects", "register"]
