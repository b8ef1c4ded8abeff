"""The `accounting` component: slurmdbd (its config Secret, Service and Deployment) and, with
`spec.accounting.mariadb.enabled`, the database through mariadb-operator (a `MariaDB` resource and its passwords).

slurmdbd runs as a Deployment with the Recreate strategy rather than a StatefulSet: it keeps no state of its own (the
database does), needs no volume claim and no per-pod DNS, and Recreate guarantees that two slurmdbd never write to one
database at once. slurmdbd refuses to start unless `DbdHost` names its own host, so the pod's hostname is fixed to
`<c>-accounting`, the Service's name.

Passwords are parameters: the reconciler reads them from Secrets at reconcile time. They end up only in the data of
the `<c>-slurmdbd` and `<c>-mariadb-passwords` Secrets, never in annotations, labels or hashes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slurmctl.api.v1 import DEFAULT_LOG_LEVEL, SlurmCluster
from slurmctl.render import meta, pods
from slurmctl.render.kinds import MARIADB
from slurmctl.render.slurm_conf import JWT_AUTH_SETTINGS

COMPONENT = "accounting"
# slurmdbd finishes what it is writing to the database on SIGTERM.
GRACE_SECONDS = 60
SLURMDBD_CONF = "slurmdbd.conf"
SLURMDBD_CONFIG_MOUNT = "/mnt/slurmdbd-config"
# slurmdbd runs as SlurmUser and cannot write to /run; the pid file only needs to be somewhere it may write.
SLURMDBD_PID_FILE = "/tmp/slurmdbd.pid"  # noqa: S108 - the container's own /tmp
# The images' fixed users (images/slurm-base/Dockerfile): SlurmUser, and munge.
SLURM_UID = 64030
MUNGE_UID = 990

MARIADB_API_VERSION, MARIADB_KIND = MARIADB
MARIADB_PORT = 3306
MARIADB_USER = "slurm"
MARIADB_DATABASE = "slurm_acct_db"
PASSWORD_KEY = "password"  # noqa: S105 - a key name, not a password
ROOT_PASSWORD_KEY = "root-password"  # noqa: S105

# Slurm's config parser ends a value at whitespace, cuts a line at `#` and treats `\` and `"` specially: a password
# with any of these (or a control character) cannot be written into slurmdbd.conf faithfully.
_CONF_SAFE = re.compile(r"^[!$-\[\]-~]+$")  # printable ASCII without space, '"', '#' and '\'


@dataclass(frozen=True)
class Database:
    """Where slurmdbd stores accounting data, and the Secret key holding the password it logs in with."""

    host: str
    port: int
    user: str
    name: str
    password_secret: str
    password_key: str


def database(cluster: SlurmCluster) -> Database:
    """The database of an accounting-enabled cluster; ValueError when the spec names none (validation reports it)."""
    c = meta.cluster_name(cluster)
    acc = cluster.spec.accounting
    if acc.external is not None:
        ext = acc.external
        return Database(
            host=ext.host,
            port=ext.port,
            user=ext.user,
            name=ext.database,
            password_secret=ext.password_secret_ref.name,
            password_key=ext.password_secret_ref.key,
        )
    if acc.mariadb is not None and acc.mariadb.enabled:
        return Database(
            host=meta.mariadb(c),
            port=MARIADB_PORT,
            user=MARIADB_USER,
            name=MARIADB_DATABASE,
            password_secret=meta.mariadb_passwords(c),
            password_key=PASSWORD_KEY,
        )
    raise ValueError("spec.accounting: neither external nor mariadb.enabled is set")


def uses_mariadb(cluster: SlurmCluster) -> bool:
    acc = cluster.spec.accounting
    return acc.enabled and acc.external is None and acc.mariadb is not None and acc.mariadb.enabled


def check_password(password: str) -> None:
    """ValueError (without the password in the message) when slurmdbd.conf cannot carry it."""
    if not _CONF_SAFE.fullmatch(password):
        raise ValueError(
            "the database password must be non-empty printable ASCII without spaces, '#', '\\' or '\"'"
            " (slurmdbd.conf cannot carry those)"
        )


def _settings(cluster: SlurmCluster) -> list[tuple[str, str]]:
    """Every slurmdbd.conf setting but the password. LogFile is unset so slurmdbd logs to stderr. Each key and why:
    docs/slurm-settings.md. They are all in the pod template's hash, so a change (DebugLevel too) restarts slurmdbd."""
    db = database(cluster)
    level = cluster.spec.slurm.log_levels().get("slurmdbd", DEFAULT_LOG_LEVEL)
    debug = [] if level == DEFAULT_LOG_LEVEL else [("DebugLevel", level)]
    return [
        ("AuthType", "auth/munge"),
        *JWT_AUTH_SETTINGS,  # slurmrestd's openapi/slurmdbd forwards users' JWTs to slurmdbd
        ("DbdHost", meta.accounting(meta.cluster_name(cluster))),
        ("DbdPort", str(meta.SLURMDBD_PORT)),
        ("SlurmUser", "slurm"),
        ("PidFile", SLURMDBD_PID_FILE),
        ("StorageType", "accounting_storage/mysql"),
        ("StorageHost", db.host),
        ("StoragePort", str(db.port)),
        ("StorageUser", db.user),
        ("StorageLoc", db.name),
        *debug,
    ]


def render_slurmdbd_conf(cluster: SlurmCluster, *, dbd_password: str) -> str:
    check_password(dbd_password)
    ns, name = cluster.key
    header = f"# Generated by slurmctl for SlurmCluster {ns}/{name}. Do not edit: changes are overwritten.\n"
    return header + "".join(f"{k}={v}\n" for k, v in [*_settings(cluster), ("StoragePass", dbd_password)])


def render_slurmdbd_secret(cluster: SlurmCluster, *, dbd_password: str) -> dict[str, Any]:
    conf = render_slurmdbd_conf(cluster, dbd_password=dbd_password)
    return meta.secret(cluster, meta.slurmdbd_secret(meta.cluster_name(cluster)), COMPONENT, {SLURMDBD_CONF: conf})


def render_mariadb_secret(cluster: SlurmCluster, *, password: str, root_password: str) -> dict[str, Any]:
    """The passwords of the MariaDB resource: random, generated once by the reconciler, never rotated."""
    check_password(password)
    return meta.secret(
        cluster,
        meta.mariadb_passwords(meta.cluster_name(cluster)),
        COMPONENT,
        {PASSWORD_KEY: password, ROOT_PASSWORD_KEY: root_password},
    )


def render_accounting_service(cluster: SlurmCluster) -> dict[str, Any]:
    """AccountingStorageHost of slurm.conf: slurmctld reaches slurmdbd through it."""
    c = meta.cluster_name(cluster)
    return meta.service(cluster, meta.accounting(c), COMPONENT, port_name="slurmdbd", port=meta.SLURMDBD_PORT)


def config_hash(cluster: SlurmCluster, *, munge_key_id: str, jwt_key_id: str, dbd_password_id: str) -> str:
    """slurmdbd reads slurmdbd.conf and the munge and JWT keys once at start. The password enters only through its
    id, so the hash in the pod template cannot be used to guess it."""
    return meta.content_hash(_settings(cluster), munge_key_id, jwt_key_id, dbd_password_id)


# slurmdbd needs no privilege at all, so its pod meets Pod Security "restricted" (docs/pod-security.md): no container
# runs as root, none keeps a capability. Every file it installs is its own user's (slurmdbd.conf and the JWT key
# owned by SlurmUser, the munge key by munge), read from Secrets that `fsGroup` makes readable to the pod's group; the
# accounting image gives SlurmUser /etc/slurm (images/accounting/Dockerfile).
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": SLURM_UID,
    "runAsGroup": SLURM_UID,
    "fsGroup": SLURM_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
NO_PRIVILEGE: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def render_slurmdbd_deployment(
    cluster: SlurmCluster, *, munge_key_id: str, jwt_key_id: str, dbd_password_id: str
) -> dict[str, Any]:
    """`dbd_password_id` changes whenever the database password does (e.g. the source Secret's resourceVersion),
    rolling slurmdbd onto the new slurmdbd.conf; it must not be the password."""
    c = meta.cluster_name(cluster)
    acc = cluster.spec.accounting
    image = cluster.spec.image_for("accounting", acc.image)
    slurmdbd = {
        "name": "slurmdbd",
        "image": image,
        "ports": [{"name": "slurmdbd", "containerPort": meta.SLURMDBD_PORT, "protocol": "TCP"}],
        "volumeMounts": [
            *pods.slurm_mounts(munge_key=False),
            pods.jwt_key_mount(),
            {"name": "slurmdbd-config", "mountPath": SLURMDBD_CONFIG_MOUNT, "readOnly": True},
        ],
        # Ready when slurmdbd answers a query that reaches its database, not when its port is open: slurmctld
        # finds slurmdbd through the Service, which lists ready pods only.
        "readinessProbe": pods.slurm_readiness("accounting"),
        "resources": pods.resources(acc.resources),
        "securityContext": NO_PRIVILEGE,
    }
    volumes = [
        *pods.slurm_volumes(c),
        pods.jwt_key_volume(c),
        {"name": "slurmdbd-config", "secret": {"secretName": meta.slurmdbd_secret(c), "defaultMode": 0o400}},
    ]
    hash_ = config_hash(cluster, munge_key_id=munge_key_id, jwt_key_id=jwt_key_id, dbd_password_id=dbd_password_id)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta.object_meta(cluster, meta.accounting(c), COMPONENT),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": meta.selector(c, COMPONENT)},
            "template": pods.slurm_pod_template(
                c,
                COMPONENT,
                config_hash=hash_,
                daemon=slurmdbd,
                image=image,
                volumes=volumes,
                placement=acc,
                image_pull_secrets=cluster.spec.slurm.image_pull_secrets,
                grace_seconds=GRACE_SECONDS,
                pod_security_context=POD_SECURITY_CONTEXT,
                munge_security_context={"runAsUser": MUNGE_UID, "runAsGroup": MUNGE_UID, **NO_PRIVILEGE},
                hostname=meta.accounting(c),
            ),
        },
    }


def render_mariadb(cluster: SlurmCluster) -> dict[str, Any]:
    """A single MariaDB server for mariadb-operator, creating slurmdbd's database and user on bootstrap."""
    c = meta.cluster_name(cluster)
    mariadb = cluster.spec.accounting.mariadb
    if mariadb is None:
        raise ValueError("spec.accounting.mariadb is not set")
    secret = meta.mariadb_passwords(c)
    storage: dict[str, Any] = {"size": mariadb.storage.size}
    if mariadb.storage.storage_class_name:
        storage["storageClassName"] = mariadb.storage.storage_class_name
    spec: dict[str, Any] = {
        "rootPasswordSecretKeyRef": {"name": secret, "key": ROOT_PASSWORD_KEY},
        "username": MARIADB_USER,
        "passwordSecretKeyRef": {"name": secret, "key": PASSWORD_KEY},
        "database": MARIADB_DATABASE,
        "port": MARIADB_PORT,
        "replicas": 1,
        "storage": storage,
    }
    if mariadb.image:
        spec["image"] = mariadb.image
    resources = pods.resources(mariadb.resources)
    if resources:
        spec["resources"] = resources
    return {
        "apiVersion": MARIADB_API_VERSION,
        "kind": MARIADB_KIND,
        "metadata": meta.object_meta(cluster, meta.mariadb(c), COMPONENT),
        "spec": spec,
    }


def render_accounting(
    cluster: SlurmCluster, *, dbd_password: str | None, munge_key_id: str, jwt_key_id: str, dbd_password_id: str
) -> list[dict[str, Any]]:
    """slurmdbd's objects, plus the MariaDB resource when the spec asks for one (whether mariadb-operator is installed
    is the reconciler's question). Without `dbd_password` (offline rendering) the slurmdbd Secret is left out."""
    out = []
    if dbd_password is not None:
        out.append(render_slurmdbd_secret(cluster, dbd_password=dbd_password))
    out += [
        render_accounting_service(cluster),
        render_slurmdbd_deployment(
            cluster, munge_key_id=munge_key_id, jwt_key_id=jwt_key_id, dbd_password_id=dbd_password_id
        ),
    ]
    if uses_mariadb(cluster):
        out.append(render_mariadb(cluster))
    return out


# A Slurm upgrade's backup of the accounting database (reconcilers/upgrade.py): mariadb-dump (in the accounting image,
# of the line the cluster leaves) writes the whole database into a claim that is never deleted, before slurmdbd of the
# new line migrates the schema. One file per upgrade: <database>-<from>-to-<to>-<UTC time>.sql.
BACKUP_COMPONENT = "accounting-backup"  # the component label of the backup Job's pod
BACKUP_MOUNT = "/backup"
BACKUP_SIZE = "1Gi"
BACKUP_BACKOFF_LIMIT = 3
# mariadb-dump reads the password from an option file (never from its command line, which `ps` shows), written into
# a memory-backed emptyDir only the pod sees.
_BACKUP_SCRIPT = """set -eu
umask 077
printf '[client]\\npassword=%s\\n' "$(cat /mnt/db-password/password)" > /work/my.cnf
file="$BACKUP_DIR/$DATABASE-$FROM-to-$TO-$(date -u +%Y%m%dT%H%M%SZ).sql"
mariadb-dump --defaults-extra-file=/work/my.cnf --host="$DB_HOST" --port="$DB_PORT" --user="$DB_USER" \\
    --single-transaction --no-tablespaces --databases "$DATABASE" > "$file.partial"
mv "$file.partial" "$file"
echo "backed up $DATABASE to $file ($(wc -c < "$file") bytes)"
"""


def backup_claim_name(c: str) -> str:
    return f"{c}-slurmdbd-backup"


def render_backup_claim(cluster: SlurmCluster) -> dict[str, Any]:
    """The claim the backups go to: without an owner, so it stays when the SlurmCluster goes (a backup is for when
    things went wrong)."""
    c = meta.cluster_name(cluster)
    metadata = meta.object_meta(cluster, backup_claim_name(c), COMPONENT)
    metadata.pop("ownerReferences", None)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": BACKUP_SIZE}}},
    }


def render_backup_job(cluster: SlurmCluster, *, name: str, from_: str, to: str) -> dict[str, Any]:
    """The Job that dumps the accounting database before an upgrade from `from_` to `to` (`cluster`: as the line it
    leaves renders it, so the image is that line's)."""
    c = meta.cluster_name(cluster)
    db = database(cluster)
    env = {
        "DB_HOST": db.host,
        "DB_PORT": str(db.port),
        "DB_USER": db.user,
        "DATABASE": db.name,
        "FROM": from_,
        "TO": to,
        "BACKUP_DIR": BACKUP_MOUNT,
    }
    dump = {
        "name": "mariadb-dump",
        "image": cluster.spec.image_for("accounting", cluster.spec.accounting.image),
        "command": ["/bin/sh", "-c", _BACKUP_SCRIPT],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "volumeMounts": [
            {"name": "backup", "mountPath": BACKUP_MOUNT},
            {"name": "work", "mountPath": "/work"},
            {"name": "db-password", "mountPath": "/mnt/db-password", "readOnly": True},
        ],
        # Root with no capability (Pod Security "baseline"): a claim's volume is root's where the volume plugin
        # ignores fsGroup (host paths), and root writes into its own directory without any capability.
        "securityContext": {**NO_PRIVILEGE, "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False},
    }
    pull = [{"name": s.name} for s in cluster.spec.slurm.image_pull_secrets]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"fsGroup": SLURM_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "containers": [dump],
        "volumes": [
            {"name": "backup", "persistentVolumeClaim": {"claimName": backup_claim_name(c)}},
            {"name": "work", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {
                "name": "db-password",
                "secret": {
                    "secretName": db.password_secret,
                    "items": [{"key": db.password_key, "path": "password"}],
                    "defaultMode": 0o440,
                },
            },
        ],
    }
    if pull:
        pod_spec["imagePullSecrets"] = pull
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta.object_meta(cluster, name, COMPONENT),
        "spec": {
            "backoffLimit": BACKUP_BACKOFF_LIMIT,
            # Its own component label: not one of slurmdbd's pods (which the upgrade counts, reconcilers/upgrade.py).
            "template": {"metadata": {"labels": meta.labels(c, BACKUP_COMPONENT)}, "spec": pod_spec},
        },
    }
