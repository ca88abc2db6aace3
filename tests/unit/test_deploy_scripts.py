"""The scripts the images run: start scripts (secrets, fail-closed), the healthcheck, and the build-time checks."""
from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

from tests.unit.deploy_files import REPO, load_script

KEY = "0123456789abcdef" * 4


# --- start_triton.py -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def start_triton():
    return load_script("docker/triton/start_triton.py")


def key_env(tmp_path, content: str) -> dict[str, str]:
    path = tmp_path / "triton_api_key"
    path.write_text(content)
    return {"INTERN_DECISION_TRITON_API_KEY_FILE": str(path)}


def test_triton_starts_with_the_key_from_the_secret_file(start_triton, tmp_path):
    argv = start_triton.main(["--log-verbose=1"], key_env(tmp_path, KEY + "\n"))
    assert argv[0] == "tritonserver" and argv[-1] == "--log-verbose=1"
    assert "--model-repository=/models" in argv and "--load-model=intern_decision" in argv
    assert "--exit-on-error=true" in argv and "--strict-readiness=true" in argv
    assert sum(arg.endswith(f":triton-api-key={KEY}") for arg in argv) == 1  # HTTP's; gRPC is off
    assert "--exit-timeout-secs=10" in argv
    assert "--backend-config=python,shm-region-prefix-name=intern_decision_" in argv


def test_stale_shared_memory_regions_of_ours_are_removed_before_triton_starts(start_triton, tmp_path):
    ours = [tmp_path / "intern_decision_1f2e", tmp_path / "intern_decision_99"]
    theirs = tmp_path / "triton_python_backend_shm_region_1"
    for region in (*ours, theirs):
        region.write_bytes(b"\0")
    assert start_triton.remove_stale_regions(tmp_path) == sorted(ours)
    assert sorted(tmp_path.iterdir()) == [theirs]


@pytest.mark.parametrize("content", ["", "\n", "short", "x" * 31, KEY + " ", KEY + ":x", KEY + ",health",
                                     KEY + "=", "k" * 513, "é" * 40])
def test_a_missing_or_unusable_key_refuses_to_start(start_triton, tmp_path, content):
    with pytest.raises(start_triton.Refused, match="API key"):
        start_triton.main([], key_env(tmp_path, content))


def test_a_missing_key_file_refuses_to_start(start_triton, tmp_path):
    with pytest.raises(start_triton.Refused, match="cannot be read"):
        start_triton.main([], {"INTERN_DECISION_TRITON_API_KEY_FILE": str(tmp_path / "absent")})


@pytest.mark.parametrize("name", ["INTERN_DECISION_API_TOKEN", "INTERN_DECISION_API_TOKEN_FILE",
                                  "INTERN_DECISION_API_TOKEN_NEXT", "INTERN_DECISION_API_TOKEN_NEXT_FILE"])
def test_triton_refuses_the_shims_api_token(start_triton, tmp_path, name):
    env = key_env(tmp_path, KEY)
    env[name] = "t" * 40
    with pytest.raises(start_triton.Refused, match=name):
        start_triton.main([], env)


def test_tritons_api_listens_on_loopback_only_grpc_is_off_and_the_metrics_stay_reachable(start_triton, tmp_path):
    # The shim, its one client, shares Triton's network namespace (the pod; Compose's network_mode): nothing else
    # reaches the API, whose key sits on the command line. Prometheus scrapes the metrics port from outside.
    argv = start_triton.main([], key_env(tmp_path, KEY))
    assert "--http-address=127.0.0.1" in argv and "--allow-grpc=false" in argv
    assert "--metrics-address=0.0.0.0" in argv and "--metrics-port=8002" in argv
    assert not [arg for arg in argv if arg.startswith(("--grpc-", "--allow-http"))]


def test_the_watchdog_pings_with_the_deployments_timeout(start_triton, tmp_path):
    env = key_env(tmp_path, KEY)
    argv = start_triton.main([], env)
    plain = start_triton.watchdog_arguments(env, argv)
    assert plain[plain.index("--") + 1:] == argv and "--ping-timeout" not in plain  # the watchdog's own default
    sized = start_triton.watchdog_arguments({**env, "INTERN_DECISION_PING_TIMEOUT_SECONDS": "125"}, argv)
    assert sized[sized.index("--ping-timeout") + 1] == "125"
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(start_triton.Refused, match="INTERN_DECISION_PING_TIMEOUT_SECONDS"):
            start_triton.watchdog_arguments({**env, "INTERN_DECISION_PING_TIMEOUT_SECONDS": bad}, argv)


@pytest.mark.parametrize("argument", ["--http-restricted-api=inference:a=b", "--grpc-restricted-protocol=x",
                                      "--model-repository=/tmp", "--http-port=9000", "--model-control-mode=none",
                                      "--http-address=0.0.0.0", "--allow-grpc=true", "--grpc-address=0.0.0.0",
                                      "--metrics-address=127.0.0.1"])
def test_extra_arguments_cannot_replace_what_the_script_owns(start_triton, tmp_path, argument):
    with pytest.raises(start_triton.Refused, match="cannot be overridden"):
        start_triton.main([argument], key_env(tmp_path, KEY))


def test_the_start_script_refuses_with_exit_2_and_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "docker/triton/start_triton.py")],
                            env={"INTERN_DECISION_TRITON_API_KEY_FILE": str(tmp_path / "absent")},
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("refusing to start: ") and result.stderr.count("\n") == 1


# --- start_shim.py -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def start_shim():
    return load_script("docker/shim/start_shim.py")


def test_the_shim_gets_its_secrets_from_files(start_shim, tmp_path):
    (tmp_path / "token").write_text("t" * 40 + "\n")
    (tmp_path / "key").write_text(KEY)
    env = start_shim.environment({"INTERN_DECISION_API_TOKEN_FILE": str(tmp_path / "token"),
                                  "INTERN_DECISION_TRITON_API_KEY_FILE": str(tmp_path / "key"), "OTHER": "1"})
    assert env == {"INTERN_DECISION_API_TOKEN": "t" * 40, "INTERN_DECISION_TRITON_API_KEY": KEY, "OTHER": "1"}


def test_the_next_token_comes_from_a_file_too(start_shim, tmp_path):
    (tmp_path / "next").write_text("n" * 40 + "\n")
    env = start_shim.environment({"INTERN_DECISION_API_TOKEN": "t" * 40,
                                  "INTERN_DECISION_API_TOKEN_NEXT_FILE": str(tmp_path / "next")})
    assert env == {"INTERN_DECISION_API_TOKEN": "t" * 40, "INTERN_DECISION_API_TOKEN_NEXT": "n" * 40}


def test_without_files_the_environment_passes_unchanged(start_shim):
    env = {"INTERN_DECISION_API_TOKEN": "t" * 40}
    assert start_shim.environment(env) == env


@pytest.mark.parametrize("content", ["", "\n"])
def test_an_empty_secret_file_refuses_to_start(start_shim, tmp_path, content):
    (tmp_path / "token").write_text(content)
    with pytest.raises(start_shim.Refused, match="is empty"):
        start_shim.environment({"INTERN_DECISION_API_TOKEN_FILE": str(tmp_path / "token")})


def test_an_unreadable_secret_file_refuses_to_start(start_shim, tmp_path):
    with pytest.raises(start_shim.Refused, match="cannot be read"):
        start_shim.environment({"INTERN_DECISION_TRITON_API_KEY_FILE": str(tmp_path / "absent")})


def test_a_secret_given_twice_refuses_to_start(start_shim, tmp_path):
    (tmp_path / "token").write_text("t" * 40)
    with pytest.raises(start_shim.Refused, match="both"):
        start_shim.environment({"INTERN_DECISION_API_TOKEN": "u" * 40,
                                "INTERN_DECISION_API_TOKEN_FILE": str(tmp_path / "token")})


def test_the_shim_runs_as_python_dash_m_shim(start_shim):
    assert start_shim.command(["--port", "8080"]) == [sys.executable, "-m", "shim", "--port", "8080"]


# --- healthcheck.py ------------------------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    answers: dict[str, int] = {}
    # POST path -> (status, body); the request's triton-api-key header is recorded
    posts: dict[str, tuple[int, bytes]] = {}
    keys: list[str | None] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        status = self.answers.get(self.path, 404)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.keys.append(self.headers.get("triton-api-key"))
        status, body = self.posts.get(self.path, (404, b""))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def healthcheck():
    return load_script("docker/healthcheck.py")


def test_the_shim_is_healthy_only_while_health_answers_200(healthcheck, server, capsys):
    port = str(server.server_address[1])
    _Handler.answers = {"/health": 200}
    assert healthcheck.main(["shim"], {"INTERN_DECISION_PORT": port}) == 0
    _Handler.answers = {"/health": 503}
    assert healthcheck.main(["shim"], {"INTERN_DECISION_PORT": port}) == 1
    assert "answered 503" in capsys.readouterr().err


PONG = (200, b'{"model_name":"intern_decision","model_version":"1",'
             b'"outputs":[{"name":"RESPONSE","datatype":"BYTES","shape":[0],"data":[]}]}')
STUB_DEAD = (500, b'{"error":"Stub process \'intern_decision_0_0\' is not healthy."}')


def test_triton_is_healthy_while_the_model_is_ready_and_answers_a_ping_with_the_key(healthcheck, server, monkeypatch,
                                                                                    capsys, tmp_path):
    monkeypatch.setattr(healthcheck, "TRITON_URL", f"http://127.0.0.1:{server.server_address[1]}")
    env = key_env(tmp_path, KEY + "\n")
    _Handler.answers = {"/v2/models/intern_decision/ready": 200}
    _Handler.posts = {"/v2/models/intern_decision/infer": PONG}
    _Handler.keys = []
    assert healthcheck.main(["triton"], env) == 0
    assert _Handler.keys == [KEY]
    _Handler.answers = {"/v2/models/intern_decision/ready": 400}
    assert healthcheck.main(["triton"], env) == 1
    assert "answered 400" in capsys.readouterr().err
    _Handler.answers = {"/v2/models/other/ready": 200}
    _Handler.posts = {"/v2/models/other/infer": PONG}
    assert healthcheck.main(["triton"], {**env, "INTERN_DECISION_MODEL_NAME": "other"}) == 0


def test_tritons_readiness_check_is_readiness_alone_without_the_key(healthcheck, server, monkeypatch, tmp_path):
    # Kubernetes' startup probe, run inside the container: Triton's API listens on 127.0.0.1 only.
    monkeypatch.setattr(healthcheck, "TRITON_URL", f"http://127.0.0.1:{server.server_address[1]}")
    _Handler.answers = {"/v2/models/intern_decision/ready": 200}
    _Handler.posts = {"/v2/models/intern_decision/infer": STUB_DEAD}
    env = {"INTERN_DECISION_TRITON_API_KEY_FILE": str(tmp_path / "absent")}
    assert healthcheck.main(["triton-ready"], env) == 0  # no ping, no key needed
    _Handler.answers = {"/v2/models/intern_decision/ready": 400}
    assert healthcheck.main(["triton-ready"], env) == 1


def test_triton_with_a_dead_stub_is_unhealthy_though_ready(healthcheck, server, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(healthcheck, "TRITON_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(healthcheck, "TRITON_METRICS_URL", f"http://127.0.0.1:{server.server_address[1]}/metrics")
    _Handler.answers = {"/v2/models/intern_decision/ready": 200}
    _Handler.posts = {"/v2/models/intern_decision/infer": STUB_DEAD}
    assert healthcheck.main(["triton"], key_env(tmp_path, KEY)) == 1
    assert capsys.readouterr().err == ("unhealthy: Triton answered 500: "
                                       "Stub process 'intern_decision_0_0' is not healthy.\n")
    _Handler.posts = {"/v2/models/intern_decision/infer": PONG}
    assert healthcheck.main(["triton"], {"INTERN_DECISION_TRITON_API_KEY_FILE": str(tmp_path / "absent")}) == 1
    assert "absent" in capsys.readouterr().err


def test_the_pings_timeout_can_be_raised_above_one_call(healthcheck, monkeypatch, tmp_path):
    import wire.liveness
    import wire.ping

    timeouts = []
    monkeypatch.setattr(wire.ping, "attempt", lambda address, model, key, timeout: timeouts.append(timeout) or
                        (None, False))
    monkeypatch.setattr(wire.liveness, "read_finished_calls", lambda url, model: 0.0)
    healthcheck.ping_model("http://127.0.0.1:8000", "intern_decision", key_env(tmp_path, KEY))
    healthcheck.ping_model("http://127.0.0.1:8000", "intern_decision",
                           {**key_env(tmp_path, KEY), "INTERN_DECISION_PING_TIMEOUT_SECONDS": "125"})
    assert timeouts == [healthcheck.PING_TIMEOUT_SECONDS, 125.0]



@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "five"])
def test_a_bad_ping_timeout_is_refused_naming_the_variable(healthcheck, monkeypatch, tmp_path, bad, capsys):
    """Validated as every setting is (wire/env.py): a bad value is unhealthy with one line naming it, never a ping
    with a timeout of zero or forever."""
    env = {**key_env(tmp_path, KEY), "INTERN_DECISION_PING_TIMEOUT_SECONDS": bad}
    with pytest.raises(ValueError, match="INTERN_DECISION_PING_TIMEOUT_SECONDS must be a finite number of seconds"):
        healthcheck.ping_model("http://127.0.0.1:8000", "intern_decision", env)
    monkeypatch.setattr(healthcheck, "get", lambda url, headers=None: None)  # Triton ready: the ping comes next
    assert healthcheck.main(["triton"], env) == 1
    assert capsys.readouterr().err.count("INTERN_DECISION_PING_TIMEOUT_SECONDS") == 1

def test_the_liveness_ping_is_healthy_when_busy_and_unhealthy_when_hung(healthcheck, monkeypatch, capsys, tmp_path):
    import wire.liveness

    verdicts = iter([wire.liveness.Verdict(wire.liveness.BUSY, "timed out; 3 call(s) ended meanwhile"),
                     wire.liveness.Verdict(wire.liveness.DOWN, "timed out; no call ended meanwhile", hung=True)])
    asked = []
    monkeypatch.setattr(wire.liveness, "liveness", lambda *args: asked.append(args) or next(verdicts))
    monkeypatch.setattr(healthcheck, "get", lambda url, headers=None: None)
    assert healthcheck.main(["triton"], key_env(tmp_path, KEY)) == 0
    assert capsys.readouterr().out == "busy: timed out; 3 call(s) ended meanwhile\n"
    assert healthcheck.main(["triton"], key_env(tmp_path, KEY)) == 1
    assert capsys.readouterr().err == "unhealthy: timed out; no call ended meanwhile\n"
    assert asked[0][:2] == ("127.0.0.1:8000", "http://127.0.0.1:8002/metrics")


def test_the_triton_check_asks_for_the_models_readiness_then_calls_the_ping_hook(healthcheck, monkeypatch):
    calls = []
    monkeypatch.setattr(healthcheck, "get", lambda url, headers=None: calls.append(url))
    monkeypatch.setattr(healthcheck, "ping_model", lambda base, model, env: calls.append(("ping", base, model)))
    assert healthcheck.main(["triton"], {}) == 0
    assert calls == ["http://127.0.0.1:8000/v2/models/intern_decision/ready",
                     ("ping", "http://127.0.0.1:8000", "intern_decision")]


def test_an_unreachable_service_is_unhealthy(healthcheck, capsys):
    assert healthcheck.main(["shim"], {"INTERN_DECISION_PORT": "1"}) == 1
    assert capsys.readouterr().err.startswith("unhealthy: ")


def test_the_healthcheck_takes_one_known_argument(healthcheck):
    assert healthcheck.main([], {}) == 2
    assert healthcheck.main(["prometheus"], {}) == 2


# --- check_pins.py -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def check_pins():
    return load_script("docker/check_pins.py")


def report(*items: tuple[str, str]) -> dict:
    return {"install": [{"metadata": {"name": name, "version": version}} for name, version in items]}


def test_pins_are_read_with_normalised_names(check_pins):
    pins = check_pins.read_pins("# comment\nTyping_Extensions==4.16.0  # why\n\ntorch==2.10.0+cu128\n")
    assert pins == {"typing-extensions": "4.16.0", "torch": "2.10.0+cu128"}


@pytest.mark.parametrize("line", ["numpy<2", "numpy", "numpy>=1.26,<2", "-r other.txt",
                                  "numpy==1 ; python_version<'3'"])
def test_anything_but_an_exact_pin_is_refused(check_pins, line):
    with pytest.raises(ValueError, match="exact pin"):
        check_pins.read_pins(line)


def test_a_name_pinned_twice_is_refused(check_pins):
    with pytest.raises(ValueError, match="twice"):
        check_pins.read_pins("numpy==1.26.4\nNumPy==1.26.3\n")


def test_what_pip_installed_must_be_pinned_exactly(check_pins):
    pins = {"torch": "2.10.0+cu128", "typing-extensions": "4.16.0"}
    assert check_pins.unpinned(pins, report(("torch", "2.10.0+cu128"), ("typing_extensions", "4.16.0"))) == []
    assert check_pins.unpinned(pins, report(("torch", "2.10.0"))) == [
        "torch==2.10.0 was installed but the pin says 2.10.0+cu128"]
    assert check_pins.unpinned(pins, report(("six", "1.17.0"))) == ["six==1.17.0 was installed but is not pinned"]


def test_check_pins_exit_codes(tmp_path):
    (tmp_path / "c.txt").write_text("six==1.17.0\n")
    (tmp_path / "ok.json").write_text(json.dumps(report(("six", "1.17.0"))))
    (tmp_path / "bad.json").write_text(json.dumps(report(("six", "1.16.0"))))
    script = str(REPO / "docker/check_pins.py")
    ok = subprocess.run([sys.executable, script, str(tmp_path / "c.txt"), str(tmp_path / "ok.json")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, script, str(tmp_path / "c.txt"), str(tmp_path / "ok.json"),
                          str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert bad.returncode == 1 and "six==1.16.0" in bad.stderr


@pytest.mark.parametrize("name", ["triton-image.txt", "shim-image.txt"])
def test_the_repositorys_constraints_parse(check_pins, name):
    assert check_pins.read_pins((REPO / "constraints" / name).read_text())


# --- check_cuda_archs.py -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def archs():
    return load_script("docker/triton/check_cuda_archs.py")


def test_cuda_targets_parse(archs):
    assert archs.parse_targets("8.0;8.6;8.9;9.0") == [(8, 0), (8, 6), (8, 9), (9, 0)]
    assert archs.parse_targets("8.0 9.0+PTX") == [(8, 0), (9, 0)]


def test_cubins_are_read_from_cuobjdump(archs):
    listing = ("ELF file    1: causal_conv1d_cuda.1.sm_75.cubin\nELF file    2: causal_conv1d_cuda.2.sm_80.cubin\n"
               "ELF file    3: causal_conv1d_cuda.3.sm_90a.cubin\nELF file    4: causal_conv1d_cuda.4.sm_120.cubin\n")
    assert archs.cubin_arches(listing) == {(7, 5), (8, 0), (9, 0), (12, 0)}


def test_a_card_runs_code_of_its_major_version_and_an_equal_or_lower_minor(archs):
    built = {(7, 5), (8, 0), (8, 7), (9, 0), (10, 0), (12, 0)}
    assert archs.uncovered([(8, 0), (8, 6), (8, 9), (9, 0)], built) == []
    assert archs.uncovered([(8, 6), (9, 0)], {(8, 7), (9, 0)}) == [(8, 6)]
    assert archs.uncovered([(9, 0)], {(8, 0), (10, 0)}) == [(9, 0)]


# --- smoke_check.py ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smoke():
    return load_script("docker/triton/smoke_check.py")


def test_the_smoke_check_wants_exactly_the_pins(smoke):
    pins = {**{name: version for name, version in smoke.PRODUCTION.items()}, "numpy": "1.26.4"}
    assert smoke.check_versions(pins, {**pins, "pip": "24.0"}) == []
    problems = smoke.check_versions(pins, {**pins, "numpy": "2.0.0", "six": "1.17.0"})
    assert problems == ["numpy: pinned 1.26.4, installed 2.0.0", "six==1.17.0 is installed but not pinned"]


def test_the_smoke_check_holds_the_contracts_production_pins(smoke):
    pins = {"torch": "2.10.0", "transformers": "5.17.0", "flash-linear-attention": "0.5.2",
            "causal-conv1d": "1.7.0"}
    assert smoke.check_versions(pins, pins) == ["the constraints pin torch==2.10.0, the contract says 2.10.0+cu128"]


def test_the_smoke_checks_pins_are_the_constraints_file(smoke):
    constraints = REPO / "constraints" / "triton-image.txt"
    pins = smoke.read_pins(constraints)
    assert pins == load_script("docker/check_pins.py").read_pins(constraints.read_text())
    assert all(pins[name] == version for name, version in smoke.PRODUCTION.items())


def test_the_smoke_check_refuses_to_run_outside_isolated_mode(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "docker/triton/smoke_check.py"),
                             str(REPO / "constraints/triton-image.txt")], capture_output=True, text=True)
    assert result.returncode == 2 and "python -I" in result.stderr


def test_the_start_script_traces_to_the_otlp_endpoint_or_refuses_a_bad_one(start_triton, tmp_path):
    env = key_env(tmp_path, KEY)
    assert not [word for word in start_triton.main([], env) if word.startswith("--trace-config")]
    traced = start_triton.main([], {**env, "INTERN_DECISION_OTLP_ENDPOINT": "http://collector:4318/v1/traces"})
    assert "--trace-config=mode=opentelemetry" in traced
    assert "--trace-config=opentelemetry,url=http://collector:4318/v1/traces" in traced
    for bad in ("collector:4318", "http://collector:4318/v1/traces,x", "ftp://collector/"):
        with pytest.raises(start_triton.Refused, match="INTERN_DECISION_OTLP_ENDPOINT"):
            start_triton.main([], {**env, "INTERN_DECISION_OTLP_ENDPOINT": bad})
