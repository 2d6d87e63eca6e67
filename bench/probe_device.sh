#!/usr/bin/env bash
# Issue 12 part 5, one device call on a lent GPU (prepared so the device minutes go to measuring):
#   1. trainplan probe --quick on the GPU, timed (target <= 3 min); under torchrun when there are >= 2
#      GPUs so the NVLink collectives are measured too;
#   2. bench/gpu_check.py predicted vs measured, with the packaged profile and with the probed one.
# Everything lands under $OUT (the device tool's output folder), else bench/results.
#   run: bash bench/probe_device.sh      (timeout ~540 s)
set -euo pipefail
OUT=${OUT:-bench/results}
PY=${PYTHON:-python}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
NGPU=$($PY -c 'import torch; print(torch.cuda.device_count())')
GPU=$($PY -c 'import torch; print(torch.cuda.get_device_name(0))')
echo "devices: $NGPU x $GPU"
START=$(date +%s)
if [ "$NGPU" -ge 2 ]; then
  $PY -m torch.distributed.run --nproc-per-node "$NGPU" -m trainplan probe --quick --out "$OUT/machine-probe.json"
else
  $PY -m trainplan probe --quick --out "$OUT/machine-probe.json"
fi
echo "{\"probe_quick_s\": $(( $(date +%s) - START )), \"gpus\": $NGPU, \"device\": \"$GPU\"}" > "$OUT/probe_speed_gpu.json"
cat "$OUT/probe_speed_gpu.json"
$PY bench/gpu_check.py --out "$OUT" --machine "$OUT/machine-probe.json" --timeout 90
