"""Every private Keras and TensorFlow API the package uses, in one place, each with why no public
one does the job; `tests/test_keras_internals.py` fails loudly on a release that changes them.

Used through the functions below:

- `weights_file_bytes`: the bytes of a `.weights.h5` file made in memory. `save_weights` only
  writes to a path, and HDF5 writing to a disk that fails leaves the library in a state that
  crashes the process later (`run_directory.save_weights_atomically`), so the file is built by
  `save_weights`' own writer (`saving_lib._save_state` into an `H5IOStore`) in a buffer.
- `sublayers`: every layer inside a model, at any depth (`Layer._flatten_layers`): Keras 3 lists
  only a model's direct layers publicly.
- `initial_epoch` / `set_initial_epoch`: the epoch `fit` starts from after a restore
  (`Model._initial_epoch`), as `BackupAndRestore` sets it from a callback, after `fit` has
  taken its `initial_epoch` argument.
- `forget_distribute_strategy`: a model without a strategy of its own (`_distribute_strategy`),
  around keras-team/keras#20585 under `MultiWorkerMirroredStrategy` (`trainer.fit_under_strategy`).
- `backup_files` / `backup_position` / `set_backup_epoch`: `BackupAndRestore`'s file paths and
  its position in training, which it keeps in private attributes.
- `tensorflow_initialized`: whether TensorFlow has created its devices (the eager context's
  `_initialized`), which it says nowhere publicly (`runtime.reuse_freed_memory`).
- `onednn_enabled`: whether TensorFlow runs its oneDNN kernels in this process
  (`IsMklEnabled`, which weighs `TF_ENABLE_ONEDNN_OPTS` against the CPU's features once); it
  only says so in a start-up log line (`runtime.use_onednn`, the runtime tests).
- `frozen_function`: a concrete function with its variables folded into constants
  (`convert_variables_to_constants_v2`), for the TFLite export of the search
  (`export.tflite`); TensorFlow has no public freezing step.

Overridden in subclasses, since a subclass is the only way to change them:

- `OPTIMIZER_HOOKS`: the update step of a Keras optimizer and the helpers it calls, which
  `training.optimizer.TokenWeightedAccumulation` overrides and calls to weigh accumulated
  gradients by tokens; Keras's accumulation has no hook for weights.
- `BACKUP_HOOKS`: `BackupAndRestore._save_model`, which `training.callbacks.ResumableBackup`
  overrides to write its files atomically.
"""

import io

# name: the parameters after `self`, or None for an attribute of a built optimizer.
OPTIMIZER_HOOKS = {
    "_backend_apply_gradients": ("grads", "trainable_variables"),
    "_backend_update_step": ("grads", "trainable_variables", "learning_rate"),
    "_backend_reset_gradient_accumulators": (),
    "_backend_increment_gradient_accumulators": ("grads", "acc_grads"),
    "_get_variable_index": ("variable",),
    "_clip_gradients": ("grads",),
    "_apply_weight_decay": ("variables",),
    "_accumulated_gradients": None,
    "_iterations": None,
}
BACKUP_HOOKS = {"_save_model": ()}


def weights_file_bytes(model) -> bytes:
    """The bytes of the .weights.h5 file `model.save_weights` writes (model and optimizer)."""
    from keras.src.saving import saving_lib

    buffer = io.BytesIO()
    store = saving_lib.H5IOStore(buffer, mode="w")
    saving_lib._save_state(
        model, weights_store=store, assets_store=None, inner_path="", visited_saveables=set()
    )
    store.close()
    return buffer.getvalue()


def sublayers(model) -> list:
    """Every layer inside `model`, at any depth, itself excluded."""
    return list(model._flatten_layers(include_self=False, recursive=True))


def initial_epoch(model) -> int:
    """The epoch `fit` starts from, as a restore set it (0 when none did)."""
    return int(getattr(model, "_initial_epoch", 0) or 0)


def set_initial_epoch(model, epoch: int) -> None:
    model._initial_epoch = int(epoch)


def forget_distribute_strategy(model) -> None:
    """Leaves `model` without a strategy of its own: `fit` then runs in the current scope's."""
    model._distribute_strategy = None


def backup_files(backup) -> tuple[str, str]:
    """(weights file, training metadata file) of a `BackupAndRestore` callback."""
    return backup._weights_path, backup._training_metadata_path


def backup_position(backup) -> dict:
    """The epoch a `BackupAndRestore` callback records, and the last batch it saw in it."""
    return {"epoch": backup._current_epoch, "batch": backup._last_batch_seen}


def set_backup_epoch(backup, epoch: int) -> None:
    backup._current_epoch = epoch


def frozen_function(function):
    """`function` (a concrete function) with its variables read once into constants."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    return convert_variables_to_constants_v2(function)


def tensorflow_initialized() -> bool:
    """Whether TensorFlow's eager context has initialized (created its devices)."""
    from tensorflow.python.eager import context

    return context.context()._initialized


def onednn_enabled() -> bool:
    """Whether TensorFlow's oneDNN kernels are on in this process (starts TensorFlow's runtime
    library, not its devices)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())
