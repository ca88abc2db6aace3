"""Start and stop the tritonserver bundled in the nvidia-pytriton wheel, on CPU.

Three things the wheel leaves to its own launcher are done here: the python backend stub for this
interpreter's version is copied next to the backend, the venv's bin/ goes first on PATH (the stub runs an
isolated interpreter that ignores PYTHONPATH and finds its site-packages through the python3 on PATH), and
LD_LIBRARY_PATH points at this interpreter's libpython so the stub links the same build as the venv's stdlib (only
where the loader's cache does not already resolve it there: a system folder put first would outrank the CUDA
libraries torch's wheels bring, and the stub would load other ones than the same torch in-process).

Triton is locked as in production: loopback only, the model loaded explicitly (only the models named), and every
API but health and metadata behind a key generated per start, which the shim is given
too (INTERN_DECISION_TRITON_API_KEY). The python backend's shared-memory regions carry a prefix of this server's
own, so that stop() removes whatever a dead stub left in /dev/shm.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devstack.process import ManagedProcess, free_ports
from wire.ping import API_KEY_HEADER
from wire.protocol import MODEL_NAME
from wire.tracing import triton_trace_flags

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
SHARED_MEMORY = Path("/dev/shm")
# Every API but health (readiness) and metadata needs the key; /metrics is a port of its own and stays open.
RESTRICTED_APIS = ("inference", "model-repository", "model-config", "shared-memory", "logging", "statistics", "trace")
# How long tritonserver waits for inferences in flight when asked to stop; a dead stub holds it this long.
EXIT_TIMEOUT_SECONDS = 5


def bundled_server_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nvidia-pytriton is not installed; run scripts/bootstrap.sh")
    root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise RuntimeError(f"no tritonserver binary under {root}")
    return root


def install_stub(root: Path | None = None, version: str | None = None) -> Path:
    """Copy the python backend stub for a Python version (default: this interpreter's) next to libtriton_python.so
    of a server tree (default: the one in this environment's nvidia-pytriton)."""
    root = root or bundled_server_root()
    version = version or "%d.%d" % sys.version_info[:2]
    source = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    target = root / "backends" / "python" / "triton_python_backend_stub"
    if not source.is_file():
        raise RuntimeError(f"the bundled server has no python backend stub for Python {version}")
    if not target.is_file() or target.read_bytes() != source.read_bytes():
        shutil.copy2(source, target)
    return target


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int

    @classmethod
    def free(cls) -> "Ports":
        return cls(*free_ports(3))


def server_command(ports: Ports, api_key: str, shm_prefix: str, model_repository: Path = MODEL_REPOSITORY,
                   config_name: str | None = "cpu", root: Path | None = None,
                   models: tuple[str, ...] = (MODEL_NAME,), otlp_endpoint: str | None = None) -> list[str]:
    """config_name None: the model's own config.pbtxt (production); else configs/<config_name>.pbtxt. otlp_endpoint:
    where Triton sends its spans (OpenTelemetry mode), None for no tracing."""
    root = root or bundled_server_root()
    config = [f"--model-config-name={config_name}"] if config_name else []
    restricted = f"{','.join(RESTRICTED_APIS)}:{API_KEY_HEADER}={api_key}"
    return [
        str(root / "bin" / "tritonserver"),
        f"--model-repository={model_repository}",
        f"--backend-directory={root / 'backends'}",
        *config,
        "--model-control-mode=explicit", *(f"--load-model={model}" for model in models),
        "--http-address=127.0.0.1", f"--http-port={ports.http}",
        "--grpc-address=127.0.0.1", f"--grpc-port={ports.grpc}",
        "--metrics-address=127.0.0.1", f"--metrics-port={ports.metrics}",
        f"--http-restricted-api={restricted}",
        f"--grpc-restricted-protocol={restricted}",
        f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        "--allow-gpu-metrics=false",
        "--pinned-memory-pool-byte-size=0",
        "--disable-auto-complete-config",
        *(triton_trace_flags(otlp_endpoint) if otlp_endpoint else []),
    ]


_LIBDIR_PROBE = """
import glob, os, sys, sysconfig
name = "libpython%d.%d.so*" % sys.version_info[:2]
candidates = [sysconfig.get_config_var("LIBDIR") or "", os.path.join(sys.base_prefix, "lib")]
print(next((d for d in candidates if d and glob.glob(os.path.join(d, name))), candidates[0]))
print(sysconfig.get_config_var("INSTSONAME") or "")
"""


def _probe_libpython(python: str | None) -> tuple[str, str]:
    done = subprocess.run([python or sys.executable, "-c", _LIBDIR_PROBE], check=True, capture_output=True,
                          text=True, timeout=60)
    libdir, _, soname = done.stdout.strip().partition("\n")
    return libdir.strip(), soname.strip()


def interpreter_libdir(python: str | None = None) -> str:
    """Where an interpreter's libpython lives: its LIBDIR, or <base prefix>/lib when LIBDIR names a build-time
    folder that holds no libpython (relocated builds)."""
    return _probe_libpython(python)[0]


def cached_by_loader(soname: str, libdir: str, ldconfig_listing: str) -> bool:
    """True when the loader's cache (`ldconfig -p`'s listing) resolves soname to the copy in libdir."""
    if not soname or not libdir:
        return False
    wanted = os.path.realpath(os.path.join(libdir, soname))
    for line in ldconfig_listing.splitlines():
        name, arrow, target = line.strip().partition(" => ")
        if arrow and name.split(" (")[0] == soname and os.path.realpath(target.strip()) == wanted:
            return True
    return False


def _ldconfig_listing() -> str:
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", shutil.which("ldconfig")):
        if ldconfig and os.path.exists(ldconfig):
            done = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30)
            return done.stdout
    return ""


def library_path_for(python: str | None = None) -> str:
    """The folder to put first on LD_LIBRARY_PATH for the stub to link python's libpython: "" when the loader's
    cache already resolves it to that interpreter's own copy (a system Python's, in a system folder)."""
    libdir, soname = _probe_libpython(python)
    return "" if cached_by_loader(soname, libdir, _ldconfig_listing()) else libdir


def server_environment(extra: dict[str, str] | None = None, python: str | None = None) -> dict[str, str]:
    """The server's environment for the stub to run ``python``'s environment (default: this interpreter's)."""
    python = python or sys.executable
    env = {name: value for name, value in os.environ.items()  # the tokens are the shim's alone
           if not name.startswith("INTERN_DECISION_API_TOKEN")}
    venv_bin = str(Path(python).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    libdir = library_path_for(python)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    env.update(extra or {})
    return env


class TritonServer(ManagedProcess):
    """tritonserver with the model repository on the CPU config (or another), ready when /v2/health/ready answers.

    root and python default to this environment's nvidia-pytriton and interpreter. api_key: the value of the
    triton-api-key header its restricted APIs require; a new random one by default. otlp_endpoint: where Triton
    sends its spans (server_command).
    """

    def __init__(self, env: dict[str, str], log_path: Path, ports: Ports | None = None,
                 model_repository: Path = MODEL_REPOSITORY, config_name: str | None = "cpu",
                 root: Path | None = None, python: str | None = None, models: tuple[str, ...] = (MODEL_NAME,),
                 api_key: str | None = None, otlp_endpoint: str | None = None):
        self.ports = ports or Ports.free()
        self.api_key = api_key or secrets.token_urlsafe(32)
        self.shm_prefix = f"intern_decision_{secrets.token_hex(6)}_"
        command = server_command(self.ports, self.api_key, self.shm_prefix, model_repository, config_name, root,
                                 models, otlp_endpoint)
        super().__init__("tritonserver", command, server_environment(env, python), log_path,
                         f"http://{self.http_url}/v2/health/ready")

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.metrics}/metrics"

    @property
    def key_header(self) -> dict[str, str]:
        return {API_KEY_HEADER: self.api_key}

    def shared_memory_regions(self) -> list[Path]:
        """This server's python backend regions in /dev/shm (a stub that died leaves its region behind)."""
        return sorted(SHARED_MEMORY.glob(self.shm_prefix + "*"))

    def stop(self, timeout: float = EXIT_TIMEOUT_SECONDS + 10.0) -> int | None:
        code = super().stop(timeout)
        if self.pid is not None:
            # A stub orphaned in the middle of a request (its server killed) hangs, holding the server's sockets.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        for region in self.shared_memory_regions():
            region.unlink(missing_ok=True)
        return code
