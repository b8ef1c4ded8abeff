"""How `slurmctl` reads its flags: each with an environment-variable equivalent (`SLURMCTL_<FLAG>`, upper-case with
underscores), booleans as Go's flag package reads them, lists comma-separated; and the operator's policy flags, which
`run` and `render` share so that a review renders what the operator would accept.
"""

from __future__ import annotations

import argparse
import os

from slurmctl.api.v1 import DEFAULT_VOLUME_SOURCES, PYXIS_KEY, Policy, image_prefix_problem


def env(flag: str, default: str | None = None) -> str | None:
    return os.environ.get("SLURMCTL_" + flag.upper().replace("-", "_"), default)


TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def env_bool(flag: str) -> bool:
    return (env(flag) or "").lower() in TRUE


def boolean(text: str) -> bool:
    """A flag's boolean value as Go's flag package reads `--flag=false` (controller-runtime operators' spelling)."""
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def comma_list(text: str) -> tuple[str, ...]:
    """A comma-separated list, blanks dropped ('' is the empty list)."""
    return tuple(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


def policy_arguments(parser: argparse.ArgumentParser, *, from_env: bool) -> None:
    """The operator's policy flags (api/v1/policy.py): each opens one door the default keeps shut, because worker and
    login pods are privileged and whoever edits a SlurmCluster must not become root on a node. `run` reads their
    SLURMCTL_* variables too; `render` takes only flags, so that a review renders what it says."""

    def default(flag: str) -> str:
        return (env(flag) if from_env else None) or ""

    def switch(flag: str, grants: str) -> None:
        parser.add_argument(
            f"--{flag}",
            nargs="?",
            const=True,
            type=boolean,
            default=env_bool(flag) if from_env else False,
            metavar="BOOL",
            help=f"accept {grants} (off by default)",
        )

    switch(
        "allow-host-path",
        "hostPath volumes in SlurmClusters (jail, sub-mounts): worker pods are privileged, so a host directory "
        "makes whoever may edit a SlurmCluster root on the node",
    )
    switch(
        "allow-control-plane-nodes",
        "tolerations of the control-plane taints (or of every taint), and node selectors or node affinity that "
        "pick control-plane nodes: privileged pods there sit beside the API server's keys",
    )
    switch("allow-root-logins", "spec.login.sshRootPublicKeys: root in the privileged login pod is root on its node")
    switch(
        "allow-node-cordon",
        "worker groups with replaceUnhealthy: the operator cordons the Kubernetes node of a worker that slurmctl's "
        "health checks drained (grant it the node-cordon RBAC too: config/components/node-cordon)",
    )
    switch(
        "allow-root-jobs",
        "jobs of root: without it slurm.conf says DisableRootJobs=YES (a root job runs in a privileged worker pod)",
    )
    switch(
        "allow-privileged-jobs",
        "root jobs whose programs keep root's capabilities (in a privileged worker pod): without it each task runs "
        "with no-new-privileges and an empty capability bounding set",
    )
    parser.add_argument(
        "--allowed-images",
        type=_image_prefixes,
        default=default("allowed-images"),
        metavar="PREFIX/[,PREFIX/...]",
        help="refuse SlurmClusters that run an image not starting with one of these prefixes, each ending in '/' "
        "(e.g. registry.example.com/slurm/): the images components name and the defaults spec.slurm.imageRegistry "
        "makes (default: any image)",
    )
    parser.add_argument(
        "--allowed-slurm-keys",
        type=comma_list,
        default=default("allowed-slurm-keys"),
        metavar="KEY[,KEY...]",
        help="slurm.conf keys extraConfig and partition options may set beyond the scheduling and tuning keys "
        f"allowed by default, '*' for any (Include never); {PYXIS_KEY} lets containers.pyxis load its plugin",
    )
    parser.add_argument(
        "--allowed-slurm-programs",
        type=comma_list,
        default=default("allowed-slurm-programs"),
        metavar="KEY[,KEY...]",
        help="the older name of --allowed-slurm-keys: its keys are added to that list",
    )
    parser.add_argument(
        "--allowed-volume-sources",
        type=comma_list,
        default=default("allowed-volume-sources"),
        metavar="SOURCE[,SOURCE...]",
        help="volume sources the jail and its sub-mounts may use beyond claimName, "
        f"{', '.join(DEFAULT_VOLUME_SOURCES)} (e.g. nfs,secret; hostPath: see --allow-host-path)",
    )


def _image_prefixes(text: str) -> tuple[str, ...]:
    prefixes = comma_list(text)
    for prefix in prefixes:
        if (problem := image_prefix_problem(prefix)) is not None:
            raise argparse.ArgumentTypeError(problem)
    return prefixes


def policy_of(args: argparse.Namespace) -> Policy:
    """The policy the flags of `run` or `render` set."""
    return Policy(
        allow_host_path=args.allow_host_path,
        allowed_images=tuple(args.allowed_images),
        allowed_slurm_keys=frozenset((*args.allowed_slurm_keys, *args.allowed_slurm_programs)),
        allowed_volume_sources=frozenset(args.allowed_volume_sources),
        allow_control_plane_nodes=args.allow_control_plane_nodes,
        allow_root_logins=args.allow_root_logins,
        allow_root_jobs=args.allow_root_jobs,
        allow_privileged_jobs=args.allow_privileged_jobs,
        allow_node_cordon=args.allow_node_cordon,
    )
