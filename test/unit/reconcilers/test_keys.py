"""Generated key material is usable by the daemons that read it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from slurmctl.reconcilers.keys import MUNGE_KEY_BYTES, new_munge_key, new_ssh_host_keys
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES, HOST_KEY_TYPES, host_key_types


def test_munge_keys_are_1024_random_bytes_and_differ() -> None:
    first, second = new_munge_key(), new_munge_key()
    assert len(first) == len(second) == MUNGE_KEY_BYTES
    assert first != second


def test_default_host_keys_are_ed25519_and_ecdsa_only() -> None:
    """RSA-3072 costs ~0.2 s of CPU per cluster: opt-in (`--ssh-rsa-host-keys`)."""
    files = new_ssh_host_keys()
    assert host_key_types(files) == DEFAULT_HOST_KEY_TYPES == ("ed25519", "ecdsa")
    assert set(files) == {f"ssh_host_{k}_key{ext}" for k in ("ed25519", "ecdsa") for ext in ("", ".pub")}


def test_ssh_host_keys_are_complete_pairs_that_ssh_keygen_accepts(tmp_path: Path) -> None:
    files = new_ssh_host_keys(HOST_KEY_TYPES)
    kinds = ("ed25519", "ecdsa", "rsa")
    assert set(files) == {f"ssh_host_{k}_key{ext}" for k in kinds for ext in ("", ".pub")}
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        pytest.fail("ssh-keygen (openssh-client) is needed to check the keys")
    for kind in kinds:
        private = tmp_path / f"ssh_host_{kind}_key"
        private.write_bytes(files[private.name])
        private.chmod(0o600)
        derived = subprocess.run(
            [keygen, "-y", "-f", str(private)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert derived.split()[:2] == files[f"{private.name}.pub"].decode().split()[:2]
