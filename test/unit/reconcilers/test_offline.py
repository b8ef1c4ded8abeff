"""`slurmctl render` is the components' plans for an offline observation (reconcilers/offline.py): for every spec
variant and flag set it prints, byte for byte, what the components' renderers give for `Inputs.offline` (what it
printed before it planned), and each planned component's plan applies exactly its renderer's objects.

Where a plan and its renderer could legitimately part, they do not for an offline observation: a disabled component
(rest off, accounting off, the benchmark without GPU groups) plans nothing to apply and its renderer renders nothing;
an elastic group's pods are created by its plan only for the nodes Slurm powers up, and no Slurm is observed offline,
while the renderer never renders them; the key Secrets exist in the observation, so the cluster's plan creates none
(and a key Secret's body is made only when created: `Plan.objects` never holds one).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from slurmctl import cli
from slurmctl.api.v1 import JAIL_POPULATED, OPEN_POLICY, Policy, SlurmCluster
from slurmctl.reconcilers import offline
from slurmctl.reconcilers.registry import COMPONENTS, desired_objects, planned_objects
from slurmctl.render import meta
from slurmctl.render.manifests import Inputs
from test.unit.api.helpers import sample_clusters

Doc = dict[str, Any]
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHj3mVf1H3vZC1y0XbmRuAlbCbe2fXx5nH0wYDsSgm0B admin@example.com"
ELASTIC = {"name": "burst", "size": 0, "autoscale": {"min": 1, "max": 4}, "resources": {"requests": {"cpu": 1}}}


def _mariadb(spec: Doc) -> None:
    spec["accounting"] = {"enabled": True, "mariadb": {"enabled": True, "storage": {"size": "50Gi"}}}


# Variant -> (sample, change to its spec).
VARIANTS: dict[str, tuple[str, Callable[[Doc], None]]] = {
    "minimal": ("slurmcluster_minimal.yaml", lambda spec: None),
    "research": ("slurmcluster_research.yaml", lambda spec: None),  # accounting (external), benchmark, 2 logins
    "research-mariadb": ("slurmcluster_research.yaml", _mariadb),
    "accounting-off": ("slurmcluster_research.yaml", lambda spec: spec.update(accounting={"enabled": False})),
    "rest-off": ("slurmcluster_research.yaml", lambda spec: spec.update(rest={"enabled": False})),
    "minimal-rest-off": ("slurmcluster_minimal.yaml", lambda spec: spec.update(rest={"enabled": False})),
    "benchmark-suspended": (
        "slurmcluster_research.yaml",
        lambda spec: spec["healthChecks"]["ncclBenchmark"].update(enabled=False),
    ),
    "elastic": ("slurmcluster_minimal.yaml", lambda spec: spec["workers"].append(copy.deepcopy(ELASTIC))),
    "elastic-gpu": (
        "slurmcluster_research.yaml",
        lambda spec: spec["workers"].append({**copy.deepcopy(ELASTIC), "gpus": 8}),
    ),
    "no-login": ("slurmcluster_minimal.yaml", lambda spec: spec.update(login={"size": 0})),
    "three-logins": (
        "slurmcluster_minimal.yaml",
        lambda spec: spec.update(login={"size": 3, "sshRootPublicKeys": [SSH_KEY]}),
    ),
    "standby": ("slurmcluster_minimal.yaml", lambda spec: spec.update(controller={"standby": True})),
    "topology": (
        "slurmcluster_research.yaml",
        lambda spec: spec.update(topology={"tree": {"levels": ["topology.kubernetes.io/zone", "example.com/sw"]}}),
    ),
}
# Flag set -> (the operator's policy, --cluster-domain).
FLAGS: dict[str, tuple[Policy, str]] = {
    "open": (OPEN_POLICY, meta.DEFAULT_CLUSTER_DOMAIN),
    "no-root-jobs": (
        dataclasses.replace(OPEN_POLICY, allow_root_jobs=False, allow_privileged_jobs=False),
        "corp.internal",
    ),
}


def _doc(variant: str) -> Doc:
    sample, change = VARIANTS[variant]
    doc = copy.deepcopy(sample_clusters()[sample])
    change(doc["spec"])
    doc["metadata"]["namespace"] = "hpc"
    return doc


def _offline_inputs(cluster: SlurmCluster, policy: Policy, domain: str) -> Inputs:
    """What `slurmctl render` rendered before it planned."""
    return Inputs.offline(
        cluster,
        root_jobs=policy.allow_root_jobs,
        privileged_jobs=policy.allow_privileged_jobs,
        cluster_domain=domain,
    )


def _dump(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)  # as render writes them: key order counts


@pytest.mark.parametrize("flags", sorted(FLAGS))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_render_prints_the_plans_which_apply_what_the_renderers_render(variant: str, flags: str) -> None:
    policy, domain = FLAGS[flags]
    cluster = SlurmCluster.model_validate(_doc(variant))
    obs = offline.observation(cluster, policy=policy, cluster_domain=domain)
    inputs = _offline_inputs(cluster, policy, domain)
    for component in COMPONENTS:
        if component.plan is None or not component.plans_offline:
            continue  # render prints its renderer's objects (accounting: its plan needs the database password)
        plan = component.plan(obs)
        assert _dump(plan.objects) == _dump(component.render(inputs)), f"{component.name}'s plan and renderer differ"
        assert not [c for c in plan.create if c.obj is None], f"{component.name} makes key material offline"
    assert _dump(planned_objects(obs)) == _dump(desired_objects(inputs))


def test_the_cli_prints_the_plans_objects(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Through `main`, with the flags: the same bytes as the renderers for the same policy and domain."""
    path = tmp_path / "clusters.yaml"
    docs = [_doc("research"), _doc("elastic")]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    flags = ["--allow-host-path", "--allowed-volume-sources=nfs", "--allow-root-logins", "--allow-root-jobs"]
    assert cli.main(["render", "-f", str(path), "--cluster-domain", "corp.internal", *flags]) == 0, err.getvalue()
    policy = Policy(
        allow_host_path=True, allowed_volume_sources=frozenset({"nfs"}), allow_root_logins=True, allow_root_jobs=True
    )
    expected = [
        obj
        for doc in docs
        for obj in desired_objects(_offline_inputs(SlurmCluster.model_validate(doc), policy, "corp.internal"))
    ]
    assert out.getvalue() == _dump(expected)


def test_a_status_in_the_file_is_not_the_new_clusters() -> None:
    """`kubectl get -o yaml` output carries a status; a populated jail in it must not leave the Job out."""
    doc = _doc("minimal")
    populated = {"type": JAIL_POPULATED, "status": "True", "reason": "Populated", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}  # fmt: skip
    doc["status"] = {"conditions": [populated]}
    cluster = SlurmCluster.model_validate(doc)
    rendered = planned_objects(offline.observation(cluster))
    assert ("Job", meta.populate_jail("minimal")) in [(o["kind"], o["metadata"]["name"]) for o in rendered]
    assert _dump(rendered) == _dump(desired_objects(Inputs.offline(cluster, root_jobs=False)))
