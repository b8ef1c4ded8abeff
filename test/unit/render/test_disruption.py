"""The workers' PodDisruptionBudget: which pods an eviction must leave alone (every worker pod of the cluster not
labelled evictable, none of them may go), as policy/v1."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.render import meta
from test.unit.render.samples import manifests, sample


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector as the API server evaluates it (NotIn and DoesNotExist also match a missing label)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if (
            (op == "In" and not (present and labels[key] in values))
            or (op == "NotIn" and present and labels[key] in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["spec"]["template"]["metadata"]["labels"])


def test_every_worker_pod_is_protected_until_labelled_evictable_and_none_may_go() -> None:
    cluster = sample("research")
    objects = manifests(cluster)
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["metadata"]["name"] == "research-workers"
    assert pdb["spec"]["maxUnavailable"] == 0
    selector = pdb["spec"]["selector"]
    workers = [pod_labels(o) for o in objects if o["kind"] == "StatefulSet" and "-worker-" in o["metadata"]["name"]]
    others = [pod_labels(o) for o in objects if o["kind"] == "StatefulSet" and "-worker-" not in o["metadata"]["name"]]
    assert len(workers) >= 2 and others
    for labels in workers:
        assert selects(selector, labels), "a worker pod as its StatefulSet creates it is protected"
        assert not selects(selector, {**labels, meta.LABEL_EVICTABLE: "true"}), "evictable: not protected"
        assert selects(selector, {**labels, meta.LABEL_EVICTABLE: "false"})
        before_rename = {**labels, meta.LABEL_COMPONENT: "worker"}
        assert selects(selector, before_rename), "pods of releases before the component rename are protected too"
        assert not selects(selector, {**labels, meta.LABEL_INSTANCE: "another"}), "another cluster's pods are not"
    for labels in others:
        assert not selects(selector, labels), "controller and login pods are not workers"
