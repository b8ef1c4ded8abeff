"""The `populate-jail` component: the Job that copies the jail image's root filesystem into the jail volume.

The Job's name is fixed, so a re-run is a delete and re-create of the same name. Which generation of the SlurmCluster a
Job was created for is recorded in the annotation `slurm.slurmctl.io/populate-generation`; `needs_recreate` turns
that into the one decision a reconciler has to make, so "overwrite runs once for that generation" holds across
operator restarts without any state outside the API server.

A Job's pod template is immutable: apply the rendered Job only when none exists (or after deleting it), never over a
live one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta, pods
from slurmctl.render.slurm_conf import JAIL_PATH

COMPONENT = "populate-jail"
GENERATION_ANNOTATION = "slurm.slurmctl.io/populate-generation"
SOURCE_ROOT = "/jail-rootfs"
BACKOFF_LIMIT = 3
# rsync -aHAX --numeric-ids as root: set any owner and mode, ACLs, device nodes and file capabilities. All of these
# are in the container runtimes' default set (and Pod Security "baseline"), so the Job needs no privileged mode.
CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD", "SETFCAP"]


def render_populate_jail_job(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    spec = cluster.spec
    populate = spec.populate_jail
    copier = {
        "name": "populate-jail",
        "image": spec.image_for("populate-jail", populate.image),
        "env": [
            {"name": "JAIL_DIR", "value": JAIL_PATH},
            {"name": "SOURCE_ROOT", "value": SOURCE_ROOT},
            {"name": "OVERWRITE", "value": "true" if populate.overwrite else "false"},
        ],
        "securityContext": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(CAPABILITIES)},
        },
        "volumeMounts": [{"name": "jail", "mountPath": JAIL_PATH}],
        "resources": pods.resources(populate.resources),
    }
    metadata = meta.object_meta(cluster, meta.populate_jail(c), COMPONENT)
    if cluster.metadata.generation is not None:
        metadata["annotations"] = {GENERATION_ANNOTATION: str(cluster.metadata.generation)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            # No ttlSecondsAfterFinished: the finished Job is the record that the jail was populated (the gate).
            "template": {
                "metadata": {"labels": meta.labels(c, COMPONENT)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Never",
                    "containers": [copier],
                    "volumes": [pods.volume("jail", spec.jail.volume)],
                    **pods.scheduling(populate),
                },
            },
        },
    }


def job_generation(job: Mapping[str, Any]) -> int | None:
    """The SlurmCluster generation a live Job was created for; None when unknown (no or unreadable annotation)."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(GENERATION_ANNOTATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def job_failed(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Failed" and cond.get("status") == "True" for cond in conditions)


def needs_recreate(cluster: SlurmCluster, job: Mapping[str, Any] | None) -> bool:
    """Whether the live Job must be deleted and applied anew for the cluster's current generation.

    - `overwrite: true` re-runs the copy once per generation: a Job created for an older generation is replaced, the
      one created for this generation is left alone whatever its outcome (succeeded, running or failed).
    - A failed Job is retried once the spec changes (a new generation, e.g. a fixed image), never in a loop.
    Without a live Job there is nothing to re-create: apply the rendered Job.
    """
    if job is None:
        return False
    if job_generation(job) == cluster.metadata.generation:
        return False
    return cluster.spec.populate_jail.overwrite or job_failed(job)
