"""The Kubernetes manifests (deploy/k8s: a Kustomize base and overlays) without a cluster: every built-in resource
of every overlay validated by kubernetes-validate in strict mode against the Kubernetes release the overlays
target; the pod's design held (Triton a native sidecar, the probes, the GPU, the read-only weights, /dev/shm in
memory, the grace period by the drain rule, which container sees which secret, a writable kernel cache); the custom
resources (Gateway API, Envoy Gateway, KEDA, the Prometheus operator) checked field by field, since no schema of
theirs ships with the validator; promtool on the fleet's
recording and alert rules and their unit tests; checkov (scripts/install-checkov.sh: from PyPI, in an environment of
its own) on the base, with a reviewed skip list (deploy/k8s/checkov-skips.yaml). A missing tool is a failure.

The overlays use only Kustomize's namespace, images and replicas fields, which `built` applies; `kustomize build`
itself is not run here (no Go toolchain)."""
from __future__ import annotations

import copy
import ipaddress
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from shim.server import KEEP_ALIVE_SECONDS
from shim.settings import ShimSettings
from tests.tools import run
from tests.unit.deploy_files import REPO, load_script

SECRETS_FOR_SETTINGS = {"INTERN_DECISION_API_TOKEN": "t" * 32, "INTERN_DECISION_TRITON_API_KEY": "k" * 32}

K8S = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.31.0"  # native sidecars are on by default from 1.29
BUILT_IN_GROUPS = ("v1", "apps/v1", "policy/v1", "networking.k8s.io/v1")
OVERLAYS = sorted(path.parent.name for path in (K8S / "overlays").glob("*/kustomization.yaml"))
LONGEST_CALL_SECONDS = 120  # CALL_TIMEOUT_SECONDS' default
# The gateway's Envoy replicas whose connections to one shim, each capped on its own, must stay below its bound.
GATEWAY_ENVOY_REPLICAS = 3


def load(path: Path) -> list[dict]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def base() -> list[dict]:
    kustomization = load(K8S / "base" / "kustomization.yaml")[0]
    labels = {key: value for entry in kustomization.get("labels", []) for key, value in entry["pairs"].items()}
    resources = [resource for name in kustomization["resources"] for resource in load(K8S / "base" / name)]
    for resource in resources:
        resource["metadata"].setdefault("labels", {}).update(labels)
    return resources


def built(overlay: str) -> list[dict]:
    """The overlay applied to the base: its namespace, image names and tags, replica counts."""
    kustomization = load(K8S / "overlays" / overlay / "kustomization.yaml")[0]
    assert kustomization["resources"] == ["../../base"]
    assert set(kustomization) <= {"apiVersion", "kind", "namespace", "resources", "images", "replicas"}
    resources = copy.deepcopy(base())
    images = {image["name"]: image for image in kustomization.get("images", [])}
    counts = {entry["name"]: entry["count"] for entry in kustomization.get("replicas", [])}
    for resource in resources:
        resource["metadata"]["namespace"] = kustomization["namespace"]
        if resource["kind"] == "Deployment":
            resource["spec"]["replicas"] = counts.get(resource["metadata"]["name"], resource["spec"]["replicas"])
            pod = resource["spec"]["template"]["spec"]
            for container in pod["containers"] + pod.get("initContainers", []):
                name = container["image"].split(":")[0]
                if name in images:
                    container["image"] = f"{images[name]['newName']}:{images[name]['newTag']}"
    return resources


def of_kind(resources: list[dict], kind: str) -> dict:
    (found,) = [resource for resource in resources if resource["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def resources() -> list[dict]:
    return base()


@pytest.fixture(scope="module")
def pod(resources) -> dict:
    return of_kind(resources, "Deployment")["spec"]["template"]["spec"]


def test_there_are_overlays_and_each_names_its_images():
    assert OVERLAYS == ["production", "staging"]
    for overlay in OVERLAYS:
        deployment = of_kind(built(overlay), "Deployment")
        pod = deployment["spec"]["template"]["spec"]
        images = [container["image"] for container in pod["containers"] + pod["initContainers"]]
        assert all(":" in image and not image.endswith(":local") for image in images), images


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_built_in_resource_is_valid_in_strict_mode(overlay):
    checked = 0
    for resource in built(overlay):
        if resource["apiVersion"] in BUILT_IN_GROUPS:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
            checked += 1
    assert checked == 4  # Deployment, Service, PodDisruptionBudget, NetworkPolicy


def test_the_strict_validator_is_real(resources):
    deployment = copy.deepcopy(of_kind(resources, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"path": "/health"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_triton_is_a_native_sidecar_pinging_through_the_model_and_holding_the_gpu(pod):
    (triton,) = pod["initContainers"]
    assert triton["name"] == "triton" and triton["restartPolicy"] == "Always"  # starts first, stops last
    liveness = triton["livenessProbe"]
    assert liveness["exec"]["command"][-2:] == ["/opt/intern-decision/healthcheck.py", "triton"]
    env = {item["name"]: item["value"] for item in triton["env"]}
    ping_timeout = float(env["INTERN_DECISION_PING_TIMEOUT_SECONDS"])
    assert ping_timeout < liveness["timeoutSeconds"]
    assert triton["startupProbe"]["periodSeconds"] * triton["startupProbe"]["failureThreshold"] >= 600
    # From inside the container: Triton's API listens on 127.0.0.1 only, out of the kubelet's reach.
    assert triton["startupProbe"]["exec"]["command"][-2:] == ["/opt/intern-decision/healthcheck.py", "triton-ready"]
    assert not [probe for probe in (triton["startupProbe"], liveness) if "httpGet" in probe or "tcpSocket" in probe]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    mounts = {mount["mountPath"]: mount for mount in triton["volumeMounts"]}
    assert mounts["/hf"]["readOnly"] is True
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"


def test_the_shim_is_ready_on_health_alive_on_its_port_and_drains_within_the_grace_period(pod):
    (shim,) = pod["containers"]
    assert shim["readinessProbe"]["httpGet"]["path"] == "/health"
    assert "tcpSocket" in shim["livenessProbe"]  # never /health: 503 while the model loads
    env = {item["name"]: item["value"] for item in shim["env"]}
    assert env["INTERN_DECISION_TRITON_URL"] == "127.0.0.1:8000"
    assert "INTERN_DECISION_API_TOKEN" not in env  # from the Secret's file only
    assert env["INTERN_DECISION_MAX_CONNECTIONS_PER_PEER"] == "0"  # every peer is an Envoy of the gateway
    assert "INTERN_DECISION_MAX_QUEUE_PER_PEER" not in env  # the contract's queue, the default
    # The shim reads the client Envoy appends to X-Forwarded-For from the pod networks alone, where the gateway is.
    balancers = ShimSettings.from_env({**SECRETS_FOR_SETTINGS, **env}).balancer_addresses
    assert balancers and all(ipaddress.ip_network(network).is_private for network in balancers)
    drain = float(env["INTERN_DECISION_DRAIN_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] > drain + LONGEST_CALL_SECONDS
    assert all("INTERN_DECISION_API_TOKEN_FILE" not in str(container.get("env")) for container in pod["initContainers"])


def test_tritons_liveness_ping_is_allowed_one_call_of_the_shims_settings(pod):
    (triton,) = pod["initContainers"]
    (shim,) = pod["containers"]
    shim_env = {item["name"]: item["value"] for item in shim["env"]}
    renderer = load_script("docker/multi_gpu.py")
    call_timeout = float(shim_env.get("INTERN_DECISION_CALL_TIMEOUT_SECONDS", renderer.CALL_TIMEOUT_SECONDS))
    ping = renderer.ping_timeout_seconds(call_timeout)
    # One call and a margin: behind a long request the ping says "busy" (wire/liveness.py), it does not wait it out.
    assert ping == LONGEST_CALL_SECONDS + renderer.PING_MARGIN_SECONDS
    env = {item["name"]: item["value"] for item in triton["env"]}
    assert float(env["INTERN_DECISION_PING_TIMEOUT_SECONDS"]) == ping
    assert triton["livenessProbe"]["timeoutSeconds"] == renderer.liveness_check_timeout_seconds(call_timeout) > ping


def test_the_probes_tolerate_one_slow_answer(pod, resources):
    (shim,) = pod["containers"]
    readiness = shim["readinessProbe"]
    assert readiness["failureThreshold"] >= 3 and readiness["timeoutSeconds"] >= 4  # /health took 3.6 s under load
    env = {item["name"]: item["value"] for item in shim["env"]}
    # A draining shim's 503s take it out before it stops admitting.
    assert readiness["periodSeconds"] * readiness["failureThreshold"] < float(env["INTERN_DECISION_DRAIN_SECONDS"])
    active = of_kind(resources, "BackendTrafficPolicy")["spec"]["healthCheck"]["active"]
    assert active["unhealthyThreshold"] >= 2 and float(active["timeout"].removesuffix("s")) >= 4


def test_each_container_has_a_tmp_of_its_own(pod):
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    tmp_volumes = []
    for container in pod["containers"] + pod["initContainers"]:
        (mount,) = [mount for mount in container["volumeMounts"] if mount["mountPath"] == "/tmp"]
        assert volumes[mount["name"]]["emptyDir"]["sizeLimit"], container["name"]
        tmp_volumes.append(mount["name"])
    assert len(set(tmp_volumes)) == len(tmp_volumes) == 2
    # No emptyDir is shared between the two containers.
    mounted = [{mount["name"] for mount in container["volumeMounts"] if "emptyDir" in volumes[mount["name"]]}
               for container in pod["containers"] + pod["initContainers"]]
    assert not mounted[0] & mounted[1]


def test_tritons_api_is_not_reachable_from_outside_the_pod(pod, resources):
    (triton,) = pod["initContainers"]
    assert [port["containerPort"] for port in triton["ports"]] == [8002]  # the metrics, for Prometheus
    argv = load_script("docker/triton/start_triton.py").command("k" * 32, [])
    assert "--http-address=127.0.0.1" in argv and "--allow-grpc=false" in argv
    policy = of_kind(resources, "NetworkPolicy")["spec"]
    assert not {8000, 8001} & {port["port"] for rule in policy["ingress"] for port in rule["ports"]}


def test_the_grace_period_is_the_drain_rule_of_the_shims_settings(pod):
    (shim,) = pod["containers"]
    env = {item["name"]: item["value"] for item in shim["env"]}
    names = load_script("docker/multi_gpu.py").TIMING_SETTINGS
    timing = {argument: (int if argument == "max_calls" else float)(env[name])
              for argument, name in names.items() if name in env}
    assert timing == {"drain_seconds": 10.0}  # the call timeout and MAX_DECISIONS at the shim's defaults
    rule = load_script("docker/multi_gpu.py").stop_grace_seconds(**timing)
    assert pod["terminationGracePeriodSeconds"] == rule
    # What waits for the lock is answered 503 draining; the request holding it runs to its end within the period.
    assert rule >= timing["drain_seconds"] + 64 * LONGEST_CALL_SECONDS


def secret_keys_seen(pod: dict, container: dict) -> set[str]:
    """The keys of the Secret a container can read, through its mounts and its environment."""
    every_key = {"api_token", "triton_api_key", "api_token_next"}  # api_token_next: during a rotation
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    seen: set[str] = set()
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret is not None:
            assert secret["secretName"] == "intern-decision"
            seen |= {item["key"] for item in secret["items"]} if "items" in secret else every_key
    for item in container.get("env", []):
        reference = item.get("valueFrom", {}).get("secretKeyRef")
        if reference is not None:
            seen.add(reference["key"])
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            seen |= every_key
    return seen


def test_which_container_sees_which_secret(pod):
    (triton,) = pod["initContainers"]
    (shim,) = pod["containers"]
    # Triton runs the checkpoint's own code: it reads its key and never the API token (nor the next one).
    assert secret_keys_seen(pod, triton) == {"triton_api_key"}
    assert secret_keys_seen(pod, shim) == {"api_token", "triton_api_key", "api_token_next"}
    env = {item["name"]: item.get("value") for item in triton["env"]}
    (mount,) = [mount for mount in triton["volumeMounts"] if "secret" in next(
        volume for volume in pod["volumes"] if volume["name"] == mount["name"])]
    assert env["INTERN_DECISION_TRITON_API_KEY_FILE"] == mount["mountPath"] + "/triton_api_key"


def test_tritons_home_and_kernel_cache_are_on_a_writable_volume(pod):
    (triton,) = pod["initContainers"]
    assert triton["securityContext"]["readOnlyRootFilesystem"] is True
    env = {item["name"]: item.get("value") for item in triton["env"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    writable = {mount["mountPath"] for mount in triton["volumeMounts"]
                if "emptyDir" in volumes[mount["name"]] and not mount.get("readOnly")}
    assert env["HOME"] in writable  # CUDA's cache (~/.nv) and whatever else writes under HOME
    assert env["TRITON_CACHE_DIR"].startswith(env["HOME"] + "/")  # OpenAI Triton's kernels, compiled at warm-up


def test_rollouts_take_one_replica_at_a_time_and_the_floor_is_two(resources):
    deployment = of_kind(resources, "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert of_kind(resources, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    scaled = of_kind(resources, "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] >= 2 and scaled["spec"]["cooldownPeriod"] >= 600
    queries = [trigger["metadata"]["query"] for trigger in scaled["spec"]["triggers"]]
    # Admitted work only: never requests in flight, which count 401s and /health.
    assert queries == ["intern_decision:shim_queued:sum", "intern_decision:model_duty_cycle:sum"]
    rules = {rule.get("record"): rule["expr"] for group in
             load(REPO / "deploy" / "prometheus" / "rules.yaml")[0]["groups"] for rule in group["rules"]}
    assert set(queries) <= set(rules)
    assert rules["intern_decision:shim_queued:sum"] == "sum(intern_decision_shim_requests_queued)"
    assert not any("in_flight" in rules[query] for query in queries)


def test_only_the_gateway_reaches_the_api_and_only_prometheus_the_metrics(resources):
    policy = of_kind(resources, "NetworkPolicy")["spec"]
    ports = [sorted(port["port"] for port in rule["ports"]) for rule in policy["ingress"]]
    assert ports == [[8080], [8002, 9464]]
    assert policy["egress"] == [] and policy["policyTypes"] == ["Ingress", "Egress"]


def test_the_route_has_an_explicit_timeout_and_the_policy_least_request_health_checks_and_connect_retries(resources):
    route = of_kind(resources, "HTTPRoute")["spec"]["rules"][0]
    assert int(route["timeouts"]["request"].removesuffix("s")) > 64 * LONGEST_CALL_SECONDS  # Envoy's default: 15 s
    policy = of_kind(resources, "BackendTrafficPolicy")["spec"]
    assert policy["loadBalancer"]["type"] == "LeastRequest"
    assert policy["healthCheck"]["active"]["http"]["path"] == "/health"
    assert set(policy["retry"]["retryOn"]["triggers"]) <= {"connect-failure", "refused-stream"}
    assert "retriableStatusCodes" not in policy["retry"]["retryOn"]  # never a second scoring


def test_the_gateway_judges_replicas_by_health_alone_and_closes_idle_connections_before_the_shim(resources):
    policy = of_kind(resources, "BackendTrafficPolicy")["spec"]
    assert "passive" not in policy["healthCheck"]  # no outlier detection: one 5xx answer takes no replica out
    idle = policy["timeout"]["http"]["connectionIdleTimeout"]
    # Envoy closes an idle upstream connection before the shim does, so it never reuses one the shim is closing.
    assert float(idle.removesuffix("s")) < KEEP_ALIVE_SECONDS


def shim_settings(pod):
    """The shim's settings as the pod gives them (its own bounds: MAX_CONNECTIONS, MAX_QUEUE)."""
    (shim,) = pod["containers"]
    env = {item["name"]: item["value"] for item in shim["env"] if "value" in item}
    secrets = {"INTERN_DECISION_API_TOKEN": "t" * 40, "INTERN_DECISION_TRITON_API_KEY": "k" * 32}
    return ShimSettings.from_env({**env, **secrets})


def test_envoys_connections_and_requests_to_a_shim_are_capped_below_the_shims_own_bounds(resources, pod):
    breaker = of_kind(resources, "BackendTrafficPolicy")["spec"]["circuitBreaker"]
    settings = shim_settings(pod)
    per_shim = breaker["perEndpoint"]["maxConnections"]
    # Envoy's default, 1,024 per backend, is far above a shim's MAX_CONNECTIONS: a flood of cheap GETs through the
    # gateway would make the shim refuse or close Envoy's pooled connections. Each Envoy's own counters: up to
    # GATEWAY_ENVOY_REPLICAS of them together stay below the shim's bound.
    assert GATEWAY_ENVOY_REPLICAS * per_shim < settings.max_connections
    # HTTP/1.1, one request at a time on a connection: the same cap holds requests at once, above the shim's queue
    # so that a full replica still answers its own 429 busy.
    assert per_shim > settings.max_queue
    # The whole backend's caps never bind before the per-shim one at the ScaledObject's most replicas.
    most_replicas = of_kind(resources, "ScaledObject")["spec"]["maxReplicaCount"]
    assert breaker["maxConnections"] == breaker["maxParallelRequests"] == per_shim * most_replicas <= 1024
    assert 0 < breaker["maxPendingRequests"] <= 1024


def test_the_gateway_bounds_each_client_at_the_balancers_rate(resources):
    balancer = load_script("docker/multi_gpu.py")
    per_second = balancer.PER_SOURCE_REQUESTS / int(balancer.RATE_PERIOD.removesuffix("s"))
    limits = of_kind(resources, "BackendTrafficPolicy")["spec"]["rateLimit"]
    assert limits["type"] == "Local"
    sources = {}
    for rule in limits["local"]["rules"]:
        [selector] = rule["clientSelectors"]
        sources[selector["sourceCIDR"]["value"]] = selector["sourceCIDR"]["type"]
        assert rule["limit"] == {"requests": per_second, "unit": "Second"}
    assert sources == {"0.0.0.0/0": "Distinct", "::/0": "Distinct"}  # every address its own bucket, IPv4 and IPv6


def test_prometheus_scrapes_both_metrics_ports(resources, pod):
    ports = {port["name"] for container in pod["containers"] + pod["initContainers"] for port in container["ports"]}
    endpoints = of_kind(resources, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert {endpoint["port"] for endpoint in endpoints} == {"shim-metrics", "triton-metrics"} <= ports


def test_the_secret_is_a_template_outside_the_kustomization():
    names = load(K8S / "base" / "kustomization.yaml")[0]["resources"]
    assert "secret.example.yaml" not in names
    secret = load(K8S / "base" / "secret.example.yaml")[0]
    assert set(secret["stringData"]) == {"api_token", "triton_api_key"}
    assert all(value.startswith("<") for value in secret["stringData"].values())


def test_promtool_checks_the_fleet_rules_and_runs_their_tests(promtool):  # noqa: F811
    checked = run([promtool, "check", "rules", "deploy/prometheus/rules.yaml"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run([promtool, "test", "rules", "deploy/prometheus/rules.test.yaml"])
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.fixture(scope="module")
def checkov() -> str:
    tool = REPO / ".cache" / "tools" / "checkov" / "bin" / "checkov"
    if not tool.is_file():
        pytest.fail("checkov is missing: run scripts/install-checkov.sh")
    return str(tool)


def checkov_failures(checkov: str, folder: Path, skips: list[str]) -> list[str]:
    command = [checkov, "-d", str(folder), "--framework", "kubernetes", "--skip-download", "-o", "json", "--quiet"]
    if skips:
        command += ["--skip-check", ",".join(skips)]
    result = run(command)
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout) if result.stdout.strip() else {}
    failed = report.get("results", {}).get("failed_checks", []) if isinstance(report, dict) else []
    return sorted({f"{check['check_id']} {check['resource']}" for check in failed})


def test_every_skip_has_its_reason():
    skips = yaml.safe_load((K8S / "checkov-skips.yaml").read_text())
    assert all(isinstance(reason, str) and len(reason) > 20 for reason in skips.values())


def test_checkov_passes_the_base_with_the_reviewed_skips_and_each_skip_is_needed(checkov):
    skips = sorted(yaml.safe_load((K8S / "checkov-skips.yaml").read_text()))
    assert checkov_failures(checkov, K8S / "base", skips) == []
    unskipped = {failure.split()[0] for failure in checkov_failures(checkov, K8S / "base", [])}
    assert unskipped == set(skips)  # a skip that nothing needs any more goes


def test_checkov_is_the_real_linter(checkov, tmp_path):
    privileged = copy.deepcopy(of_kind(base(), "Deployment"))
    privileged["metadata"]["namespace"] = "x"
    privileged["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(privileged))
    skips = sorted(yaml.safe_load((K8S / "checkov-skips.yaml").read_text()))
    assert any(failure.startswith("CKV_K8S_16 ") for failure in checkov_failures(checkov, tmp_path, skips))
