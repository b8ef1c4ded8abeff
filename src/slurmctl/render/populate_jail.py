"""The `populate-jail` component: the Job that copies the jail image's root filesystem into the jail volume.

The Job's name is fixed, so a re-run is a delete and re-create of the same name. Which generation of the SlurmCluster a
Job was created for is recorded in the annotation `slurm.slurmctl.io/populate-generation`; the reconciler reads it
back (`reconcilers/observed.py`), so "overwrite runs once for that generation" holds across operator restarts without
any state outside the API server.

A Job's pod template is immutable: apply the rendered Job only when none exists (or after deleting it), never over a
live one.

The copier (images/scripts/populate-jail) refuses a volume that holds files slurmctl did not put there unless
`spec.populateJail.adopt` is set; it says so with its exit status (`REFUSED_EXIT_CODE`) and its termination message,
which the reconciler reads from the Job's pod (the operator already watches its own pods: no new permission, and a
Job's status says nothing about why its pods failed).
"""

from __future__ import annotations

import json
from typing import Any

from slurmctl.api.v1 import SlurmCluster, VolumeRef
from slurmctl.render import meta, pods
from slurmctl.render.slurm_conf import JAIL_PATH

COMPONENT = "populate-jail"
GENERATION_ANNOTATION = "slurm.slurmctl.io/populate-generation"
SOURCE_ROOT = "/jail-rootfs"
BACKOFF_LIMIT = 3
# The copier's exit status when the volume holds someone else's files (images/scripts/populate-jail declares the same).
REFUSED_EXIT_CODE = 3
# Where the copier explains a refusal; the kubelet falls back to the log's tail for any other failure.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
MAX_VOLUME_DESCRIPTION = 200
# rsync -aHAX --numeric-ids as root: set any owner and mode, ACLs and file capabilities. All of these are in the
# container runtimes' default set (and Pod Security "baseline"), so the Job needs no privileged mode. No MKNOD: the
# copy leaves device nodes behind (images/scripts/populate-jail --no-devices; every node mounts a minimal /dev).
CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETFCAP"]


def volume_description(ref: VolumeRef) -> str:
    """How messages name the jail volume: its claim, or its volume source (kind and settings, shortened)."""
    if ref.claim_name:
        return f"PersistentVolumeClaim {ref.claim_name}"
    text = ", ".join(f"{kind} volume {json.dumps(body, sort_keys=True)}" for kind, body in (ref.source or {}).items())
    if len(text) > MAX_VOLUME_DESCRIPTION:
        text = text[: MAX_VOLUME_DESCRIPTION - 3] + "..."
    return text or "the jail volume"


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
            {"name": "ADOPT", "value": "true" if populate.adopt else "false"},
            {"name": "JAIL_VOLUME", "value": volume_description(spec.jail.volume)},
            {"name": "TERMINATION_LOG", "value": TERMINATION_MESSAGE_PATH},
        ],
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pods.root_with(CAPABILITIES),
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
                "metadata": pods.pod_metadata(populate, meta.labels(c, COMPONENT)),
                "spec": {
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Never",
                    "containers": [copier],
                    "volumes": [pods.volume("jail", spec.jail.volume)],
                    **pods.pod_settings(populate, spec.slurm.image_pull_secrets),
                },
            },
        },
    }
