"""Every ``torch.a.b`` attribute chain in raylab/, trainers/ and benchmarks/ exists in the torch found.

    PYTHONPATH=DIR_WITH_TORCH_2_11 python benchmarks/torch_api_check.py

The project runs on the torch it finds from 2.11 on; this lists any attribute it names that
the running torch lacks (an API newer than that torch), and exits 1 if there is one. It checks
names, not signatures: run the unit tests on that torch too.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAIN = re.compile(r"(?<![.\w])torch(?:\.[A-Za-z_]\w*)+")


def chains() -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in ("raylab", "trainers", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue  # its own docstring names an example chain
            for match in CHAIN.finditer(path.read_text()):
                found.setdefault(match.group(0), str(path.relative_to(ROOT)))
    return found


def missing(torch, names: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for chain, where in sorted(names.items()):
        parts, obj = chain.split("."), torch
        for i, part in enumerate(parts[1:], 1):
            if hasattr(obj, part):
                obj = getattr(obj, part)
                continue
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                out.append((chain, where))
                break
    return out


def main() -> int:
    import torch

    names = chains()
    absent = missing(torch, names)
    print(f"torch {torch.__version__}: {len(names)} attribute chains, {len(absent)} missing")
    for chain, where in absent:
        print(f"  {chain}  ({where})")
    return 1 if absent else 0


if __name__ == "__main__":
    sys.exit(main())
