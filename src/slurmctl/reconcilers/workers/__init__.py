"""The `workers` component: its reconciler (observe, then execute the plan) and its pure plan."""

from slurmctl.reconcilers.workers.reconciler import WorkersReconciler

__all__ = ["WorkersReconciler"]
