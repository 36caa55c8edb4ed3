"""The process settings the CLI applies before TensorFlow starts (keras_transformer/runtime.py).

TensorFlow's BFC allocator is checked on TensorFlow's allocator itself, which counts a small
tensor's bytes only when it is the BFC one (whether `malloc` faults pages in depends on the C
library and the kernel). Applied after TensorFlow has started, too late to change its allocator,
the setting warns. The start-up notes of TensorFlow's C++ logger are kept from the terminal, and
everything else written to stderr still reaches it.
"""

import os
import subprocess
import sys

from keras_transformer.runtime import BFC_VARIABLE, TOO_LATE, VECTOR_WIDTH_FLAG, prefer_wide_vectors

BYTES_IN_USE = (
    "from keras_transformer import runtime\n"
    "runtime.configure()\n"
    "import tensorflow as tf\n"
    "x = tf.ones([1000])\n"
    "print(tf.config.experimental.get_memory_info('CPU:0')['current'])\n"
)

TOO_LATE_SCRIPT = (
    "import tensorflow as tf\ntf.constant(1.0) + 1\nfrom keras_transformer import runtime\n"
    "runtime.reuse_freed_memory()\n"
)

# Notes at start-up and at a first step, a real error, a progress bar's partial line, then a
# death that runs no exit handler.
NOISE_AND_A_REAL_ERROR = (
    "import os\n"
    "from keras_transformer import runtime\n"
    "runtime.quiet_tensorflow_notes()\n"
    "os.write(2, b'I0000 00:00:1.2 7 port.cc:153] oneDNN custom operations are on.\\n')\n"
    "os.write(2, b'E0000 00:00:1.3 7 cuda_platform.cc:52] failed call to cuInit: 303\\n')\n"
    "os.write(2, b'a real error\\n')\n"
    "os.write(2, b'W0000 00:00:9.1 7 mkl_util.h:1] oneDNN supports DT_INT32 only on platforms "
    "with AVX-512. Falling back to the default implementation.\\n')\n"
    "os.write(2, b'1/9\\r2/9\\r')\n"
    "os.write(2, b'its last words')\n"
    "os.abort()\n"
)


def run_as_a_user(args, setting=None) -> subprocess.CompletedProcess:
    """`python args` in a process of its own, with `setting` (or nothing) in
    `TF_CPU_ALLOCATOR_USE_BFC`."""
    environment = {name: value for name, value in os.environ.items() if name != BFC_VARIABLE}
    if setting is not None:
        environment[BFC_VARIABLE] = setting
    return subprocess.run(
        [sys.executable, *args], env=environment, check=True, capture_output=True, text=True
    )


def test_configure_makes_tensorflow_reuse_freed_cpu_memory_unless_told_otherwise():
    # The BFC allocator counts the live 4,000-byte tensor; TensorFlow's malloc-based one counts
    # only large blocks.
    assert int(run_as_a_user(["-c", BYTES_IN_USE]).stdout.split()[-1]) >= 4000
    assert int(run_as_a_user(["-c", BYTES_IN_USE], "false").stdout.split()[-1]) == 0


def test_importing_the_package_sets_nothing():
    script = "import os, keras_transformer.cli; print(os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'))"
    assert run_as_a_user(["-c", script]).stdout.strip() == "None"


def test_a_setting_after_tensorflow_started_warns_that_it_is_too_late():
    warned = run_as_a_user(["-c", TOO_LATE_SCRIPT]).stderr
    assert TOO_LATE in warned
    assert "<string>:4: RuntimeWarning" in warned  # at the caller's line
    assert TOO_LATE not in run_as_a_user(["-c", TOO_LATE_SCRIPT], "false").stderr


def test_a_vector_width_already_in_xla_flags_is_kept(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    prefer_wide_vectors()
    assert os.environ["XLA_FLAGS"] == f"--xla_cpu_enable_fast_math=false {VECTOR_WIDTH_FLAG}=512"
    monkeypatch.setenv("XLA_FLAGS", f"{VECTOR_WIDTH_FLAG}=256")
    prefer_wide_vectors()
    assert os.environ["XLA_FLAGS"] == f"{VECTOR_WIDTH_FLAG}=256"


def test_tensorflow_notes_are_kept_quiet_for_life_and_real_errors_are_not():
    died = subprocess.run([sys.executable, "-c", NOISE_AND_A_REAL_ERROR], stderr=subprocess.PIPE)
    assert died.returncode != 0
    # Read to the end of the pipe: what the filter forwarded after the process died is there.
    assert died.stderr == b"a real error\n1/9\r2/9\rits last words"


def test_the_cli_prints_no_tensorflow_start_up_notes_unless_verbose():
    quiet = run_as_a_user(["-m", "keras_transformer", "presets"])
    assert "base " in quiet.stdout
    assert quiet.stderr == ""
    # What it keeps quiet: TensorFlow does print notes on this machine.
    loud = "from keras_transformer import runtime\nruntime.configure(quiet=False)\n"
    assert "oneDNN" in run_as_a_user(["-c", loud + "import tensorflow"]).stderr
