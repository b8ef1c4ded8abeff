"""The steps of the Slurm node loop's repair plan (reconcilers/node_plans.py), carried out in order by
reconcilers/node_executor.py: what changes in Slurm, which pods go, and which Kubernetes nodes are cordoned.

They are data so that the repair can be decided without an API server or a Slurm (an observation in, steps out) and
so that what the loop did is the plan's own words: each step carries the Events that say so once it is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slurmctl.reconcilers.plan import Note
from slurmctl.reconcilers.unhealthy import Replacement

SlurmVerb = Literal["drain", "resume", "set_down", "delete_node"]


@dataclass(frozen=True)
class SlurmWrite:
    """Tell Slurm to drain, resume, set DOWN or delete `nodes` (`reason`: the drain or DOWN reason). `notes` are the
    Events once Slurm took it. Slurm refusing it ends the repair (the rest would meet the same Slurm), unless
    `refusal` is set: then the refusal is that WARNING line and the repair goes on."""

    verb: SlurmVerb
    nodes: tuple[str, ...]
    reason: str = ""
    notes: tuple[Note, ...] = ()
    refusal: str = ""


@dataclass(frozen=True)
class ForceDelete:
    """Delete this incarnation of a pod (`uid`) with no grace period: its kubelet on the lost Kubernetes node `host`
    is gone and would never confirm. `note` is the Event once deleted."""

    pod: str
    uid: str
    host: str
    note: Note


@dataclass(frozen=True)
class Replace:
    """Move an unhealthy worker off its Kubernetes node: cordon and label the node, then delete the pod (with its
    grace period). `note` is the Event once done."""

    replacement: Replacement
    note: Note


Step = SlurmWrite | ForceDelete | Replace
