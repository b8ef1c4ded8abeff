"""Where pods go by default: each worker group spreads over nodes (soft), the controller and login pods avoid sharing a
node (soft), and what the spec says replaces those defaults as docs/concepts.md "Where pods run" states."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta
from test.unit.render.samples import manifests, object_key, sample_doc

HOSTNAME = "kubernetes.io/hostname"
USER_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]
        }
    }
}
USER_SPREAD = [
    {
        "maxSkew": 2,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "workers"}},
    }
]


def _render(change: Callable[[dict[str, Any]], None] = lambda doc: None) -> dict[str, dict[str, Any]]:
    doc = sample_doc("research")
    change(doc)
    return {object_key(obj): obj for obj in manifests(SlurmCluster.model_validate(doc))}


def _group(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (group,) = [g for g in doc["spec"]["workers"] if g["name"] == name]
    return group


def _pod(objs: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    pod: dict[str, Any] = objs[f"statefulset-research-{name}"]["spec"]["template"]["spec"]
    return pod


def _terms(pod: dict[str, Any]) -> list[tuple[int, dict[str, str]]]:
    """The preferred anti-affinity terms, as (weight, matchLabels); each checked to be per node."""
    out = []
    for term in pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]:
        assert term["podAffinityTerm"]["topologyKey"] == HOSTNAME
        assert set(term["podAffinityTerm"]) == {"topologyKey", "labelSelector"}  # the pod's own namespace
        out.append((term["weight"], term["podAffinityTerm"]["labelSelector"]["matchLabels"]))
    return out


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("group", ["cpu", "h100"])
def test_each_worker_group_spreads_its_own_pods_over_nodes_softly(group: str) -> None:
    objs = _render()
    sts = objs[f"statefulset-research-worker-{group}"]
    (constraint,) = sts["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert constraint == {
        "maxSkew": 1,
        "topologyKey": HOSTNAME,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": sts["spec"]["selector"]["matchLabels"]},
    }
    assert constraint["labelSelector"]["matchLabels"] == {
        meta.LABEL_INSTANCE: "research",
        meta.LABEL_COMPONENT: "workers",
        meta.LABEL_WORKER_GROUP: group,
    }
    # Its own pods match it, the other group's do not: each group is spread on its own.
    other = "h100" if group == "cpu" else "cpu"
    assert _selects(constraint["labelSelector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"])
    other_labels = objs[f"statefulset-research-worker-{other}"]["spec"]["template"]["metadata"]["labels"]
    assert not _selects(constraint["labelSelector"]["matchLabels"], other_labels)


def test_the_spread_keeps_the_groups_scheduling() -> None:
    pod = _pod(_render(), "worker-h100")
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "affinity" not in pod  # workers get no default affinity


def test_a_groups_constraints_replace_the_default_and_touch_only_that_group() -> None:
    before = _render()
    after = _render(lambda doc: _group(doc, "h100").update(topologySpreadConstraints=USER_SPREAD))
    assert _pod(after, "worker-h100")["topologySpreadConstraints"] == USER_SPREAD
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {"statefulset-research-worker-h100"}


def test_an_empty_list_turns_the_spread_off() -> None:
    objs = _render(lambda doc: _group(doc, "cpu").update(topologySpreadConstraints=[]))
    assert "topologySpreadConstraints" not in _pod(objs, "worker-cpu")
    assert "topologySpreadConstraints" in _pod(objs, "worker-h100")


def test_null_is_unset_and_keeps_the_default() -> None:
    assert _render(lambda doc: _group(doc, "cpu").update(topologySpreadConstraints=None)) == _render()


def test_the_spread_does_not_depend_on_the_groups_size() -> None:
    """Scaling changes only replicas (test_changes.py), so it never rolls a group's pods."""
    before = _pod(_render(), "worker-cpu")
    assert _pod(_render(lambda doc: _group(doc, "cpu").update(size=1)), "worker-cpu") == before


def test_controller_and_login_avoid_each_others_nodes_and_login_pods_each_other() -> None:
    objs = _render()
    controller, login = _pod(objs, "controller"), _pod(objs, "login")
    controller_labels = objs["statefulset-research-controller"]["spec"]["template"]["metadata"]["labels"]
    login_labels = objs["statefulset-research-login"]["spec"]["template"]["metadata"]["labels"]

    ((weight, avoids),) = _terms(controller)
    assert weight == 100 and avoids == {meta.LABEL_INSTANCE: "research", meta.LABEL_COMPONENT: "login"}
    assert _selects(avoids, login_labels) and not _selects(avoids, controller_labels)

    (apart, spread) = _terms(login)
    assert apart == (100, {meta.LABEL_INSTANCE: "research", meta.LABEL_COMPONENT: "controller"})
    assert _selects(apart[1], controller_labels) and not _selects(apart[1], login_labels)
    assert spread == (50, {meta.LABEL_INSTANCE: "research", meta.LABEL_COMPONENT: "login"})
    assert _selects(spread[1], login_labels)
    # Another cluster's pods in the namespace are not avoided.
    assert not _selects(avoids, {**login_labels, meta.LABEL_INSTANCE: "other"})
    # Soft only: nothing required, and no spread constraint by default.
    for pod in (controller, login):
        assert set(pod["affinity"]) == {"podAntiAffinity"}
        assert set(pod["affinity"]["podAntiAffinity"]) == {"preferredDuringSchedulingIgnoredDuringExecution"}
        assert "topologySpreadConstraints" not in pod


@pytest.mark.parametrize("component", ["controller", "login"])
def test_a_users_affinity_without_pod_anti_affinity_is_merged_with_the_default(component: str) -> None:
    default = _pod(_render(), component)["affinity"]["podAntiAffinity"]
    pod = _pod(_render(lambda doc: doc["spec"].setdefault(component, {}).update(affinity=USER_AFFINITY)), component)
    assert pod["affinity"] == {**USER_AFFINITY, "podAntiAffinity": default}


@pytest.mark.parametrize("component", ["controller", "login"])
@pytest.mark.parametrize(
    "anti_affinity",
    [
        {},
        {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"team": "a"}}}
            ]
        },
    ],
    ids=["empty", "required"],
)
def test_a_users_pod_anti_affinity_replaces_the_default(component: str, anti_affinity: dict[str, Any]) -> None:
    affinity = {**USER_AFFINITY, "podAntiAffinity": anti_affinity}
    pod = _pod(_render(lambda doc: doc["spec"].setdefault(component, {}).update(affinity=affinity)), component)
    assert pod["affinity"] == affinity


def test_login_and_controller_take_spread_constraints_when_given() -> None:
    objs = _render(lambda doc: doc["spec"]["login"].update(topologySpreadConstraints=USER_SPREAD))
    assert _pod(objs, "login")["topologySpreadConstraints"] == USER_SPREAD
    assert "podAntiAffinity" in _pod(objs, "login")["affinity"]  # independent of the anti-affinity


def test_defaults_are_fresh_objects() -> None:
    """The StatefulSet's selector and the spread's labelSelector are equal, not the same dict: a later change to one
    (by any code that edits a rendered object) must not reach the other."""
    sts = _render()["statefulset-research-worker-cpu"]
    (constraint,) = sts["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert constraint["labelSelector"]["matchLabels"] is not sts["spec"]["selector"]["matchLabels"]


def _pod_templates(objs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod template the cluster renders, by object key (a CronJob's inside its Job template)."""
    out = {}
    for key, obj in objs.items():
        spec = obj.get("spec", {})
        template = spec.get("jobTemplate", {}).get("spec", {}).get("template") or spec.get("template")
        if obj["kind"] in ("StatefulSet", "Deployment", "Job", "CronJob"):
            out[key] = template
    return out


def test_every_pod_carries_its_component_s_priority_labels_annotations_and_the_pull_secrets() -> None:
    """A private registry's secret reaches every pod; each component's priority class, labels and annotations reach
    its own pods only, beside the operator's labels and annotations."""
    paths = {  # the object that makes a component's pods -> where its settings are in the spec
        "job-research-populate-jail": ("populateJail",),
        "statefulset-research-controller": ("controller",),
        "statefulset-research-worker-cpu": ("workers", "cpu"),
        "statefulset-research-worker-h100": ("workers", "h100"),
        "statefulset-research-login": ("login",),
        "deployment-research-accounting": ("accounting",),
        "deployment-research-rest": ("rest",),
        "cronjob-research-nccl-benchmark": ("healthChecks", "ncclBenchmark"),
    }

    def component(doc: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        if path[0] == "workers":
            return _group(doc, path[1])
        node: dict[str, Any] = doc["spec"]
        for name in path:
            node = node.setdefault(name, {})
        return node

    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["slurm"]["imagePullSecrets"] = [{"name": "registry"}]
        for key, path in paths.items():
            settings = component(doc, path)
            settings["priorityClassName"] = f"pc-{key}"
            settings["podLabels"] = {"example.com/team": key[-20:].strip("-")}
            settings["podAnnotations"] = {"example.com/made-by": key}

    # The identity Job runs with the populate-jail Job's settings (both write into the jail, on the same nodes).
    shared = {"job-research-identity": "job-research-populate-jail"}
    before, after = _pod_templates(_render()), _pod_templates(_render(change))
    assert set(after) == set(paths) | set(shared)
    for key, template in after.items():
        by = shared.get(key, key)
        assert template["spec"]["priorityClassName"] == f"pc-{by}", key
        assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}], key
        ours = before[key]["metadata"]
        assert template["metadata"]["labels"] == {**ours["labels"], "example.com/team": by[-20:].strip("-")}, key
        assert template["metadata"]["annotations"] == {**ours.get("annotations", {}), "example.com/made-by": by}, key
        assert "priorityClassName" not in before[key]["spec"] and "imagePullSecrets" not in before[key]["spec"], key
