"""Declared users and groups (spec.identity) on the real node: the identity Job writes them into the jail, every
daemon resolves them through extrausers, sshd lets them in with their declared keys, Slurm runs their jobs as them;
removed, a user is locked out and keeps their home; one whose id an account made by hand has is refused by name.

One small cluster (two workers, a login node) is shared by the tests of this module, in order.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test.e2e.pods.slurm import Kube, small_cluster, small_group, ssh_keypair
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "ident"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
JAIL = "/mnt/jail"
USER, UID, GROUP, GID = "ada", 2100, "research", 3100
HAND_MADE, HAND_UID = "handmade", 2200


def declared(public_key: str) -> dict[str, Any]:
    return {
        "groups": [{"name": GROUP, "gid": GID}],
        "users": [{"name": USER, "uid": UID, "groups": [GROUP], "sshAuthorizedKeys": [public_key]}],
    }


def condition(kube: Kube, type_: str) -> dict[str, Any]:
    conditions = kube.json("slurmcluster", NAME).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def synced(kube: Kube, reason: str, *, timeout: float = 120) -> dict[str, Any]:
    """IdentitySynced with this reason, for the cluster's current generation."""
    generation = kube.json("slurmcluster", NAME)["metadata"]["generation"]

    def probe() -> dict[str, Any] | None:
        c = condition(kube, "IdentitySynced")
        return c if c.get("reason") == reason and c.get("observedGeneration") == generation else None

    try:
        return until(probe, timeout=timeout, interval=1, what=f"IdentitySynced {reason}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the condition is {condition(kube, 'IdentitySynced')}") from None


def attempt(key: Path, user: str, host: str, command: str) -> tuple[int, str]:
    """ssh as `user`; (exit status, output) whatever happens (255: ssh itself failed, e.g. refused)."""
    proc = subprocess.run(
        [
            "ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
            f"{user}@{host}", command,
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def user_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return ssh_keypair(tmp_path_factory.mktemp("ssh"))


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: Path, user_key: tuple[Path, str]) -> Iterator[Kube]:
    docs = small_cluster(NAME, identity=declared(user_key[1]))
    docs[1]["spec"]["workers"] = [small_group("cpu", 2)]
    kube.apply(docs)
    kube.until_available(NAME, operator, timeout=600)
    synced(kube, "Synced", timeout=180)
    yield kube


def test_a_declared_user_logs_in_with_their_key_and_runs_jobs_as_themselves(
    cluster: Kube, user_key: tuple[Path, str]
) -> None:
    kube = cluster
    key, _ = user_key
    ip = kube.json("pod", LOGIN_POD)["status"]["podIP"]
    rc, who = attempt(key, USER, ip, "id -un; id -u; id -G; echo $HOME; stat -c '%a %U' $HOME; test ! -e /mnt/jail")
    assert rc == 0, who
    name, uid, groups, home, mode = who.splitlines()[:5]
    assert (name, uid, home, mode) == (USER, str(UID), f"/home/{USER}", f"700 {USER}"), who
    assert set(groups.split()) == {str(UID), str(GID)}, who
    # Both workers resolve the user and their groups (the jail's files through extrausers).
    rc, out = attempt(key, USER, ip, "srun -N2 --ntasks-per-node=1 sh -c 'echo $(hostname) $(id)'")
    assert rc == 0, out
    lines = [line for line in out.splitlines() if "uid=" in line]
    assert len({line.split()[0] for line in lines}) == 2, out
    for line in lines:
        assert f"uid={UID}({USER}) gid={UID}({USER})" in line and f"{GID}({GROUP})" in line, out
    rc, out = attempt(key, USER, ip, "cd ~ && sbatch --parsable --wait -o out-%j.txt --wrap id")
    assert rc == 0, out
    job = out.strip().split(";")[0].split()[-1]
    owner = kube.exec(LOGIN_POD, LOGIN, "stat", "-c", "%u %a", f"{JAIL}/home/{USER}/out-{job}.txt")
    assert owner.split()[0] == str(UID), owner


def test_a_removed_user_is_locked_out_and_keeps_their_home_and_a_colliding_one_is_named(
    cluster: Kube, user_key: tuple[Path, str]
) -> None:
    kube = cluster
    key, _ = user_key
    ip = kube.json("pod", LOGIN_POD)["status"]["podIP"]
    kube.exec(LOGIN_POD, LOGIN, "chroot", JAIL, "useradd", "-u", str(HAND_UID), "-M", HAND_MADE)
    # ada goes; bob is declared with the uid of the account made by hand.
    patch = [{"op": "replace", "path": "/spec/identity/users", "value": [{"name": "bob", "uid": HAND_UID}]}]
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(patch))
    said = synced(kube, "IdentityConflict")
    assert said["status"] == "False"
    assert f"spec.identity.users[0].uid: {HAND_UID} is already used by {HAND_MADE}" in said["message"], said
    events = kube.json("events", "--field-selector", f"involvedObject.name={NAME}")["items"]
    assert any(e["reason"] == "IdentityConflict" and HAND_MADE in e["message"] for e in events), events
    # Locked: the key that worked is refused now; the home and its files stay, the hand-made account is as it was.
    rc, out = attempt(key, USER, ip, "true")
    assert rc != 0, out
    shadow = kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"grep '^{USER}:' {JAIL}/etc/shadow")
    assert re.match(rf"^{USER}:!", shadow), shadow
    kept = kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"stat -c '%u %a' {JAIL}/home/{USER}; ls {JAIL}/home/{USER}")
    assert kept.split()[:2] == [str(UID), "700"] and "out-" in kept, kept
    passwd = kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"grep -c '^bob:' {JAIL}/etc/passwd || true")
    assert passwd.strip() == "0", passwd
    hand = kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"grep '^{HAND_MADE}:' {JAIL}/etc/passwd")
    assert hand.split(":")[2] == str(HAND_UID), hand
