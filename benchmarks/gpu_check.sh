#!/usr/bin/env bash
# benchmarks/gpu_check.sh: the GPU path, asserted, on a bare machine with an NVIDIA GPU, a
# vendor Python with torch >= 2.11, no Ray and no network, in at most 480 s of step limits.
#
#   bash benchmarks/device_kit.sh                 # here, where pip reaches the registries
#   PY=python3 bash benchmarks/gpu_check.sh       # there, with this tree and its .kit/
#
# PY: the machine's Python (default python3; never .venv). PYTHONPATH: where Ray and the
# kit's other packages are importable; when it is unset and .kit/ is here, the kit's wheels are
# unpacked (pip --no-deps --no-index --target) into $OUT_DIR/site first, and .kit-mol/ too when
# present. One ok/FAIL/skip line per step, the figures table last (benchmarks/gpu_check.py
# lists the steps). Exit code: the number of failed steps; 2 with no GPU (one line, at once).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT_DIR=${OUT_DIR:-results/gpu-check-$(date +%Y%m%d-%H%M%S)}
export PYTHONWARNINGS=ignore RAY_DEDUP_LOGS=1 PY
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs an NVIDIA GPU"; exit 2; }
[ "$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)" -ge 1 ] \
  || { echo "torch sees no CUDA GPU (torch built for CPU, or CUDA_VISIBLE_DEVICES hides it)"; exit 2; }
if [ -z "${PYTHONPATH:-}" ] && [ -d .kit ]; then
  mkdir -p "$OUT_DIR"
  wheels=(.kit/*.whl); [ -d .kit-mol ] && wheels+=(.kit-mol/*.whl)
  "$PY" -m pip install --quiet --no-deps --no-index --target "$OUT_DIR/site" "${wheels[@]}" \
    || { echo "could not unpack .kit/ with $PY -m pip"; exit 2; }
  PYTHONPATH="$OUT_DIR/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/gpu_check.py --out "$OUT_DIR" "$@"
