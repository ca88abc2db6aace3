"""The dev stack's tritonserver: locked like production, one key per start for both sides, no token in its env."""
from __future__ import annotations

from devstack.shim import shim_environment
from devstack.triton import RESTRICTED_APIS, TritonServer, cached_by_loader


def flags(command: list[str], name: str) -> list[str]:
    return [argument.split("=", 1)[1] for argument in command if argument.startswith(name + "=")]


def test_every_api_but_health_and_metadata_needs_this_runs_key_which_the_shim_gets(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERN_DECISION_API_TOKEN", "t" * 40)
    monkeypatch.setenv("INTERN_DECISION_API_TOKEN_NEXT", "n" * 40)
    server = TritonServer({}, tmp_path / "tritonserver.log")
    command = server._command
    groups = ",".join(RESTRICTED_APIS)
    assert flags(command, "--http-restricted-api") == [f"{groups}:triton-api-key={server.api_key}"]
    assert flags(command, "--grpc-restricted-protocol") == [f"{groups}:triton-api-key={server.api_key}"]
    assert "health" not in RESTRICTED_APIS and "metadata" not in RESTRICTED_APIS
    assert len(server.api_key) >= 32
    assert shim_environment(server, {})["INTERN_DECISION_TRITON_API_KEY"] == server.api_key
    assert "INTERN_DECISION_API_TOKEN" not in server._env and "INTERN_DECISION_API_TOKEN_NEXT" not in server._env
    assert TritonServer({}, tmp_path / "other.log").api_key != server.api_key


def test_loopback_only_explicit_model_control_a_short_exit_and_a_prefix_of_its_own(tmp_path):
    server = TritonServer({}, tmp_path / "tritonserver.log")
    command = server._command
    for name in ("--http-address", "--grpc-address", "--metrics-address"):
        assert flags(command, name) == ["127.0.0.1"]
    assert flags(command, "--model-control-mode") == ["explicit"]
    assert flags(command, "--load-model") == ["intern_decision"]
    assert flags(command, "--exit-timeout-secs") == ["5"]
    assert flags(command, "--backend-config") == [f"python,shm-region-prefix-name={server.shm_prefix}"]
    assert server.shm_prefix != TritonServer({}, tmp_path / "other.log").shm_prefix


def test_libpython_folder_goes_on_the_library_path_only_where_the_loaders_cache_does_not_resolve_it(tmp_path):
    # A system Python's libpython sits in a system folder the cache resolves; putting that folder first would make
    # the stub load the system's CUDA libraries (NCCL, cuDNN) over the ones torch's wheels bring.
    system = tmp_path / "usr-lib"
    system.mkdir()
    (system / "libpython3.12.so.1.0").write_bytes(b"")
    listing = (f"\tlibnccl.so.2 (libc6,x86-64) => {system}/libnccl.so.2\n"
               f"\tlibpython3.12.so.1.0 (libc6,x86-64) => {system}/libpython3.12.so.1.0\n")
    assert cached_by_loader("libpython3.12.so.1.0", str(system), listing)
    # a linked alias of the same folder resolves to the same file
    alias = tmp_path / "lib"
    alias.symlink_to(system)
    assert cached_by_loader("libpython3.12.so.1.0", str(alias), listing)
    # a pyenv-style build elsewhere, or a cache with another copy, or no soname: the folder is needed
    own = tmp_path / "pyenv-lib"
    own.mkdir()
    (own / "libpython3.12.so.1.0").write_bytes(b"")
    assert not cached_by_loader("libpython3.12.so.1.0", str(own), listing)
    assert not cached_by_loader("libpython3.12.so.1.0", str(system), listing.replace("3.12", "3.11"))
    assert not cached_by_loader("", str(system), listing)
