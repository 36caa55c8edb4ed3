#!/usr/bin/env bash
# Issue 9's time-matched comparison: the plain PyTorch recipe (../shared/peers/m30k_torch.py) and
# our `make train-multi30k` recipe, each trained EN->DE for the same minutes on this machine, one
# after the other, then a table of both on test_2016_flickr (greedy for both, as the PyTorch
# recipe decodes; our beam 4 and averaged checkpoints beside). The matmul ceiling is measured
# before each, since this machine's speed drifts.
#
# Table: docs/RESULTS.md#multi30k-ende-test_2016_flickr-1000-sentences.
#
#   benchmarks/m30k_time_matched.sh [minutes] [runs directory]   # 50 minutes: about 2 hours
#
# A finished half (its result.json or learning_curve.png exists) is not run again.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-50}
RUNS=${2:-runs/time-matched-${MINUTES}min}
PEERS=${KT_PEERS_DIR:-../shared/peers}
PYTHON=.venv/bin/python
source benchmarks/peer_venvs.sh

make --silent install
ensure_torch_venv
mkdir -p "$RUNS"
ceiling() { "$PYTHON" "$PEERS/matmul_ceiling.py" --framework tf --out "$RUNS/ceiling.jsonl" >/dev/null; }

if [ ! -f "$RUNS/m30k-torch/result.json" ]; then
    ceiling
    M30K=$(realpath "${DATA_DIR:-../shared/data/multi30k}") "$TORCH_VENV/bin/python" \
        "$PEERS/m30k_torch.py" --minutes "$MINUTES" --out "$RUNS/m30k-torch" | tee "$RUNS/m30k-torch.log"
fi
if [ ! -f "$RUNS/multi30k-ende/learning_curve.png" ]; then
    ceiling
    make train-multi30k M30K_TARGETS=de M30K_MINUTES="$MINUTES" M30K_RUNS="$RUNS"
fi
"$PYTHON" benchmarks/time_matched_table.py --torch "$RUNS/m30k-torch" --ours "$RUNS/multi30k-ende" \
    --ceilings "$RUNS/ceiling.jsonl" | tee "$RUNS/time_matched.md"
