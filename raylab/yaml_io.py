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


class DuplicateKey(yaml.MarkedYAMLError):
    """A mapping that names one key twice (YAML says keys are unique; PyYAML keeps the last)."""


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no arbitrary objects) that also reads ``1e-4`` as a float and
    refuses a key written twice in one mapping, at any depth (a copy-paste would otherwise
    sweep on the second value without a word)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if earlier is not key_node.start_mark:
                    raise DuplicateKey(
                        problem=f"key '{key}' is written twice in one mapping (first at line {earlier.line + 1})",
                        problem_mark=key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


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
    """Parse YAML text; a syntax error or a key written twice in one mapping becomes
    ``UserError('source:line:col: problem')``."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except DuplicateKey as err:
        mark = err.problem_mark
        raise UserError(f"{source}:{mark.line + 1}:{mark.column + 1}: {err.problem}") from None
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
