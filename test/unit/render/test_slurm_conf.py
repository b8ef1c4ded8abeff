"""What a Slurm administrator reads in the samples' configs: nodes, node sets, partitions, plugins, accounting."""

from __future__ import annotations

from slurmctl.render.slurm_conf import render_slurm_configs
from test.unit.render.samples import sample


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_minimal_sample_nodes_and_default_partition() -> None:
    configs = render_slurm_configs(sample("minimal"))
    nodes = _lines(configs["nodes.conf"])
    for ordinal in (0, 1):
        name = f"minimal-worker-cpu-{ordinal}"
        assert f"NodeName={name} NodeAddr={name}.minimal-workers CPUs=2 RealMemory=4096 State=UNKNOWN" in nodes
    assert "NodeName=minimal-worker-cpu-2" not in configs["nodes.conf"]
    assert "NodeSet=cpu Nodes=minimal-worker-cpu-[0-1]" in nodes
    assert "PartitionName=main Nodes=cpu Default=YES State=UP" in nodes

    slurm = _lines(configs["slurm.conf"])
    for line in (
        "ClusterName=minimal",
        "SlurmctldHost=minimal-controller-0(minimal-controller-0.minimal-controller)",
        "AuthType=auth/munge",
        "PlugStackConfig=/etc/slurm/plugstack.conf",
        "ProctrackType=proctrack/cgroup",
        "Include /etc/slurm/nodes.conf",
    ):
        assert line in slurm
    assert not any(line.startswith(("GresTypes", "AccountingStorage", "HealthCheck")) for line in slurm)
    assert _lines(configs["plugstack.conf"])[1:] == ["required /usr/lib/slurmctl/chroot.so jail=/mnt/jail"]
    assert _lines(configs["gres.conf"])[1:] == []


def test_research_sample_groups_partitions_gpus_and_accounting() -> None:
    configs = render_slurm_configs(sample("research"))
    nodes = _lines(configs["nodes.conf"])
    assert (
        "NodeName=research-worker-h100-3 NodeAddr=research-worker-h100-3.research-workers CPUs=120 RealMemory=1638400"
        " Gres=gpu:8 Feature=h100,nvlink State=UNKNOWN"
    ) in nodes
    assert (
        "NodeName=research-worker-cpu-7 NodeAddr=research-worker-cpu-7.research-workers CPUs=30 RealMemory=122880"
        " Feature=cpu,epyc State=UNKNOWN"
    ) in nodes
    assert sum(line.startswith("NodeName=") for line in nodes) == 12
    assert "NodeSet=h100 Nodes=research-worker-h100-[0-3]" in nodes
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
