#!/usr/bin/env bash
# benchmarks/device_kit.sh: the wheels a bare GPU machine lacks (Python 3.12, manylinux x86-64),
# built here where the package registries answer, to carry there with benchmarks/gpu_check.sh.
#
#   bash benchmarks/device_kit.sh        # writes .kit/ (<= 60 MiB) and .kit-mol/ (rdkit)
#
# .kit/: Ray 2.60 without ray/jars, the Ray dependencies that machine lacks, gymnasium, ale-py
# and raylab's own wheel (requiring torch>=2.11). The machine's packages are listed in
# benchmarks/gpu_machine_constraints.txt; benchmarks/device_kit.py says how the kit is resolved.
# Exit code 1 when the kit is over its size limit or does not resolve.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
exec "$PY" benchmarks/device_kit.py "$@"
