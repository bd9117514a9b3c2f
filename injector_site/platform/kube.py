"""A client for the Kubernetes API, for the management commands that call it, and for /mutate only to read a
serving group's leader Pod when INJECTOR_GROUP_LEADER_LOOKUP is on (mutations/webhook/groups.py).

Inside a Pod it uses the Pod's service account (in-cluster configuration); elsewhere the kubeconfig
that KUBECONFIG names, else ~/.kube/config, as kubectl does. The official `kubernetes` client is
imported here only, so processes that never call the API (the webhook, with that lookup off) never load it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

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
