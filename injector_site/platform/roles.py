"""Which routes a process serves: the webhook role answers the API server, the operator role people.

deploy/ runs two Deployments of one image: `volcano-injector` (INJECTOR_ROLE=webhook) behind the Service
the API server calls, and `volcano-injector-operator` (INJECTOR_ROLE=operator) behind the UI's Service,
so no operator request (an impact replay, a CSV export) can take a thread or a CPU share of a webhook
worker. "all" serves both from one process (development, the tests).
"""

from __future__ import annotations

WEBHOOK = "webhook"
OPERATOR = "operator"
ALL = "all"
MUTATE_PATH = "/mutate"
# What the kubelet (probes) and Prometheus call on every role.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# What the API server, the kubelet and Prometheus need from the webhook.
WEBHOOK_PATHS = PROBE_PATHS | {MUTATE_PATH}

NOT_SERVED = {
    WEBHOOK: "Not found: this server runs the webhook only (INJECTOR_ROLE=webhook): the admin, dashboard and "
             "API are served by the operator Deployment (Service volcano-injector-ui).\n",
    OPERATOR: "Not found: this server runs the operator pages only (INJECTOR_ROLE=operator): the API server "
              "calls /mutate on the webhook Deployment (Service volcano-injector).\n",
}


def role_serves(*, role: str, path: str) -> bool:
    """Whether a process of `role` answers `path` (a 404 that names the right Service otherwise)."""
    if role == WEBHOOK:
        return path in WEBHOOK_PATHS
    if role == OPERATOR:
        return path != MUTATE_PATH
    return True


def role_serves_mutate(*, role: str) -> bool:
    return role != OPERATOR


def role_serves_operators(*, role: str) -> bool:
    return role != WEBHOOK
