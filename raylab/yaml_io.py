"""Safe YAML reading with errors that name the file and line.

PyYAML follows YAML 1.1, where ``1e-4`` is a string; researchers write learning rates that
way, so the loader here also reads scientific notation without a dot as a float.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from raylab.errors import UserError


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no arbitrary objects) that also reads ``1e-4`` as a float."""


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def loads(text: str, source: str) -> Any:
    """Parse YAML text; a syntax error becomes ``UserError('source:line:col: problem')``."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = err.problem or err.context or "invalid YAML"
        raise UserError(f"{where}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as err:
        raise UserError(f"{source}: YAML error: {err}") from None


def load(path: Path) -> Any:
    """Read and parse a YAML file (see ``loads``)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror}") from None
    return loads(text, str(path))


def dumps(data: Any) -> str:
    """YAML text in the order given (not sorted), for dry runs and saved experiments."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
