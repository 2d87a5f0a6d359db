"""The documentation site's generated pages, made at build time (``hooks:`` in mkdocs.yml).

- ``reference/experiments.md``: every experiment YAML key, from the experiment spec's dataclasses
  (``raylab.experiment``) and every registered workload's Config dataclass, with the docstring
  written under each field (``raylab.config.field_docs``).
- ``reference/cli.md``: every ``python -m`` entry point of ``raylab`` and ``trainers``, from its
  argparse parser.
- ``reference/api.md``: the workload API, ``raylab.workloads.WORKLOAD_API``, as mkdocstrings
  directives, rendered from the docstrings.

Nothing here is written by hand, so the pages cannot drift from the code.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (this file is ``docs/_hooks/references.py``)."""

PAGES = ("reference/experiments.md", "reference/cli.md", "reference/api.md")
"""The pages this hook adds to the site (under ``docs/``)."""


# ----------------------------------------------------------------------------- mkdocs hooks


def on_files(files, config):
    """Add the generated pages to the site's files (mkdocs calls this once per build)."""
    from mkdocs.structure.files import File

    for path, make in zip(PAGES, (experiments_page, cli_page, api_page)):
        files.append(File.generated(config, path, content=make()))
    return files


# ----------------------------------------------------------------------------- helpers


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(hint: Any) -> str:
    """A type annotation as a reader writes it: ``int``, ``float | None``, ``Literal['a', 'b']``."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    if typing.get_origin(hint) is typing.Union:  # ``UserPath | None`` (a NewType's union)
        return " | ".join("None" if arg is type(None) else _type_name(arg) for arg in typing.get_args(hint))
    return str(hint).replace("typing.", "").replace("raylab.config.", "").replace("NoneType", "None")


def _default(field: dataclasses.Field, required: tuple[str, ...] | None) -> str:
    """The field's default as YAML would hold it; "required" for one without a default (or, when
    ``required`` is given, for the names in it: a mapping without a default is then empty)."""
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    elif required is None or field.name in required:
        return "required"
    else:
        value = {}
    if dataclasses.is_dataclass(value):
        return f"[see below](#{field.name})"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`" if value != "" else '`""`'


def field_rows(cls: type, required: tuple[str, ...] | None = None) -> list[tuple[str, str, str, str]]:
    """``(name, type, default, docstring)`` for each field of a dataclass, in order; the
    docstring under a field in the class that declares it (base classes included), or for a
    field that is itself a dataclass (a section), that class's docstring."""
    from raylab.config import field_docs

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass is not object:
            docs.update(field_docs(klass))
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name, f.type)
        if dataclasses.is_dataclass(hint):
            rows.append((f.name, "mapping", _default(f, required), docs.get(f.name) or _first_paragraph(hint.__doc__)))
        else:
            rows.append((f.name, _type_name(hint), _default(f, required), docs.get(f.name, "")))
    return rows


def field_table(
    cls: type,
    prefix: str = "",
    skip: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
    required: tuple[str, ...] | None = None,
) -> str:
    """A Markdown table of a dataclass's fields (``extra``: rows appended as they are)."""
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, kind, default, doc in field_rows(cls, required):
        if name not in skip:
            lines.append(f"| `{prefix}{name}` | `{_cell(kind)}` | {_cell(default)} | {_cell(doc)} |")
    return "\n".join([*lines, *extra])


def rst_to_markdown(doc: str, lang: str = "yaml") -> str:
    """A module docstring as Markdown: each ``::`` literal block fenced as ``lang``, and
    ````code```` as `code`."""
    out, lines, i = [], doc.strip("\n").splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            out += [line.rstrip()[:-1].rstrip() + ":", "", f"```{lang}"]
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
                out.append(lines[i][4:])
                i += 1
            while out[-1] == "":
                out.pop()
            out += ["```", ""]
            continue
        out.append(line.replace("``", "`"))
        i += 1
    return "\n".join(out)


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


# ----------------------------------------------------------------------------- experiments


def experiments_page() -> str:
    """Every key of an experiment YAML file: the spec's sections, then each workload's config."""
    from raylab import experiment, search_space, workloads

    spec = experiment.Experiment
    hints = typing.get_type_hints(spec)
    nested = {f.name: hints[f.name] for f in dataclasses.fields(spec) if dataclasses.is_dataclass(hints[f.name])}
    smoke_row = (
        "| `smoke` | `mapping` | `{}` | Overrides of the keys on this page that `--smoke` applies: "
        "a version of the sweep that finishes in about two minutes on two CPU cores. |"
    )
    out = [
        "# Experiment file reference",
        "",
        "Generated from the code at build time: the experiment spec's dataclasses in "
        "`raylab/experiment.py`, the search-space syntax of `raylab/search_space.py`, and the "
        "`Config` dataclass of every registered workload, with the docstring written under each "
        "field. The guide to writing these files is [Experiments](../experiments.md).",
        "",
        "An experiment is one YAML file; its first line is the command that runs it. A "
        "`key=value` on the command line (`config.lr=3e-4`, `resources.workers=2`) overrides any "
        "key, after the `smoke` section when `--smoke` is given. An unknown key or a wrong type is "
        "refused before anything starts, naming the file, the key and the valid keys.",
        "",
        "## Top-level keys",
        "",
        field_table(spec, skip=("name", "source", "smoke"), extra=(smoke_row,), required=experiment.REQUIRED_KEYS),
        "",
    ]
    for name, cls in nested.items():
        out += [f"## `{name}`", "", _first_paragraph(cls.__doc__), "", field_table(cls, prefix=f"{name}."), ""]
    out += ["## `search`", "", rst_to_markdown(search_space.__doc__ or ""), ""]
    out += [
        "## `config`: each workload's fields",
        "",
        "The `config` section, and `search`, which varies the same fields, take the fields of the "
        "workload's `Config` dataclass. Defaults are the paper-scale settings.",
        "",
    ]
    for name, workload in sorted(workloads.registry().items()):
        cls = workload.config_class()
        out += [
            f"### `{name}`",
            "",
            f"`{cls.__module__}.{cls.__qualname__}`"
            + (f": {_cell(workload.description)}" if workload.description else ""),
            "",
            field_table(cls, prefix="config."),
            "",
        ]
    return "\n".join(out)


# ----------------------------------------------------------------------------- command line


def entry_points() -> list[tuple[str, str]]:
    """``(python -m name, module defining main)`` for every ``python -m`` command of ``raylab`` and
    ``trainers``: modules run as ``__main__`` and packages with a ``__main__.py``."""
    found = []
    for package in ("raylab", "trainers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            text = path.read_text()
            if path.name == "__main__.py":
                tree = ast.parse(text)
                source = next((n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module), None)
                found.append((".".join(rel.parts[:-1]), source or ".".join(rel.parts)))
            elif 'if __name__ == "__main__":' in text:
                found.append((".".join(rel.parts), ".".join(rel.parts)))
    first = ("raylab.tune", "raylab.train", "raylab.report")  # the three everyday commands lead
    return sorted(found, key=lambda f: (first.index(f[0]) if f[0] in first else len(first), f[0]))


def _action_row(action: argparse.Action) -> str:
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
    else:
        name = action.metavar or action.dest
        if action.nargs in ("*", "?"):
            name = f"[{name}{' ...' if action.nargs == '*' else ''}]"
    default = action.default
    shown = "" if default in (None, False, [], argparse.SUPPRESS) else f"`{default}`"
    return f"| `{_cell(name)}` | {_cell(action.help or '')} | {shown} |"


def cli_page() -> str:
    out = [
        "# Command-line reference",
        "",
        "Generated at build time from each command's argparse parser: every `python -m` entry "
        "point of `raylab` and of the workloads in `trainers/`. Run any of them with `--help` for "
        "the same text in a terminal.",
        "",
    ]
    for command, module_name in entry_points():
        module = importlib.import_module(module_name)
        made = getattr(module, "parser", None)
        if not callable(made):  # never call main() here: it would run the command
            raise RuntimeError(f"python -m {command}: {module_name} has no parser() for the CLI reference to read")
        parser = made()
        parser.prog = f"python -m {command}"
        doc = _first_paragraph(module.__doc__).replace("``", "`")
        out += [f"## `python -m {command}`", "", doc, ""]
        out += ["```text", parser.format_usage().strip(), "```", ""]
        actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
        if actions:
            out += ["| argument | what | default |", "| --- | --- | --- |", *map(_action_row, actions), ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------- API


def api_page() -> str:
    """mkdocstrings directives over ``WORKLOAD_API``, one section per module."""
    from raylab.workloads import ALL, WORKLOAD_API

    out = [
        "# Workload API reference",
        "",
        "What a workload's code (`trainers/<name>/`, or a lab's own package) may import from "
        "raylab, rendered from the docstrings. The list is `raylab.workloads.WORKLOAD_API`, the one "
        "declaration of the workload API: this page is generated from it at build time, and "
        "`raylab.testing.workload_api_violations` checks a package's imports against it. The rest of "
        "raylab is the framework's inside and may change without notice. Most names are also "
        "re-exported by `raylab` itself (`from raylab import session, from_dict, LoopState`).",
        "",
    ]
    for module, names in WORKLOAD_API.items():
        out += [f"## `{module}`", "", f"::: {module}", "    options:", "      show_root_heading: false"]
        if ALL in names:
            out += ["      show_submodules: true"]
        else:
            out += ["      members:", *(f"        - {n}" for n in names)]
        out += [""]
    return "\n".join(out)
