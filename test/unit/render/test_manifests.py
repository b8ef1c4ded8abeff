"""What `slurmctl render` prints for each sample: which components appear, in which order, behind which switches."""

from __future__ import annotations

from slurmctl.render.workers import render_elastic_worker_pod
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


def test_every_slurm_pod_searches_the_workers_domain_so_that_node_names_resolve() -> None:
    """A worker's Slurm node name is its pod's name, published as `<pod>.<c>-workers.<ns>.svc.<domain>`: jobs,
    login and controller pods resolve it as it is (MASTER_ADDR=$(scontrol show hostnames ... | head -n1))."""
    cluster = sample("research")
    searched = {"StatefulSet/research-controller", "StatefulSet/research-login"}
    searched |= {f"StatefulSet/research-worker-{g.name}" for g in cluster.spec.workers if g.autoscale is None}
    for domain in ("cluster.local", "corp.example"):
        found = set()
        for obj in manifests(cluster, cluster_domain=domain):
            spec = (obj.get("spec", {}).get("template") or {}).get("spec") or {}
            if "dnsConfig" in spec:
                assert spec["dnsConfig"] == {"searches": [f"research-workers.hpc.svc.{domain}"]}
                found.add(f"{obj['kind']}/{obj['metadata']['name']}")
        assert found == searched
    group = cluster.spec.workers[0]  # an elastic group's pods are rendered one at a time, with the same domain
    pod = render_elastic_worker_pod(cluster, group, 0, configs={}, munge_key_id="m", cluster_domain="corp.example")
    assert pod["spec"]["subdomain"] == "research-workers"
    assert pod["spec"]["dnsConfig"] == {"searches": ["research-workers.hpc.svc.corp.example"]}
