"""Command-line entry point: `slurmctl --version`, `slurmctl run`, `slurmctl render -f FILE`, `slurmctl rbac`.

`run` flags are named as kubebuilder operators name them, each with an environment-variable equivalent
(`SLURMCTL_<FLAG>`, upper-case with underscores), so users and Helm charts recognise them.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.config.config_exception import ConfigException

from slurmctl import __version__, reconcilers
from slurmctl.api.v1 import KIND, Policy, check_cluster, parse_quantity
from slurmctl.flags import boolean, comma_list, env, env_bool, policy_arguments, policy_of
from slurmctl.reconcilers import offline
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.lost_nodes import DEFAULT_NODE_LOST_AFTER
from slurmctl.reconcilers.preemption import DEFAULT_PREEMPTION_TAINTS
from slurmctl.render import rbac
from slurmctl.render.meta import DEFAULT_CLUSTER_DOMAIN
from slurmctl.render.network_policy import DEFAULT_NETWORK, NetworkSettings
from slurmctl.runtime import Client, LeaderElectionConfig, LeaderElectionLost, Manager, ManagerOptions, heap
from slurmctl.runtime.logs import configure, kv
from slurmctl.runtime.version import check_server_version
from slurmctl.slurm import DEFAULT_MAX_ANSWER_BYTES, describe_size

log = logging.getLogger(__name__)

Register = Callable[[Manager], Awaitable[None]]
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _pod_namespace(outside: str) -> str:
    """The namespace of the operator's pod; `outside` when it runs outside one (`make run`)."""
    if IN_CLUSTER_NAMESPACE.is_file():
        return IN_CLUSTER_NAMESPACE.read_text().strip()
    return os.environ.get("POD_NAMESPACE", outside)


def _cidrs(text: str) -> tuple[str, ...]:
    """A comma-separated list of IPv4/IPv6 networks (no host bits), as a NetworkPolicy's ipBlock takes them."""
    try:
        return tuple(str(ipaddress.ip_network(part.strip())) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a number of seconds, 0 or more")
    return value


def _size(text: str) -> int:
    """A size in bytes, written as a Kubernetes quantity (`268435456`, `256Mi`, `1Gi`): a whole number of bytes, at
    least one."""
    try:
        value = parse_quantity(text.strip())
    except ValueError:
        value = None
    if value is None or value < 1 or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected a size such as 256Mi (a quantity of whole bytes), got {text!r}")
    return int(value)


# A DNS subdomain as Kubernetes names one (RFC 1123): dot-separated lower-case labels.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")


def _dns_domain(text: str) -> str:
    domain = text.strip().rstrip(".")
    if len(domain) > 253 or not _DNS_SUBDOMAIN.fullmatch(domain):
        raise argparse.ArgumentTypeError(f"expected a DNS domain such as cluster.local, got {text!r}")
    return domain


def _cluster_domain_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster-domain",
        type=_dns_domain,
        default=env("cluster-domain") or DEFAULT_CLUSTER_DOMAIN,
        metavar="DOMAIN",
        help="the kubelets' clusterDomain: Slurm pods search <cluster>-workers.<namespace>.svc.DOMAIN, so that "
        f"a worker's Slurm node name resolves in jobs and on login nodes (default: {DEFAULT_CLUSTER_DOMAIN})",
    )


def default_workers() -> int:
    """Workers per controller. A reconcile mostly waits on the API server, so a few per CPU keep round trips
    overlapping; more than 8 only queue up behind one event loop and the API server's own limits."""
    return min(8, max(2, 2 * len(os.sched_getaffinity(0))))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slurmctl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"slurmctl {__version__}")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the operator in the foreground")
    run.add_argument(
        "--kubeconfig",
        default=env("kubeconfig", os.environ.get("KUBECONFIG")),
        help="kubeconfig file (default: $KUBECONFIG, else the in-cluster service account)",
    )
    run.add_argument(
        "--metrics-bind-address",
        default=env("metrics-bind-address", ":8080"),
        help='address of /metrics, e.g. ":8080" or "127.0.0.1:8080"; "0" disables',
    )
    run.add_argument(
        "--health-probe-bind-address",
        default=env("health-probe-bind-address", ":8081"),
        help='address of /healthz and /readyz; "0" disables',
    )
    run.add_argument(
        "--leader-elect",
        nargs="?",
        const=True,
        type=boolean,
        default=env_bool("leader-elect"),
        metavar="BOOL",
        help="run controllers only while holding the leader lease (for more than one replica); "
        "--leader-elect alone means true, --leader-elect=false switches it off",
    )
    run.add_argument(
        "--ssh-rsa-host-keys",
        nargs="?",
        const=True,
        type=boolean,
        default=env_bool("ssh-rsa-host-keys"),
        metavar="BOOL",
        help="give new clusters' login nodes an RSA-3072 SSH host key besides ed25519 and ECDSA (for clients that "
        "know no other type; costs ~0.2 s of CPU per cluster); clusters created with one keep it either way",
    )
    run.add_argument(
        "--leader-election-namespace",
        default=env("leader-election-namespace"),
        help="namespace of the Lease (default: the pod's namespace)",
    )
    run.add_argument(
        "--leader-election-id",
        default=env("leader-election-id", "slurmctl.slurm.slurmctl.io"),
        help="name of the Lease",
    )
    run.add_argument(
        "--watch-namespace",
        "--namespace",
        dest="namespace",
        type=_namespaces,
        default=_namespaces(env("watch-namespace") or env("namespace") or ""),
        metavar="NS[,NS...]",
        help="watch only these namespaces (comma-separated; default: all). Grant the operator Roles there "
        "(`slurmctl rbac --watch-namespace` with the same list) instead of the ClusterRole",
    )
    policy_arguments(run, from_env=True)
    run.add_argument(
        "--max-concurrent-reconciles",
        type=_positive_int,
        default=env("max-concurrent-reconciles") or str(default_workers()),
        help="workers per controller (default: twice the CPUs this process may use, between 2 and 8)",
    )
    run.add_argument(
        "--resync-period",
        type=float,
        default=float(env("resync-period") or 0) or None,
        metavar="SECONDS",
        help="re-deliver every cached object to the controllers this often (a converged cluster costs no writes; "
        "default: never, watch events alone)",
    )
    run.add_argument(
        "--node-lost-after",
        type=_seconds,
        default=env("node-lost-after") or str(DEFAULT_NODE_LOST_AFTER),
        metavar="SECONDS",
        help="a Kubernetes node NotReady this long (by the operator's clock) is lost: its workers are drained in "
        "Slurm, and those whose slurmd Slurm cannot reach either are set DOWN, leave Slurm and have their pods "
        "force-deleted so that their StatefulSets re-create them on Ready nodes (default: 60; 0: never)",
    )
    run.add_argument(
        "--max-eviction-hold",
        type=_seconds,
        default=env("max-eviction-hold") or "0",
        metavar="SECONDS",
        help="an eviction (kubectl drain) waits this long at most for the jobs of a worker on the cordoned node; "
        "then its Slurm node is set DOWN and Slurm requeues them (default: 0, for ever)",
    )
    run.add_argument(
        "--preemption-taints",
        type=comma_list,
        default=comma_list(env("preemption-taints", ",".join(DEFAULT_PREEMPTION_TAINTS)) or ""),
        metavar="KEYS",
        help="taint keys (comma-separated) that say a Kubernetes node is about to go away: its workers are drained "
        "in Slurm at once and set DOWN when jobs run there, so that Slurm requeues them (default: "
        f"{','.join(DEFAULT_PREEMPTION_TAINTS)}; '': none)",
    )
    _cluster_domain_argument(run)
    run.add_argument(
        "--operator-namespace",
        default=env("operator-namespace"),
        metavar="NS",
        help="the namespace of the operator's pods, the only pods each cluster's NetworkPolicy lets reach its "
        "slurmrestd (default: the pod's namespace; outside a pod, slurmctl-system)",
    )
    run.add_argument(
        "--login-ssh-from",
        type=_cidrs,
        default=_cidrs(env("login-ssh-from") or ""),
        metavar="CIDR[,CIDR...]",
        help="where the login pods' sshd may be reached from, by their NetworkPolicy (default: anywhere)",
    )
    run.add_argument(
        "--slurm-max-answer-size",
        type=_size,
        default=env("slurm-max-answer-size") or str(DEFAULT_MAX_ANSWER_BYTES),
        metavar="SIZE",
        help="the largest answer the operator reads from a cluster's slurmrestd (e.g. 512Mi); a larger one fails "
        "that cluster's request, as an unreachable slurmrestd would, instead of filling the operator's memory. "
        f"The largest is /jobs/, ~6.5 KB a job (default: {describe_size(DEFAULT_MAX_ANSWER_BYTES)}, 20,000 jobs "
        "with room to spare)",
    )
    run.add_argument(
        "--graceful-shutdown-timeout",
        type=float,
        default=float(env("graceful-shutdown-timeout", "30") or "30"),
        help="seconds to let reconciles finish after SIGTERM",
    )
    run.add_argument(
        "--log-level", default=env("log-level", "info"), choices=["debug", "info", "warning", "error"], type=str.lower
    )
    run.add_argument("--log-format", default=env("log-format", "text"), choices=["text", "json"])
    render = sub.add_parser("render", help="print the manifests the operator would apply for SlurmClusters in a file")
    render.add_argument("-f", "--filename", required=True, help="YAML file with SlurmCluster objects ('-': stdin)")
    render.add_argument("-n", "--namespace", default="default", help="namespace for objects that name none")
    policy_arguments(render, from_env=False)
    _cluster_domain_argument(render)
    rbac = sub.add_parser(
        "rbac", help="print the RBAC objects an operator started with the same flags needs (to apply as an admin)"
    )
    rbac.add_argument(
        "--watch-namespace",
        required=True,
        type=_namespaces,
        metavar="NS[,NS...]",
        help="the namespaces the operator will watch (the same list as `run --watch-namespace`): a Role in each; "
        "empty (--watch-namespace=): the cluster-wide opt-in, a ClusterRole",
    )
    rbac.add_argument(
        "--allow-node-cordon",
        action="store_true",
        help="also the ClusterRole to cordon Nodes, for an operator started with --allow-node-cordon",
    )
    rbac.add_argument("--service-account", default="slurmctl-operator", help="the operator's ServiceAccount")
    rbac.add_argument("--service-account-namespace", default="slurmctl-system", help="its namespace")
    return parser  # fmt: skip


def _namespaces(text: str) -> tuple[str, ...]:
    """A comma-separated namespace list (empty: all namespaces)."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    for name in names:
        if not _NAMESPACE.fullmatch(name) or len(name) > 63:
            raise argparse.ArgumentTypeError(f"{name!r} is not a namespace name")
    return names


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def manager_options(args: argparse.Namespace) -> ManagerOptions:
    election = None
    if args.leader_elect:
        election = LeaderElectionConfig(
            namespace=args.leader_election_namespace or _pod_namespace("default"), name=args.leader_election_id
        )
    namespaces: tuple[str, ...] = args.namespace
    return ManagerOptions(
        namespace=namespaces[0] if len(namespaces) == 1 else None,
        namespaces=namespaces if len(namespaces) > 1 else (),
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_election=election,
        grace_period=args.graceful_shutdown_timeout,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        resync_period=args.resync_period,
    )


async def _connect(kubeconfig: str | None) -> k8s.ApiClient:
    if kubeconfig:
        return await k8s_config.new_client_from_config(config_file=kubeconfig)
    configuration = k8s.Configuration()
    k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return k8s.ApiClient(configuration=configuration)


async def _run(args: argparse.Namespace, register: Register | None) -> int:
    try:
        api = await _connect(args.kubeconfig)
    except (ConfigException, OSError) as exc:
        where = args.kubeconfig or "the in-cluster service account"
        log.error("cannot load cluster credentials %s", kv(source=where, error=exc))
        return 2
    ctx: Context | None = None
    try:
        client = Client(api)
        if not await check_server_version(client):
            return 1  # the one ERROR line is written; Kubernetes shows the exit, the log says why
        manager = Manager(client, manager_options(args))
        if register is None:
            ctx = await reconcilers.register(
                manager,
                policy=policy_of(args),
                rsa_host_keys=args.ssh_rsa_host_keys,
                node_lost_after=args.node_lost_after,
                cluster_domain=args.cluster_domain,
                slurm_max_answer_bytes=args.slurm_max_answer_size,
                max_eviction_hold=args.max_eviction_hold,
                preemption_taints=args.preemption_taints,
                network=NetworkSettings(
                    operator_namespace=args.operator_namespace or _pod_namespace(DEFAULT_NETWORK.operator_namespace),
                    ssh_from=args.login_ssh_from,
                ),
            )
        else:
            await register(manager)
        heap.settle()
        await manager.run()
    except LeaderElectionLost as exc:
        log.error("exiting so that Kubernetes restarts the operator %s", kv(error=exc))
        return 1
    finally:
        if ctx is not None:
            await ctx.slurm.aclose()
        await api.close()
    return 0


def render_command(
    filename: str, *, namespace: str, policy: Policy | None = None, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
) -> int:
    """`slurmctl render`: what the operator would apply, without a cluster (for reviews and GitOps diffs). It prints
    the objects of the components' own plans (registry order) for the observation of the new cluster once its keys
    exist and its jail is populated (reconcilers/offline.py): what only a cluster would add (key ids, elastic pods,
    key material) is left out.

    Invalid clusters, and those the operator's `policy` refuses (default: the default flags), are reported on
    stderr with every problem's field path, and nothing is printed for them.
    """
    policy = policy or Policy()
    text = sys.stdin.read() if filename == "-" else Path(filename).read_text()
    try:
        documents = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError as exc:
        sys.stderr.write(f"{filename}: not valid YAML: {exc}\n")
        return 1
    failed = False
    rendered: list[dict[str, Any]] = []
    for doc in documents:
        if doc.get("kind") != KIND:
            continue
        doc.setdefault("metadata", {}).setdefault("namespace", namespace)
        cluster, problems = check_cluster(doc, policy=policy)
        if cluster is None or problems:
            failed = True
            name = doc["metadata"].get("name", "?")
            for problem in [str(p) for p in problems] or ["the object could not be read"]:
                sys.stderr.write(f"{filename}: SlurmCluster {name}: {problem}\n")
            continue
        obs = offline.observation(cluster, policy=policy, cluster_domain=cluster_domain)
        rendered.extend(reconcilers.planned_objects(obs))
    sys.stdout.write(yaml.safe_dump_all(rendered, sort_keys=False))
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None, *, register: Register | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "render":
        return render_command(
            args.filename,
            namespace=args.namespace,
            policy=policy_of(args),
            cluster_domain=args.cluster_domain,
        )
    if args.command == "rbac":
        who = rbac.Grantee(args.service_account, args.service_account_namespace)
        objects = rbac.for_install(args.watch_namespace, who, cordon=args.allow_node_cordon)
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
        return 0
    if args.command != "run":
        parser.print_help()
        return 2
    configure(args.log_level, args.log_format)
    log.info(
        "starting %s",
        kv(
            version=__version__,
            namespaces=",".join(args.namespace) or "*",
            leader_elect=args.leader_elect,
            policy=policy_of(args),
            node_lost_after=args.node_lost_after,
            cluster_domain=args.cluster_domain,
            slurm_max_answer_size=args.slurm_max_answer_size,
        ),
    )
    return asyncio.run(_run(args, register))


if __name__ == "__main__":
    sys.exit(main())
