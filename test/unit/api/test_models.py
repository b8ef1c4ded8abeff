"""The models read what users and the API server write, and write it back unchanged."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

import slurmctl
from slurmctl.api.v1 import (
    IMAGE_TAG,
    Condition,
    Policy,
    SlurmCluster,
    SlurmClusterSpec,
    SlurmClusterStatus,
    WorkerGroupStatus,
    check_cluster,
    parse_quantity,
    ready_summary,
)
from test.unit.api.helpers import sample_clusters

MINIMAL = {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu"}]}


def test_samples_parse_without_problems() -> None:
    samples = sample_clusters()
    assert set(samples) == {"slurmcluster_minimal.yaml", "slurmcluster_research.yaml"}
    # The research sample mounts NFS and a host directory and logs in as root: what its comments say the operator's
    # flags must allow. The minimal one needs no opt-in.
    opted_in = Policy(allow_host_path=True, allowed_volume_sources=frozenset({"nfs"}), allow_root_logins=True)
    for name, doc in samples.items():
        cluster, problems = check_cluster(doc, policy=opted_in if name == "slurmcluster_research.yaml" else None)
        assert cluster is not None, name
        assert problems == [], name


def test_realistic_sample_has_what_it_promises() -> None:
    cluster = SlurmCluster.model_validate(sample_clusters()["slurmcluster_research.yaml"])
    spec = cluster.spec
    assert [g.name for g in spec.workers] == ["cpu", "h100"]
    assert [g.name for g in spec.gpu_groups] == ["h100"]
    assert len(spec.partitions) == 2
    assert spec.login.service.type == "LoadBalancer"
    assert spec.accounting.external is not None
    assert spec.accounting.external.password_secret_ref.name == "research-accounting-db"
    assert spec.health_checks.nccl_benchmark.enabled


def test_minimal_spec_gets_the_defaults_a_user_expects() -> None:
    spec = SlurmClusterSpec.model_validate(MINIMAL)
    assert spec.controller.size == 1
    assert [(p.name, p.default) for p in spec.partitions] == [("main", True)]
    assert spec.partition_workers(spec.partitions[0]) == ["cpu"]
    assert spec.workers[0].gpus == 0
    assert not spec.workers[0].is_gpu
    assert spec.gpu_groups == []
    assert spec.slurm.cgroup_version == "auto"
    assert spec.accounting.enabled is False
    assert spec.login.service.type == "ClusterIP"
    assert spec.accounting.external is None
    assert spec.shared_memory_size(spec.workers[0]) == "64Gi"


def test_default_images_follow_the_operator_version_and_registry() -> None:
    assert slurmctl.__version__ == IMAGE_TAG
    spec = SlurmClusterSpec.model_validate(MINIMAL)
    assert spec.image_for("worker") == f"ghcr.io/slurmctl/worker:{slurmctl.__version__}"
    assert spec.image_for("nccl-benchmark", spec.health_checks.nccl_benchmark.image).startswith(
        "ghcr.io/slurmctl/nccl-benchmark:"
    )
    custom = SlurmClusterSpec.model_validate(
        {**MINIMAL, "slurm": {"imageRegistry": "registry.local/mirror/", "imageTag": "dev"}}
    )
    assert custom.image_for("populate-jail") == "registry.local/mirror/populate-jail:dev"
    assert custom.image_for("login", "example.com/my-login:1") == "example.com/my-login:1"


def test_wire_names_are_camel_case_including_kubernetes_acronyms() -> None:
    spec = SlurmClusterSpec.model_validate(MINIMAL)
    wire = spec.to_dict()
    assert "minBusBandwidthGBps" in wire["healthChecks"]["ncclBenchmark"]
    assert "populateJail" in wire and "healthChecks" in wire and "sharedMemorySize" in wire["jail"]
    parsed = SlurmClusterSpec.model_validate(
        {
            **MINIMAL,
            "login": {"service": {"type": "LoadBalancer", "loadBalancerIP": "192.0.2.1"}},
            "slurm": {"config": {"defMemPerCPU": 2048}},
        }
    )
    assert parsed.login.service.load_balancer_ip == "192.0.2.1"
    assert parsed.to_dict()["login"]["service"]["loadBalancerIP"] == "192.0.2.1"
    assert parsed.slurm.config.slurm_conf() == {"DefMemPerCPU": "2048"}


def test_to_dict_carries_no_nulls() -> None:
    spec = SlurmClusterSpec.model_validate(
        {**MINIMAL, "controller": {"affinity": {"nodeAffinity": None, "podAntiAffinity": {"x": [None, 1]}}}}
    )

    def values(node: object) -> list[object]:
        if isinstance(node, dict):
            return [v for item in node.values() for v in values(item)]
        if isinstance(node, list):
            return [v for item in node for v in values(item)]
        return [node]

    wire = spec.to_dict()
    assert None not in values(wire)
    assert wire["controller"]["affinity"] == {"podAntiAffinity": {"x": [1]}}


def test_round_trip_is_lossless_for_the_samples_and_status() -> None:
    for doc in sample_clusters().values():
        cluster = SlurmCluster.model_validate(doc)
        assert SlurmCluster.model_validate(cluster.to_dict()) == cluster
    status = SlurmClusterStatus(
        phase="Available",
        observed_generation=3,
        conditions=[
            Condition(
                type="WorkersReady",
                status="True",
                reason="AllReady",
                message="6/6 ready",
                last_transition_time="2026-01-02T03:04:05Z",  # type: ignore[arg-type]
                observed_generation=3,
            )
        ],
        workers=[WorkerGroupStatus(name="cpu", desired=6, ready=6)],
        workers_ready=ready_summary(6, 6),
    )
    wire = status.to_dict()
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert wire["workersReady"] == "6/6"
    assert SlurmClusterStatus.model_validate(wire) == status


def test_live_object_with_server_metadata_parses() -> None:
    live = {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {
            "name": "demo",
            "namespace": "hpc",
            "uid": "5b0c4c3e-0000-4000-8000-000000000000",
            "generation": 4,
            "resourceVersion": "12345",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": MINIMAL,
        "status": {"phase": "Reconciling", "conditions": [], "someFutureField": 1},
    }
    cluster = SlurmCluster.model_validate(live)
    assert cluster.key == ("hpc", "demo")
    assert cluster.metadata.generation == 4
    assert cluster.status is not None and cluster.status.phase == "Reconciling"
    assert cluster.to_dict()["metadata"]["managedFields"][0]["manager"] == "kubectl"
    assert cluster.spec_dict()["workers"][0]["name"] == "cpu"


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"workers": [{"name": "cpu", "size": "4"}]}, ("workers", 0, "size")),
        ({"workers": [{"name": "cpu", "gpus": True}]}, ("workers", 0, "gpus")),
        ({"accounting": {"enabled": "yes"}}, ("accounting", "enabled")),
        ({"jail": {"volume": {"claimName": "j"}, "sharedMemorySize": "lots"}}, ("jail", "sharedMemorySize")),
        ({"login": {"service": {"type": "External"}}}, ("login", "service", "type")),
    ],
)
def test_models_are_as_strict_as_the_api_server(patch: dict[str, object], path: tuple[object, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        SlurmClusterSpec.model_validate({**MINIMAL, **patch})
    assert [e["loc"][: len(path)] for e in info.value.errors()] == [path]


def test_parse_quantity() -> None:
    assert parse_quantity("64Gi") == 64 * 2**30
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("1.5k") == 1500
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(7) == 7
    for bad in ("", "Gi", "1.2.3", "1 Gi", "1e99999999999"):
        with pytest.raises(ValueError):
            parse_quantity(bad)
