"""What a Slurm administrator reads in the samples' configs: nodes, node sets, partitions, plugins, accounting."""

from __future__ import annotations

from slurmctl.render.slurm_conf import dynamic_node_conf, render_slurm_configs
from test.unit.render.samples import sample


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_minimal_sample_nodes_and_default_partition() -> None:
    cluster = sample("minimal")
    configs = render_slurm_configs(cluster)
    nodes = _lines(configs["nodes.conf"])
    # Workers are dynamic nodes: no file lists them, each registers with its group's definition and feature.
    assert not any(line.startswith("NodeName=") for line in nodes)
    assert dynamic_node_conf(cluster.spec.workers[0]) == "Feature=cpu CPUs=1 RealMemory=1024"
    assert "NodeSet=cpu Feature=cpu" in nodes
    assert "PartitionName=main Nodes=cpu Default=YES State=UP" in nodes

    slurm = _lines(configs["slurm.conf"])
    for line in (
        "ClusterName=minimal",
        "SlurmctldHost=minimal-controller-0(minimal-controller-0.minimal-controller)",
        "AuthType=auth/munge",
        "PlugStackConfig=/etc/slurm/plugstack.conf",
        "ProctrackType=proctrack/cgroup",
        "MaxNodeCount=4096",
        "TreeWidth=65533",
        "Include /etc/slurm/nodes.conf",
    ):
        assert line in slurm
    assert "CgroupPlugin=autodetect" in _lines(configs["cgroup.conf"])
    assert not any(line.startswith(("GresTypes", "AccountingStorage", "HealthCheck")) for line in slurm)
    assert _lines(configs["plugstack.conf"])[1:] == ["required /usr/lib/slurmctl/chroot.so jail=/mnt/jail"]
    assert _lines(configs["gres.conf"])[1:] == []


def test_research_sample_groups_partitions_gpus_and_accounting() -> None:
    cluster = sample("research")
    configs = render_slurm_configs(cluster)
    nodes = _lines(configs["nodes.conf"])
    groups = {g.name: dynamic_node_conf(g) for g in cluster.spec.workers}
    assert groups == {
        "h100": "Feature=h100,nvlink CPUs=120 RealMemory=1638400 Gres=gpu:8",
        "cpu": "Feature=cpu,epyc CPUs=30 RealMemory=122880",
    }
    assert "NodeSet=h100 Feature=h100" in nodes
    assert "PartitionName=cpu Nodes=cpu Default=YES State=UP MaxTime=24:00:00" in nodes
    assert "PartitionName=gpu Nodes=h100 Default=NO State=UP MaxTime=72:00:00 OverSubscribe=NO" in nodes

    slurm = _lines(configs["slurm.conf"])
    for line in (
        "GresTypes=gpu",
        "HealthCheckProgram=/usr/lib/slurmctl/gpu-healthcheck",
        "HealthCheckInterval=120",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=research-accounting",
        "AccountingStoragePort=6819",
        "MaxJobCount=50000",
        "DefMemPerCPU=4096",
    ):
        assert line in slurm
    # The user's raw lines come last, after the nodes include, so they override what is generated.
    assert slurm[-2:] == ["PriorityType=priority/multifactor", "PriorityWeightFairshare=10000"]
    assert slurm.index("Include /etc/slurm/nodes.conf") < slurm.index("PriorityType=priority/multifactor")
    assert "NodeName=research-worker-h100-[0-999] Name=gpu File=/dev/nvidia[0-7]" in _lines(configs["gres.conf"])
