#!/usr/bin/env bash
# benchmarks/gpu_check.sh: the GPU path, asserted, on a bare machine with an NVIDIA GPU, a
# vendor Python with torch >= 2.11, no Ray and no network (benchmarks/gpu_check.py: the steps).
#
#   bash benchmarks/device_kit.sh                              # here, where pip reaches the registries
#   PY=python3 bash benchmarks/gpu_check.sh [--calibrate]      # there, with this tree and its .kit/
#
# PY: the machine's Python (default python3; never .venv). OUT_DIR: where summary.txt,
# gpu_check.json and logs.tar.gz go (default $OUT when set, the folder a device call brings
# back; else results/gpu-check-<time>). PYTHONPATH: where Ray and the kit's other packages are
# importable; when it is unset and .kit/ is here, the kit's wheels are unpacked (pip --no-deps
# --no-index --no-compile --target) into KIT_SITE (default /tmp/raylab-kit-site, outside
# OUT_DIR; a second run with the same kit reuses it), and .kit-mol/ too when present.
# --calibrate: generous limits, wall times and suggested limits printed. --rehearse: no GPU
# needed, every step's CPU twin (benchmarks/device_rehearsal.py runs it).
# One ok/FAIL/skip line per step, the figures last. Exit code: the number of failed steps;
# 2 with no GPU (one line, at once).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT_DIR=${OUT_DIR:-${OUT:-results/gpu-check-$(date +%Y%m%d-%H%M%S)}}
KIT=${KIT:-$PWD/.kit}
KIT_SITE=${KIT_SITE:-${TMPDIR:-/tmp}/raylab-kit-site}
export PYTHONWARNINGS=ignore RAY_DEDUP_LOGS=1 PY KIT PYTHONUNBUFFERED=1
rehearse=0
for arg in "$@"; do [ "$arg" = --rehearse ] && rehearse=1; done
if [ "$rehearse" = 0 ]; then
  command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs an NVIDIA GPU"; exit 2; }
  [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)" -ge 1 ] \
    || { echo "torch sees no CUDA GPU (torch built for CPU, or CUDA_VISIBLE_DEVICES hides it)"; exit 2; }
fi
if [ -z "${PYTHONPATH:-}" ] && [ -d "$KIT" ]; then
  wheels=("$KIT"/*.whl); [ -d "$KIT-mol" ] && wheels+=("$KIT-mol"/*.whl)
  stamp=$(ls -l "${wheels[@]}" | md5sum | cut -c1-16)
  if [ "$(cat "$KIT_SITE/.kit-stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "kit: ${#wheels[@]} wheels already unpacked in $KIT_SITE"
  else
    SECONDS=0
    rm -rf "$KIT_SITE"
    "$PY" -m pip install --quiet --no-deps --no-index --no-compile --disable-pip-version-check \
      --target "$KIT_SITE" "${wheels[@]}" || { echo "could not unpack $KIT with $PY -m pip"; exit 2; }
    echo "$stamp" > "$KIT_SITE/.kit-stamp"
    echo "kit: ${#wheels[@]} wheels unpacked into $KIT_SITE in $SECONDS s"
  fi
  PYTHONPATH="$KIT_SITE"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/gpu_check.py --out "$OUT_DIR" "$@"
