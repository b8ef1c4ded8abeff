"""The client's HTTP session consults the environment (proxies, netrc) only when proxy variables are set."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from slurmctl.runtime import Client

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _without_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def test_no_proxy_variables_no_environment_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_proxies(monkeypatch)
    api = ApiClient(Configuration(host="https://127.0.0.1:6443"))
    try:
        Client(api)
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()


async def test_proxy_variables_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_proxies(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    api = ApiClient(Configuration(host="https://127.0.0.1:6443"))
    try:
        Client(api)
        assert api.rest_client.pool_manager.trust_env is True
    finally:
        await api.close()
