"""Every bound the shim puts on a caller is on docs/operations.md's one limits page, with its value read from the
code: each setting of ShimSettings that is not named below as something else, and the fixed bounds; the errors it
names are the registry's."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from shim import json_body, metrics_server
from shim.edge import encoding
from shim.semif import request as semif_request
from shim.server import limits
from shim.settings import ShimSettings
from shim.systemone import mcp_body
from shim.systemone import request as systemone_request
from wire import strict_json

ROOT = Path(__file__).resolve().parents[2]
# The settings that bound no caller: secrets, addresses, names, switches, the model's checks and the drain.
NOT_BOUNDS = {"api_token", "api_token_next", "triton_api_key", "triton_url", "metrics_url", "model_name",
              "health_timeout_seconds", "probe_seconds", "drain_seconds", "balancer_addresses", "extra_model_names",
              "model_release_date", "mcp", "playground", "host", "port", "metrics_host", "metrics_port",
              "otlp_endpoint", "api_keys"}
SERVER_CONSTANTS = {name: value for name, value in vars(limits).items()
                    if name.isupper() and isinstance(value, (int, float))}
# Fixed bounds elsewhere, as the page spells each one.
FIXED = {
    **{f"`{name}`": value for name, value in SERVER_CONSTANTS.items()},
    "`MAX_MEMBERS`": encoding.MAX_MEMBERS, "`IN_SLICE`": encoding.IN_SLICE, "`OUT_SLICE`": encoding.OUT_SLICE,
    "`RATIO_FLOOR`": encoding.RATIO_FLOOR,
    "`strict_json.MAX_DEPTH`": strict_json.MAX_DEPTH, "`strict_json.MAX_VALUES`": strict_json.MAX_VALUES,
    "`json_body.ON_LOOP_BYTES`": json_body.ON_LOOP_BYTES,
    "`semif.request.MAX_OPTIONS`": semif_request.MAX_OPTIONS,
    "`MAX_OPTIONS_FOR_ALL`": semif_request.MAX_OPTIONS_FOR_ALL,
    "`systemone.request.MAX_OPTIONS`": systemone_request.MAX_OPTIONS,
    "`SDK_MESSAGE_BYTES`": mcp_body.SDK_MESSAGE_BYTES,
    **{f"`metrics_server.{name}`": value for name, value in vars(metrics_server).items()
       if name.isupper() and isinstance(value, (int, float))},
}


def limits_page() -> list[str]:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("\n## Reliability and limits\n", 1)[1].split("\n## ", 1)[0]
    return section.splitlines()


def written(value: float) -> list[str]:
    """How the page may write a value: 1048576 as itself, 1,048,576 or 1 MiB; 5.0 as 5."""
    if value != int(value):
        return [str(value)]
    number = int(value)
    forms = [str(number), f"{number:,}"]
    forms += [f"{number // 1024} KiB"] if number % 1024 == 0 else []
    forms += [f"{number // 2**20} MiB"] if number % 2**20 == 0 else []
    return forms


def said(line: str, form: str) -> bool:
    return re.search(rf"(?<![\w,])(?<!\d\.){re.escape(form)}(?![\w,]|\.\d)", line) is not None


def bound_settings() -> dict[str, float]:
    return {field.name.upper(): field.default for field in dataclasses.fields(ShimSettings)
            if field.name not in NOT_BOUNDS}


def test_the_bounds_are_read():
    assert {"MAX_QUEUE", "MAX_BATCH_ITEMS", "MAX_DECODE_RATIO", "HEADER_TIMEOUT_SECONDS"} <= set(bound_settings())
    assert {"`MAX_HEADERS`", "`MAX_BODY_CHUNKS`", "`KEEP_ALIVE_SECONDS`"} <= set(FIXED)


@pytest.mark.parametrize("variable, default", sorted(bound_settings().items()))
def test_every_setting_that_bounds_a_caller_is_on_the_limits_page_with_its_default(variable, default):
    lines = [line for line in limits_page() if f"`{variable}`" in line]
    assert [line for line in lines if any(said(line, f"default {form}") for form in written(default))], \
        f"docs/operations.md, 'Reliability and limits': no line names `{variable}` with 'default {default}'"


@pytest.mark.parametrize("name, value", sorted(FIXED.items()))
def test_every_fixed_bound_is_on_the_limits_page_with_its_value(name, value):
    lines = [line for line in limits_page() if name in line]
    assert [line for line in lines if any(said(line, form) for form in written(value))], \
        f"docs/operations.md, 'Reliability and limits': no line names {name} with {value}"


def test_every_code_the_limits_page_names_is_the_registrys_with_its_status():
    from shim.errors.codes import REGISTRY

    named = {(int(status), code) for line in limits_page()
             for status, code in re.findall(r"(?<![\d,])(\d{3}) `([a-z_]+)`", line)}
    assert (429, "busy") in named  # the codes are read
    assert sorted(named - {(error.status, error.code) for error in REGISTRY}) == [], \
        "docs/operations.md, 'Reliability and limits': a status and code the registry (shim/errors/codes.py) lacks"
