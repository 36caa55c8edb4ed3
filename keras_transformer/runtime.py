"""Process settings that TensorFlow and XLA read once, at start-up: called by the CLI, never on
import.

- `reuse_freed_memory`: TensorFlow's best-fit-with-coalescing allocator for CPU memory
  (`TF_CPU_ALLOCATOR_USE_BFC`), the one it uses on GPUs. By default TensorFlow takes CPU memory
  from the C library's `malloc`, which on some machines maps every large tensor afresh and lets
  the kernel zero its pages again at each training step; the BFC allocator keeps what it mapped
  and hands it out again. The memory it keeps is not returned until the process ends.
  TensorFlow reads the variable when it creates its CPU device, at the first operation of a
  process.
- `prefer_wide_vectors`: XLA's CPU code generation with vectors as wide as an AVX-512 CPU's
  (`--xla_cpu_prefer_vector_width=512`) for its fusions (dropout masks, layer normalization,
  softmax, the loss); where the CPU has no 512-bit vectors it changes nothing. XLA reads
  `XLA_FLAGS` at the first compilation of a process.
- `select_backend`: Keras's backend (`KERAS_BACKEND`), which Keras reads once, when it is
  imported: TensorFlow, or JAX for `train --backend jax`.
- `leave_gpus_to_jax`: with JAX as Keras's backend TensorFlow runs the input pipeline only, and is
  kept off the GPUs, whose memory JAX's allocator takes.
- `quiet_start_up`: TensorFlow's C++ start-up notes (the oneDNN notice, "could not find cuda
  drivers", "failed call to cuInit" on a machine without a GPU) kept from the terminal; they are
  written by absl's C++ logger straight to file descriptor 2, past `TF_CPP_MIN_LOG_LEVEL`.

`configure` applies all of them but the backend, which the CLI selects first. A value the user
already set in the environment is kept; the measurements behind the defaults are in
docs/RESULTS.md.
"""

import contextlib
import os
import re
import sys
import tempfile
import warnings

from keras_transformer import keras_internals

BFC_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
BACKEND_VARIABLE = "KERAS_BACKEND"
BACKENDS = ("tensorflow", "jax")
VECTOR_WIDTH_FLAG = "--xla_cpu_prefer_vector_width"

TOO_LATE = (
    "TensorFlow ran operations before keras_transformer.runtime.reuse_freed_memory() was "
    "called, so its CPU allocator stays malloc, which can fault large tensors in again at every "
    f"training step. Call it before any TensorFlow operation, or set {BFC_VARIABLE}=true in the "
    "environment of the process ('false' keeps malloc and silences this warning)."
)

# TensorFlow's start-up notes on stderr: informational, or about a GPU the machine lacks.
START_UP_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|port\.cc:\d+\] oneDNN custom operations"
    r"|cudart_stub\.cc|cuda_platform\.cc:\d+\] failed call to cuInit|cpu_feature_guard\.cc"
    r"|^To enable the following instructions|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation_placer\.cc|TF-TRT Warning"
)


def configure(quiet: bool = True) -> None:
    """Every setting of this module, before TensorFlow is imported; `quiet=False` leaves
    TensorFlow's start-up notes on stderr (the CLI's `--verbose`)."""
    reuse_freed_memory()
    prefer_wide_vectors()
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with quiet_start_up():
            import tensorflow as tf

            tf.config.list_physical_devices()  # where the GPU probe logs its failure
    if os.environ.get(BACKEND_VARIABLE) == "jax":
        leave_gpus_to_jax()


def select_backend(name: str | None = None) -> str:
    """Sets `KERAS_BACKEND` to `name`, or keeps the environment's (TensorFlow when unset), and
    returns it; an error once Keras has been imported on another backend."""
    name = name or os.environ.get(BACKEND_VARIABLE, "tensorflow")
    if name not in BACKENDS:
        raise ValueError(f"{BACKEND_VARIABLE}={name!r}: the backends are {', '.join(BACKENDS)}")
    if "keras" in sys.modules and sys.modules["keras"].backend.backend() != name:
        raise RuntimeError(f"Keras was imported on another backend before selecting {name!r}")
    os.environ[BACKEND_VARIABLE] = name
    return name


def leave_gpus_to_jax() -> None:
    """Hides the GPUs from TensorFlow, before it creates its devices."""
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")


def reuse_freed_memory() -> None:
    """Sets `TF_CPU_ALLOCATOR_USE_BFC=true` unless the variable is already set; warns when
    TensorFlow has already created its CPU device, too late for the setting to take effect."""
    if BFC_VARIABLE in os.environ:
        return
    os.environ[BFC_VARIABLE] = "true"
    if "tensorflow" in sys.modules and keras_internals.tensorflow_initialized():
        warnings.warn(TOO_LATE, RuntimeWarning, stacklevel=2)


def prefer_wide_vectors(bits: int = 512) -> None:
    """Adds `--xla_cpu_prefer_vector_width=bits` to `XLA_FLAGS` unless a width is set there."""
    flags = os.environ.get("XLA_FLAGS", "")
    if VECTOR_WIDTH_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {VECTOR_WIDTH_FLAG}={bits}".strip()


@contextlib.contextmanager
def quiet_start_up():
    """Captures file descriptor 2 for the block, then writes back every line that is not one of
    TensorFlow's start-up notes (`START_UP_NOISE`), so real errors still reach the user."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", "replace")
            kept = [line for line in text.splitlines(True) if not START_UP_NOISE.search(line)]
            sys.stderr.write("".join(kept))
