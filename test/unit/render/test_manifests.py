"""What `slurmctl render` prints for each sample: which components appear, in which order, behind which switches."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.workers import render_elastic_worker_pod
from test.unit.render.samples import UID, manifests, sample, sample_doc


def _names(variant: str) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in manifests(sample(variant))]


def test_minimal_sample() -> None:
    assert _names("minimal") == [
        "ConfigMap/minimal-slurm-configs",
        "NetworkPolicy/minimal-slurm",
        "NetworkPolicy/minimal-slurmrestd",
        "NetworkPolicy/minimal-login-ssh",
        "ServiceAccount/minimal-power",
        "Role/minimal-power",
        "RoleBinding/minimal-power",
        "ConfigMap/minimal-power",
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


def test_ssh_to_job_nodes_runs_the_login_nodes_sshd_in_every_worker_and_nothing_of_it_by_default() -> None:
    """spec.login.sshToJobNodes: each worker's slurmd container gets the login nodes' sshd ConfigMap and host keys,
    port 22 and the login nodes' headless Service to admit connections from (fixed and elastic groups alike). Off by
    default, a worker pod has none of it: the host keys stay out of the workers."""

    def workers(cluster: SlurmCluster) -> list[dict[str, Any]]:
        found = [
            o["spec"]["template"]["spec"]
            for o in manifests(cluster, cluster_domain="corp.example")
            if o["kind"] == "StatefulSet" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "workers"
        ]
        elastic = [g for g in cluster.spec.workers if g.autoscale is not None]
        found += [
            render_elastic_worker_pod(cluster, g, 0, configs={}, munge_key_id="m", cluster_domain="corp.example")[
                "spec"
            ]
            for g in elastic
        ]
        assert found
        return found

    def slurmd(spec: dict[str, Any]) -> dict[str, Any]:
        (container,) = (c for c in spec["containers"] if c["name"] == "slurmd")
        return container

    cluster = sample("research")
    for spec in workers(cluster):
        assert not {"sshd-configs", "ssh-host-keys"} & {v["name"] for v in spec["volumes"]}
        assert [p["name"] for p in slurmd(spec)["ports"]] == ["slurmd"]
        assert "SLURMCTL_SSH_FROM" not in {e["name"] for e in slurmd(spec)["env"]}

    doc = sample_doc("research")
    doc["spec"]["login"]["sshToJobNodes"] = True
    enabled = SlurmCluster.model_validate(doc)
    for spec in workers(enabled):
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["sshd-configs"]["configMap"] == {"name": "research-sshd"}
        assert volumes["ssh-host-keys"]["secret"]["secretName"] == "research-ssh-host-keys"
        container = slurmd(spec)
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["ssh-host-keys"] == {"name": "ssh-host-keys", "mountPath": "/mnt/ssh-host-keys", "readOnly": True}
        assert {"name": "ssh", "containerPort": 22, "protocol": "TCP"} in container["ports"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SLURMCTL_SSH_FROM"] == "research-login-headless.hpc.svc.corp.example"

    def login_env(cluster: SlurmCluster) -> dict[str, str]:
        (login,) = (
            o for o in manifests(cluster) if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "research-login"
        )
        (sshd,) = login["spec"]["template"]["spec"]["containers"][:1]
        return {e["name"]: e.get("value") for e in sshd["env"]}

    # The login nodes' ssh clients know the workers' host keys (the login nodes' own) under the workers' names: one
    # pattern for every group, so adding or removing a group does not restart the login pods (ending sessions).
    assert "SLURMCTL_JOB_NODES" not in login_env(cluster)
    assert login_env(enabled)["SLURMCTL_JOB_NODES"] == "research-worker-*"
    fewer = enabled.model_copy(update={"spec": enabled.spec.model_copy(update={"workers": enabled.spec.workers[:1]})})
    assert login_env(fewer) == login_env(enabled)
