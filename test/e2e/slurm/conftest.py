"""Fixtures for tests against real Slurm daemons: one local instance per test session, with the chroot plugin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm, ensure_test_user, local_slurm_instance


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """slurmctld + slurmd + munged on loopback; every job step runs inside a busybox jail under the state dir.

    Clients run with `.env` (or `.run(...)`, whose cwd "/" exists in the jail). `.user` is a non-root user present on
    the host and in the jail's /etc/passwd.
    """
    user = ensure_test_user()
    with local_slurm_instance(tmp_path_factory.mktemp("local-slurm"), jail_users=(user,)) as slurm:
        yield slurm
