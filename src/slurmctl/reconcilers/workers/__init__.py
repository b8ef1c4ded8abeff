"""The `workers` component: its reconciler (what it observes beyond the rest) and its pure plan."""

from slurmctl.reconcilers.workers.plan import plan
from slurmctl.reconcilers.workers.reconciler import WorkersReconciler

__all__ = ["WorkersReconciler", "plan"]
