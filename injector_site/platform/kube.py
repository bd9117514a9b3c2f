"""A client for the Kubernetes API, for the management commands that call it, and for /mutate only to read a
serving group's leader Pod when INJECTOR_GROUP_LEADER_LOOKUP is on (mutations/webhook/groups.py, its last resort).

Inside a Pod it uses the Pod's service account (in-cluster configuration); elsewhere the kubeconfig
that KUBECONFIG names, else ~/.kube/config, as kubectl does. The official `kubernetes` client is
imported here only, so processes that never call the API (the webhook, with that lookup off) never load it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import AdmissionregistrationV1Api, ApiClient, CoreV1Api

# Every call gives up after this long: a CronJob run must end, not hang on a dead connection.
REQUEST_TIMEOUT_SECONDS = 30


class KubeConfigError(Exception):
    """No way to reach the API server: neither in a Pod nor with a readable kubeconfig."""


def kube_api_client(*, kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """A `kubernetes.client.ApiClient`: in-cluster when running in a Pod, else from the kubeconfig."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    in_pod = os.environ.get("KUBERNETES_SERVICE_HOST") and kubeconfig is None
    try:
        if in_pod:
            # kubernetes.config is not annotated (its client package is)
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig or os.environ.get("KUBECONFIG") or None, context=context,
                client_configuration=configuration, persist_config=False,
            )
    except (ConfigException, OSError) as exc:
        where = "the Pod's service account" if in_pod else (kubeconfig or os.environ.get("KUBECONFIG")
                                                           or "~/.kube/config")
        raise KubeConfigError(f"cannot configure a Kubernetes client from {where}: {exc}") from exc
    return client.ApiClient(configuration)


def kube_core_api(api_client: ApiClient | None = None) -> CoreV1Api:
    """The core/v1 API (namespaces, resource quotas, Pods) on a client from kube_api_client()."""
    from kubernetes import client

    return client.CoreV1Api(api_client or kube_api_client())


def kube_admission_api(api_client: ApiClient | None = None) -> AdmissionregistrationV1Api:
    """The admissionregistration.k8s.io/v1 API (webhook configurations) on a client from kube_api_client()."""
    from kubernetes import client

    return client.AdmissionregistrationV1Api(api_client or kube_api_client())


def kube_arguments_add(parser: Any) -> None:
    """The --kubeconfig and --context options every management command that calls the API takes, as kubectl's."""
    parser.add_argument("--kubeconfig", default=None,
                        help="A kubeconfig file (default: in a Pod its service account, else KUBECONFIG or "
                             "~/.kube/config).")
    parser.add_argument("--context", default=None, help="The kubeconfig context to use (default: its current one).")


def api_status_message(exc: Any) -> str:
    """The API server's own message of an ApiException (its Status body), else the HTTP reason."""
    body = getattr(exc, "body", None)
    try:
        return str(json.loads(body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(getattr(exc, "reason", None) or body or "no message")


def api_error_text(exc: Any, *, grants: str, status_hints: Mapping[int, str] | None = None) -> str:
    """An ApiException as an operator reads it: the status, the server's message, and what to do.

    `grants` names what grants the missing permission (a kustomize component), for 403; `status_hints` adds
    what a status means to this caller (404 of a CRD, 409 of an object in the way, 410 of a paged list).
    """
    message = api_status_message(exc)
    status: int | None = getattr(exc, "status", None)
    if status_hints and status is not None and status in status_hints:
        return f"{status}: {message} ({status_hints[status]})"
    if status == 403:
        return f"403 forbidden: {message} (the service account lacks this permission: apply {grants}, which grants it)"
    if status == 401:
        return f"401 unauthorized: {message} (the service account token or kubeconfig credentials are not accepted)"
    return f"HTTP {status}: {message}"
