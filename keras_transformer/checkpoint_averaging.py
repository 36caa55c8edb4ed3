"""Checkpoint averaging, §6.1: "a single model obtained by averaging the last 5 checkpoints".

The average is element-wise over the model's weights only; optimizer slots in the checkpoint
files are ignored, since the averaged model is for inference (or a fresh fine-tuning run).
"""

from pathlib import Path

import numpy as np

from keras_transformer.callbacks import CheckpointError, list_checkpoints, save_weights_atomically


def load_weights_checked(model, path: Path):
    """`model.load_weights(path)`, with an error naming the file when it cannot be read."""
    if not path.exists():
        raise CheckpointError(f"checkpoint file {path} does not exist")
    try:
        model.load_weights(path)
    except Exception as error:  # h5py/keras raise many types for truncated or foreign files
        raise CheckpointError(
            f"checkpoint file {path} is unreadable or corrupt: {error}"
        ) from error


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
