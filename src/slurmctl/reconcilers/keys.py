"""Key material the cluster reconciler creates once per cluster and never rotates.

Generation is random, so it lives here rather than in the pure renderers; the renderers receive the bytes.
"""

from __future__ import annotations

import secrets

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

MUNGE_KEY_BYTES = 1024
# sshd refuses RSA keys below 2048 bits; 3072 is ssh-keygen's default and keeps host keys current for years.
RSA_BITS = 3072


def new_munge_key() -> bytes:
    """1024 bytes from the OS CSPRNG: munged's own `mungekey` default size."""
    return secrets.token_bytes(MUNGE_KEY_BYTES)


def new_ssh_host_keys() -> dict[str, bytes]:
    """Host keys as sshd reads them from /etc/ssh: `ssh_host_<type>_key` (OpenSSH private format) and `.pub`."""
    keys: dict[str, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey] = {
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "ecdsa": ec.generate_private_key(ec.SECP256R1()),
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS),
    }
    files: dict[str, bytes] = {}
    for kind, key in keys.items():
        name = f"ssh_host_{kind}_key"
        files[name] = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        files[f"{name}.pub"] = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    return files
