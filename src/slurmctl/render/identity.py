"""The `identity` component: the Job that writes spec.identity's users and groups into the jail.

Every daemon reads the jail's /etc/passwd, group and shadow (libnss-extrausers, images/scripts/lib.sh
link_jail_users), so an account written there exists at once on every node. The Job runs images/scripts/sync-identity
in the populate-jail image (it has the jail's Debian and its shadow tools: useradd, usermod, groupadd and groupmod
with --prefix take the account files' locks, as a `useradd` run by hand in the jail does).

What it is given is `render_records`: one tab-separated line per group, user and key, each group and user with the
field path the operator's messages name it by. The Job's name is fixed; the hash of what it writes is its annotation
`IDENTITY_HASH_ANNOTATION`, and a Job for another hash is replaced (reconcilers/identity.py). A declared entry whose
name or id an account the Job did not make already has is refused and left out: the Job says so, one line per entry,
in its container's termination message, which the reconciler reads from the Job's pod.
"""

from __future__ import annotations

from typing import Any, Final

from slurmctl.api.v1 import Identity, SlurmCluster, SubMount
from slurmctl.render import meta, pods
from slurmctl.render.slurm_conf import JAIL_PATH

COMPONENT: Final = "identity"
IDENTITY_HASH_ANNOTATION: Final = "slurm.slurmctl.io/identity-hash"
BACKOFF_LIMIT: Final = 3
# Where sync-identity keeps what it manages, inside the jail (root's, mode 0755): the names of the users and groups
# it made, and one authorized_keys file per declared user, which sshd reads (render/sshd.py). A locked user's file is
# removed.
STATE_DIR: Final = "/etc/slurmctl/identity"
KEYS_DIR: Final = f"{STATE_DIR}/authorized_keys"
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
# useradd, usermod, groupadd and groupmod write the account files root owns (shadow and gshadow are group shadow's:
# CHOWN keeps their group); a new home is made, filled from /etc/skel and given to its user (CHOWN, FOWNER);
# DAC_OVERRIDE reaches into a jail path whose owner is not root (a home under a user's directory). No SETUID, no
# SYS_CHROOT: --prefix writes under the jail without entering it.
CAPABILITIES: Final = ("CHOWN", "DAC_OVERRIDE", "FOWNER")


def render_records(identity: Identity) -> str:
    """What sync-identity reads, tab separated (the schema allows no tab or newline in any field), each entry with the
    field paths its messages name: `group NAME_PATH GID_PATH NAME GID`, `user PATH NAME UID GID GROUPS SHELL HOME`
    (GROUPS comma separated, `-` for none) and `key NAME LINE`. A user without gid has a group of its own, written
    as a group at the user's name and uid."""
    lines: list[str] = []
    for index, group in enumerate(identity.groups):
        where = f"spec.identity.groups[{index}]"
        lines.append(f"group\t{where}.name\t{where}.gid\t{group.name}\t{group.gid}")
    for index, user in enumerate(identity.users):
        where = f"spec.identity.users[{index}]"
        if user.gid is None:
            lines.append(f"group\t{where}.name\t{where}.uid\t{user.name}\t{user.uid}")
    for index, user in enumerate(identity.users):
        groups = ",".join(user.groups) or "-"
        fields = [f"spec.identity.users[{index}]", user.name, str(user.uid), str(user.primary_gid), groups]
        lines.append("\t".join(["user", *fields, user.shell, user.home_dir]))
        lines += [f"key\t{user.name}\t{key}" for key in user.ssh_authorized_keys]
    return "".join(f"{line}\n" for line in lines)


def declares_anything(cluster: SlurmCluster) -> bool:
    identity = cluster.spec.identity
    return bool(identity.users or identity.groups)


def home_sub_mounts(cluster: SlurmCluster) -> list[SubMount]:
    """The sub-mounts (spec.jail.subMounts) a declared home lies on: the only ones the Job mounts, so that it reaches
    no volume it does not write (a host path among them would make it a privileged pod)."""
    homes = [user.home_dir for user in cluster.spec.identity.users]
    return [
        m
        for m in sorted(cluster.spec.jail.sub_mounts, key=lambda m: m.name)
        if any(home == m.mount_path or home.startswith(m.mount_path.rstrip("/") + "/") for home in homes)
    ]


def _volumes(cluster: SlurmCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """(volumes, mounts, JAIL_SUBMOUNTS) of the Job: the jail and the sub-mounts homes lie on."""
    spec = cluster.spec
    subs = home_sub_mounts(cluster)
    volumes = [pods.volume("jail", spec.jail.volume), *(pods.volume(f"submount-{m.name}", m.volume) for m in subs)]
    mounts = [{"name": "jail", "mountPath": JAIL_PATH}]
    for m in subs:
        mount: dict[str, Any] = {"name": f"submount-{m.name}", "mountPath": f"{pods.SUBMOUNTS_ROOT}/{m.name}"}
        if m.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return volumes, mounts, " ".join(f"{m.name}:{m.mount_path}" for m in subs)


def identity_hash(cluster: SlurmCluster) -> str:
    """What a run of the Job is for: the records, and the image and mounts that write them."""
    spec = cluster.spec
    image = spec.image_for("populate-jail", spec.populate_jail.image)
    return meta.content_hash(render_records(spec.identity), image, _volumes(cluster))


def render_identity_job(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    spec = cluster.spec
    settings = spec.populate_jail  # the Job runs where, and as, the populate-jail Job does
    volumes, mounts, sub_mounts = _volumes(cluster)
    sync = {
        "name": "sync-identity",
        "image": spec.image_for("populate-jail", settings.image),
        "command": ["/usr/lib/slurmctl/sync-identity"],
        "env": [
            {"name": "JAIL_DIR", "value": JAIL_PATH},
            {"name": "JAIL_SUBMOUNTS", "value": sub_mounts},
            {"name": "IDENTITY", "value": render_records(spec.identity)},
            {"name": "TERMINATION_LOG", "value": TERMINATION_MESSAGE_PATH},
        ],
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pods.root_with(CAPABILITIES),
        "volumeMounts": mounts,
        "resources": pods.resources(settings.resources),
    }
    metadata = meta.object_meta(cluster, meta.identity(c), COMPONENT)
    metadata["annotations"] = {IDENTITY_HASH_ANNOTATION: identity_hash(cluster)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            # Kept when finished: its pod's termination message is what the IdentitySynced condition reports.
            "template": {
                "metadata": pods.pod_metadata(settings, meta.labels(c, COMPONENT)),
                "spec": {
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Never",
                    "containers": [sync],
                    "volumes": volumes,
                    **pods.pod_settings(settings, spec.slurm.image_pull_secrets),
                },
            },
        },
    }
