"""injector_site/platform/kube.py: a Kubernetes client from the Pod's service account, else from a kubeconfig."""

import pytest

from injector_site.platform.kube import KubeConfigError, kube_api_client


def test_in_a_pod_the_client_uses_the_service_account_token_and_ca(tmp_path, monkeypatch):
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token-123")
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "ignored-in-a-pod"))
    configuration = kube_api_client().configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.auth_settings()["BearerToken"]["value"] .lower() == "bearer sa-token-123"
    assert configuration.ssl_ca_cert == str(ca)


def test_outside_a_pod_the_client_reads_the_kubeconfig_that_kubeconfig_names(tmp_path, monkeypatch):
    from tests.support.kube_api import KubeApiReplay

    replay = KubeApiReplay()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(replay.kubeconfig(tmp_path)))
    configuration = kube_api_client().configuration
    replay.stop()
    assert configuration.host == replay.url
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer replay-token"


def test_without_a_pod_or_a_kubeconfig_the_error_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(KubeConfigError, match=str(tmp_path / "missing")):
        kube_api_client()
