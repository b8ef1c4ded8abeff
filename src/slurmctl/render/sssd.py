"""spec.identity.directory: the sssd sidecar of the login, worker and controller pods, and its sssd.conf.

sshd, slurmctld, slurmd and its step daemons, and the processes of sessions and jobs in the jail all resolve users
through NSS; with a directory, NSS asks the pod's sssd after the image's and the jail's own files ("files extrausers
sss", images/scripts/lib.sh use_sssd). sssd runs in a native sidecar (an init container with `restartPolicy:
Always`, like munged): the kubelet starts it, and waits for its NSS socket, before the daemon's container, and stops it
after. Its sockets and memory caches are emptyDirs the daemon's container mounts at the standard paths (complement-jail
binds them into the jail), and its client side (libnss_sss, pam_sss, sss_ssh_authorizedkeys) comes from the sidecar's
image through another, so client and daemon are always one SSSD version, whatever Debian the Slurm image is built on.

sssd.conf is rendered here without the bind password, into the sidecar's environment: the pod template carries every
setting (a change rolls the pods), and the password never passes through the operator: the sidecar reads it from the
user's Secret, mounted into it alone, and writes the file 0600 in its own file system (images/sssd/entrypoint).
"""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.api.v1.defaults import IMAGE_TAG, default_image
from slurmctl.api.v1.identity import Directory
from slurmctl.render import pods

CONTAINER = "sssd"
ENTRYPOINT = "/usr/lib/slurmctl/entrypoint-sssd"
# Where the sidecar publishes its client side; the daemon's container mounts it read-only.
CLIENT_DIR = "/run/sssd-client"
PIPES_DIR = "/var/lib/sss/pipes"
MC_DIR = "/var/lib/sss/mc"
# sssd's cache: on an emptyDir, so a restarted sidecar still answers from it while the directory is unreachable.
DB_DIR = "/var/lib/sss/db"
NSS_SOCKET = f"{PIPES_DIR}/nss"
# sshd's AuthorizedKeysCommand: the sidecar's sss_ssh_authorizedkeys (a wrapper with the libraries it needs).
AUTHORIZED_KEYS_COMMAND = f"{CLIENT_DIR}/bin/sss_ssh_authorizedkeys"
BIND_PASSWORD_MOUNT = "/mnt/sssd-bind"  # noqa: S105 - a path, not a password
BIND_PASSWORD_FILE = f"{BIND_PASSWORD_MOUNT}/password"
CA_MOUNT = "/mnt/sssd-ca"
CA_FILE = f"{CA_MOUNT}/ca.crt"
DOMAIN = "directory"
# The lowest uid and gid taken from the directory: below it are the images' and the jail's system accounts (munge
# 990, slurmrestd 991, Debian's 100-999), which a directory entry must never shadow. Slurm's own 64030 is in the images'
# files, which NSS reads first.
MIN_ID = 1000
# How long sssd waits on the directory: a connection (ldap_network_timeout), one LDAP operation (ldap_opt_timeout) and
# a search (ldap_search_timeout). A lookup that misses them is answered from the cache, and sssd goes offline, trying
# again after offline_timeout (doubling up to offline_timeout_max).
NETWORK_TIMEOUT_SECONDS = 3
OPERATION_TIMEOUT_SECONDS = 6
OFFLINE_RETRY_SECONDS = 10
OFFLINE_RETRY_MAX_SECONDS = 60
# How long the kubelet waits for sssd's NSS socket before it restarts the sidecar (its startup probe): sssd opens it
# without the directory, so this is only its own start.
START_SECONDS = 60
RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}}
# sssd starts as root and drops to its own user for its responders: CHOWN, FOWNER, DAC_OVERRIDE for its cache and
# sockets, SETUID and SETGID for the drop, KILL to stop its children. Nothing else, no privilege escalation.
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")


def sssd_image(cluster: SlurmCluster) -> str:
    """The sidecar's image: the operator's own version, in the cluster's registry, whatever its Slurm line (the same
    for every line, like the operator's image)."""
    return default_image("sssd", registry=cluster.spec.slurm.image_registry, tag=IMAGE_TAG)


def _search_base(base_dn: str, search_filter: str | None) -> str:
    """SSSD's `base?scope?filter` form: the filter narrows users (or groups) to those matching it too."""
    return f"{base_dn}?subtree?{search_filter}" if search_filter else base_dn


def render_sssd_conf(directory: Directory) -> str:
    """sssd.conf without the bind password; the domain's section is last, so the sidecar appends the password's lines
    to it. Every value is one line (the API and validation refuse line breaks)."""
    domain = [
        ("id_provider", "ldap"),
        ("auth_provider", "ldap"),
        # Who may log in is who the directory (and userFilter) makes a user: no second access rule.
        ("access_provider", "permit"),
        ("chpass_provider", "none"),
        ("ldap_uri", ", ".join(directory.uris)),
        ("ldap_search_base", directory.base_dn),
        ("ldap_user_search_base", _search_base(directory.base_dn, directory.user_filter)),
        ("ldap_group_search_base", _search_base(directory.base_dn, directory.group_filter)),
        ("ldap_schema", directory.schema_),
        ("ldap_id_use_start_tls", "true" if directory.start_tls else "false"),
        ("ldap_tls_reqcert", "demand"),
        *([("ldap_tls_cacert", CA_FILE)] if directory.ca is not None else []),
        ("ldap_user_ssh_public_key", "sshPublicKey"),
        ("min_id", str(MIN_ID)),
        # A new login needs the directory: passwords are never cached (users and groups are, for the lookups of
        # running sessions and jobs while it is unreachable).
        ("cache_credentials", "false"),
        ("enumerate", "false"),
        ("ldap_network_timeout", str(NETWORK_TIMEOUT_SECONDS)),
        ("ldap_opt_timeout", str(OPERATION_TIMEOUT_SECONDS)),
        ("ldap_search_timeout", str(OPERATION_TIMEOUT_SECONDS)),
        ("offline_timeout", str(OFFLINE_RETRY_SECONDS)),
        ("offline_timeout_max", str(OFFLINE_RETRY_MAX_SECONDS)),
        *([("ldap_default_bind_dn", directory.bind_dn)] if directory.bind_dn is not None else []),
    ]
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("sssd", [("services", "nss, pam, ssh"), ("domains", DOMAIN)]),
        # root and the images' system users are never looked up in the directory.
        ("nss", [("filter_users", "root"), ("filter_groups", "root")]),
        ("pam", []),
        ("ssh", []),
        (f"domain/{DOMAIN}", domain),
    ]
    lines = ["# Generated by slurmctl from spec.identity.directory. The sidecar adds the bind password."]
    for name, settings in sections:
        lines += ["", f"[{name}]", *(f"{key} = {value}" for key, value in settings)]
    return "\n".join(lines) + "\n"


def sssd_volumes(directory: Directory) -> list[dict[str, Any]]:
    """The emptyDirs the sidecar shares with the daemon's container, and the user's Secret and CA, which only the
    sidecar mounts."""
    volumes: list[dict[str, Any]] = [
        {"name": "sssd-client", "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": "sssd-pipes", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": "sssd-mc", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {"name": "sssd-db", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    if directory.bind_password_secret_ref is not None:
        ref = directory.bind_password_secret_ref
        volumes.append(
            {
                "name": "sssd-bind",
                "secret": {
                    "secretName": ref.name,
                    "items": [{"key": ref.key, "path": "password"}],
                    "defaultMode": 0o400,
                },
            }
        )
    if directory.ca is not None:
        if directory.ca.config_map_key_ref is not None:
            cm = directory.ca.config_map_key_ref
            source: dict[str, Any] = {
                "configMap": {"name": cm.name, "items": [{"key": cm.key, "path": "ca.crt"}], "defaultMode": 0o444}
            }
        else:
            assert directory.ca.secret_key_ref is not None, "validation: a CA is a ConfigMap key or a Secret key"
            sec = directory.ca.secret_key_ref
            items = [{"key": sec.key, "path": "ca.crt"}]
            source = {"secret": {"secretName": sec.name, "items": items, "defaultMode": 0o444}}
        volumes.append({"name": "sssd-ca", **source})
    return volumes


def sssd_container(cluster: SlurmCluster, directory: Directory) -> dict[str, Any]:
    env = [
        {"name": "SSSD_CONF", "value": render_sssd_conf(directory)},
        {"name": "SSSD_CLIENT_DIR", "value": CLIENT_DIR},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "sssd-client", "mountPath": CLIENT_DIR},
        {"name": "sssd-pipes", "mountPath": PIPES_DIR},
        {"name": "sssd-mc", "mountPath": MC_DIR},
        {"name": "sssd-db", "mountPath": DB_DIR},
    ]
    if directory.bind_password_secret_ref is not None:
        env.append({"name": "SSSD_BIND_PASSWORD_FILE", "value": BIND_PASSWORD_FILE})
        mounts.append({"name": "sssd-bind", "mountPath": BIND_PASSWORD_MOUNT, "readOnly": True})
    if directory.ca is not None:
        mounts.append({"name": "sssd-ca", "mountPath": CA_MOUNT, "readOnly": True})
    return {
        "name": CONTAINER,
        "image": sssd_image(cluster),
        "command": ["/usr/bin/tini", "--", ENTRYPOINT],
        "restartPolicy": "Always",
        "env": env,
        "startupProbe": {
            "exec": {"command": ["test", "-S", NSS_SOCKET]},
            "periodSeconds": 1,
            "failureThreshold": START_SECONDS,
        },
        "volumeMounts": mounts,
        "resources": RESOURCES,
        "securityContext": {**pods.root_with(CAPABILITIES), "runAsNonRoot": False},
    }


def daemon_mounts() -> list[dict[str, Any]]:
    """The daemon container's view of the sidecar: its client side (read-only), sockets and caches."""
    return [
        {"name": "sssd-client", "mountPath": CLIENT_DIR, "readOnly": True},
        {"name": "sssd-pipes", "mountPath": PIPES_DIR},
        {"name": "sssd-mc", "mountPath": MC_DIR, "readOnly": True},
    ]


def add_sssd(cluster: SlurmCluster, pod_spec: dict[str, Any]) -> None:
    """With spec.identity.directory, the sidecar after munge, its volumes, and the daemon container's (the pod's
    first) mounts and SSSD_CLIENT_DIR, which switches its entrypoint to the directory. Without it, nothing."""
    directory = cluster.spec.identity.directory
    if directory is None:
        return
    # In place: a renderer may still add to these lists after this (render/controller.py's state volume).
    pod_spec.setdefault("initContainers", []).append(sssd_container(cluster, directory))
    pod_spec.setdefault("volumes", []).extend(sssd_volumes(directory))
    daemon = pod_spec["containers"][0]
    daemon.setdefault("volumeMounts", []).extend(daemon_mounts())
    daemon.setdefault("env", []).append({"name": "SSSD_CLIENT_DIR", "value": CLIENT_DIR})
