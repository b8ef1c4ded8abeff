"""spec.identity.directory on real pods: a SlurmCluster pointed at a real OpenLDAP (images/test-slapd, `make images`)
over ldaps with a CA made here, through the sssd sidecars, with accounting into a test MariaDB. A directory user (no
entry in the jail's passwd) logs in over ssh with the directory's password and with the key the directory holds, lands
in the jail, runs `srun -N2` on both workers and an sbatch job, as their uid and with their directory groups, and
`sacct` names them as the job's user; then the directory goes away: the logged-in connection and cached lookups keep
working and a new password login is refused, until it returns. Last, the real slapd refuses a wrong bind password,
then the server's certificate checked against a CA that did not sign it: DirectoryReachable names the field, nothing
restarts, the logged-in user goes on, and putting the Secret and the ConfigMap back makes it Reachable again.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
from test.e2e.pods.slurm import (
    TEST_DB_IMAGE,
    Kube,
    accounting_into,
    database,
    slurm_image,
    small_cluster,
    small_group,
    ssh,
    ssh_keypair,
)
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "dir"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
WORKER_PODS = (f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1")
DB = f"{NAME}-db"
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
WRONG_BIND_PASSWORD = "not-the-Bind-pw4"


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA made for this test, valid for a day."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
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
    return ca, ca_key


def _certificates(namespace: str, service_ip: str) -> tuple[str, str, str]:
    """(CA certificate, server certificate, server key) in PEM: a CA made for this test and the slapd Service's
    certificate, for its names in the namespace and its ClusterIP (the URI the cluster uses: the operator of these
    tests runs on the machine, which reaches ClusterIPs but does not resolve the cluster's names)."""
    now = datetime.datetime.now(datetime.UTC)
    ca, ca_key = _ca("slurmctl test directory CA")
    key = ec.generate_private_key(ec.SECP256R1())
    names = [LDAP, f"{LDAP}.{namespace}", f"{LDAP}.{namespace}.svc", f"{LDAP}.{namespace}.svc.cluster.local"]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
        .issuer_name(ca.subject)
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


def warnings(kube: Kube, reason: str) -> list[tuple[str, str, int]]:
    """(type, message, count) of each Event with this reason in the namespace."""
    items = kube.json("events", "--field-selector", f"reason={reason}")["items"]
    return [(e["type"], e["message"], e.get("count") or 1) for e in items]


def sssd_sidecars(kube: Kube) -> dict[str, tuple[str, int]]:
    """Each pod with an sssd sidecar: (its uid, the sidecar's restarts). Equal before and after: neither the pod was
    re-created nor its sidecar restarted."""
    found = {}
    for pod in kube.json("pods")["items"]:
        for status in pod.get("status", {}).get("initContainerStatuses") or []:
            if status["name"] == "sssd":
                found[pod["metadata"]["name"]] = (pod["metadata"]["uid"], status.get("restartCount", 0))
    return found


def until_recorded(read: Callable[[], str], expected: str, *, what: str) -> None:
    """Wait for `read()` (sacct's output) to be `expected`: slurmctld sends a finished job to slurmdbd on its own
    time."""
    seen = [""]

    def probe() -> bool:
        seen[0] = read().strip()
        return seen[0] == expected

    try:
        until(probe, timeout=120, interval=2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; sacct printed {seen[0]!r}, expected {expected!r}") from None


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


@contextmanager
def logged_in(key: Path, ip: str, control: Path) -> Iterator[Callable[[str], subprocess.CompletedProcess[str]]]:
    """A logged-in user: one authenticated ssh connection (a ControlMaster at `control`), closed after the block.
    Yields a function that runs a command in a new session on that very connection: it fails when ssh would have had
    to log in again (the session's $SSH_CONNECTION, the client's address and port, is no longer the master's)."""
    base = ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-S", str(control)]  # fmt: skip
    subprocess.run([*base, "-M", "-N", "-f", f"{USER}@{ip}"], check=True, timeout=60)

    def connection(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, f"{USER}@{ip}", f'echo "$SSH_CONNECTION"; {command}'],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    first = connection("true")
    assert first.returncode == 0 and first.stdout.strip(), first

    def run(command: str) -> subprocess.CompletedProcess[str]:
        proc = connection(command)
        assert proc.returncode == 0, proc
        assert proc.stdout.split("\n", 1)[0] == first.stdout.strip(), f"not the logged-in connection: {proc}"
        return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.split("\n", 1)[1], proc.stderr)

    try:
        yield run
    finally:
        subprocess.run([*base, "-O", "exit", f"{USER}@{ip}"], capture_output=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def cluster(
    node: Node, kube: Kube, operator: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Kube, Path, str]]:
    """The directory and the accounting database, then a cluster of two workers and a login node pointed at both; the
    user's home in the jail (an administrator makes it, as for any user whose home the directory names). Yields (kube,
    the user's key, login IP). The database starts first: it is the slowest to be ready."""
    require_images(node, [SLAPD_IMAGE, SSSD_IMAGE, TEST_DB_IMAGE, slurm_image("accounting")])
    start = time.monotonic()
    kube.apply(database(DB, secrets.token_urlsafe(18)))
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
    spec = {"workers": [small_group("cpu", 2)], "identity": {"directory": directory}, "accounting": accounting_into(DB)}
    kube.apply(small_cluster(NAME, **spec))
    logs = (f"statefulset/{NAME}-login -c sssd", f"pod/{NAME}-worker-cpu-0 -c sssd", f"deployment/{NAME}-accounting")
    kube.until_available(NAME, operator, timeout=270, logs=logs)
    # What accounting costs the start: when each condition last turned True (the last of them made it Available).
    conditions = kube.json("slurmcluster", NAME)["status"]["conditions"]
    print(f"Available {time.monotonic() - start:.0f}s after the first apply; conditions True at:")
    print("\n".join(sorted(f"  {c['lastTransitionTime']} {c['type']}" for c in conditions if c["status"] == "True")))
    kube.exec(LOGIN_POD, LOGIN, "install", "-d", "-o", str(UID), "-g", str(GID), "-m", "0750", f"{JAIL}/home/{USER}")
    ip = kube.json("pod", LOGIN_POD)["status"]["podIP"]
    until_directory(kube, "True", "Reachable", timeout=60)
    yield kube, key, ip


@pytest.mark.timeout(480)  # the module's cluster starts in this test's setup: the database is the slowest part
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
    # sacct names the directory user as the job's user and group: to the user, and to root among everyone's jobs.
    expected = f"{job}|{USER}|{USER}|COMPLETED|0:0"
    fields = f"-n -P -X -j {job} --format=JobID,User,Group,State,ExitCode"
    until_recorded(lambda: ssh(key, USER, ip, f"sacct {fields}"), expected, what=f"job {job} in the user's sacct")
    until_recorded(
        lambda: kube.exec(LOGIN_POD, LOGIN, "sacct", "-a", *fields.split()), expected, what=f"job {job} in sacct"
    )


def test_without_the_directory_sessions_and_cached_lookups_go_on_and_new_logins_wait_for_it(
    cluster: tuple[Kube, Path, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    kube, key, ip = cluster
    # A logged-in user: one authenticated connection, which later commands reuse without logging in again.
    with logged_in(key, ip, tmp_path_factory.mktemp("ctl") / "master") as session:
        kube.delete("pod", LDAP, timeout=60)
        again = session("id -un; id -G; srun -N2 --ntasks-per-node=1 id -u")
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


def assert_secret_kept(kube: Kube, operator: Path) -> None:
    """Neither bind password is in the SlurmCluster, its Events or the operator's log."""
    seen = {
        "the SlurmCluster": json.dumps(kube.json("slurmcluster", NAME)),
        "the Events": json.dumps(kube.json("events")),
        "the operator's log": operator.read_text(),
    }
    for where, text in seen.items():
        for password in (BIND_PASSWORD, WRONG_BIND_PASSWORD):
            assert password not in text, f"a bind password in {where}"


@pytest.mark.timeout(420)  # a finding waits for the operator's next look (every 30 s) and a fix for its retry (15 s)
def test_a_wrong_bind_password_or_ca_is_named_and_the_logged_in_user_goes_on(
    cluster: tuple[Kube, Path, str], operator: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    kube, key, ip = cluster
    sidecars = sssd_sidecars(kube)
    assert {LOGIN_POD, *WORKER_PODS} <= set(sidecars), sidecars
    ca = kube.json("configmap", "ldap-ca")["data"]["ca.crt"]
    with logged_in(key, ip, tmp_path_factory.mktemp("ctl") / "master") as session:
        # The bind password in its Secret is not the directory's.
        wrong = {"stringData": {"password": WRONG_BIND_PASSWORD}}
        kube.run("patch", "secret", "ldap-bind", "--type=merge", "-p", json.dumps(wrong))
        message = until_directory(kube, "False", "DirectoryBindRefused", timeout=90)
        assert message.startswith("spec.identity.directory.bindDN / bindPasswordSecretRef: ldaps://"), message
        assert "invalidCredentials" in message, message
        until(lambda: warnings(kube, "DirectoryBindRefused"), timeout=30, what="a DirectoryBindRefused Event")
        # Nothing restarts: the sidecars keep the password they started with, so the user goes on and logs in anew.
        assert kube.phase(NAME) == "Available"
        ran = session("id -un; srun -N2 --ntasks-per-node=1 id -u").stdout.split()
        assert ran == [USER, str(UID), str(UID)], ran
        assert ssh_password(USER, ip, PASSWORD, "id -un").stdout.strip() == USER
        assert sssd_sidecars(kube) == sidecars
        assert warnings(kube, "DirectoryBindRefused") == [("Warning", message, 1)], "one Event for the finding"
        assert_secret_kept(kube, operator)
        bind = {"stringData": {"password": BIND_PASSWORD}}
        kube.run("patch", "secret", "ldap-bind", "--type=merge", "-p", json.dumps(bind))
        until_directory(kube, "True", "Reachable", timeout=60)

        # The CA given is not the one that signed the server's certificate.
        other = _ca("another CA")[0].public_bytes(serialization.Encoding.PEM).decode()
        kube.run("patch", "configmap", "ldap-ca", "--type=merge", "-p", json.dumps({"data": {"ca.crt": other}}))
        message = until_directory(kube, "False", "DirectoryCertificateRefused", timeout=90)
        assert message.startswith("spec.identity.directory.ca: ldaps://"), message
        until(lambda: warnings(kube, "DirectoryCertificateRefused"), timeout=30, what="a certificate Event")
        assert kube.phase(NAME) == "Available"
        assert session("id -un").stdout.strip() == USER
        assert warnings(kube, "DirectoryCertificateRefused") == [("Warning", message, 1)], "one Event for the finding"
        kube.run("patch", "configmap", "ldap-ca", "--type=merge", "-p", json.dumps({"data": {"ca.crt": ca}}))
        until_directory(kube, "True", "Reachable", timeout=60)
        assert sssd_sidecars(kube) == sidecars
    # Healthy again: a new password login (the sidecars may have read the wrong CA meanwhile, and retry on their own).
    until(
        lambda: ssh_password(USER, ip, PASSWORD, "id -un").stdout.strip() == USER or None,
        timeout=180,
        what="a password login with the CA back",
    )
    assert sssd_sidecars(kube) == sidecars
