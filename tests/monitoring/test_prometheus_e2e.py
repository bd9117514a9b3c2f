"""A real Prometheus scrapes the real webhook under gunicorn; every dashboard query and every rule is evaluated.

The webhook runs as in the cluster (gunicorn_conf.py: HTTPS, two workers, PROMETHEUS_MULTIPROC_DIR,
METRICS_TOKEN) on a throwaway database; Prometheus (Debian's package, on a free local port, scraping
every second) reads /metrics as the ServiceMonitor does (TLS verified against the CA, bearer token,
honor_labels) and loads the PrometheusRule's rules. After admissions of every kind and a scan for
unconverted Pods (against the recorded Kubernetes API), each panel query must return data, each rule
must evaluate without error, and every metric any of them names must exist: a renamed or misspelt
metric fails here.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.support import pods
from tests.support.kube_api import KubeApiReplay, fixture
from tests.support.servers import REPO, VENV_BIN, GunicornProcess, database_drop, database_recreate, free_port
from tests.support.tls import make_dev_certs

from .conftest import (
    dashboard,
    dashboard_targets,
    find_tool,
    grafana_expanded,
    metric_names,
    rule_groups,
)

pytestmark = pytest.mark.slow

TOKEN = "e2e-metrics-token"
APISERVER_METRICS = REPO / "tests" / "fixtures" / "apiserver" / "metrics-admission-webhooks.txt"
DEADLINE_SECONDS = 90
ROUNDS, REVIEWS_PER_ROUND = 4, 7


class StaticMetrics:
    """The recorded API server metrics, served as a scrape target (no API server runs here)."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """Debian's prometheus on a free port, with its own storage, configuration and rules; its HTTP API."""

    def __init__(self, work: Path, config: dict, rules: dict) -> None:
        self.port = free_port()
        (work / "rules.yaml").write_text(yaml.safe_dump(rules))
        (work / "prometheus.yml").write_text(yaml.safe_dump({**config, "rule_files": [str(work / "rules.yaml")]}))
        self.log_path = work / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - open while it runs; stop() closes it
        self.process = subprocess.Popen(
            [find_tool("prometheus"), f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=1h"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # 400/422: the query did not parse or evaluate
            return json.loads(exc.read())

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


def wait_for(check, *, what: str, deadline: float, log=lambda: ""):
    """Call check() until it returns something true; fail naming `what` (and the last answer) at the deadline."""
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    pytest.fail(f"{what} within the time allowed; last answer: {last!r}\n{log()[-3000:]}")


@pytest.fixture(scope="module")
def webhook_database():
    url = f"postgres://postgres@127.0.0.1:5432/volcano_injector_monitoring_{os.getpid()}"
    database_recreate(url)
    # A namespace policy that is off and one that is audit-only (the fixtures' legacy and team-b).
    subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "shell", "-c",
         ("from profiles.models import NamespacePolicy as P; P.objects.create(namespace='legacy', mode='off'); "
          "P.objects.create(namespace='team-b', mode='audit-only')")],
        cwd=REPO, check=True, timeout=120, env={**os.environ, "DATABASE_URL": url, "INJECTOR_DEV_MODE": "true"})
    yield url
    database_drop(url)


@pytest.fixture(scope="module")
def stack(webhook_database, tmp_path_factory):
    """The webhook under gunicorn (HTTPS), a recorded unconverted-Pod scan and GPU inventory sync, and Prometheus
    scraping both targets."""
    work = tmp_path_factory.mktemp("monitoring-e2e")
    certs = make_dev_certs(work / "certs")
    webhook = GunicornProcess(log_path=work / "gunicorn.log", env={
        "DATABASE_URL": webhook_database,
        "INJECTOR_DEV_MODE": "true",
        "INJECTOR_AUDIT_SPOOL_DIR": str(work / "spool"),
        "INJECTOR_AUDIT_WRITER_AUTOSTART": "true",
        "INJECTOR_CONFIG_RECHECK_SECONDS": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus-multiproc"),
        "METRICS_TOKEN": TOKEN,
        "TLS_CERT_FILE": str(certs / "tls.crt"),
        "TLS_KEY_FILE": str(certs / "tls.key"),
        "TLS_CLIENT_CA_FILE": "",
        "WEB_CONCURRENCY": "2",
        "GUNICORN_THREADS": "2",
        "LOG_LEVEL": "WARNING",
    })
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    webhook.wait_until(lambda: https(webhook.port, context, "GET", "/readyz")[0] == 200, timeout_seconds=60,
                       what="become ready")

    replay = KubeApiReplay().start()
    continue_token = fixture("pods-all-namespaces-page-1")["metadata"]["continue"]
    (replay.on("GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/volcano-injector",
               "mutatingwebhookconfiguration-volcano-injector")
        .on("GET", "/api/v1/namespaces", "namespaces-gpu-cluster")
        .on("GET", "/api/v1/pods", "pods-all-namespaces-page-1")
        .on("GET", "/api/v1/pods", "pods-all-namespaces-page-2", query={"continue": continue_token}))
    subprocess.run([str(VENV_BIN / "python"), "manage.py", "find_unconverted_pods",
                    "--kubeconfig", str(replay.kubeconfig(work))], cwd=REPO, check=True, timeout=120,
                   capture_output=True,
                   env={**os.environ, "DATABASE_URL": webhook_database, "INJECTOR_DEV_MODE": "true"})
    # A GPU inventory sync too, so its gauges (the stale-inventory alert's) are scraped.
    nodes_continue = fixture("nodes-gpu-page-1")["metadata"]["continue"]
    (replay.on("GET", "/api/v1/nodes", "nodes-gpu-page-1")
        .on("GET", "/api/v1/nodes", "nodes-gpu-page-2", query={"continue": nodes_continue})
        .on("GET", "/api/v1/namespaces/kube-system/configmaps/volcano-vgpu-node-config",
            "configmap-volcano-vgpu-node-config"))
    subprocess.run([str(VENV_BIN / "python"), "manage.py", "sync_gpu_inventory",
                    "--kubeconfig", str(replay.kubeconfig(work))], cwd=REPO, check=True, timeout=120,
                   capture_output=True,
                   env={**os.environ, "DATABASE_URL": webhook_database, "INJECTOR_DEV_MODE": "true"})
    replay.stop()

    apiserver = StaticMetrics(APISERVER_METRICS.read_bytes())
    prometheus = Prometheus(work, {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {   # what the ServiceMonitor in deploy/components/monitoring asks the Operator for
                "job_name": "volcano-injector",
                "scheme": "https",
                "metrics_path": "/metrics",
                "honor_labels": True,
                "tls_config": {"ca_file": str(certs / "ca.crt"), "server_name": "localhost"},
                "authorization": {"type": "Bearer", "credentials": TOKEN},
                "static_configs": [{"targets": [f"127.0.0.1:{webhook.port}"]}],
            },
            {"job_name": "apiserver", "static_configs": [{"targets": [f"127.0.0.1:{apiserver.port}"]}]},
        ],
    }, rule_groups())
    prometheus.certs = certs
    try:
        drive_admissions(webhook.port, context)
        yield prometheus
    finally:
        prometheus.stop()
        apiserver.stop()
        webhook.stop()


def https(port: int, context: ssl.SSLContext, method: str, path: str, body: bytes | None = None,
          headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def drive_admissions(port: int, context: ssl.SSLContext) -> None:
    """Admissions of every decision the dashboard shows, a few times over so rates have several samples."""
    audit_only_denial = pods.vllm_deployment_pod(namespace="team-b",
                                                 annotations={"volcano-injector.io/preset": "no-such-preset"})
    reviews = [
        pods.review(pods.vllm_deployment_pod()),  # mutated, sized from its serving command (the model catalog)
        pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-14b"})),
        pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "20Gi"})),
        pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"})),
        pods.review(audit_only_denial),
        pods.review(pods.cpu_pod()),
        pods.review(pods.vllm_deployment_pod(), operation="UPDATE"),
    ]
    for _ in range(ROUNDS):
        for review in reviews:
            status, _ = https(port, context, "POST", "/mutate", json.dumps(review).encode(),
                              {"Content-Type": "application/json"})
            assert status == 200
        https(port, context, "POST", "/mutate", b"not json", {"Content-Type": "application/json"})
        time.sleep(1.5)


def metric_problems(prometheus: Prometheus, expr: str, *, needs_data: bool) -> list[str]:
    """What is wrong with one expression on this Prometheus: it fails to parse or evaluate, names a metric
    that does not exist, or (for a panel) returns nothing."""
    problems = []
    answer = prometheus.query(expr)
    if answer.get("status") != "success":
        return [f"does not evaluate: {answer.get('error')}"]
    if needs_data and not answer["data"]["result"]:
        problems.append("returns no data")
    known = set(prometheus.api("label/__name__/values")["data"])
    missing = sorted(metric_names(expr) - known)
    if missing:
        problems.append(f"names metrics that do not exist: {missing}")
    return problems


def test_every_dashboard_query_returns_data(stack):
    deadline = time.monotonic() + DEADLINE_SECONDS
    targets = [(title, grafana_expanded(expr)) for title, expr in dashboard_targets()]
    assert len(targets) >= 20

    def problems() -> dict[str, list[str]]:
        found = {f"{title}: {expr}": metric_problems(stack, expr, needs_data=True) for title, expr in targets}
        return {query: problem for query, problem in found.items() if problem}

    # Rates need two scrapes and increases a few: poll until every panel answers, or report what does not.
    while time.monotonic() < deadline and problems():
        time.sleep(1)
    assert problems() == {}


def test_every_rule_loads_evaluates_and_names_existing_metrics(stack):
    deadline = time.monotonic() + DEADLINE_SECONDS
    expected = {rule["alert"] for group in rule_groups()["groups"] for rule in group["rules"]}

    def rules_healthy():
        loaded = {rule["name"]: rule for group in stack.api("rules")["data"]["groups"] for rule in group["rules"]}
        evaluated = [r for r in loaded.values() if r.get("lastEvaluation", "").startswith("0001") is False]
        if set(loaded) != expected or len(evaluated) != len(expected):
            return None
        return loaded

    loaded = wait_for(rules_healthy, what="Prometheus loading and evaluating every rule", deadline=deadline,
                      log=stack.log)
    for name, rule in loaded.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
    for group in rule_groups()["groups"]:
        for rule in group["rules"]:
            assert metric_problems(stack, rule["expr"], needs_data=False) == [], rule["alert"]


def test_the_grafana_variable_reads_an_existing_label(stack):
    (variable,) = [v for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    metric, label = variable["query"]["query"].removeprefix("label_values(").removesuffix(")").split(", ")
    answer = stack.api(f"label/{label}/values", **{"match[]": metric})
    assert answer["status"] == "success" and "team-a" in answer["data"]


def test_a_query_naming_a_missing_metric_is_caught(stack):
    """The check above can fail: a misspelt metric in a panel or rule is reported, even where the query parses."""
    problems = metric_problems(stack, "sum(rate(volcano_injector_admission_total[1m])) or vector(0)", needs_data=True)
    assert problems == ["names metrics that do not exist: ['volcano_injector_admission_total']"]
    assert metric_problems(stack, "sum(rate(volcano_injector_admissions_total[1m]", needs_data=False)[0].startswith(
        "does not evaluate")


def test_every_admission_is_counted_once_over_both_workers(stack):
    """Multiprocess mode: the two workers' files add up to one count per AdmissionReview answered."""
    deadline = time.monotonic() + DEADLINE_SECONDS

    def total():
        result = stack.query("sum(volcano_injector_admissions_total)")["data"]["result"]
        return result and float(result[0]["value"][1]) == ROUNDS * REVIEWS_PER_ROUND

    wait_for(total, what=f"{ROUNDS * REVIEWS_PER_ROUND} admissions counted", deadline=deadline, log=stack.log)
    workers = stack.query("count(volcano_injector_config_version)")["data"]["result"]
    assert float(workers[0]["value"][1]) == 2  # liveall: one configuration version per live worker


def test_the_served_certificates_expiry_is_exported(stack):
    from tests.injector_site.platform.test_tls import openssl_not_after

    result = stack.query('volcano_injector_tls_certificate_expiry_timestamp_seconds{certificate="serving"}')
    assert float(result["data"]["result"][0]["value"][1]) == openssl_not_after(stack.certs / "tls.crt")
