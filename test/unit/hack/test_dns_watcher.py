"""The pod DNS records hack/dns_watcher.py writes for dnsmasq (the watch itself runs in test/e2e/pods)."""

from __future__ import annotations

from typing import Any

from test.loose_modules import REPO, load_module

dw = load_module(REPO / "hack" / "dns_watcher.py")


def pod(ns: str, name: str, ip: str | None, hostname: str = "", subdomain: str = "", phase: str = "Running") -> Any:
    spec = {"hostname": hostname, "subdomain": subdomain} if hostname else {}
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec, "status": {"podIP": ip, "phase": phase}}


def svc(ns: str, name: str, cluster_ip: str) -> Any:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": cluster_ip}}


def endpoints(ns: str, name: str, ready: list[tuple[str, str]], not_ready: list[tuple[str, str]]) -> Any:
    def addrs(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
        return [{"ip": ip, **({"hostname": h} if h else {})} for ip, h in pairs]

    subset = {"addresses": addrs(ready), "notReadyAddresses": addrs(not_ready)}
    return {"metadata": {"namespace": ns, "name": name}, "subsets": [subset]}


def by_key(*objs: Any) -> dict[str, Any]:
    return {dw.key(o): o for o in objs}


def test_statefulset_pods_and_a_headless_service_with_not_ready_peers() -> None:
    pods = by_key(
        pod("a", "web-0", "10.244.0.10", "web-0", "web"),
        pod("a", "web-1", "10.244.0.11", "web-1", "web"),
        pod("a", "plain", "10.244.0.12"),
        pod("a", "done", "10.244.0.13", "done", "web", phase="Succeeded"),
        pod("a", "pending", None, "pending", "web"),
    )
    services = by_key(svc("a", "web", "None"))
    eps = by_key(endpoints("a", "web", [("10.244.0.10", "web-0")], [("10.244.0.11", "web-1")]))
    assert dw.render(pods, services, eps).splitlines() == [
        "10.244.0.10 web-0.web.a.svc.cluster.local",
        "10.244.0.10 web.a.svc.cluster.local",
        "10.244.0.11 web-1.web.a.svc.cluster.local",
        "10.244.0.11 web.a.svc.cluster.local",
    ]


def test_a_cluster_ip_service_names_only_its_ready_pods() -> None:
    services = by_key(svc("b", "ctl", "10.96.0.7"), {"metadata": {"namespace": "b", "name": "ext"}, "spec": {}})
    eps = by_key(
        endpoints("b", "ctl", [("10.244.0.20", "")], [("10.244.0.21", "")]),
        endpoints("b", "orphan", [("10.244.0.22", "")], []),
    )
    assert dw.render({}, services, eps) == "10.244.0.20 ctl.b.svc.cluster.local\n"


def test_nothing_to_publish_is_an_empty_file() -> None:
    assert dw.render({}, {}, {}) == ""


def service(ns: str, name: str, cluster_ip: str, *ports: tuple[str, int, str]) -> Any:
    spec = {"clusterIP": cluster_ip, "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports]}
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def endpoint_ports(ns: str, name: str, ready: list[str], not_ready: list[str], *ports: tuple[str, int]) -> Any:
    subset = {
        "addresses": [{"ip": ip} for ip in ready],
        "notReadyAddresses": [{"ip": ip} for ip in not_ready],
        "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports],
    }
    return {"metadata": {"namespace": ns, "name": name}, "subsets": [subset]}


def test_service_rules_dnat_each_cluster_ip_port_to_its_ready_endpoints_in_equal_shares() -> None:
    services = by_key(
        service("default", "kubernetes", "10.96.0.1", ("https", 443, "TCP")),
        service("sys", "metrics", "10.96.0.20", ("metrics", 8080, "TCP"), ("health", 8081, "TCP")),
        service("sys", "headless", "None", ("p", 80, "TCP")),
        service("sys", "empty", "10.96.0.21", ("p", 80, "TCP")),
    )
    eps = by_key(
        endpoint_ports("sys", "metrics", ["10.244.0.11", "10.244.0.10"], ["10.244.0.12"], ("metrics", 9080)),
        endpoint_ports("sys", "headless", ["10.244.0.13"], [], ("p", 80)),
    )
    rules = dw.render_services(services, eps, "SVC", "127.0.0.1:6443").splitlines()
    assert rules == [
        "*nat",
        ":SVC - [0:0]",
        '-A SVC -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -m comment --comment "default/kubernetes:https"'
        " -j DNAT --to-destination 127.0.0.1:6443",
        '-A SVC -d 10.96.0.20/32 -p tcp -m tcp --dport 8080 -m comment --comment "sys/metrics:metrics"'
        " -m statistic --mode random --probability 0.50000 -j DNAT --to-destination 10.244.0.10:9080",
        '-A SVC -d 10.96.0.20/32 -p tcp -m tcp --dport 8080 -m comment --comment "sys/metrics:metrics"'
        " -j DNAT --to-destination 10.244.0.11:9080",
        "COMMIT",
    ]


def test_no_services_is_an_empty_chain_and_kubernetes_follows_its_endpoints_without_an_apiserver() -> None:
    assert dw.render_services({}, {}, "SVC", None) == "*nat\n:SVC - [0:0]\nCOMMIT\n"
    services = by_key(service("default", "kubernetes", "10.96.0.1", ("https", 443, "TCP")))
    eps = by_key(endpoint_ports("default", "kubernetes", ["192.0.2.5"], [], ("https", 6443)))
    assert "--to-destination 192.0.2.5:6443" in dw.render_services(services, eps, "SVC", None)
