"""Pod DNS and Service routing for the local node: watch pods, Services and Endpoints, keep a hosts file for
dnsmasq's --hostsdir and (with --service-chain) an iptables nat chain that does kube-proxy's job for ClusterIPs.

Records (all under cluster.local):
  <podIP> <hostname>.<subdomain>.<ns>.svc.cluster.local      pods with spec.hostname and spec.subdomain
  <ip> <svc>.<ns>.svc.cluster.local                          every address of a headless Service's Endpoints,
                                                             notReadyAddresses included (peers find each other
                                                             before they are Ready, as StatefulSets expect)
  <ip> <hostname>.<svc>.<ns>.svc.cluster.local               Endpoints addresses that carry a hostname
  <ip> <svc>.<ns>.svc.cluster.local                          ready endpoint IPs of a ClusterIP Service: the node
                                                             has no kube-proxy, so the name points at the pods

The file is written outside the hosts directory and renamed in, and only when its content changes (dnsmasq re-reads
it by inotify).

Service routing (the node has no kube-proxy): one DNAT rule per ready endpoint of every ClusterIP Service port, in the
nat chain that hack/node.sh hooks into PREROUTING (pods, whose route to the Service network goes through the bridge's
address) and OUTPUT (the node itself), spread over the endpoints at random as kube-proxy's iptables mode does. The
chain is replaced whole with `iptables-restore --noflush`, only when its content changes. default/kubernetes goes to
--apiserver: the API server listens on loopback only and cannot publish that address as its Endpoints (it refuses
loopback endpoint addresses), so the node routes it there (hack/node.sh sets route_localnet on the bridge for this).
Names still resolve to the pods (above), so nothing but a client that uses a ClusterIP (the in-cluster config's
KUBERNETES_SERVICE_HOST, a client given spec.clusterIP) depends on this routing.

Started and stopped by hack/node.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.rest import ApiException

DOMAIN = "cluster.local"
Obj = dict[str, Any]
Lister = Callable[..., Awaitable[Any]]


def log(msg: str) -> None:
    print(f"dns-watcher: {msg}", file=sys.stderr, flush=True)


def key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def render(pods: dict[str, Obj], services: dict[str, Obj], endpoints: dict[str, Obj]) -> str:
    lines: set[str] = set()
    for pod in pods.values():
        spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
        ip, hostname, sub = status.get("podIP"), spec.get("hostname"), spec.get("subdomain")
        if ip and hostname and sub and status.get("phase") not in ("Succeeded", "Failed"):
            lines.add(f"{ip} {hostname}.{sub}.{meta['namespace']}.svc.{DOMAIN}")
    for k, ep in endpoints.items():
        svc = services.get(k)
        if svc is None or (svc.get("spec") or {}).get("type") == "ExternalName":
            continue
        headless = (svc.get("spec") or {}).get("clusterIP") == "None"
        ns, name = k.split("/", 1)
        for subset in ep.get("subsets") or []:
            addrs = list(subset.get("addresses") or [])
            if headless:
                addrs += subset.get("notReadyAddresses") or []
            for addr in addrs:
                ip = addr.get("ip")
                if not ip:
                    continue
                lines.add(f"{ip} {name}.{ns}.svc.{DOMAIN}")
                if headless and addr.get("hostname"):
                    lines.add(f"{ip} {addr['hostname']}.{name}.{ns}.svc.{DOMAIN}")
    return "".join(f"{line}\n" for line in sorted(lines))


def service_targets(key_: str, port: Obj, endpoints: Obj | None, apiserver: str | None) -> list[str]:
    """`ip:port` of every ready endpoint behind one Service port (Endpoints ports carry the Service port's name)."""
    if key_ == "default/kubernetes" and apiserver:
        return [apiserver]
    name, protocol = port.get("name") or "", port.get("protocol") or "TCP"
    targets: set[str] = set()
    for subset in (endpoints or {}).get("subsets") or []:
        numbers = [
            p["port"]
            for p in subset.get("ports") or []
            if (p.get("name") or "") == name and (p.get("protocol") or "TCP") == protocol and p.get("port")
        ]
        for addr in subset.get("addresses") or []:
            if addr.get("ip"):
                targets.update(f"{addr['ip']}:{n}" for n in numbers)
    return sorted(targets)


def render_services(services: dict[str, Obj], endpoints: dict[str, Obj], chain: str, apiserver: str | None) -> str:
    """iptables-restore input that replaces `chain` (nat table) with a DNAT rule per ready endpoint of every ClusterIP
    Service port; with n endpoints, the i-th rule takes 1/(n-i) of what reaches it, so each gets an equal share."""
    rules: list[str] = []
    for k in sorted(services):
        spec = services[k].get("spec") or {}
        cluster_ip = spec.get("clusterIP")
        if not cluster_ip or cluster_ip == "None" or spec.get("type") == "ExternalName":
            continue
        for port in spec.get("ports") or []:
            protocol = (port.get("protocol") or "TCP").lower()
            if protocol not in ("tcp", "udp") or not port.get("port"):
                continue
            targets = service_targets(k, port, endpoints.get(k), apiserver)
            match = f"-d {cluster_ip}/32 -p {protocol} -m {protocol} --dport {port['port']}"
            comment = f'-m comment --comment "{k}:{port.get("name") or port["port"]}"'
            for i, target in enumerate(targets):
                share = f" -m statistic --mode random --probability {1 / (len(targets) - i):.5f}"
                share = share if i < len(targets) - 1 else ""
                rules.append(f"-A {chain} {match} {comment}{share} -j DNAT --to-destination {target}")
    return "".join(f"{line}\n" for line in ["*nat", f":{chain} - [0:0]", *rules, "COMMIT"])


class Watcher:
    def __init__(
        self,
        api: client.ApiClient,
        hosts_dir: Path,
        work_dir: Path,
        service_chain: str | None = None,
        apiserver: str | None = None,
    ) -> None:
        core = client.CoreV1Api(api)
        self.sources: dict[str, Lister] = {
            "pods": core.list_pod_for_all_namespaces,
            "services": core.list_service_for_all_namespaces,
            "endpoints": core.list_endpoints_for_all_namespaces,
        }
        self.objects: dict[str, dict[str, Obj]] = {name: {} for name in self.sources}
        self.synced: set[str] = set()
        self.changed = asyncio.Event()
        self.hosts_file = hosts_dir / "cluster.hosts"
        self.work_dir = work_dir
        self.written: str | None = None
        self.service_chain = service_chain
        self.apiserver = apiserver
        self.rules_written: str | None = None

    async def run_source(self, name: str) -> None:
        lister = self.sources[name]
        backoff = 0.5
        while True:
            try:
                resp = await lister(_preload_content=False, _request_timeout=30)
                body = json.loads(await resp.read())
                self.objects[name] = {key(o): o for o in body.get("items") or []}
                self.synced.add(name)
                self.changed.set()
                await self.watch(name, lister, body["metadata"]["resourceVersion"])
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: relist after a short pause
                log(f"{name}: {type(exc).__name__}: {exc}; relisting")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def watch(self, name: str, lister: Lister, rv: str) -> None:
        """Follow changes from `rv` until the server ends the watch (then relist) or the version expires (410)."""
        timeout = random.randint(300, 600)
        async with watch.Watch() as w:
            async for event in w.stream(
                lister,
                resource_version=rv,
                timeout_seconds=timeout,
                allow_watch_bookmarks=True,
                _request_timeout=timeout + 30,
            ):
                kind, raw = event["type"], event["raw_object"]
                if kind == "ERROR":
                    raise ApiException(status=raw.get("code", 500), reason=raw.get("message", "watch error"))
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self.objects[name].pop(key(raw), None)
                else:
                    self.objects[name][key(raw)] = raw
                self.changed.set()

    def write(self, content: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".cluster.hosts.", dir=self.work_dir)
        with os.fdopen(fd, "w") as f:
            f.write(content)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.hosts_file)

    async def run_writer(self) -> None:
        while True:
            await self.changed.wait()
            self.changed.clear()
            if self.synced != set(self.sources):
                continue
            content = render(self.objects["pods"], self.objects["services"], self.objects["endpoints"])
            if content != self.written:
                self.write(content)
                self.written = content
                log(f"wrote {content.count(chr(10))} records")
            if self.service_chain:
                await self.write_rules()

    async def write_rules(self) -> None:
        """Replace the Service chain when its rules changed; after a failure, try again a second later."""
        assert self.service_chain is not None
        rules = render_services(self.objects["services"], self.objects["endpoints"], self.service_chain, self.apiserver)
        if rules == self.rules_written:
            return
        restore = shutil.which("iptables-restore") or "/usr/sbin/iptables-restore"
        proc = await asyncio.create_subprocess_exec(
            restore, "--noflush", "-w", "10", stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate(rules.encode())
        if proc.returncode != 0:
            log(f"iptables-restore failed ({proc.returncode}): {err.decode(errors='replace').strip()}; retrying")
            asyncio.get_running_loop().call_later(1.0, self.changed.set)
            return
        self.rules_written = rules
        log(f"wrote {rules.count(' -j DNAT ')} Service rules into {self.service_chain}")

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for name in self.sources:
                tg.create_task(self.run_source(name))
            tg.create_task(self.run_writer())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--hosts-dir", required=True, type=Path, help="dnsmasq's --hostsdir")
    parser.add_argument("--work-dir", required=True, type=Path, help="where the file is written before the rename")
    parser.add_argument("--service-chain", help="the iptables nat chain to keep with the ClusterIP Services' rules")
    parser.add_argument("--apiserver", help="HOST:PORT that default/kubernetes routes to (the API server's address)")
    args = parser.parse_args()
    args.hosts_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    api = await config.new_client_from_config(config_file=args.kubeconfig)
    try:
        await Watcher(api, args.hosts_dir, args.work_dir, args.service_chain, args.apiserver).run()
    finally:
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
