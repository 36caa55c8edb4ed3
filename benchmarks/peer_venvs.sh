# The peers' virtual environments, created on first use so that torch and keras-hub never enter
# the project's .venv. Sourced by compare_peers.sh and m30k_time_matched.sh.
#
# Table: docs/PERFORMANCE.md#speed-against-peers (the peers' environments).
TORCH_VENV=${TORCH_VENV:-/tmp/kt-venv-torch}
HUB_VENV=${HUB_VENV:-/tmp/kt-venv-keras-hub}

# A venv counts as ready only when its packages import: one whose install broke off is redone.
ensure_torch_venv() {
    "$TORCH_VENV/bin/python" -c "import torch, sentencepiece, sacrebleu" 2>/dev/null && return
    python3 -m venv "$TORCH_VENV"
    # The CPU-only wheel: the default PyPI torch pulls gigabytes of CUDA libraries.
    local wheel
    wheel=$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1)
    # sentencepiece and sacrebleu, at our pins: m30k_torch.py's BPE and its scores.
    "$TORCH_VENV/bin/pip" install --quiet -c requirements.txt numpy "${wheel:-torch==2.13.0}" \
        sentencepiece sacrebleu
}

ensure_hub_venv() {
    "$HUB_VENV/bin/python" -c "import keras_hub" 2>/dev/null && return
    # The project's pinned TensorFlow/Keras, plus keras-hub without letting it move them.
    python3 -m venv "$HUB_VENV"
    "$HUB_VENV/bin/pip" install --quiet -r requirements.txt
    "$HUB_VENV/bin/pip" install --quiet keras-hub==0.32.0 -c requirements.txt
}
