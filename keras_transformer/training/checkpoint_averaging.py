"""Checkpoint averaging, §6.1: "a single model obtained by averaging the last 5 checkpoints".

The average is element-wise over the model's weights only; optimizer slots in the checkpoint
files are ignored, since the averaged model is for inference (or a fresh fine-tuning run).
"""

from pathlib import Path

import numpy as np

from keras_transformer import run_directory
from keras_transformer.model import Transformer
from keras_transformer.run_directory import (
    CheckpointError,
    list_checkpoints,
    load_weights_checked,
    save_weights_atomically,
)


def average_checkpoints(model, checkpoints: list[Path]) -> list[np.ndarray]:
    """Element-wise mean of `model`'s weights over `checkpoints`; leaves `model` averaged."""
    if not checkpoints:
        raise CheckpointError("no checkpoints to average")
    total = None
    for path in checkpoints:
        load_weights_checked(model, Path(path))
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights, strict=True)]
    averaged = [
        (t / len(checkpoints)).astype(w.dtype)
        for t, w in zip(total, model.get_weights(), strict=True)
    ]
    model.set_weights(averaged)
    return averaged


def average_last_checkpoints(model, directory: Path, last: int, output: Path) -> list[Path]:
    """Averages the last `last` `ckpt-<step>` files of `directory` into `output`.

    Returns the checkpoints used, oldest first.
    """
    if last < 1:  # available[-0:] would be every checkpoint
        raise CheckpointError(f"asked to average the last {last} checkpoints: at least 1")
    available = list_checkpoints(directory)
    if len(available) < last:
        raise CheckpointError(
            f"asked to average the last {last} checkpoints but {directory} holds "
            f"{len(available)}: {[p.name for p in available]}"
        )
    used = available[-last:]
    average_checkpoints(model, used)
    output.parent.mkdir(parents=True, exist_ok=True)
    save_weights_atomically(model, output)
    return used


def average_run(run_dir, last: int, output=None) -> tuple[Path, list[Path]]:
    """`average RUN --last N`: the run's last `last` checkpoints averaged into `output` (default
    RUN/averaged-last<N>.weights.h5). Returns the output and the checkpoints used."""
    run_dir = Path(run_dir)
    output = Path(output) if output else run_directory.averaged_weights_path(run_dir, last)
    model = Transformer(run_directory.read_config(run_dir))
    directory = run_dir / run_directory.CHECKPOINTS_DIR
    return output, average_last_checkpoints(model, directory, last, output)
