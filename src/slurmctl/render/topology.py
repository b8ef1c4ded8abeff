"""Slurm's network topology (topology.conf) from the labels of the Kubernetes nodes the workers run on.

`spec.topology` names the node labels that describe the network: tree levels, the topmost first (e.g. zone, then
switch), or one block label (e.g. an NVLink domain). Workers whose Kubernetes nodes carry the same values share a
switch. Always rendered as `TopologyPlugin=topology/tree`, one tree under a single root switch, so that a job may
span switches and `--switches=N` keeps it within fewer:

    SwitchName=s1 Nodes=c-worker-a-[0-1]
    SwitchName=s2 Nodes=c-worker-a-[2-3]
    SwitchName=unlabelled Nodes=c-worker-b-0
    SwitchName=root Switches=s1,s2,unlabelled

Why these rules (Slurm 24.11, verified in its source and with real daemons):

- Workers are dynamic nodes. slurmctld builds the topology when it starts and at each `scontrol reconfigure`, from
  the nodes it knows then; a node that registers later is in no switch, and topology/tree never allocates it
  ("Requested topology configuration is not available"). topology.conf names every worker whose pod has a node and
  is not going, ready or not; the primary controller's config follower reconfigures once slurmctld knows a named
  node it did not know at its last build (images/scripts/entrypoint-controller), which puts it in its switch.
  Readiness is not followed: a probe failing for a few seconds (a reconfigure, a failover, a node registered anew)
  rewrote the file twice, and each version reconfigured every daemon as the kubelet delivered it, up to a minute
  apart; a worker out of its switch meanwhile took no job (CI on 5e51006).
- Names slurmctld does not know are only warned about, so the file may name a node not registered yet, or lag one
  that just left.
- A worker whose Kubernetes node lacks a level's label goes to the catch-all leaf `unlabelled` under the root:
  it stays schedulable.
- topology/block is not used: on 24.11 slurmctld exits ("Block not contains any nodes") while no listed node exists,
  and every slurmd, which knows only itself, exits ("children count lower than bblock_node_cnt"). A block label is
  rendered as a one-level tree: `--switches=1` keeps a job inside one block.
- A switch is named after its label value; where that value would name two switches (the same value under two
  parents, or `root`/`unlabelled`), after its path of values, and then with a hash of the path. Names are cut to
  Slurm's 64 characters the same way.
- At most MAX_TOPOLOGY_SWITCHES switches: workers that would add more go to the catch-all, so the file always fits
  its ConfigMap.

Output is deterministic: the same placement renders byte-identical text, so the ConfigMap is not rewritten.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmctl.api.v1 import SlurmCluster
from slurmctl.api.v1.defaults import MAX_TOPOLOGY_SWITCHES
from slurmctl.render import meta

TOPOLOGY_CONF = "topology.conf"
TOPOLOGY_PLUGIN = "topology/tree"
ROOT = "root"
CATCH_ALL = "unlabelled"
MAX_SWITCH_NAME = 64  # Slurm's HOST_NAME_MAX: longer switch names are refused

# Slurm node name -> the labels of the Kubernetes node its pod runs on, for the scheduled workers that are not going.
Placement = Mapping[str, Mapping[str, str]]
_NUMBERED = re.compile(r"^(.*?)([1-9][0-9]*|0)$")


def hostlist(names: Iterable[str]) -> str:
    """Node names as a Slurm hostlist expression, consecutive ordinals folded: a-0,a-1,a-3 -> a-[0-1,3]."""
    by_prefix: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        match = _NUMBERED.match(name)
        if match:
            by_prefix.setdefault(match.group(1), []).append(int(match.group(2)))
        else:
            plain.append(name)
    parts = list(plain)
    for prefix, numbers in by_prefix.items():
        numbers.sort()
        ranges: list[str] = []
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
            if number is not None:
                start = previous = number
        single = len(numbers) == 1
        parts.append(f"{prefix}{numbers[0]}" if single else f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(parts))


@dataclass
class _Switch:
    path: tuple[str, ...]
    nodes: list[str] = field(default_factory=list)
    children: list[tuple[str, ...]] = field(default_factory=list)


def _short(name: str, path: tuple[str, ...]) -> str:
    digest = hashlib.sha256("\0".join(path).encode()).hexdigest()[:8]
    return f"{name[: MAX_SWITCH_NAME - 9]}-{digest}"


def _names(paths: Iterable[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """A unique Slurm name per switch path: its own value where that is unambiguous, else its path, else hashed."""
    paths = sorted(paths)
    wanted: dict[tuple[str, ...], str] = {p: p[-1] for p in paths}
    used: dict[str, int] = {ROOT: 1, CATCH_ALL: 1}
    for name in wanted.values():
        used[name] = used.get(name, 0) + 1
    for p in paths:
        if used[wanted[p]] > 1:
            wanted[p] = "-".join(p)
    taken = {ROOT, CATCH_ALL}
    out: dict[tuple[str, ...], str] = {}
    for p in paths:
        name = wanted[p]
        if len(name) > MAX_SWITCH_NAME or name in taken:
            name = _short(name, p)
        taken.add(name)
        out[p] = name
    return out


def render_topology_conf(cluster: SlurmCluster, placement: Placement) -> str | None:
    """topology.conf for `spec.topology` and where the workers run; None without a topology."""
    topology = cluster.spec.topology
    if topology is None:
        return None
    levels = topology.levels
    switches: dict[tuple[str, ...], _Switch] = {}
    unlabelled: list[str] = []
    for node in sorted(placement):
        labels = placement[node]
        values = tuple(labels.get(level, "") for level in levels)
        if not all(values):
            unlabelled.append(node)
            continue
        new = [values[: depth + 1] for depth in range(len(values)) if values[: depth + 1] not in switches]
        if len(switches) + len(new) > MAX_TOPOLOGY_SWITCHES:
            unlabelled.append(node)
            continue
        for path in new:
            switches[path] = _Switch(path)
            if len(path) > 1:
                switches[path[:-1]].children.append(path)
        switches[values].nodes.append(node)
    if not switches and not unlabelled:
        # No worker scheduled yet. topology/tree needs at least one leaf with nodes (slurmctld exits on a tree
        # without any): name the workers the spec asks for; slurmctld only warns about those it does not know.
        c = meta.cluster_name(cluster)
        unlabelled = [f"{meta.worker_group(c, g.name)}-{i}" for g in cluster.spec.workers for i in range(g.size)]
        if not unlabelled:
            unlabelled = [f"{meta.worker_group(c, cluster.spec.workers[0].name)}-0"]
    names = _names(switches)
    ns, name = cluster.key
    lines = [
        f"# Generated by slurmctl for SlurmCluster {ns}/{name} from the labels {', '.join(levels)} of the nodes its "
        "workers run on. Do not edit: changes are overwritten.\n"
    ]
    for path in sorted(switches, key=lambda p: (-len(p), names[p])):
        switch = switches[path]
        if switch.nodes:
            lines.append(f"SwitchName={names[path]} Nodes={hostlist(switch.nodes)}\n")
        else:
            lines.append(f"SwitchName={names[path]} Switches={','.join(sorted(names[p] for p in switch.children))}\n")
    top = sorted(names[p] for p in switches if len(p) == 1)
    if unlabelled:
        lines.append(f"SwitchName={CATCH_ALL} Nodes={hostlist(unlabelled)}\n")
        top.append(CATCH_ALL)
    lines.append(f"SwitchName={ROOT} Switches={','.join(top)}\n")
    return "".join(lines)
