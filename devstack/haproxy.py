"""HAProxy in front of local shims, rendered from the production template (docker/haproxy/haproxy.cfg.template by
docker/multi_gpu.py), in the foreground with its log in a file; ready once /health answers 200 through it."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from devstack.process import ManagedProcess, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
RENDERER = REPO_ROOT / "docker" / "multi_gpu.py"


def renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multi_gpu", RENDERER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if Path(p).is_file()), None)
    if found is None:
        raise RuntimeError("haproxy is missing: run scripts/install-haproxy.sh (Debian's haproxy package)")
    return found


class HAProxyServer(ManagedProcess):
    def __init__(self, servers: list[tuple[str, str]], folder: Path, port: int | None = None,
                 check_inter: str = "1s", maxconn: int | None = None, **options):
        """options: haproxy_config's other keywords (the per-source bounds, the body limit, ...)."""
        self.port = port or free_port()
        self.config_path = folder / "haproxy.cfg"
        folder.mkdir(parents=True, exist_ok=True)
        limits = {} if maxconn is None else {"maxconn": maxconn}
        self.config_path.write_text(renderer().haproxy_config(servers, f"127.0.0.1:{self.port}",
                                                              check_inter=check_inter, **limits, **options))
        super().__init__("haproxy", [haproxy_binary(), "-db", "-f", str(self.config_path)], {},
                         folder / "haproxy.log", f"{self.url}/health")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
