"""The oldest Kubernetes the operator supports, and the check at start that refuses an older API server.

Every kind is written at one API version (CronJob batch/v1, PodDisruptionBudget policy/v1, ...), with no fallback to
the versions older releases served. Against an older API server the operator would not fail at start but later, one
write or one watch at a time, far from the cause; asking the server's version once, before anything starts, turns that
into one log line naming both versions and an exit status Kubernetes shows.

Generic: it knows Kubernetes versions, nothing about what the operator manages.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from slurmctl.runtime.client import Client
from slurmctl.runtime.errors import ApiError
from slurmctl.runtime.logs import kv

log = logging.getLogger(__name__)

# (major, minor): the oldest Kubernetes release slurmctl supports. Declared here and nowhere else.
MIN_KUBERNETES: Final = (1, 32)

# Leading digits only: managed clusters add a suffix to `minor` ("32+" on GKE and EKS).
_NUMBER = re.compile(r"\s*(\d+)")
# "v1.37.2", "v1.32.3-eks-1234abc", "v1.33.1+k3s1": the first two numbers.
_GIT_VERSION = re.compile(r"\s*v?(\d+)\.(\d+)")


@dataclass(frozen=True)
class KubernetesVersion:
    major: int
    minor: int
    git_version: str = ""  # as the server spells it (e.g. v1.37.2), for messages; may be empty

    def at_least(self, minimum: tuple[int, int]) -> bool:
        return (self.major, self.minor) >= minimum

    def __str__(self) -> str:
        return self.git_version or f"v{self.major}.{self.minor}"


def version_text(version: tuple[int, int]) -> str:
    """`(1, 32)` as people and `kubectl version` write it: v1.32."""
    return f"v{version[0]}.{version[1]}"


def parse_version(info: Mapping[str, Any]) -> KubernetesVersion | None:
    """The release of a `/version` answer: its `major` and `minor` (as kubectl reads them), where `minor` may carry a
    suffix ("32+"); when either is empty or unreadable (some builds leave them so), the first two numbers of
    `gitVersion`. None when neither says it."""
    git_version = str(info.get("gitVersion") or "").strip()
    major = _NUMBER.match(str(info.get("major") or ""))
    minor = _NUMBER.match(str(info.get("minor") or ""))
    if major and minor:
        return KubernetesVersion(int(major.group(1)), int(minor.group(1)), git_version)
    from_git = _GIT_VERSION.match(git_version)
    if from_git:
        return KubernetesVersion(int(from_git.group(1)), int(from_git.group(2)), git_version)
    return None


async def check_server_version(client: Client, minimum: tuple[int, int] = MIN_KUBERNETES) -> bool:
    """Whether the operator may start against this API server: False (after one ERROR line naming the version found
    and the minimum) only when the server says it is older than `minimum`. A version that cannot be read (the server
    not answering within the client's retries, an answer without one) is logged as a warning and lets the operator
    start: a passing outage must not become a crash loop, and the informers report and ride out an outage as before.
    """
    try:
        info = await client.server_version()
    except ApiError as exc:
        log.warning("cannot read the API server's version; starting anyway %s", kv(error=exc))
        return True
    version = parse_version(info) if isinstance(info, Mapping) else None
    if version is None:
        log.warning("the API server's version cannot be parsed; starting anyway %s", kv(answer=info))
        return True
    if not version.at_least(minimum):
        log.error(
            "the API server is older than slurmctl supports %s",
            kv(kubernetes_version=version, minimum=version_text(minimum)),
        )
        return False
    log.info("API server version %s", kv(kubernetes_version=version, minimum=version_text(minimum)))
    return True
