"""The reconcilers' test bench: the real registry and reconcilers on a Manager whose client is the in-memory
`FakeClient` (server-side-apply-lite), and the steps the rest of the world takes (a user, the Job controller, a
kubelet) written straight into it."""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Sequence
from typing import Any

from slurmctl.api.v1 import API_VERSION, KIND, Policy
from slurmctl.reconcilers.component import Component
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.registry import register
from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, JOB, NODE, POD, SECRET, SLURM_CLUSTER, STATEFULSET, Kind
from slurmctl.runtime import Manager, ManagerOptions, Request, Result
from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.fake import FakeClient, Write

NS = "hpc"
NAME = "c"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests test@example"
# The default policy, plus the one opt-in `spec` needs: it logs in as root (sshRootPublicKeys).
POLICY = Policy(allow_root_logins=True)


def spec(*, size: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "jail": {"volume": {"claimName": "jail"}},
        "workers": [{"name": "cpu", "size": size, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}],
        "login": {"sshRootPublicKeys": [SSH_KEY]},
        **extra,
    }


class Env:
    def __init__(
        self,
        components: Sequence[Component] | None = None,
        *,
        policy: Policy = POLICY,
        clock: Clock = REAL_CLOCK,
        served: Sequence[tuple[str, str]] | None = None,
        max_eviction_hold: float = 0.0,
    ) -> None:
        """`components`: what to register instead of the registry's table; `policy`: the operator's (its flags);
        `clock`: the manager's (the status writer's coalescing window runs on it);
        `served`: the kinds the API server serves (default: every built-in kind, all versions);
        `max_eviction_hold`: the operator's --max-eviction-hold."""
        self.components = components
        self.policy = policy
        self.max_eviction_hold = max_eviction_hold
        self.fake = FakeClient() if served is None else FakeClient(served=served)
        self.fake.serve(*SLURM_CLUSTER)
        options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False)
        self.manager = Manager(self.fake, options, cache=self.fake.cache_factory, clock=clock)
        self.ctx: Context
        self._events: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Env:
        self.ctx = await register(
            self.manager, self.components, policy=self.policy, max_eviction_hold=self.max_eviction_hold
        )
        self.components = self.ctx.components
        self._events = asyncio.create_task(self.manager.recorder.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._events is not None:
            self._events.cancel()

    # ---- the user -----------------------------------------------------------------------------------------------
    def create(self, body_spec: dict[str, Any], *, name: str = NAME) -> dict[str, Any]:
        return self.fake.put(
            {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": NS}, "spec": body_spec}
        )

    def edit(self, change: Any, *, name: str = NAME) -> dict[str, Any]:
        """Apply `change(spec)` to the live SlurmCluster's spec, as `kubectl edit` would (new generation)."""
        obj = copy.deepcopy(self.cluster(name))
        change(obj["spec"])
        return self.fake.put(obj)

    def secret(
        self, name: str, data: dict[str, bytes], *, labels: dict[str, str] | None = None, owner: str | None = None
    ) -> dict[str, Any]:
        """A Secret as someone made it; `owner`: the uid of the SlurmCluster it names as its controller."""
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        metadata: dict[str, Any] = {"name": name, "namespace": NS}
        if labels:
            metadata["labels"] = labels
        if owner:
            metadata["ownerReferences"] = [
                {"apiVersion": API_VERSION, "kind": KIND, "name": NAME, "uid": owner, "controller": True}
            ]
        return self.fake.put({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": encoded})

    # ---- the operator -------------------------------------------------------------------------------------------
    async def run(self, *components: str, name: str = NAME) -> dict[str, Result | None]:
        """One reconcile of each named component (all, in registry order, by default); events posted after."""
        results = {}
        for component in components or [c.name for c in self.ctx.components]:
            results[component] = await self.ctx.reconcilers[component](Request(NS, name))
        await self.ctx.status.flush()  # what the status writer sends a moment later
        await self.manager.recorder.flush()
        return results

    async def converge(self, *components: str, name: str = NAME, rounds: int = 10) -> None:
        """Reconcile until a whole round writes nothing (what informer events would keep doing)."""
        for _ in range(rounds):
            before = len(self.fake.writes)
            await self.run(*components, name=name)
            if len(self.fake.writes) == before:
                return
        raise AssertionError(f"no convergence in {rounds} rounds; last writes: {self.fake.writes[before:]}")

    async def poll_slurm(self, *, name: str = NAME) -> Result | None:
        """One pass of the loop that reads Slurm's view of the nodes."""
        result = await self.ctx.loops["slurm-nodes"](Request(NS, name))
        await self.ctx.status.flush()
        await self.manager.recorder.flush()
        return result

    def mark(self) -> int:
        """A point in the write log, for `writes_since`."""
        return len(self.fake.writes)

    def writes_since(self, mark: int, *, events: bool = True) -> list[Write]:
        return [w for w in self.fake.writes[mark:] if events or w.kind != "Event"]

    async def available(self, body_spec: dict[str, Any] | None = None, *, name: str = NAME) -> None:
        """Create a cluster and play the rest of the world until it is Available: the jail Job succeeds, every pod
        turns ready."""
        self.create(spec() if body_spec is None else body_spec, name=name)
        await self.converge(name=name)
        self.job_succeeds(name=name)
        await self.converge(name=name)
        self.pods_ready()
        await self.converge(name=name)

    # ---- the rest of the world ----------------------------------------------------------------------------------
    def job_succeeds(self, *, name: str = NAME) -> None:
        status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
        self.fake.set_status(*JOB, f"{name}-populate-jail", status, namespace=NS)

    def job_fails(self, *, name: str = NAME) -> None:
        failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff limit"}
        self.fake.set_status(*JOB, f"{name}-populate-jail", {"failed": 4, "conditions": [failed]}, namespace=NS)

    def pods_ready(self) -> None:
        """Every workload reports all its pods ready, as their controllers would once kubelets say so."""
        for sts in self.fake.of_kind(*STATEFULSET):
            replicas = sts["spec"].get("replicas", 1)
            self.fake.set_status(*STATEFULSET, sts["metadata"]["name"], {"readyReplicas": replicas}, namespace=NS)
        for dep in self.fake.of_kind(*DEPLOYMENT):
            self.fake.set_status(*DEPLOYMENT, dep["metadata"]["name"], {"availableReplicas": 1}, namespace=NS)

    def worker_pods(self, *, on: str = "node-a", name: str = NAME) -> list[str]:
        """What the StatefulSet controller and a kubelet make of each worker StatefulSet: the pods it lacks, from its
        template, scheduled on the Kubernetes node `on`, running and ready. Returns their names."""
        made = []
        for sts in self.fake.of_kind(*STATEFULSET):
            md = sts["metadata"]
            if md["labels"].get(meta.LABEL_COMPONENT) != "workers" or md["labels"].get(meta.LABEL_INSTANCE) != name:
                continue
            for i in range(sts["spec"].get("replicas", 1)):
                pod = f"{md['name']}-{i}"
                if self.get(POD, pod) is None:
                    labels = {**sts["spec"]["template"]["metadata"]["labels"], "controller-revision-hash": "rev-1"}
                    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": md["name"], "uid": md["uid"]}
                    metadata = {"name": pod, "namespace": NS, "labels": labels, "ownerReferences": [owner]}
                    self.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"nodeName": on}})
                    self.pod_runs(pod)
                    made.append(pod)
        return made

    def pod_runs(self, pod: str, *, ready: bool = True, slurmd: str = "running", ip: str = "127.0.0.30") -> None:
        """The kubelet reports the pod: its address, Ready or not, and the state of its slurmd container."""
        ready_condition = {"type": "Ready", "status": "True" if ready else "False"}
        containers = [{"name": "slurmd", "ready": ready, "state": {slurmd: {}}}]
        status = {"phase": "Running", "podIP": ip, "conditions": [ready_condition], "containerStatuses": containers}
        self.fake.set_status(*POD, pod, status, namespace=NS)

    def k8s_node(self, name: str, *, unschedulable: bool = False, taints: tuple[str, ...] = ()) -> None:
        """A Kubernetes node, cordoned (`kubectl cordon`) or not (`kubectl uncordon`), with NoSchedule taints of
        these keys."""
        spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
        if taints:
            spec["taints"] = [{"key": key, "effect": "NoSchedule"} for key in taints]
        self.fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec})

    # ---- reading ------------------------------------------------------------------------------------------------
    def cluster(self, name: str = NAME) -> dict[str, Any]:
        obj = self.fake.find(*SLURM_CLUSTER, name, namespace=NS)
        assert obj is not None
        return obj

    def condition(self, type_: str, *, name: str = NAME) -> dict[str, Any] | None:
        conditions = (self.cluster(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == type_), None)

    def reason(self, type_: str) -> tuple[str, str] | None:
        cond = self.condition(type_)
        return None if cond is None else (cond["status"], cond["reason"])

    def phase(self) -> str | None:
        return (self.cluster().get("status") or {}).get("phase")

    def get(self, kind: Kind, name: str) -> dict[str, Any] | None:
        return self.fake.find(*kind, name, namespace="" if kind == NODE else NS)

    def labels(self, pod: str) -> dict[str, str]:
        found = self.get(POD, pod)
        assert found is not None, pod
        return dict(found["metadata"].get("labels") or {})

    def names(self, kind: Kind) -> list[str]:
        return [o["metadata"]["name"] for o in self.fake.of_kind(*kind)]

    def events(self) -> list[tuple[str, str, str]]:
        return [(e["type"], e["reason"], e["message"]) for e in self.fake.of_kind("v1", "Event")]

    def secret_text(self, name: str, key: str) -> str:
        secret = self.get(SECRET, name)
        assert secret is not None
        return base64.b64decode(secret["data"][key]).decode()
