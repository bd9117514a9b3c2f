"""What the monitoring tests share: the rules and dashboard of deploy/components/monitoring, and Prometheus' tools."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "components" / "monitoring"
PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboards" / "volcano-injector.json"


def rule_groups() -> dict:
    """The PrometheusRule's spec: a rules file as Prometheus reads it ({"groups": [...]})."""
    return yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]


def alerting_rules() -> list[dict]:
    return [rule for group in rule_groups()["groups"] for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every query of every panel, rows' nested panels included."""
    found = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((panel["title"], target["expr"]))

    walk(dashboard()["panels"])
    return found


# Grafana's variables in the dashboard's queries, as Grafana would fill them in for a query over the last hour.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$namespace": ".*",
    "$instance": ".*",
}


def grafana_expanded(expr: str) -> str:
    """A panel's query with Grafana's variables replaced; a variable the dashboard does not define fails."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace("${" + name[1:] + "}", GRAFANA_VARIABLES[name]).replace(name, GRAFANA_VARIABLES[name])
    left = re.findall(r"\$\{?\w+", expr)
    assert not left, f"unknown Grafana variable(s) {left} in {expr!r}"
    return expr


_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (selectors), leaving out functions, keywords and labels."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"\boffset\s+\w+", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", text):
        name = match.group(1)
        if name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def find_tool(name: str) -> str:
    """A Prometheus binary on PATH (scripts/install-prometheus.sh installs Debian's); skip without, fail in CI."""
    path = shutil.which(name)
    if path is None:
        message = f"no {name} on PATH (run scripts/install-prometheus.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
