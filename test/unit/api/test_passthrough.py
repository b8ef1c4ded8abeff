"""Pass-through Kubernetes objects that the API server would reject when a child is applied (or, on Kubernetes 1.20,
accept into a StatefulSet whose pods then never start) are validation problems naming the SlurmCluster field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmctl.api.v1 import OPEN_POLICY, check_cluster
from slurmctl.cli import main

GOOD_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                                         "values": ["H100"]}]}]
        }
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                               "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "x"}}}}
        ]
    },
}  # fmt: skip
SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
GOOD_SPREAD = [
    {**SPREAD, "labelSelector": {"matchLabels": {"slurm.slurmctl.io/worker-group": "gpu"}}},
    {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2,
     "labelSelector": {"matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "In",
                                             "values": ["workers"]}]}},
]  # fmt: skip
GOOD_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    {"operator": "Exists"},
]


def cluster(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "gpu", "gpus": 8}]}
    return {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "metadata": {"name": "c"},
            "spec": {**base, **spec}}  # fmt: skip


def worker(**fields: Any) -> list[dict[str, Any]]:
    return [{"name": "gpu", "gpus": 8, **fields}]


def problems_of(obj: dict[str, Any]) -> list[str]:
    return [str(p) for p in check_cluster(obj, policy=OPEN_POLICY)[1]]


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("volume source with an unknown kind", {"jail": {"volume": {"source": {"bogus": {"x": 1}}}}},
     "spec.jail.volume.source: Additional properties are not allowed ('bogus' was unexpected)"),
    ("volume source of the wrong type", {"jail": {"volume": {"source": {"emptyDir": "x"}}}},
     "spec.jail.volume.source.emptyDir: 'x' is not of type 'object', 'null'"),
    ("sub-mount volume missing a field",
     {"jail": {"volume": {"claimName": "j"},
               "subMounts": [{"name": "d", "mountPath": "/data", "volume": {"source": {"nfs": {"server": "s"}}}}]}},
     "spec.jail.subMounts[0].volume.source.nfs: 'path' is a required property"),
    ("toleration with an unknown field", {"workers": worker(tolerations=[{"foo": "bar"}])},
     "spec.workers[0].tolerations[0]: Additional properties are not allowed ('foo' was unexpected)"),
    ("toleration effect", {"workers": worker(tolerations=[{"key": "k", "operator": "Exists", "effect": "Never"}])},
     "spec.workers[0].tolerations[0].effect: 'Never' is not one of NoSchedule, PreferNoSchedule, NoExecute (or empty)"),
    ("toleration without key", {"controller": {"tolerations": [{"operator": "Equal", "value": "x"}]}},
     "spec.controller.tolerations[0].operator: must be Exists when key is empty (tolerate every taint)"),
    ("affinity with an unknown field", {"login": {"affinity": {"foo": "bar"}}},
     "spec.login.affinity: Additional properties are not allowed ('foo' was unexpected)"),
    ("node affinity operator",
     {"workers": worker(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near"}]}]}}})},
     "spec.workers[0].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator: 'Near' is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"),
    ("spread constraint missing a field",
     {"workers": worker(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname"}])},
     "spec.workers[0].topologySpreadConstraints[0]: 'whenUnsatisfiable' is a required property"),
    ("spread constraint with an unknown field", {"login": {"topologySpreadConstraints": [{**SPREAD, "skew": 1}]}},
     "spec.login.topologySpreadConstraints[0]: Additional properties are not allowed ('skew' was unexpected)"),
    ("spread constraint maxSkew", {"workers": worker(topologySpreadConstraints=[{**SPREAD, "maxSkew": 0}])},
     "spec.workers[0].topologySpreadConstraints[0].maxSkew: 0 is not greater than zero"),
    ("spread constraint action",
     {"controller": {"topologySpreadConstraints": [{**SPREAD, "whenUnsatisfiable": "Wait"}]}},
     "spec.controller.topologySpreadConstraints[0].whenUnsatisfiable: 'Wait' is not one of DoNotSchedule, "
     "ScheduleAnyway"),
    ("spread constraint topology key", {"rest": {"topologySpreadConstraints": [{**SPREAD, "topologyKey": "a b"}]}},
     "spec.rest.topologySpreadConstraints[0].topologyKey: 'a b': the name must be at most 63 characters of letters, "
     "digits, '-', '_' or '.', starting and ending with a letter or digit"),
    ("spread constraints twice for one key", {"workers": worker(topologySpreadConstraints=[SPREAD, SPREAD])},
     "spec.workers[0].topologySpreadConstraints[1]: a second constraint for topologyKey 'kubernetes.io/hostname' "
     "and whenUnsatisfiable 'ScheduleAnyway'"),
    ("spread constraint selector",
     {"workers": worker(topologySpreadConstraints=[
         {**SPREAD, "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}}])},
     "spec.workers[0].topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator: 'Gt' is not one of "
     "In, NotIn, Exists, DoesNotExist"),
    ("spread constraint minDomains", {"workers": worker(topologySpreadConstraints=[{**SPREAD, "minDomains": 2}])},
     "spec.workers[0].topologySpreadConstraints[0].minDomains: only applies to whenUnsatisfiable DoNotSchedule"),
    ("node selector key", {"populateJail": {"nodeSelector": {"bad key!": "x"}}},
     "spec.populateJail.nodeSelector.bad key!: 'bad key!': the name must be at most 63 characters of letters, "
     "digits, '-', '_' or '.', starting and ending with a letter or digit"),
    ("node selector value", {"accounting": {"nodeSelector": {"zone": "a b"}}},
     "spec.accounting.nodeSelector.zone: 'a b' is not a label value (at most 63 letters, digits, '-', '_' or '.', "
     "alphanumeric at the ends)"),
    ("login Service annotation key", {"login": {"service": {"annotations": {"Example.com/lb": "x"}}}},
     "spec.login.service.annotations.Example.com/lb: 'Example.com/lb': the prefix before '/' must be a lowercase DNS "
     "subdomain of at most 253 characters"),
    ("pod label value", {"workers": worker(podLabels={"team": "a b"})},
     "spec.workers[0].podLabels.team: 'a b' is not a label value (at most 63 letters, digits, '-', '_' or '.', "
     "alphanumeric at the ends)"),
    ("pod annotation key", {"rest": {"podAnnotations": {"Example.com/x": "y"}}},
     "spec.rest.podAnnotations.Example.com/x: 'Example.com/x': the prefix before '/' must be a lowercase DNS "
     "subdomain of at most 253 characters"),
    ("benchmark resources", {"healthChecks": {"ncclBenchmark": {"resources": {"limits": {"gpus": 1}}}}},
     "spec.healthChecks.ncclBenchmark.resources.limits.gpus: 'gpus' is not a Kubernetes resource name"),
    ("requests above limits",
     {"workers": worker(resources={"requests": {"memory": "64Gi"}, "limits": {"memory": "32Gi"}})},
     "spec.workers[0].resources.requests.memory: 64Gi is more than the limit 32Gi"),
    ("resource name", {"controller": {"resources": {"limits": {"gpus": 1}}}},
     "spec.controller.resources.limits.gpus: 'gpus' is not a Kubernetes resource name"),
    ("extended resource overcommitted",
     {"login": {"resources": {"requests": {"example.com/fpga": 1}, "limits": {"example.com/fpga": 2}}}},
     "spec.login.resources.requests.example.com/fpga: an extended resource's request must equal its limit (2)"),
    ("negative limit", {"workers": worker(resources={"limits": {"cpu": "-4"}})},
     "spec.workers[0].resources.limits.cpu: value error, '-4' is negative; a size or count is 0 or more"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_broken_passthrough_objects_name_the_field(change: dict[str, Any], expected: str) -> None:
    # An unknown volume source is the operator's policy's too (test_policy.py): only the passthrough check here.
    assert [p for p in problems_of(cluster(**change)) if "operator's policy" not in p] == [expected]


def test_correct_scheduling_and_volumes_pass() -> None:
    placement = {"tolerations": GOOD_TOLERATIONS, "affinity": GOOD_AFFINITY, "nodeSelector": {"pool": "gpu-h100"},
                 "topologySpreadConstraints": GOOD_SPREAD, "priorityClassName": "hpc-high",
                 "podLabels": {"example.com/team": "physics", "app.kubernetes.io/part-of": "hpc"},
                 "podAnnotations": {"prometheus.io/scrape": "true", "example.com/note": "any: text"}}  # fmt: skip
    obj = cluster(
        jail={"volume": {"source": {"nfs": {"server": "10.0.0.2", "path": "/jail"}}},
              "subMounts": [{"name": "s", "mountPath": "/scratch", "volume": {"source": {"emptyDir": {}}}}]},
        workers=worker(**placement, resources={"requests": {"cpu": 8, "memory": "64Gi"},
                                               "limits": {"memory": "64Gi", "hugepages-2Mi": "1Gi"}}),
        login={"service": {"type": "LoadBalancer", "annotations": {
            "service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}}, **placement},
    )  # fmt: skip
    assert problems_of(obj) == []


def test_render_prints_the_same_problems_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(yaml.safe_dump(cluster(**CASES[0][1], workers=worker(tolerations=[{"foo": "bar"}]))))

    assert main(["render", "-f", str(manifest)]) == 1

    err = capsys.readouterr().err
    assert f"SlurmCluster c: {CASES[0][2]}" in err
    assert "SlurmCluster c: spec.workers[0].tolerations[0]: Additional properties are not allowed" in err


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"workers": worker(resources={"requests": {"memory": "1e9999999999"}})},
         "spec.workers[0].resources.requests.memory: value error, '1e9999999999' is above the maximum of 1Ei"),
        ({"partitions": [{"name": "default", "default": True}]}, 'spec.partitions[0].name: Slurm reserves "default"'),
        ({"slurm": {"extraConfig": "PlugStackConfig=/dev/null\n"}},
         "spec.slurm.extraConfig: line 1: PlugStackConfig is owned by slurmctl"),
    ],
)  # fmt: skip
def test_render_refuses_what_used_to_crash_or_break_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], expected: str
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(yaml.safe_dump(cluster(**change)))

    assert main(["render", "-f", str(manifest)]) == 1

    captured = capsys.readouterr()
    assert f"SlurmCluster c: {expected}" in captured.err
    assert "Traceback" not in captured.err and captured.out.strip() in ("", "[]")
