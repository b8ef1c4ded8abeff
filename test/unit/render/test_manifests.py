"""What `slurmctl render` prints for each sample: which components appear, in which order, behind which switches."""

from __future__ import annotations

from test.unit.render.samples import UID, manifests, sample


def _names(variant: str) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in manifests(sample(variant))]


def test_minimal_sample() -> None:
    assert _names("minimal") == [
        "ConfigMap/minimal-slurm-configs",
        "Job/minimal-populate-jail",
        "Service/minimal-controller",
        "StatefulSet/minimal-controller",
        "Service/minimal-workers",
        "PodDisruptionBudget/minimal-workers",
        "StatefulSet/minimal-worker-cpu",
        "ConfigMap/minimal-sshd",
        "Service/minimal-login",
        "Service/minimal-login-headless",
        "Service/minimal-login-0",
        "StatefulSet/minimal-login",
        "Service/minimal-rest",
        "Deployment/minimal-rest",
    ]


def test_research_sample_adds_accounting_and_the_benchmark() -> None:
    names = _names("research")
    assert names[-6:] == [
        "Secret/research-slurmdbd",
        "Service/research-accounting",
        "Deployment/research-accounting",
        "Service/research-rest",
        "Deployment/research-rest",
        "CronJob/research-nccl-benchmark",
    ]
    assert "MariaDB/research-mariadb" not in names
    assert "MariaDB/research-mariadb" in _names("research-mariadb")


def test_every_object_is_owned_by_the_cluster_and_labelled_with_its_component() -> None:
    for variant in ("minimal", "research", "research-mariadb"):
        cluster = sample(variant)
        for obj in manifests(cluster):
            (owner,) = obj["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"]) == ("SlurmCluster", cluster.metadata.name, UID)
            assert owner["controller"] is True
            assert obj["metadata"]["labels"]["app.kubernetes.io/component"]
