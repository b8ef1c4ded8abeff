"""Key material the cluster reconciler creates once per cluster and never rotates.

Generation is random, so it lives here rather than in the pure renderers; the renderers receive the bytes.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES, host_key_file

MUNGE_KEY_BYTES = 1024
# Slurm's JWT guide makes jwt_hs256.key from 32 random bytes: the 256 bits HS256 (HMAC-SHA256) signs with.
JWT_KEY_BYTES = 32
# sshd refuses RSA keys below 2048 bits; 3072 is ssh-keygen's default and keeps host keys current for years.
RSA_BITS = 3072


def new_munge_key() -> bytes:
    """1024 bytes from the OS CSPRNG: munged's own `mungekey` default size."""
    return secrets.token_bytes(MUNGE_KEY_BYTES)


def new_jwt_key() -> bytes:
    """32 bytes from the OS CSPRNG, as Slurm's JWT guide makes jwt_hs256.key."""
    return secrets.token_bytes(JWT_KEY_BYTES)


PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _new_key(kind: str) -> PrivateKey:
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if kind == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    raise ValueError(f"unknown SSH host key type {kind!r}")


def new_ssh_host_keys(types: Iterable[str] = DEFAULT_HOST_KEY_TYPES) -> dict[str, bytes]:
    """Host keys as sshd reads them from /etc/ssh: `ssh_host_<type>_key` (OpenSSH private format) and `.pub`.
    ed25519 and ECDSA take well under a millisecond; RSA-3072 (opt-in) takes ~0.2 s of CPU."""
    files: dict[str, bytes] = {}
    for kind in types:
        key = _new_key(kind)
        name = host_key_file(kind)
        files[name] = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        files[f"{name}.pub"] = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    return files
