"""A small controller-runtime for asyncio on kubernetes-asyncio. Knows nothing about Slurm.

The names reconcilers need are re-exported here; see `manager.py` for how they fit together.
"""

from slurmctl.runtime.apply import Applier
from slurmctl.runtime.cache import Cache, NotWatched
from slurmctl.runtime.client import Client, Resource, drop_nones
from slurmctl.runtime.controller import Controller, Result
from slurmctl.runtime.errors import (
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TerminalError,
    Timeout,
    TooManyRequests,
)
from slurmctl.runtime.events import NORMAL, WARNING, EventRecorder
from slurmctl.runtime.handlers import (
    Request,
    all_of,
    annotations_changed,
    any_of,
    enqueue_mapped,
    enqueue_object,
    enqueue_owner,
    generation_changed,
    labels_changed,
    negate,
)
from slurmctl.runtime.informer import Event, EventType, Informer
from slurmctl.runtime.leader import LeaderElectionConfig, LeaderElectionLost
from slurmctl.runtime.manager import Manager, ManagerOptions

__all__ = [
    "NORMAL",
    "WARNING",
    "ApiError",
    "Applier",
    "Cache",
    "Client",
    "Conflict",
    "Controller",
    "Event",
    "EventRecorder",
    "EventType",
    "Forbidden",
    "Gone",
    "Informer",
    "Invalid",
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "Manager",
    "ManagerOptions",
    "NotFound",
    "NotWatched",
    "Request",
    "Resource",
    "Result",
    "ServerError",
    "TerminalError",
    "Timeout",
    "TooManyRequests",
    "all_of",
    "annotations_changed",
    "any_of",
    "drop_nones",
    "enqueue_mapped",
    "enqueue_object",
    "enqueue_owner",
    "generation_changed",
    "labels_changed",
    "negate",
]
