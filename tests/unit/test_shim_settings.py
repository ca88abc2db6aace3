"""Shim configuration: the token rules (INV-6) and every other value validated, naming the variable."""
import pytest

from shim.settings import ShimSettings

TOKEN = "t" * 32
KEY = "k" * 32
SECRETS = {"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": KEY}


def test_defaults():
    settings = ShimSettings.from_env(SECRETS)
    assert (settings.max_decisions, settings.max_body_bytes, settings.max_queue) == (64, 1024 * 1024, 32)
    assert settings.triton_url == "127.0.0.1:8000" and settings.model_name == "intern_decision"
    assert settings.metrics_url == "http://127.0.0.1:8002/metrics"
    assert settings.triton_api_key == KEY and settings.probe_seconds == 5.0
    assert settings.drain_seconds == 5.0 and settings.api_token_next is None
    assert TOKEN not in repr(settings) and KEY not in repr(settings)


@pytest.mark.parametrize("token", ["", "t" * 31, "t" * 31 + " ", "t" * 31 + "\x7f", "t" * 31 + "é",
                                   "t" * 16 + "\n" + "t" * 16, "t" * 32 + "\x00"])
def test_a_short_or_non_visible_token_is_refused(token):
    with pytest.raises(ValueError, match="INTERN_DECISION_API_TOKEN"):
        ShimSettings.from_env({**SECRETS, "INTERN_DECISION_API_TOKEN": token})


def test_the_full_visible_range_is_accepted():
    token = "".join(chr(code) for code in range(33, 127))
    assert ShimSettings.from_env({**SECRETS, "INTERN_DECISION_API_TOKEN": token}).api_token == token
    key = token[::-1]
    assert ShimSettings.from_env({**SECRETS, "INTERN_DECISION_TRITON_API_KEY": key}).triton_api_key == key


@pytest.mark.parametrize("key", ["", "k" * 31, "k" * 31 + " ", "k" * 31 + "\x7f", "k" * 31 + "é",
                                 "k" * 16 + "\n" + "k" * 16, "k" * 32 + "\x00"])
def test_a_missing_short_or_non_visible_triton_api_key_is_refused_without_showing_it(key):
    with pytest.raises(ValueError, match="INTERN_DECISION_TRITON_API_KEY") as refused:
        ShimSettings.from_env({**SECRETS, "INTERN_DECISION_TRITON_API_KEY": key})
    assert not key or key not in str(refused.value)


def test_the_triton_api_key_must_differ_from_the_token():
    with pytest.raises(ValueError, match="INTERN_DECISION_TRITON_API_KEY must differ from INTERN_DECISION_API_TOKEN"):
        ShimSettings.from_env({**SECRETS, "INTERN_DECISION_TRITON_API_KEY": TOKEN})


@pytest.mark.parametrize("name, value", [
    ("MAX_DECISIONS", "0"), ("MAX_DECISIONS", "-1"), ("MAX_DECISIONS", "1.5"), ("MAX_DECISIONS", "lots"),
    ("MAX_BODY_BYTES", "0"), ("MAX_BODY_BYTES", "1e6"), ("MAX_QUEUE", "0"), ("MAX_QUEUE", " 3"),
    ("TRITON_URL", "http://127.0.0.1:8000"), ("TRITON_URL", "localhost"), ("TRITON_URL", "triton:0"),
    ("TRITON_URL", "triton:65536"),
    ("TRITON_METRICS_URL", "127.0.0.1:8002/metrics"), ("MODEL_NAME", "a b"),
    ("CALL_TIMEOUT_SECONDS", "0"), ("CALL_TIMEOUT_SECONDS", "inf"), ("HEALTH_TIMEOUT_SECONDS", "soon"),
    ("PROBE_SECONDS", "0"), ("PROBE_SECONDS", "-5"), ("PROBE_SECONDS", "nan"),
    ("DRAIN_SECONDS", "0"), ("DRAIN_SECONDS", "inf"),
    ("HEADER_TIMEOUT_SECONDS", "0"), ("HEADER_TIMEOUT_SECONDS", "nan"), ("MAX_CONNECTIONS", "0"),
    ("MAX_CONNECTIONS", "many"), ("MAX_CONNECTIONS", "32"),
])
def test_a_bad_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=f"INTERN_DECISION_{name} "):
        ShimSettings.from_env({**SECRETS, f"INTERN_DECISION_{name}": value})


def test_explicit_values_are_taken():
    settings = ShimSettings.from_env({
        **SECRETS, "INTERN_DECISION_MAX_DECISIONS": "8", "INTERN_DECISION_PROBE_SECONDS": "0.5",
        "INTERN_DECISION_MAX_BODY_BYTES": "2048", "INTERN_DECISION_MAX_QUEUE": "2",
        "INTERN_DECISION_TRITON_URL": "triton:8000", "INTERN_DECISION_CALL_TIMEOUT_SECONDS": "2.5"})
    assert (settings.max_decisions, settings.max_body_bytes, settings.max_queue) == (8, 2048, 2)
    assert settings.triton_url == "triton:8000" and settings.call_timeout_seconds == 2.5
    assert settings.probe_seconds == 0.5


def test_the_entry_point_refuses_a_bad_token_before_serving(monkeypatch, capsys):
    from shim.__main__ import main

    monkeypatch.setenv("INTERN_DECISION_API_TOKEN", "short")
    monkeypatch.setenv("INTERN_DECISION_TRITON_API_KEY", KEY)
    assert main(["--port", "8080"]) == 2
    assert "refusing to start: INTERN_DECISION_API_TOKEN" in capsys.readouterr().err


@pytest.mark.parametrize("key", [None, "short"])
def test_the_entry_point_refuses_a_missing_or_short_triton_api_key_before_serving(monkeypatch, capsys, key):
    from shim.__main__ import main

    monkeypatch.setenv("INTERN_DECISION_API_TOKEN", TOKEN)
    if key is None:
        monkeypatch.delenv("INTERN_DECISION_TRITON_API_KEY", raising=False)
    else:
        monkeypatch.setenv("INTERN_DECISION_TRITON_API_KEY", key)
    assert main(["--port", "8080"]) == 2
    assert "refusing to start: INTERN_DECISION_TRITON_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["0", "65536", "80a", "８０"])
def test_the_entry_point_refuses_a_bad_port(monkeypatch, capsys, port):
    from shim.__main__ import main

    monkeypatch.setenv("INTERN_DECISION_API_TOKEN", TOKEN)
    monkeypatch.setenv("INTERN_DECISION_TRITON_API_KEY", KEY)
    assert main(["--port", port]) == 2
    assert "INTERN_DECISION_PORT must be a port number" in capsys.readouterr().err


def test_the_connection_bounds_and_max_connections_above_the_queue():
    settings = ShimSettings.from_env(SECRETS)
    assert (settings.header_timeout_seconds, settings.max_connections) == (10.0, 256)
    assert ShimSettings.from_env({**SECRETS, "INTERN_DECISION_MAX_QUEUE": "4",
                                  "INTERN_DECISION_MAX_CONNECTIONS": "5"}).max_connections == 5
    with pytest.raises(ValueError, match="INTERN_DECISION_MAX_CONNECTIONS must be above INTERN_DECISION_MAX_QUEUE"):
        ShimSettings.from_env({**SECRETS, "INTERN_DECISION_MAX_QUEUE": "4", "INTERN_DECISION_MAX_CONNECTIONS": "4"})


def test_a_sources_share_of_the_queue_is_off_unless_set():
    """The contract's queue by default: any source may hold every place; the share is an opt-in."""
    assert ShimSettings.from_env(SECRETS).max_queue_per_peer == 0 == ShimSettings.max_queue_per_peer
    queue = {**SECRETS, "INTERN_DECISION_MAX_QUEUE": "10"}
    assert ShimSettings.from_env(queue).max_queue_per_peer == 0
    assert ShimSettings.from_env({**queue, "INTERN_DECISION_MAX_QUEUE_PER_PEER": "2"}).max_queue_per_peer == 2
    assert ShimSettings.from_env({**queue, "INTERN_DECISION_MAX_QUEUE_PER_PEER": "10"}).max_queue_per_peer == 10
    assert ShimSettings.from_env({**queue, "INTERN_DECISION_MAX_QUEUE_PER_PEER": "0"}).max_queue_per_peer == 0


@pytest.mark.parametrize("value", ["11", "-1", "few", " 2"])
def test_a_share_of_the_queue_past_it_or_not_a_count_is_refused(value):
    with pytest.raises(ValueError, match="INTERN_DECISION_MAX_QUEUE_PER_PEER"):
        ShimSettings.from_env({**SECRETS, "INTERN_DECISION_MAX_QUEUE": "10",
                               "INTERN_DECISION_MAX_QUEUE_PER_PEER": value})


# --- where python -m shim listens: the same settings, the command line's --host and --port in place of the variables


def test_where_the_shim_and_its_metrics_listen():
    settings = ShimSettings.from_env(SECRETS)
    assert (settings.host, settings.port, settings.metrics_address) == ("127.0.0.1", 8080, ("127.0.0.1", 9464))
    read = ShimSettings.from_env({**SECRETS, "INTERN_DECISION_HOST": "0.0.0.0", "INTERN_DECISION_PORT": "9000",
                                  "INTERN_DECISION_METRICS_HOST": "10.0.0.5", "INTERN_DECISION_METRICS_PORT": "9100"})
    assert (read.host, read.port, read.metrics_address) == ("0.0.0.0", 9000, ("10.0.0.5", 9100))
    given = ShimSettings.from_env({**SECRETS, "INTERN_DECISION_HOST": "0.0.0.0", "INTERN_DECISION_PORT": "9000"},
                                  host="10.1.1.1", port="9001")
    assert (given.host, given.port, given.metrics_address) == ("10.1.1.1", 9001, ("10.1.1.1", 9464))
    assert ShimSettings.from_env({**SECRETS, "INTERN_DECISION_METRICS_PORT": "0"}).metrics_address is None


@pytest.mark.parametrize("env, given, message", [
    ({"INTERN_DECISION_PORT": "0"}, None, "INTERN_DECISION_PORT must be a port number 1..65535, got '0'"),
    ({}, "65536", "INTERN_DECISION_PORT must be a port number 1..65535, got '65536'"),
    ({"INTERN_DECISION_METRICS_PORT": "x"}, None,
     "INTERN_DECISION_METRICS_PORT must be a port number 1..65535, or 0 for no metrics, got 'x'"),
    ({"INTERN_DECISION_METRICS_PORT": "9000"}, "9000", "INTERN_DECISION_METRICS_PORT must differ from the shim's port"),
])
def test_a_bad_listening_port_is_refused_naming_the_variable(env, given, message):
    with pytest.raises(ValueError, match=message):
        ShimSettings.from_env({**SECRETS, **env}, port=given)


def test_no_module_of_the_shim_reads_the_environment_itself():
    """Every INTERN_DECISION_* value is read by ShimSettings.from_env, through wire/env.py: the entry point hands it
    os.environ, and nothing else in shim/ touches os.environ or os.getenv."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted((root / "shim").rglob("*.py")):
        tree = ast.parse(path.read_text())
        handed = {id(argument) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute) and node.func.attr == "from_env" for argument in node.args}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os" and id(node) not in handed:
                found.append(f"{path.relative_to(root)}:{node.lineno}: os.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                    and {alias.name for alias in node.names} & {"environ", "getenv", "environb"}:
                found.append(f"{path.relative_to(root)}:{node.lineno}: from os import ...")
    assert found == []


def test_tracing_is_off_unless_an_otlp_endpoint_is_set():
    assert ShimSettings.from_env(SECRETS).otlp_endpoint is None
    for endpoint in ("http://collector:4318/v1/traces", "https://[::1]:4318/v1/traces", "http://10.0.0.9:4318/"):
        assert ShimSettings.from_env({**SECRETS, "INTERN_DECISION_OTLP_ENDPOINT": endpoint}).otlp_endpoint == endpoint


@pytest.mark.parametrize("endpoint", ["collector:4318", "grpc://collector:4317", "http://", "http://:4318/v1/traces",
                                      "http://collector:99999/v1/traces", "http://collector:0/", "http://a:b@c/v1",
                                      "http://collector:4318/v1/traces,x", "http://c:4318/v1?a=b", " http://c/"])
def test_a_bad_otlp_endpoint_is_refused_by_name(endpoint):
    with pytest.raises(ValueError, match="INTERN_DECISION_OTLP_ENDPOINT"):
        ShimSettings.from_env({**SECRETS, "INTERN_DECISION_OTLP_ENDPOINT": endpoint})


def test_every_default_is_its_fields_and_written_there_alone():
    """from_env falls back on the fields' defaults: unset, every value is the field's, and from_env writes no number
    or text of its own (the server's and the edge's limits take theirs from the fields too)."""
    import ast
    import inspect
    import textwrap

    from shim.edge.encoding import BodyDecoder
    from shim.server import ConnectionLimits

    assert ShimSettings.from_env(SECRETS) == ShimSettings(api_token=TOKEN, triton_api_key=KEY)
    source = ast.parse(textwrap.dedent(inspect.getsource(ShimSettings.from_env)))
    body = source.body[0].body[1:]  # past the docstring
    nodes = [node for statement in body for node in ast.walk(statement)]
    rules = {id(node.value) for node in nodes if isinstance(node, ast.keyword)}  # minimum=0, a rule
    rules |= {id(node.slice) for node in nodes if isinstance(node, ast.Subscript)}  # an index
    assert [node.value for node in nodes if isinstance(node, ast.Constant) and id(node) not in rules
            and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)] == []
    assert ConnectionLimits().header_seconds == ShimSettings.header_timeout_seconds
    assert inspect.signature(BodyDecoder).parameters["max_ratio"].default == ShimSettings.max_decode_ratio
