"""Reading the GPU nodes and the vGPU device plugin's node ConfigMap through the official `kubernetes` client.

Read-only: nodes are listed (paged with limit/continue, so no response holds the whole cluster) and one
ConfigMap is read; deploy/components/gpu-inventory grants exactly that. Node lists come back as the API
server's JSON (`_preload_content=False`), which the pure reader (mutations.engine.inventory) takes as it
is: deserialising 5,000 nodes into the client's classes would cost most of the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from injector_site.platform.kube import REQUEST_TIMEOUT_SECONDS, api_error_text
from mutations.engine.inventory import NodeConfig, NodeReading, node_config_parse, node_read

if TYPE_CHECKING:
    from kubernetes.client import ApiException, CoreV1Api

# Nodes listed per request: a few MiB of JSON a page at most.
PAGE_SIZE = 500
NODE_CONFIG_MAP = "volcano-vgpu-node-config"
NODE_CONFIG_NAMESPACE = "kube-system"
NODE_CONFIG_KEY = "config.json"
COMPONENT = "deploy/components/gpu-inventory"


class InventoryReadError(Exception):
    """A read the inventory needs failed (RBAC, credentials, a timeout, the server unreachable)."""


@dataclass
class ClusterReading:
    """What one read found: the GPU nodes, how many nodes and pages were listed, and what could not be read."""

    nodes: list[NodeReading] = field(default_factory=list)
    nodes_listed: int = 0
    pages: int = 0
    problems: list[str] = field(default_factory=list)
    node_config_found: bool = False


def cluster_read(*, api: CoreV1Api, node_config_name: str = NODE_CONFIG_MAP,
                 node_config_namespace: str = NODE_CONFIG_NAMESPACE,
                 timeout_seconds: float = REQUEST_TIMEOUT_SECONDS) -> ClusterReading:
    """Every GPU node as Volcano's scheduler sees it; raises InventoryReadError when a read fails part way."""
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError

    reading = ClusterReading()
    try:
        configs = _node_configs(api, node_config_name, node_config_namespace, timeout_seconds, reading)
    except HTTPError as exc:
        raise InventoryReadError(f"cannot read ConfigMap {node_config_namespace}/{node_config_name}: the API server "
                                 f"did not answer in time or at all ({type(exc).__name__}: {exc})") from exc
    try:
        token = None
        while True:
            # An HTTP response (not a V1NodeList): _preload_content=False.
            response: Any = api.list_node(limit=PAGE_SIZE, _continue=token, _request_timeout=timeout_seconds,
                                          _preload_content=False)
            page = json.loads(response.data)
            reading.pages += 1
            for item in page.get("items") or []:
                reading.nodes_listed += 1
                node = node_read(item, configs)
                if node is not None:
                    reading.nodes.append(node)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return reading
    except HTTPError as exc:
        raise InventoryReadError(f"cannot list nodes: the API server did not answer in time or at all "
                                 f"({type(exc).__name__}: {exc}), after {reading.pages} page(s)") from exc
    except ApiException as exc:
        raise InventoryReadError(f"cannot list nodes: {_api_error(exc)} (after {reading.pages} page(s))") from exc
    except ValueError as exc:
        raise InventoryReadError(f"cannot list nodes: page {reading.pages + 1} is not JSON: {exc}") from exc


def _node_configs(api: CoreV1Api, name: str, namespace: str, timeout_seconds: float,
                  reading: ClusterReading) -> dict[str, NodeConfig]:
    """The device plugin's per-node settings; none (the plugin's defaults) when the ConfigMap does not exist."""
    from kubernetes.client import ApiException

    try:
        config_map = api.read_namespaced_config_map(name, namespace, _request_timeout=timeout_seconds)
    except ApiException as exc:
        if exc.status == 404:
            reading.problems.append(f"ConfigMap {namespace}/{name} not found: every node is taken at the device "
                                    "plugin's defaults (no memory scaling, 10 slices a card)")
            return {}
        raise InventoryReadError(f"cannot read ConfigMap {namespace}/{name}: {_api_error(exc)}") from exc
    reading.node_config_found = True
    text = (config_map.data or {}).get(NODE_CONFIG_KEY)
    if text is None:
        reading.problems.append(f"ConfigMap {namespace}/{name} has no {NODE_CONFIG_KEY}: the plugin's defaults are "
                                "assumed")
        return {}
    configs, problems = node_config_parse(text)
    reading.problems += [f"ConfigMap {namespace}/{name}: {p}" for p in problems]
    return configs


def _api_error(exc: ApiException) -> str:
    return api_error_text(exc, grants=COMPONENT,
                          status_hints={410: "the list changed too much while it was paged; the next run starts over"})
