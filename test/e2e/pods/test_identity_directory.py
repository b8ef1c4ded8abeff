"""spec.identity.directory on real pods: a SlurmCluster pointed at a real OpenLDAP (images/test-slapd, `make images`)
over ldaps with a CA made here, through the sssd sidecars. A directory user (no entry in the jail's passwd) logs in
over ssh with the directory's password and with the key the directory holds, lands in the jail, runs `srun -N2` on
both workers and an sbatch job, as their uid and with their directory groups; then the directory goes away: the
logged-in connection and cached lookups keep working and a new password login is refused, until it returns.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from slurmctl.api.v1.defaults import IMAGE_TAG
from test.e2e.harness import Node
from test.e2e.pods.conftest import require_images
from test.e2e.pods.slurm import Kube, small_cluster, small_group, ssh, ssh_keypair
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "dir"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
JAIL = "/mnt/jail"
LDAP = "ldap"
SLAPD_IMAGE = f"localhost/slurmctl-test/slapd:{IMAGE_TAG}"
SSSD_IMAGE = f"ghcr.io/slurmctl/sssd:{IMAGE_TAG}"
SUFFIX = "dc=example,dc=com"
USER, UID, GID = "dora", 10001, 10001
HPC_GID = 10100
PASSWORD = "Dora-directory-pw1"
BIND_PASSWORD = "sssd-Bind-pw2"
ADMIN_PASSWORD = "slapd-Admin-pw3"


def _certificates(namespace: str, service_ip: str) -> tuple[str, str, str]:
    """(CA certificate, server certificate, server key) in PEM: a CA made for this test and the slapd Service's
    certificate, for its names in the namespace and its ClusterIP (the URI the cluster uses: the operator of these
    tests runs on the machine, which reaches ClusterIPs but does not resolve the cluster's names)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slurmctl test directory CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names = [LDAP, f"{LDAP}.{namespace}", f"{LDAP}.{namespace}.svc", f"{LDAP}.{namespace}.svc.cluster.local"]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [*(x509.DNSName(n) for n in names), x509.IPAddress(ipaddress.ip_address(service_ip))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem).decode(), cert.public_bytes(pem).decode(), key_pem.decode()


def _seed(public_key: str) -> str:
    """The directory: the bind account sssd uses, one user with a password and an ssh key, their group and hpc."""
    return f"""dn: {SUFFIX}
objectClass: dcObject
objectClass: organization
o: Example
dc: example

dn: ou=people,{SUFFIX}
objectClass: organizationalUnit
ou: people

dn: ou=groups,{SUFFIX}
objectClass: organizationalUnit
ou: groups

dn: cn=sssd,{SUFFIX}
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: sssd
userPassword: {BIND_PASSWORD}

dn: uid={USER},ou=people,{SUFFIX}
objectClass: account
objectClass: posixAccount
objectClass: shadowAccount
objectClass: ldapPublicKey
uid: {USER}
cn: Dora Directory
uidNumber: {UID}
gidNumber: {GID}
homeDirectory: /home/{USER}
loginShell: /bin/bash
userPassword: {PASSWORD}
sshPublicKey: {public_key}

dn: cn={USER},ou=groups,{SUFFIX}
objectClass: posixGroup
cn: {USER}
gidNumber: {GID}

dn: cn=hpc,ou=groups,{SUFFIX}
objectClass: posixGroup
cn: hpc
gidNumber: {HPC_GID}
memberUid: {USER}
"""


def _slapd_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": LDAP, "labels": {"app": LDAP}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "slapd",
                    "image": SLAPD_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"name": "ldaps", "containerPort": 636}, {"name": "ldap", "containerPort": 389}],
                    "readinessProbe": {"tcpSocket": {"port": 636}, "periodSeconds": 1},
                    "volumeMounts": [
                        {"name": "seed", "mountPath": "/mnt/slapd", "readOnly": True},
                        {"name": "tls", "mountPath": "/mnt/slapd-tls", "readOnly": True},
                    ],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                }
            ],
            "volumes": [
                {"name": "seed", "secret": {"secretName": "ldap-seed"}},
                {"name": "tls", "secret": {"secretName": "ldap-tls"}},
            ],
        },
    }


def _service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": LDAP},
        "spec": {"selector": {"app": LDAP}, "ports": [{"name": "ldaps", "port": 636, "targetPort": 636}]},
    }


def _directory_objects(namespace: str, service_ip: str, public_key: str) -> tuple[list[dict[str, Any]], str]:
    """The directory's Secrets, its CA ConfigMap and its pod; and the CA's PEM."""
    ca, cert, key = _certificates(namespace, service_ip)
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ldap-tls"},
         "stringData": {"tls.crt": cert, "tls.key": key}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ldap-seed"},
         "stringData": {"seed.ldif": _seed(public_key), "admin-password": ADMIN_PASSWORD}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ldap-bind"},
         "stringData": {"password": BIND_PASSWORD}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ldap-ca"}, "data": {"ca.crt": ca}},
        _slapd_pod(),
    ], ca  # fmt: skip


def directory_condition(kube: Kube) -> tuple[str, str, str]:
    """(status, reason, message) of the SlurmCluster's DirectoryReachable, or empty strings while it has none."""
    conditions = kube.json("slurmcluster", NAME).get("status", {}).get("conditions") or []
    found = next((c for c in conditions if c["type"] == "DirectoryReachable"), None)
    return (found["status"], found["reason"], found["message"]) if found else ("", "", "")


def until_directory(kube: Kube, status: str, reason: str, *, timeout: float) -> str:
    """Wait for DirectoryReachable to say `status`/`reason`; its message."""
    return until(
        lambda: ((c := directory_condition(kube))[:2] == (status, reason) and c[2]) or None,
        timeout=timeout,
        what=f"DirectoryReachable {status} {reason}",
    )


def ssh_password(
    user: str, host: str, password: str, command: str, *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """One command over ssh with a password only (no key offered), typed by SSH_ASKPASS."""
    askpass = Path(tempfile.mkdtemp(prefix="askpass-")) / "askpass"
    askpass.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(password)}\n")
    askpass.chmod(0o700)
    env = {**os.environ, "SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}
    options = [
        "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password", "-o", "NumberOfPasswordPrompts=1",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip
    return subprocess.run(
        ["ssh", *options, f"{user}@{host}", command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def cluster(
    node: Node, kube: Kube, operator: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Kube, Path, str]]:
    """The directory, then a cluster of two workers and a login node pointed at it; the user's home in the jail (an
    administrator makes it, as for any user whose home the directory names). Yields (kube, the user's key, login IP)."""
    require_images(node, [SLAPD_IMAGE, SSSD_IMAGE])
    key, public = ssh_keypair(tmp_path_factory.mktemp("ssh"))
    kube.apply([_service()])
    service_ip = kube.json("service", LDAP)["spec"]["clusterIP"]
    objects, _ = _directory_objects(kube.ns, service_ip, public)
    kube.apply(objects)
    directory = {
        "uris": [f"ldaps://{service_ip}:636"],
        "baseDN": SUFFIX,
        "bindDN": f"cn=sssd,{SUFFIX}",
        "bindPasswordSecretRef": {"name": "ldap-bind"},
        "ca": {"configMapKeyRef": {"name": "ldap-ca"}},
    }
    kube.apply(small_cluster(NAME, workers=[small_group("cpu", 2)], identity={"directory": directory}))
    kube.until_available(
        NAME, operator, timeout=240, logs=(f"statefulset/{NAME}-login -c sssd", f"pod/{NAME}-worker-cpu-0 -c sssd")
    )
    kube.exec(LOGIN_POD, LOGIN, "install", "-d", "-o", str(UID), "-g", str(GID), "-m", "0750", f"{JAIL}/home/{USER}")
    ip = kube.json("pod", LOGIN_POD)["status"]["podIP"]
    until_directory(kube, "True", "Reachable", timeout=60)
    yield kube, key, ip


def test_a_directory_user_logs_in_with_password_and_key_and_runs_jobs_as_themself(
    cluster: tuple[Kube, Path, str],
) -> None:
    kube, key, ip = cluster
    # Not a user of the jail's own files: only the directory knows them.
    assert USER not in kube.exec(LOGIN_POD, LOGIN, "cat", f"{JAIL}/etc/passwd")
    # The key the directory holds (AuthorizedKeysCommand), into the jail as "/".
    who = ssh(key, USER, ip, "id -un; id -u; id -G; test ! -e /mnt/jail && echo in-jail; pwd")
    lines = who.split("\n")
    assert lines[:2] == [USER, str(UID)], who
    assert {str(GID), str(HPC_GID)} <= set(lines[2].split()), who
    assert lines[3:5] == ["in-jail", f"/home/{USER}"], who
    # The directory's password (pam_sss).
    by_password = until(
        lambda: ((p := ssh_password(USER, ip, PASSWORD, "id -un")).returncode == 0 and p.stdout.strip()) or None,
        timeout=60,
        what="a password login of the directory user",
    )
    assert by_password == USER
    wrong = ssh_password(USER, ip, "not-the-password", "id -un")
    assert wrong.returncode != 0, wrong
    # srun on both workers: the step runs as the user with their directory groups, in the jail.
    out = ssh(key, USER, ip, "srun -N2 --ntasks-per-node=1 sh -c 'echo $(hostname) $(id -u) $(id -G | tr \" \" ,)'")
    rows = sorted(line.split() for line in out.strip().split("\n"))
    assert [row[0] for row in rows] == [f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"], out
    for _, uid, gids in rows:
        assert uid == str(UID) and {str(GID), str(HPC_GID)} <= set(gids.split(",")), out
    # sbatch: the output file in the user's home in the jail, owned by them.
    job = ssh(key, USER, ip, "cd ~ && sbatch --parsable --wait -o out-%j.txt --wrap 'id -un'").strip().split(";")[0]
    path = f"{JAIL}/home/{USER}/out-{job}.txt"
    assert kube.exec(LOGIN_POD, LOGIN, "cat", path).strip() == USER
    assert kube.exec(LOGIN_POD, LOGIN, "stat", "-c", "%u:%g", path).strip() == f"{UID}:{GID}"


def test_without_the_directory_sessions_and_cached_lookups_go_on_and_new_logins_wait_for_it(
    cluster: tuple[Kube, Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    kube, key, ip = cluster
    control = tmp_path_factory.mktemp("ctl") / "master"
    base = ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-S", str(control)]  # fmt: skip
    # A logged-in user: one authenticated connection, which later commands reuse without logging in again.
    subprocess.run([*base, "-M", "-N", "-f", f"{USER}@{ip}"], check=True, timeout=60)
    try:
        kube.delete("pod", LDAP, timeout=60)
        again = subprocess.run(
            [*base, f"{USER}@{ip}", "id -un; id -G; srun -N2 --ntasks-per-node=1 id -u"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert again.returncode == 0, again
        out = again.stdout.split("\n")
        assert out[0] == USER and str(HPC_GID) in out[1].split(), again.stdout
        assert out[2:4] == [str(UID), str(UID)], again.stdout
        # A new password login is refused (passwords are never cached), at once and cleanly.
        refused = ssh_password(USER, ip, PASSWORD, "id -un", timeout=60)
        assert refused.returncode != 0, refused
        # The SlurmCluster says so, naming the field; the cluster stays Available for the jail's own users.
        message = until_directory(kube, "False", "DirectoryUnreachable", timeout=90)
        assert message.startswith("spec.identity.directory.uris: ldaps://"), message
        assert kube.phase(NAME) == "Available"
        events = kube.run("get", "events", "--field-selector", "reason=DirectoryUnreachable", "-o", "name")
        assert events.strip(), "one Warning Event for the finding"
        # The directory returns: password logins work again.
        kube.apply([_slapd_pod()])
        until(
            lambda: ssh_password(USER, ip, PASSWORD, "id -un").stdout.strip() == USER or None,
            timeout=120,
            what="a password login once the directory is back",
        )
        until_directory(kube, "True", "Reachable", timeout=60)
    finally:
        subprocess.run([*base, "-O", "exit", f"{USER}@{ip}"], capture_output=True, timeout=30, check=False)
