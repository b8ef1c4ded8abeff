"""The jail gate: worker and login StatefulSets start only on a populated jail. The populate-jail component runs the
Job and owns JailPopulated; the workers and login components read the gate here, from the cache and the status."""

from __future__ import annotations

from slurmctl.api.v1 import JAIL_POPULATED
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import JobState
from slurmctl.render import meta
from slurmctl.render.kinds import JOB
from slurmctl.runtime import Cache


def jail_gate_open(cache: Cache, loaded: Loaded) -> bool:
    """Whether workers and login may run: the Job succeeded now or did before (the condition remembers, e.g. after
    the Job was deleted). An overwrite in progress or a failed re-run tears nothing down: existing StatefulSets stay."""
    job = cache.get(*JOB, meta.populate_jail(loaded.name), namespace=loaded.namespace)
    if job is not None and JobState.of(job).succeeded:
        return True
    condition = loaded.condition(JAIL_POPULATED)
    return condition is not None and condition.status == "True"
