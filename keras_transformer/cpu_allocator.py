"""TensorFlow's CPU memory kept for reuse between training steps.

By default TensorFlow takes CPU memory from the C library's `malloc`, which maps a large block from
the kernel when it is asked for and unmaps it when freed. A training step frees its large tensors
(`small`'s 49 MB of logits among them) and the next step maps them afresh, so the kernel zeroes
every page again at its first touch: about 86,000 page faults a step of the peers' `small` workload
(336 MiB) and 253,000 for `base`, with a sixth of a `small` step's CPU time (a tenth of `base`'s)
spent in the kernel. TensorFlow's best-fit-with-coalescing allocator, the one it uses for GPU
memory, keeps what it has mapped and hands it out again; `TF_CPU_ALLOCATOR_USE_BFC` makes it
TensorFlow's CPU allocator too. With it the steps took no page faults: `small` trained 11-43% faster
(the median of three pairs of processes 21%), `base` 6-14% and `small` without XLA 10-23%, for 1-3%
more peak resident memory; greedy and beam decoding, which free nothing that large, did not change
(benchmarks/RESULTS.md, 2026-11-27 10:55 UTC). All this was measured on the AVX2 EPYC, family 25
model 1. How `malloc` behaves depends on the C library and the kernel. On an AVX-512 EPYC
(family 25 model 17, Linux 6.18, 2026-11-27 22:40 UTC), `malloc` took no page faults on a
64 MiB tensor returned at every call, so there the setting likely gains little (not measured).

The memory it keeps is not returned to the system until the process ends: a process's resident
memory stays at its peak. TensorFlow reads the variable when it creates its CPU device, at the
first operation of a process, so the package sets it on import; a value already set (`false`
to keep `malloc`) is kept. A process that ran TensorFlow operations before importing the package
keeps the allocator it started with, and is warned, since its training runs slower for it.
"""

import os
import warnings

from tensorflow.python.eager import context

BFC_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"

TOO_LATE = (
    "TensorFlow ran operations before keras_transformer was imported, so its CPU allocator "
    "stays malloc, which faults large tensors in again at every training step (up to 1.4x "
    f"slower). Import keras_transformer before any TensorFlow operation, or set {BFC_VARIABLE}"
    "=true in the environment of the process ('false' keeps malloc and silences this warning)."
)


def reuse_freed_memory() -> None:
    """Sets `TF_CPU_ALLOCATOR_USE_BFC=true` unless the variable is already set; warns when
    TensorFlow has already created its CPU device, too late for the setting to take effect."""
    if BFC_VARIABLE in os.environ:
        return
    os.environ[BFC_VARIABLE] = "true"
    # The eager context creates the CPU device, and with it the allocator, when it initializes;
    # TensorFlow has no public way to ask whether that has happened.
    if context.context()._initialized:
        # Level 3 is the user's `import` line: above this function is the package's
        # `__init__`, and `warnings` skips the import machinery's frames in between.
        warnings.warn(TOO_LATE, RuntimeWarning, stacklevel=3)
