#!/usr/bin/env bash
# benchmarks/gpu_check.sh: the GPU path on any machine with an NVIDIA GPU, in at most 8 minutes.
#
#   bash benchmarks/gpu_check.sh            # after `make test` (or any .venv with raylab)
#   PY=~/venv/bin/python bash benchmarks/gpu_check.sh     # on a cluster node
#
# 1. GPU discipline under Ray: a task that reserved no GPU sees none, a half-GPU task sees one
#    device, and the distributed backend raylab picks is nccl there;
# 2. one real GPU trial per workload: python -m raylab.tune NAME --smoke
#    resources.gpus_per_worker=1, with the GPU's peak memory use sampled while it runs (a trial
#    that silently trained on the CPU shows ~0 MiB);
# 3. DQN env steps/s at the full experiment's settings (8 envs, batch 32, one update per 4
#    steps), the same loop on this GPU and on the CPU (benchmarks/dqn_throughput.py);
# 4. ResNet-18 training images/s on this GPU (benchmarks/image_throughput.py);
# 5. with 2 or more GPUs, one 2-worker DDP trial (nccl).
# Figures go to stdout and to $OUT_DIR/summary.txt; each step has its own time limit, and a
# failed step is reported and the next one runs. Exit code: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT_DIR=${OUT_DIR:-results/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
FAILED=0
export PYTHONWARNINGS=ignore RAY_DEDUP_LOGS=1

say() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME LIMIT_S CMD...: run CMD with a time limit, log it, count a failure
  local name=$1 limit=$2; shift 2
  local log="$OUT_DIR/$name.log" start=$SECONDS
  if timeout "$limit" "$@" >"$log" 2>&1; then
    say "ok    $name ($((SECONDS - start)) s)"
  else
    say "FAIL  $name (exit $?, $((SECONDS - start)) s; see $log)"; FAILED=$((FAILED + 1))
  fi
}

command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs an NVIDIA GPU"; exit 2; }
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
[ "${GPUS:-0}" -ge 1 ] || { echo "torch sees no CUDA GPU (torch built for CPU?)"; exit 2; }
say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1) x $GPUS"
say "torch $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"

# 1. GPU discipline
step discipline 120 "$PY" - <<'EOF'
import os, ray, torch
from raylab import session, trainables
ray.init(num_cpus=2, include_dashboard=False)
@ray.remote(num_cpus=1, num_gpus=0)
def cpu_task():
    session.hide_unreserved_gpus()
    return os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count()
@ray.remote(num_cpus=1, num_gpus=0.5)
def half_gpu_task():
    return os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count()
visible, count = ray.get(cpu_task.remote())
assert visible == "" and count == 0, (visible, count)
visible, count = ray.get(half_gpu_task.remote())
assert count == 1 and len(visible.split(",")) == 1, (visible, count)
assert trainables.distributed_backend(0.5) == "nccl"
assert trainables.distributed_backend(0) == "gloo"
print("cpu task sees no GPU; half-GPU task sees one device; backend nccl on CUDA, gloo without")
EOF

# 2. one GPU trial per workload, GPU memory sampled while it runs
for exp in toy dqn_softlinf backdoor fair_adv seagram boltz_distill; do
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$OUT_DIR/$exp.gpu_mib" 2>/dev/null &
  SAMPLER=$!
  step "trial_$exp" 90 "$PY" -m raylab.tune "$exp" --smoke resources.gpus_per_worker=1 \
    --storage "$OUT_DIR/runs" --name "$exp" --quiet
  kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null
  say "      $exp peak GPU memory: $(sort -n "$OUT_DIR/$exp.gpu_mib" | tail -1) MiB"
done

# 3. DQN env steps/s, full experiment settings, GPU then CPU (same loop, same steps)
step dqn_gpu 100 "$PY" benchmarks/dqn_throughput.py --steps 3000 --num-envs 8 --skip-rllib
grep -i "steps/s" "$OUT_DIR/dqn_gpu.log" | sed 's/^/      gpu: /' | tee -a "$SUMMARY"
step dqn_cpu 100 env CUDA_VISIBLE_DEVICES= "$PY" benchmarks/dqn_throughput.py --steps 3000 --num-envs 8 --skip-rllib
grep -i "steps/s" "$OUT_DIR/dqn_cpu.log" | sed 's/^/      cpu: /' | tee -a "$SUMMARY"

# 4. ResNet-18 images/s
step resnet18 90 "$PY" benchmarks/image_throughput.py --steps 100
grep -i "images/s" "$OUT_DIR/resnet18.log" | sed 's/^/      /' | tee -a "$SUMMARY"

# 5. a 2-worker DDP trial (nccl), when there are two GPUs
if [ "$GPUS" -ge 2 ]; then
  step ddp_2_workers 90 "$PY" -m raylab.tune backdoor --smoke resources.workers=2 \
    resources.gpus_per_worker=1 --storage "$OUT_DIR/runs" --name ddp --quiet
else
  say "skip  ddp_2_workers (one GPU)"
fi

say "failed steps: $FAILED (logs in $OUT_DIR)"
exit "$FAILED"
