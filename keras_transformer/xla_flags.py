"""XLA's CPU code generation set for this model: vectors as wide as the CPU's.

XLA on CPU generates the code of its fusions (the dropout masks, layer normalization, softmax,
the loss: all but the matrix products, which Eigen and YNNPACK compute) with 256-bit vectors by
default, AVX-512 or not. At 512 bits those fusions took 16-31% less thread time in the peers'
`small` and `base` training steps on an AMD EPYC with AVX-512, 4-10% of a step
(benchmarks/RESULTS.md, 2026-11-26). Where the CPU has no 512-bit vectors the preference
changes nothing (XLA emits the same vectors, checked on an AVX2 EPYC); the matrix products do not
depend on it.

XLA reads `XLA_FLAGS` once, at the first compilation in a process, so the package sets it on
import. A width already in `XLA_FLAGS` is kept, and a process that compiled with XLA before
importing the package keeps whatever it compiled with.
"""

import os

VECTOR_WIDTH_FLAG = "--xla_cpu_prefer_vector_width"


def prefer_wide_vectors(bits: int = 512) -> None:
    """Adds `--xla_cpu_prefer_vector_width=bits` to `XLA_FLAGS` unless a width is set there."""
    flags = os.environ.get("XLA_FLAGS", "")
    if VECTOR_WIDTH_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {VECTOR_WIDTH_FLAG}={bits}".strip()
