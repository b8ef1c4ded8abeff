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
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "NET_BIND_SERVICE", "SETGID", "SETPCAP", "SETUID",
    "SYS_ADMIN", "SYS_CHROOT",
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


# Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/), the checks our pods
# can trip; the API server's own verdict on real pods is test/e2e/pods/test_pod_security.py's. docs/pod-security.md
# has this table and why each component needs its level.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected"}
RESTRICTED_VOLUMES |= {"secret"}
LEVELS = {
    "controller": "baseline",
    "workers": "privileged",
    "login": "privileged",
    "accounting": "restricted",
    "rest": "restricted",
    "populate-jail": "baseline",
    "identity": "baseline",
    "benchmark": "baseline",
}


def level(pod: dict[str, Any]) -> str:
    """The strictest Pod Security level a pod spec meets."""
    every = [*pod.get("initContainers", []), *pod.get("containers", [])]
    contexts = [c.get("securityContext") or {} for c in every]
    host = any(pod.get(f) for f in ("hostNetwork", "hostPID", "hostIPC"))
    volumes = {next(k for k in v if k != "name") for v in pod.get("volumes", [])}
    added = {cap for c in contexts for cap in (c.get("capabilities") or {}).get("add", [])}
    if host or "hostPath" in volumes or any(c.get("privileged") for c in contexts) or added - BASELINE_CAPABILITIES:
        return "privileged"
    pod_context = pod.get("securityContext") or {}
    non_root = all(c.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True for c in contexts)
    root = pod_context.get("runAsUser") == 0 or any(c.get("runAsUser") == 0 for c in contexts)
    seccomp = all((c.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type") for c in contexts)
    drops = all("ALL" in (c.get("capabilities") or {}).get("drop", []) for c in contexts)
    escalation = all(c.get("allowPrivilegeEscalation") is False for c in contexts)
    restricted = non_root and not root and seccomp and drops and escalation and added <= {"NET_BIND_SERVICE"}
    return "restricted" if restricted and volumes <= RESTRICTED_VOLUMES else "baseline"


def test_each_component_meets_the_pod_security_level_the_docs_say() -> None:
    """slurmrestd and slurmdbd (with its munge sidecar) run without root or capabilities ("restricted"); slurmctld,
    populate-jail, identity and the benchmark start as root with baseline's capabilities; slurmd and sshd need more."""
    found: dict[str, set[str]] = {}
    for variant in sorted(VARIANTS):
        cluster = SlurmCluster.model_validate(sample_doc(variant))
        for obj in desired_objects(Inputs.offline(cluster)):
            spec = obj.get("spec") or {}
            template = (spec.get("jobTemplate") or {}).get("spec", spec).get("template")
            if template:
                component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
                found.setdefault(component, set()).add(level(template["spec"]))
    assert found == {component: {lvl} for component, lvl in LEVELS.items()}
