"""Readers for the deployment files (docker/, constraints/, .dockerignore), shared by the deployment tests."""
from __future__ import annotations

import importlib.util
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Mapping

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILES = {"triton": DOCKER / "triton" / "Dockerfile", "shim": DOCKER / "shim" / "Dockerfile"}


def load_script(relative: str) -> ModuleType:
    """Import one of the docker/ scripts (they are not a package) by path."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location("deploy_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- compose -------------------------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                       r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's variable interpolation: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, $$."""
    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group("name") or match.group("bare")
        op, arg = match.group("op"), match.group("arg")
        current = env.get(name)
        unset_or_empty = not current
        if op == ":-":
            return arg if unset_or_empty else current
        if op == "-":
            return arg if current is None else current
        if op in (":?", "?") and (unset_or_empty if op == ":?" else current is None):
            raise ValueError(f"{name}: {arg}")
        return current or ""

    return _VARIABLE.sub(replace, value)


def variables(value: str) -> set[str]:
    return {m.group("name") or m.group("bare") for m in _VARIABLE.finditer(value) if m.group(0) != "$$"}


def environment(service: dict) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {key: "" if value is None else str(value) for key, value in raw.items()}


def env_files(service: dict) -> list[str]:
    raw = service.get("env_file") or []
    raw = [raw] if isinstance(raw, (str, dict)) else raw
    return [item["path"] if isinstance(item, dict) else item for item in raw]


def secret_names(service: dict) -> list[str]:
    return [item["source"] if isinstance(item, dict) else item for item in service.get("secrets") or []]


@dataclass(frozen=True)
class Port:
    host_ip: str
    published: str
    target: str


def ports(service: dict, env: Mapping[str, str]) -> list[Port]:
    """Published ports, interpolated with env; short syntax [[IP:]HOST:]CONTAINER[/proto] and long syntax."""
    result = []
    for item in service.get("ports") or []:
        if isinstance(item, dict):
            result.append(Port(interpolate(str(item.get("host_ip", "")), env),
                               interpolate(str(item.get("published", "")), env), str(item["target"])))
            continue
        text = interpolate(str(item), env).split("/", 1)[0]
        parts = text.rsplit(":", 2)
        if len(parts) == 3:
            result.append(Port(parts[0], parts[1], parts[2]))
        elif len(parts) == 2:
            result.append(Port("", parts[0], parts[1]))
        else:
            result.append(Port("", "", parts[0]))
    return result


def env_file_names(path: Path) -> dict[str, str]:
    """NAME -> value of an env file (comments and blank lines skipped)."""
    result = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            result[name.strip()] = value.strip()
    return result


# --- Dockerfiles ---------------------------------------------------------------------------------------------

@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse_dockerfile(path: Path) -> list[Stage]:
    """Stages and their instructions; continuation lines joined, comment lines dropped."""
    logical, current = [], ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, args.strip()))
    return stages


def shell_commands(run_args: str) -> list[list[str]]:
    """The simple commands of a RUN line (split at && || ; |), each as words."""
    words = shlex.split(run_args, posix=True)
    commands, current = [], []
    for word in words:
        if word in ("&&", "||", ";", "|"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(word)
    if current:
        commands.append(current)
    return commands


def pip_commands(stages: list[Stage]) -> list[list[str]]:
    """Every `pip install` / `pip wheel` (also via python -m pip) in any RUN of any stage."""
    found = []
    for stage in stages:
        for instruction in stage.instructions:
            if instruction.keyword != "RUN":
                continue
            for command in shell_commands(instruction.args):
                words = command
                if len(words) >= 3 and words[0].startswith("python") and words[1:3] == ["-m", "pip"]:
                    words = ["pip", *words[3:]]
                if words and words[0] in ("pip", "pip3") and len(words) > 1 and words[1] in ("install", "wheel"):
                    found.append(words)
    return found


def option_values(words: list[str], *names: str) -> list[str]:
    values = []
    for index, word in enumerate(words):
        for name in names:
            if word == name and index + 1 < len(words):
                values.append(words[index + 1])
            elif word.startswith(name + "="):
                values.append(word.split("=", 1)[1])
    return values


def copies(stages: list[Stage]) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY from the build context (not --from another stage)."""
    result = []
    for stage in stages:
        for instruction in stage.instructions:
            if instruction.keyword != "COPY":
                continue
            words = instruction.args.split()
            if any(word.startswith("--from") for word in words):
                continue
            words = [word for word in words if not word.startswith("--")]
            result.append((words[:-1], words[-1]))
    return result


# --- .dockerignore -------------------------------------------------------------------------------------------

def _pattern_regex(pattern: str) -> re.Pattern:
    """Docker's (Go filepath.Match) patterns plus '**': '*' and '?' stop at '/', '**/' spans directories."""
    out, index = [], 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append(r"(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(r".*")
            index += 2
        elif pattern[index] == "*":
            out.append(r"[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append(r"[^/]")
            index += 1
        elif pattern[index] == "[" and "]" in pattern[index + 1:]:
            end = pattern.index("]", index + 1)
            out.append("[" + pattern[index + 1:end].replace("\\", "\\\\") + "]")
            index = end + 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out))


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore patterns leave `path` (relative, with /) out of the build context.

    The last pattern that matches the path or one of its parent directories decides; '!' re-includes.
    """
    excluded = False
    prefixes = [path] + ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)]
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip().strip("/")
        regex = _pattern_regex(pattern)
        if any(regex.fullmatch(candidate) for candidate in prefixes):
            excluded = not negate
    return excluded


def dockerignore_patterns() -> list[str]:
    return [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


# --- constraints ---------------------------------------------------------------------------------------------

def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    return load_script("docker/check_pins.py").read_pins(path.read_text())


def requirement_names(path: Path) -> list[str]:
    """Names (extras dropped) of a requirements file's lines."""
    names = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            names.append(normalize(re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0]))
    return names
