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
- `use_onednn`: TensorFlow's oneDNN kernels (`TF_ENABLE_ONEDNN_OPTS=1`). TensorFlow turns them on
  by itself only on CPUs with AVX-512 VNNI or BF16, AVX-VNNI or AMX; on others, AVX2 CPUs among
  them, its Eigen kernels run, slower for the wide matrix products of the output projection
  (beam search over a 58k vocabulary), and for a training step without XLA. Programs compiled
  by XLA ran slower with oneDNN on, so a command that compiles with XLA (`--jit-compile`) leaves
  the setting to TensorFlow. TensorFlow reads the variable once, at its start.
- `select_backend`: Keras's backend (`KERAS_BACKEND`), which Keras reads once, when it is
  imported: TensorFlow, or JAX for `train --backend jax`.
- `leave_gpus_to_jax`: with JAX as Keras's backend TensorFlow runs the input pipeline only, and is
  kept off the GPUs, whose memory JAX's allocator takes.
- `quiet_tensorflow_notes`: TensorFlow's C++ notes (the oneDNN notices at start-up and at a
  first step, "could not find cuda drivers", "failed call to cuInit" on a machine without a GPU)
  kept from the terminal for the life of the process; absl's C++ logger writes them straight to
  file descriptor 2, past `TF_CPP_MIN_LOG_LEVEL`.

`configure` applies all of them but the backend, which the CLI selects first, and oneDNN under
XLA. A value the user already set in the environment is kept; the measurements behind the
defaults are in docs/DEFAULTS.md.
"""

import atexit
import os
import re
import subprocess
import sys
import warnings

from keras_transformer import keras_internals

BFC_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
ONEDNN_NOTE = (
    f"keras-transformer: {ONEDNN_VARIABLE}=1, TensorFlow's oneDNN kernels on (TensorFlow turns "
    "them on by itself only on CPUs with AVX-512 VNNI or BF16, AVX-VNNI or AMX); "
    f"{ONEDNN_VARIABLE}=0 keeps them off"
)
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
    r"|computation_placer\.cc|TF-TRT Warning|oneDNN supports DT_\w+ only on platforms with"
)

# The filter between the process's file descriptor 2 and the terminal: complete lines are
# forwarded unless they are noise, and a partial line up to its last carriage return (a
# progress bar) at once. It ignores Ctrl-C, which the terminal sends to the whole process
# group, so that the main process's last words still pass through it.
_FILTER = """
import os, re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise = re.compile(sys.argv[1].encode())
pending = b""
while chunk := os.read(0, 65536):
    *lines, pending = (pending + chunk).split(b"\\n")
    kept = b"".join(line + b"\\n" for line in lines if not noise.search(line))
    carriage = pending.rfind(b"\\r") + 1
    kept, pending = kept + pending[:carriage], pending[carriage:]
    if kept:
        os.write(2, kept)
if pending and not noise.search(pending):
    os.write(2, pending)
"""


def configure(quiet: bool = True, xla: bool = False) -> None:
    """Every setting of this module, before TensorFlow is imported; `quiet=False` leaves
    TensorFlow's start-up notes on stderr (the CLI's `--verbose`), and says when oneDNN was
    turned on; `xla`: the command compiles its model with XLA, and oneDNN is left to
    TensorFlow."""
    reuse_freed_memory()
    prefer_wide_vectors()
    if not xla and use_onednn() and not quiet:
        print(ONEDNN_NOTE, file=sys.stderr)
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        quiet_tensorflow_notes()
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


def use_onednn() -> bool:
    """Sets `TF_ENABLE_ONEDNN_OPTS=1` unless the variable is already set; whether it did."""
    if ONEDNN_VARIABLE in os.environ:
        return False
    os.environ[ONEDNN_VARIABLE] = "1"
    return True


def prefer_wide_vectors(bits: int = 512) -> None:
    """Adds `--xla_cpu_prefer_vector_width=bits` to `XLA_FLAGS` unless a width is set there."""
    flags = os.environ.get("XLA_FLAGS", "")
    if VECTOR_WIDTH_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {VECTOR_WIDTH_FLAG}={bits}".strip()


def quiet_tensorflow_notes() -> None:
    """Routes file descriptor 2 through a filter process that drops TensorFlow's notes
    (`START_UP_NOISE`) and forwards everything else, for the rest of the process's life.

    A process of its own, not a thread: when this one dies at once (an abort in TensorFlow's C++
    code, a kill), the filter still reads what was written before and forwards it, so a fatal
    error's message is never lost. At exit, file descriptor 2 is given back and the filter waited
    for, so that nothing it forwards lands after the process has ended.
    """
    sys.stderr.flush()
    terminal = os.dup(2)
    noise_filter = subprocess.Popen(
        [sys.executable, "-c", _FILTER, START_UP_NOISE.pattern],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )
    os.dup2(noise_filter.stdin.fileno(), 2)
    noise_filter.stdin.close()
    atexit.register(_close_filter, noise_filter, terminal)


def _close_filter(noise_filter: subprocess.Popen, terminal: int) -> None:
    sys.stderr.flush()
    os.dup2(terminal, 2)  # closes this process's end of the pipe: the filter reads to its end
    os.close(terminal)
    try:
        noise_filter.wait(timeout=10)
    except subprocess.TimeoutExpired:  # a child process of ours still holds the pipe
        pass
