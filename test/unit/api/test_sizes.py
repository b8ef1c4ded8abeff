"""The rendered ConfigMaps provably fit in 1 MiB: validation's bound is never below what the real renderer produces
for worst-case specs, and a spec whose bound is above the limit is refused, naming the field that makes it big."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmctl.api.v1 import OPEN_POLICY, SlurmCluster, check_cluster
from slurmctl.api.v1.defaults import MAX_SSH_KEY_LENGTH, MAX_SSH_KEYS, MAX_TOPOLOGY_LEVELS, MAX_TOPOLOGY_SWITCHES
from slurmctl.api.v1.sizes import CONFIGMAP_DATA_LIMIT, slurm_configs_bound, sshd_configs_bound
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render.manifests import Inputs
from slurmctl.render.topology import render_topology_conf

NAME = "c" * 24  # the longest cluster name, in the longest namespace: the bound holds for any name
NAMESPACE = "n" * 63
MAX_QUANTITY = "1Ei"


def group_name(index: int) -> str:
    return f"{'g' * 17}{index:03d}"  # 20 characters, the longest


def doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u"},
        "spec": {"jail": {"volume": {"claimName": "jail"}}, **spec},
    }


def data_size(configmap: dict[str, Any]) -> int:
    return sum(len(key.encode()) + len(value.encode()) for key, value in configmap.get("data", {}).items())


def rendered_sizes(cluster: SlurmCluster) -> dict[str, int]:
    return {
        obj["metadata"]["name"].removeprefix(f"{NAME}-"): data_size(obj)
        for obj in desired_objects(Inputs.offline(cluster))
        if obj["kind"] == "ConfigMap"
    }


def big_groups(sizes: list[int], *, features: int = 0, feature_length: int = 63) -> list[dict[str, Any]]:
    resources = {"requests": {"cpu": MAX_QUANTITY, "memory": MAX_QUANTITY}}
    return [
        {"name": group_name(i), "size": size, "gpus": 16, "resources": resources,
         "features": [f"{i:02d}{'f' * (feature_length - 4)}{n:02d}" for n in range(features)]}
        for i, size in enumerate(sizes)
    ]  # fmt: skip


def partitions(count: int, *, options: int, value_length: int, groups: list[str]) -> list[dict[str, Any]]:
    return [
        {"name": f"p{p}", "default": p == 0, "workers": groups,
         "options": {f"Option{'x' * 50}{o:02d}": "v" * value_length for o in range(options)}}
        for p in range(count)
    ]  # fmt: skip


WORST_CASES = {
    # MAX_TOTAL_WORKERS nodes with the longest names and numbers, 64 partitions over all 17 groups, some extraConfig.
    "most nodes": dict(
        workers=big_groups([1000] * 16 + [384]),
        partitions=partitions(64, options=2, value_length=32, groups=[group_name(i) for i in range(17)]),
        slurm={"extraConfig": "SchedulerParameters=bf_continue\n" * 100},
    ),
    # Features travel with each node's registration, not in the ConfigMap.
    "long features": dict(workers=big_groups([1000] * 16 + [384], features=32)),
    # Partition options near their limits on every partition.
    "many options": dict(
        workers=big_groups([10]),
        partitions=partitions(64, options=12, value_length=1024, groups=[group_name(0)]),
    ),
    "largest extraConfig": dict(workers=big_groups([1000]), slurm={"extraConfig": ("x" * 1023 + "\n") * 64}),
    # Container jobs on (oci.conf), and pyxis' plugstack.conf line with every argument at its longest.
    "containers": dict(
        workers=big_groups([10]),
        containers={
            "enabled": True,
            "pyxis": {
                "enabled": True,
                "path": "/" + "p" * 1023,
                "arguments": {f"{'a' * 62}{n:02d}": "v" * 1024 for n in range(32)},
            },
        },
    ),
}


@pytest.mark.parametrize("case", sorted(WORST_CASES))
def test_the_bound_covers_the_rendered_configmaps_of_worst_case_specs(case: str) -> None:
    cluster, problems = check_cluster(doc(**WORST_CASES[case]), policy=OPEN_POLICY)
    assert cluster is not None and problems == [], problems
    sizes = rendered_sizes(cluster)
    bound = sum(slurm_configs_bound(cluster.spec).values())

    assert sizes["slurm-configs"] <= bound <= CONFIGMAP_DATA_LIMIT
    assert bound - sizes["slurm-configs"] < 0.1 * bound + 8192, "the bound is so loose it refuses specs that fit"


def test_the_sshd_configmap_fits_whatever_the_spec() -> None:
    keys = [f"ssh-ed25519 {'A' * (MAX_SSH_KEY_LENGTH - 12)}" for _ in range(MAX_SSH_KEYS)]
    cluster, problems = check_cluster(
        doc(workers=[{"name": "cpu"}], login={"sshRootPublicKeys": keys}), policy=OPEN_POLICY
    )
    assert cluster is not None and problems == [], problems

    assert rendered_sizes(cluster)["sshd"] <= sshd_configs_bound() < 0.6 * CONFIGMAP_DATA_LIMIT


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (dict(workers=big_groups([1]), partitions=partitions(64, options=64, value_length=1024,
                                                              groups=[group_name(0)])), "spec.partitions"),
    ],
)  # fmt: skip
def test_a_spec_too_big_for_a_configmap_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    cluster, problems = check_cluster(doc(**spec), policy=OPEN_POLICY)
    assert cluster is not None
    (problem,) = problems
    assert problem.path == field
    assert f"more than the {CONFIGMAP_DATA_LIMIT:,} a ConfigMap holds" in problem.message
    # And it really would not have fitted.
    assert rendered_sizes(cluster)["slurm-configs"] > CONFIGMAP_DATA_LIMIT


def test_more_options_than_a_partition_may_have_is_a_schema_problem() -> None:
    spec = dict(workers=[{"name": "cpu"}], partitions=partitions(1, options=1100, value_length=8, groups=[]))
    _, problems = check_cluster(doc(**spec), policy=OPEN_POLICY)
    (problem,) = problems
    assert str(problem).startswith("spec.partitions[0].options: dictionary should have at most 64 items")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 1000), min_size=1, max_size=4),
    features=st.integers(0, 32),
    feature_length=st.integers(4, 63),
    options=st.integers(0, 64),
    value_length=st.integers(1, 1024),
    parts=st.integers(1, 64),
    extra=st.text(max_size=2000),
)
def test_the_bound_is_never_below_what_is_rendered(
    sizes: list[int], features: int, feature_length: int, options: int, value_length: int, parts: int, extra: str
) -> None:
    spec = dict(
        workers=big_groups(sizes, features=features, feature_length=feature_length),
        partitions=partitions(parts, options=options, value_length=value_length, groups=[]),
        slurm={"extraConfig": extra.replace("\0", "")},
    )
    cluster, _ = check_cluster(doc(**spec), policy=OPEN_POLICY)
    assert cluster is not None
    assert rendered_sizes(cluster)["slurm-configs"] <= sum(slurm_configs_bound(cluster.spec).values())


def test_topology_conf_never_exceeds_its_bound() -> None:
    """The worst placement: every worker on a node with labels of its own at every level, 63-character values (each
    switch its own name, cut and hashed), more switches than the cap."""
    levels = [f"example.com/level{i}" for i in range(MAX_TOPOLOGY_LEVELS)]
    cluster = SlurmCluster.model_validate(doc(workers=big_groups([1000] * 4), topology={"tree": {"levels": levels}}))
    bound = slurm_configs_bound(cluster.spec)["spec.topology"]
    placement = {
        f"{NAME}-worker-{group_name(g)}-{i}": {level: f"{n:05d}{'v' * 58}" for n, level in enumerate(levels)}
        | {levels[-1]: f"{g}{i:04d}{'v' * 58}"}
        for g in range(4)
        for i in range(1000)
    }
    text = render_topology_conf(cluster, placement)
    assert text is not None and text.count("SwitchName=") <= MAX_TOPOLOGY_SWITCHES + 2
    assert len(text.encode()) + len("topology.conf") <= bound
    assert not check_cluster(
        doc(workers=big_groups([1000] * 4), topology={"tree": {"levels": levels}}), policy=OPEN_POLICY
    )[1]
