"""sync-identity on a real directory with this machine's shadow tools: declared users and groups land in the jail's
account files with their homes and keys, accounts made by hand are never changed, a collision is refused by name
and the rest applied, a removed user is locked and keeps their home."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from slurmctl.api.v1 import Identity
from slurmctl.render.identity import KEYS_DIR, STATE_DIR, render_records
from test.unit.images.conftest import run_script

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests ada@example"
HAND_MADE = "jailuser:x:1500:1500::/home/jailuser:/bin/sh"


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    """A populated jail whose account files are this machine's, plus one user made by hand."""
    root = tmp_path / "jail"
    (root / "etc" / "skel").mkdir(parents=True)
    (root / "home").mkdir()
    for name in ("passwd", "group", "shadow", "gshadow", "login.defs"):
        shutil.copy2(Path("/etc") / name, root / "etc" / name)
    with (root / "etc" / "passwd").open("a") as f:
        f.write(HAND_MADE + "\n")
    with (root / "etc" / "group").open("a") as f:
        f.write("jailuser:x:1500:\n")
    (root / "etc" / "skel" / ".profile").write_text("# skel\n")
    (root / ".slurmctl-jail-populated").write_text("populated\n")
    return root


def sync(jail: Path, identity: dict[str, object]) -> tuple[int, str, str]:
    """Runs the script; (exit status, termination message, log)."""
    message = jail.parent / "termination-log"
    message.write_text("")
    records = render_records(Identity.model_validate(identity))
    env = {"JAIL_DIR": str(jail), "IDENTITY": records, "TERMINATION_LOG": str(message)}
    done = run_script("sync-identity", env=env)
    return done.returncode, message.read_text(), done.stderr


def entry(jail: Path, file: str, name: str) -> list[str] | None:
    for line in (jail / "etc" / file).read_text().splitlines():
        if line.split(":")[0] == name:
            return line.split(":")
    return None


ADA = {"name": "ada", "uid": 2000, "groups": ["research"], "sshAuthorizedKeys": [KEY]}
RESEARCH = {"name": "research", "gid": 3000}


def test_declared_users_and_groups_get_entries_a_home_and_keys(jail: Path) -> None:
    rc, said, log = sync(jail, {"groups": [RESEARCH], "users": [ADA]})
    assert rc == 0, log
    assert said.splitlines() == ["1 users and 2 groups written, 0 locked, 0 refused"], log
    assert entry(jail, "passwd", "ada") == ["ada", "x", "2000", "2000", "", "/home/ada", "/bin/bash"]
    assert entry(jail, "group", "ada") == ["ada", "x", "2000", ""]
    assert entry(jail, "group", "research") == ["research", "x", "3000", "ada"]
    assert entry(jail, "shadow", "ada") is not None
    home = (jail / "home" / "ada").stat()
    assert (home.st_uid, home.st_gid, stat.S_IMODE(home.st_mode)) == (2000, 2000, 0o700)
    assert (jail / "home" / "ada" / ".profile").stat().st_uid == 2000
    keys = jail / KEYS_DIR.lstrip("/") / "ada"
    assert keys.read_text() == KEY + "\n"
    assert (keys.stat().st_uid, stat.S_IMODE(keys.stat().st_mode)) == (0, 0o644)
    assert (jail / STATE_DIR.lstrip("/") / "users").read_text() == "ada\n"
    assert entry(jail, "passwd", "jailuser") == HAND_MADE.split(":")


def test_a_collision_with_an_account_made_by_hand_is_refused_by_name_and_the_rest_applied(jail: Path) -> None:
    users = [ADA, {"name": "bob", "uid": 1500, "gid": 3000}, {"name": "jailuser", "uid": 2002, "gid": 3000}]
    before = (jail / "etc" / "passwd").read_text()
    rc, said, log = sync(jail, {"groups": [RESEARCH], "users": users})
    assert rc == 0, log
    assert said.splitlines() == [
        "1 users and 2 groups written, 0 locked, 2 refused",
        "spec.identity.users[1].uid: 1500 is already used by jailuser",
        "spec.identity.users[2].name: jailuser is already an account of the jail (uid 1500), not made by slurmctl",
    ]
    assert entry(jail, "passwd", "bob") is None
    assert entry(jail, "passwd", "jailuser") == HAND_MADE.split(":")
    assert not (jail / KEYS_DIR.lstrip("/") / "jailuser").exists(), "no key may log in as someone else's account"
    assert entry(jail, "passwd", "ada") is not None
    assert all(line in (jail / "etc" / "passwd").read_text() for line in before.splitlines())


def test_a_removed_user_is_locked_keeps_their_home_and_is_unlocked_when_declared_again(jail: Path) -> None:
    sync(jail, {"groups": [RESEARCH], "users": [ADA]})
    (jail / "home" / "ada" / "results").write_text("ada's work")
    group = jail / "etc" / "group"  # an admin adds someone to the declared group by hand
    group.write_text(group.read_text().replace("research:x:3000:ada\n", "research:x:3000:ada,jailuser\n"))
    rc, said, log = sync(jail, {"groups": [RESEARCH]})
    assert rc == 0, log
    assert said.splitlines() == ["0 users and 1 groups written, 1 locked, 0 refused"]
    shadow = entry(jail, "shadow", "ada")
    assert shadow is not None and shadow[1].startswith("!") and shadow[7] == "1", shadow
    assert not (jail / KEYS_DIR.lstrip("/") / "ada").exists()
    assert (jail / "home" / "ada" / "results").read_text() == "ada's work"
    assert entry(jail, "group", "research") == ["research", "x", "3000", "jailuser"]
    rc, said, log = sync(jail, {"groups": [RESEARCH], "users": [ADA]})
    assert rc == 0, log
    shadow = entry(jail, "shadow", "ada")
    assert shadow is not None and shadow[7] == "", shadow
    assert entry(jail, "group", "research") == ["research", "x", "3000", "jailuser,ada"]
    assert (jail / KEYS_DIR.lstrip("/") / "ada").read_text() == KEY + "\n"


def test_a_jail_not_yet_populated_is_left_alone(jail: Path) -> None:
    (jail / ".slurmctl-jail-populated").unlink()
    rc, _, log = sync(jail, {"users": [ADA]})
    assert rc != 0 and "not populated" in log
    assert entry(jail, "passwd", "ada") is None


def test_a_home_on_a_sub_mount_is_made_there_and_one_that_cannot_be_made_is_named(jail: Path, tmp_path: Path) -> None:
    homes = tmp_path / "submounts" / "homes"
    homes.mkdir(parents=True)
    (jail / "data").write_text("a file where a directory would go")
    users = [{**ADA, "home": "/data/home/ada"}, {"name": "bob", "uid": 2001, "home": "/data/bob"}]
    message = tmp_path / "termination-log"
    message.write_text("")
    env = {
        "JAIL_DIR": str(jail),
        "IDENTITY": render_records(Identity.model_validate({"groups": [RESEARCH], "users": users})),
        "TERMINATION_LOG": str(message),
        "JAIL_SUBMOUNTS": "homes:/data/home",
        "SUBMOUNTS_ROOT": str(tmp_path / "submounts"),
    }
    done = run_script("sync-identity", env=env)
    assert done.returncode == 0, done.stderr
    assert (homes / "ada").stat().st_uid == 2000
    lines = message.read_text().splitlines()
    assert lines[0] == "2 users and 3 groups written, 0 locked, 1 refused", lines
    assert lines[1].startswith("spec.identity.users[1].home: /data/bob could not be made (the account is written)")
    assert entry(jail, "passwd", "bob") is not None
