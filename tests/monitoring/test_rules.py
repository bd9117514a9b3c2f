"""The alerting rules: promtool checks them, and its unit tests prove each alert fires when it should and only then."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, alerting_rules, find_tool, metric_names, rule_groups

UNIT_TESTS = Path(__file__).with_name("rules_test.yaml")
RUNBOOK = REPO / "deploy" / "README.md"


@pytest.fixture
def rules_file(tmp_path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups()))
    return path


def test_promtool_checks_the_rules(rules_file):
    result = subprocess.run([find_tool("promtool"), "check", "rules", str(rules_file)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_groups()['groups'][0]['rules'])} rules found" in result.stdout


def unit_tests_completed() -> dict:
    """rules_test.yaml with each expected alert's fixed annotations (description, runbook) taken from its rule."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    rules = {rule["alert"]: rule for rule in alerting_rules()}
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            for expected in check["exp_alerts"]:
                fixed = {k: v for k, v in rules[check["alertname"]]["annotations"].items() if "{{" not in v}
                expected["exp_annotations"] = {**fixed, **expected.get("exp_annotations", {})}
    return tests


def test_promtool_unit_tests_pass(rules_file, tmp_path):
    tests = tmp_path / "rules_test.yaml"
    tests.write_text(yaml.safe_dump(unit_tests_completed(), width=1000))
    result = subprocess.run([find_tool("promtool"), "test", "rules", str(tests)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not():
    fires, silent = set(), set()
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
    alerts = {rule["alert"] for rule in alerting_rules()}
    assert alerts - fires == set(), "alerts no unit test fires"
    assert alerts - silent == set(), "alerts no unit test proves silent"
    assert (fires | silent) - alerts == set(), "unit tests of alerts that do not exist"


def test_a_broken_alert_fails_the_unit_tests(tmp_path):
    """The unit tests can fail: an alert whose threshold moved no longer fires where its test expects it."""
    groups = rule_groups()
    for rule in groups["groups"][0]["rules"]:
        if rule.get("alert") == "VolcanoInjectorErrors":
            rule["expr"] = rule["expr"].replace("> 0.01", "> 0.05")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    (tmp_path / "rules_test.yaml").write_text(yaml.safe_dump(unit_tests_completed(), width=1000))
    result = subprocess.run([find_tool("promtool"), "test", "rules", "rules_test.yaml"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert "VolcanoInjectorErrors" in result.stdout + result.stderr


@pytest.mark.parametrize("rule", alerting_rules(), ids=lambda rule: rule["alert"])
def test_every_alert_says_what_to_check_first_and_has_a_runbook_section(rule):
    assert rule["labels"]["severity"] in {"critical", "warning"}
    annotations = rule["annotations"]
    assert annotations["summary"]
    assert "Check first" in annotations["description"]
    page, anchor = annotations["runbook"].split("#")
    assert page == "deploy/README.md" and anchor == rule["alert"].lower()
    headings = re.findall(r"^#### (\S+)", RUNBOOK.read_text(), re.MULTILINE)
    assert rule["alert"] in headings, f"deploy/README.md has no '#### {rule['alert']}' section"


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (le) (rate(volcano_injector_admission_duration_seconds_bucket{job="x"}[5m]))',
     {"volcano_injector_admission_duration_seconds_bucket"}),
    ("absent(up{job=\"volcano-injector\"} == 1)", {"up"}),
    ("max(a_b offset 1h) > max(c) and on () d_total >= 5 or vector(0)", {"a_b", "c", "d_total"}),
    ("min by (instance, certificate) (x_seconds) - time() < 7 * 86400", {"x_seconds"}),
])
def test_metric_names_are_found_in_an_expression(expr, names):
    assert metric_names(expr) == names
