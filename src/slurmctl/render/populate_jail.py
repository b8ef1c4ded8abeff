"""The `populate-jail` component: the Job that copies the jail image's root filesystem into the jail volume.

The Job's name is fixed, so a re-run is a delete and re-create of the same name. Which generation of the SlurmCluster a
Job was created for is recorded in the annotation `slurm.slurmctl.io/populate-generation`; the reconciler reads it
back (`reconcilers/observed.py`), so "overwrite runs once for that generation" holds across operator restarts without
any state outside the API server.

A Job's pod template is immutable: apply the rendered Job only when none exists (or after deleting it), never over a
live one.
"""

from __future__ import annotations

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
            "seccompProfile": {"type": "RuntimeDefault"},
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
