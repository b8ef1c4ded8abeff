"""Pod DNS for the local node: watch pods, Services and Endpoints, keep a hosts file for dnsmasq's --hostsdir.

Records (all under cluster.local):
  <podIP> <hostname>.<subdomain>.<ns>.svc.cluster.local      pods with spec.hostname and spec.subdomain
  <ip> <svc>.<ns>.svc.cluster.local                          every address of a headless Service's Endpoints,
                                                             notReadyAddresses included (peers find each other
                                                             before they are Ready, as StatefulSets expect)
  <ip> <hostname>.<svc>.<ns>.svc.cluster.local               Endpoints addresses that carry a hostname
  <ip> <svc>.<ns>.svc.cluster.local                          ready endpoint IPs of a ClusterIP Service: the node
                                                             has no kube-proxy, so the name points at the pods

The file is written outside the hosts directory and renamed in, and only when its content changes (dnsmasq re-reads
it by inotify). Started and stopped by hack/node.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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


class Watcher:
    def __init__(self, api: client.ApiClient, hosts_dir: Path, work_dir: Path) -> None:
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
    args = parser.parse_args()
    args.hosts_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    api = await config.new_client_from_config(config_file=args.kubeconfig)
    try:
        await Watcher(api, args.hosts_dir, args.work_dir).run()
    finally:
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
