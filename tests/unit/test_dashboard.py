"""The dashboard is code: the committed JSON is exactly what deploy/grafana/dashboard.py builds, every alert of
docker/alerts.yml has the panel that shows why it fired, and Compose's and Kubernetes' copies name the same
datasource. tests/integration/test_dashboard.py runs every query against a real Prometheus."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.unit.deploy_files import DOCKER, REPO, load_script

GRAFANA = REPO / "deploy" / "grafana"
ALERT_NAME = re.compile(r"Alert: (InternDecision[A-Za-z0-9]+)")
METRIC = re.compile(r"\b((?:intern_decision|nv)_[a-z0-9_]+|up)\b")


@pytest.fixture(scope="module")
def builder():
    return load_script("deploy/grafana/dashboard.py")


def panels(board: dict) -> list[dict]:
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def alerts() -> dict[str, str]:
    rules = yaml.safe_load((DOCKER / "alerts.yml").read_text())
    return {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def test_the_committed_json_is_what_the_builder_builds(builder):
    assert builder.JSON_PATH.read_text(encoding="utf-8") == builder.render(), \
        "run python deploy/grafana/dashboard.py and commit the JSON"


def test_the_rows_read_top_to_bottom(builder):
    rows = [panel["title"] for panel in builder.build()["panels"] if panel["type"] == "row"]
    assert rows == ["Is it up?", "Is it keeping up?", "Where the time goes", "The card", "Alerts"]


def test_every_alert_has_the_panel_that_shows_why_it_fired(builder):
    named: dict[str, list[dict]] = {}
    for panel in panels(builder.build()):
        for name in ALERT_NAME.findall(panel.get("description", "")):
            named.setdefault(name, []).append(panel)
    assert sorted(named) == sorted(alerts())
    for name, expr in alerts().items():
        (panel,) = named[name]
        queried = {metric for target in panel["targets"] for metric in METRIC.findall(target["expr"])}
        assert set(METRIC.findall(expr)) & queried, (name, expr, queried)


def test_every_panel_queries_the_provisioned_prometheus_with_ids_unique(builder):
    board = builder.build()
    datasource = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    (provisioned,) = datasource["datasources"]
    assert provisioned["type"] == "prometheus" and provisioned["url"] == "http://prometheus:9090"
    for panel in panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": provisioned["uid"]}, panel["title"]
        assert panel["targets"] and all(target["datasource"] == panel["datasource"] for target in panel["targets"])
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids) and 0 not in ids


def test_kubernetes_ships_the_same_json_for_grafanas_sidecar():
    kustomization = yaml.safe_load((GRAFANA / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == ["intern-decision.json"]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}
    assert json.loads((GRAFANA / "intern-decision.json").read_text())["uid"] == "intern-decision"


def test_no_panel_lists_error_codes_the_runbook_holds(builder):
    """What each status and code means is docs/operations.md's runbook, held to the registry; a panel naming several
    would go stale with the next one."""
    from shim.errors.codes import REGISTRY

    for panel in panels(builder.build()):
        named = {error.code for error in REGISTRY if re.search(rf"\b{error.code}\b", panel.get("description", ""))}
        assert len(named) <= 1, f"{panel['title']} lists {sorted(named)}: point to docs/operations.md's runbook"
