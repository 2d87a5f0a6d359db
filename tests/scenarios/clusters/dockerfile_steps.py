"""cluster/Dockerfile's steps, read from the file, to run outside Docker (no daemon here).

``steps(path)`` parses the instructions this Dockerfile uses (FROM, ARG, ENV, WORKDIR, COPY, RUN;
line continuations, comments) into a list of ``(instruction, argument)``; ``run_steps`` plays
them in a folder standing in for the image's file system: COPY copies from the build context
(the tracked files, less the Dockerfile's .dockerignore), RUN runs in bash from the working
folder with the given environment (a plain venv's ``pip`` and ``python`` first on PATH) and the
ARG values, which Docker also hands to RUN as environment variables.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

SUPPORTED = {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN"}


def steps(path: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions in order; an instruction outside SUPPORTED is an error
    (this stand-in would silently skip what the image does)."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        if word.upper() not in SUPPORTED:
            raise ValueError(f"{path}: instruction {word} is not played by this stand-in")
        out.append((word.upper(), rest.strip()))
    return out


def _pattern(pat: str) -> re.Pattern:
    """A .dockerignore pattern as Docker reads it: anchored at the context root, ``*`` and ``?``
    within one path element, ``**/`` any number of folders."""
    out, i = "", 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pat.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pat[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pat[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pat[i]), i + 1
    return re.compile(out + r"\Z")


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Excluded by a pattern matching the file or a folder above it (no ``!`` patterns here)."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(_pattern(p.strip("/")).match(prefix) for p in patterns for prefix in prefixes)


def context_files(repo: Path, dockerfile: Path) -> list[str]:
    """The build context's files: tracked files that the Dockerfile's .dockerignore keeps."""
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    patterns = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    tracked = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout
    return [rel for rel in tracked.splitlines() if not _ignored(rel, patterns) and (repo / rel).is_file()]


def run_steps(
    dockerfile: Path, repo: Path, root: Path, env: dict[str, str], args: dict[str, str], timeout: float
) -> list[dict]:
    """Play the Dockerfile in ``root`` (its WORKDIR paths made relative to ``root``); ``args``
    override ARG defaults. Returns one record per RUN (command, return code, output tail) and
    stops at the first that fails."""
    values: dict[str, str] = {}
    workdir = root
    files = context_files(repo, dockerfile)
    records = []
    for word, arg in steps(dockerfile):
        if word == "ARG":
            name, _, default = arg.partition("=")
            values[name] = args.get(name, default)
        elif word == "ENV":  # KEY=VALUE pairs, for the RUN lines after it
            values.update(pair.partition("=")[::2] for pair in arg.split())
        elif word == "WORKDIR":
            workdir = root / arg.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            parts = [p for p in arg.split() if not p.startswith("--")]
            *sources, dest = parts
            target = workdir / dest
            for src in sources:
                src = src.rstrip("/") if src not in (".", "./") else ""
                for rel in files:
                    if src and rel != src and not rel.startswith(src + "/"):
                        continue
                    inner = rel[len(src) + 1 :] if src else rel
                    (target / inner).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(repo / rel, target / inner)
        elif word == "RUN":
            # `cd /` in a RUN means the image's root: here, the stand-in root.
            command = arg.replace("cd / ", f"cd {root} ")
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=workdir,
                env={**env, **values},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            records.append({"run": arg, "rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-3000:]})
            if proc.returncode != 0:
                break
    return records


def fresh_venv(path: Path, python: str) -> dict[str, str]:
    """A plain venv (no system site-packages) and the environment that puts it first on PATH."""
    subprocess.run([python, "-m", "venv", str(path)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(path)
    return env
