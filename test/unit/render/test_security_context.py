"""Every container the operator renders says how it runs: privileged only where Slurm needs it (slurmd: pivot_root,
mounts, the node's devices for jobs), sshd with the few capabilities sshd and complement-jail use (no privileged
mode, no node devices), everything else without privilege escalation, with the runtime's default seccomp filter and
only the capabilities its root entrypoint uses before it drops to its user."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render.manifests import Inputs
from test.unit.render.samples import VARIANTS, sample_doc

PRIVILEGED = {"slurmd"}
SSHD_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_ADMIN",
    "SYS_CHROOT",
}  # fmt: skip


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    template = (spec.get("jobTemplate") or {}).get("spec", spec).get("template") or {}
    pod = template.get("spec") or {}
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_has_a_security_context_and_only_slurmd_is_privileged(variant: str) -> None:
    cluster = SlurmCluster.model_validate(sample_doc(variant))
    found = {}
    for obj in desired_objects(Inputs.offline(cluster)):
        for container in containers(obj):
            found[(obj["metadata"]["name"], container["name"])] = container.get("securityContext")
    assert found, "the sample renders workloads"
    for (workload, name), context in found.items():
        assert context, f"{workload}/{name} has no securityContext"
        if name in PRIVILEGED:
            assert context == {"privileged": True}, f"{workload}/{name}"
            continue
        if name == "sshd":
            assert not context.get("privileged") and context["seccompProfile"] == {"type": "RuntimeDefault"}
            assert context["capabilities"] == {"drop": ["ALL"], "add": sorted(SSHD_CAPABILITIES)}
            continue
        assert not context.get("privileged"), f"{workload}/{name}"
        assert context["allowPrivilegeEscalation"] is False, f"{workload}/{name}"
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, f"{workload}/{name}"
        assert context["capabilities"]["drop"] == ["ALL"], f"{workload}/{name}"
        assert not {"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "NET_RAW"} & set(context["capabilities"].get("add", []))
