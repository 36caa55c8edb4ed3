#!/usr/bin/env bash
# Ours against the peers users would pick instead (../shared/peers), one after another in one
# run on this machine: matmul ceilings, keras-transformer, the tensorflow.org-tutorial-style
# Keras model and keras-hub (both with XLA, their faster mode), and PyTorch nn.Transformer
# (eager, its faster mode), each on `small` and `base`, and the tutorial-style model again with
# its dropout on (benchmarks/tutorial_dropout_on.py: as shipped it trains without). Then prints
# the peers' table and our ratio to the best peer for each figure (benchmarks/peer_ratios.py),
# and last greedy decoding against keras-hub and training against every peer again, alternated
# round by round (benchmarks/alternated.py, records in results/alternated-<results file>): those
# ratios carry none of the minutes of drift between two programs run one after the other.
# On a CPU with bfloat16 units (AMX or AVX512-BF16, used by oneDNN but not by XLA) ours is also
# trained in mixed_bfloat16 without XLA: a row of its own, since the peers' workload is float32.
# Elsewhere that row is skipped: emulated, bfloat16 trains several times slower than float32
# (docs/PERFORMANCE.md). BF16=yes or BF16=no overrides the check.
#
# Table: docs/PERFORMANCE.md#speed-against-peers.
#
#   benchmarks/compare_peers.sh [results.jsonl]      # about 40 minutes on 2 cores
#
# The peers run in their own virtual environments (benchmarks/peer_venvs.sh). SIZES="small"
# runs only the small workload.
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${KT_PEERS_DIR:-../shared/peers}
SIZES=${SIZES:-small base}
if grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo 2>/dev/null; then BF16=${BF16:-yes}; fi
BF16=${BF16:-no}
OUT=${1:-benchmarks/results/peers-$(date -u +%Y-%m-%dT%H%MZ).jsonl}
# One file per run: ratios are only fair between records of the same run.
if [ -e "$OUT" ]; then echo "$OUT exists: give a new results file" >&2; exit 2; fi
PYTHON=.venv/bin/python
source benchmarks/peer_venvs.sh

make --silent install
ensure_torch_venv
ensure_hub_venv

mkdir -p "$(dirname "$OUT")"
FAILED=0
# A program that fails is reported and the others still run; the script then exits 1.
run() { echo "== $*" >&2; "$@" --out "$OUT" >/dev/null || { echo "FAILED: $*" >&2; FAILED=$((FAILED + 1)); }; }
run "$PYTHON" "$PEERS/matmul_ceiling.py" --framework tf
run "$TORCH_VENV/bin/python" "$PEERS/matmul_ceiling.py" --framework torch
for size in $SIZES; do
    run "$PYTHON" benchmarks/throughput.py --size "$size"
    if [ "$BF16" = yes ]; then
        run "$PYTHON" benchmarks/throughput.py --size "$size" --precision mixed_bfloat16 --no-jit
    fi
    run "$PYTHON" "$PEERS/tf_tutorial_style.py" --size "$size" --jit
    # As shipped it trains with its dropout off (Keras 3); this row has it on.
    run "$PYTHON" benchmarks/tutorial_dropout_on.py --size "$size" --jit --no-decode
    run "$HUB_VENV/bin/python" "$PEERS/keras_hub_peer.py" --size "$size" --jit
    run "$TORCH_VENV/bin/python" "$PEERS/torch_nn.py" --size "$size"
done
"$PYTHON" benchmarks/peer_ratios.py "$OUT"
ALTERNATED_OUT="$(dirname "$OUT")/alternated-$(basename "$OUT")"
alternated() {
    echo "== benchmarks/alternated.py $*" >&2
    TORCH_VENV="$TORCH_VENV" "$HUB_VENV/bin/python" benchmarks/alternated.py "$@" \
        --out "$ALTERNATED_OUT" || { echo "FAILED: alternated.py $*" >&2; FAILED=$((FAILED + 1)); }
}
if [[ " $SIZES " == *" small "* ]]; then alternated decode; fi
for size in $SIZES; do
    # A round times each program for seconds, not minutes: 5 steps of small (about 1 s each),
    # 2 of base (about 4-5 s each).
    steps=5
    if [ "$size" = base ]; then steps=2; fi
    alternated train --size "$size" --steps "$steps"
done
if [ "$FAILED" -gt 0 ]; then echo "$FAILED program(s) failed: see FAILED above" >&2; exit 1; fi
