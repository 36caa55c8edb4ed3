"""The process settings the CLI applies before TensorFlow starts (keras_transformer/runtime.py).

TensorFlow's BFC allocator is checked on TensorFlow's allocator itself, which counts a small
tensor's bytes only when it is the BFC one (whether `malloc` faults pages in depends on the C
library and the kernel). Applied after TensorFlow has started, too late to change its allocator,
the setting warns. The start-up notes of TensorFlow's C++ logger are kept from the terminal, and
everything else written to stderr still reaches it.

What TensorFlow does depends on the CPU: it turns oneDNN on by itself only on some, and its
`malloc` allocator keeps statistics only with oneDNN on. So every test that starts TensorFlow
runs under both `TF_ENABLE_ONEDNN_OPTS` settings and asserts what TensorFlow reports about
itself, never what one CPU does.
"""

import json
import os
import subprocess
import sys

import pytest

from keras_transformer.runtime import (
    BFC_VARIABLE,
    ONEDNN_NOTE,
    ONEDNN_VARIABLE,
    START_UP_NOISE,
    TOO_LATE,
    VECTOR_WIDTH_FLAG,
    prefer_wide_vectors,
)

# Bytes in use on the CPU after a 4,000-byte tensor, or None where TensorFlow's allocator keeps
# no statistics (its `malloc` one with oneDNN off).
BYTES_IN_USE = (
    "from keras_transformer import runtime\n"
    "runtime.configure()\n"
    "import tensorflow as tf\n"
    "x = tf.ones([1000])\n"
    "try:\n"
    "    print(tf.config.experimental.get_memory_info('CPU:0')['current'])\n"
    "except ValueError as error:\n"
    "    assert 'Allocator stats not available' in str(error), error\n"
    "    print(None)\n"
)

# TensorFlow started after `configure(quiet=..., xla=...)`: its oneDNN state and our environment.
TENSORFLOW_STARTED = (
    "import json, os, sys\n"
    "from keras_transformer import keras_internals, runtime\n"
    "runtime.configure(quiet=sys.argv[1] == 'quiet', xla=sys.argv[2:] == ['xla'])\n"
    "import tensorflow as tf\n"
    "tf.constant(1.0) + 1\n"
    "print(json.dumps({'onednn': keras_internals.onednn_enabled(), "
    f"'variable': os.environ.get('{ONEDNN_VARIABLE}')}}))\n"
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


def run_as_a_user(args, setting=None, onednn=None) -> subprocess.CompletedProcess:
    """`python args` in a process of its own, with `setting` (or nothing) in
    `TF_CPU_ALLOCATOR_USE_BFC` and `onednn` (or nothing) in `TF_ENABLE_ONEDNN_OPTS`."""
    chosen = {BFC_VARIABLE: setting, ONEDNN_VARIABLE: onednn}
    environment = {name: value for name, value in os.environ.items() if name not in chosen}
    environment.update({name: value for name, value in chosen.items() if value is not None})
    return subprocess.run(
        [sys.executable, *args], env=environment, check=True, capture_output=True, text=True
    )


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_configure_makes_tensorflow_reuse_freed_cpu_memory_unless_told_otherwise(onednn):
    # The BFC allocator counts the live 4,000-byte tensor; TensorFlow's malloc-based one counts
    # only large blocks, or keeps no statistics at all.
    assert int(run_as_a_user(["-c", BYTES_IN_USE], onednn=onednn).stdout.split()[-1]) >= 4000
    kept_malloc = run_as_a_user(["-c", BYTES_IN_USE], "false", onednn).stdout.split()[-1]
    assert kept_malloc in ("0", "None")


def test_configure_turns_onednn_on_and_says_so_when_verbose():
    started = run_as_a_user(["-c", TENSORFLOW_STARTED, "verbose"])
    assert json.loads(started.stdout) == {"onednn": True, "variable": "1"}
    assert ONEDNN_NOTE in started.stderr
    quiet = run_as_a_user(["-c", TENSORFLOW_STARTED, "quiet"])
    assert json.loads(quiet.stdout) == {"onednn": True, "variable": "1"}
    assert ONEDNN_NOTE not in quiet.stderr


def test_a_command_compiled_by_xla_leaves_onednn_to_tensorflow():
    started = run_as_a_user(["-c", TENSORFLOW_STARTED, "verbose", "xla"])
    assert json.loads(started.stdout)["variable"] is None
    assert ONEDNN_NOTE not in started.stderr


def test_a_user_who_turned_onednn_off_keeps_it_off():
    started = run_as_a_user(["-c", TENSORFLOW_STARTED, "verbose"], onednn="0")
    assert json.loads(started.stdout) == {"onednn": False, "variable": "0"}
    assert ONEDNN_NOTE not in started.stderr


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


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_the_cli_prints_no_tensorflow_start_up_notes_unless_verbose(onednn):
    quiet = run_as_a_user(["-m", "keras_transformer", "presets"], onednn=onednn)
    assert "base " in quiet.stdout
    assert quiet.stderr == ""
    assert run_as_a_user(["-c", TENSORFLOW_STARTED, "quiet"], onednn=onednn).stderr == ""
    # What it keeps quiet: the notes TensorFlow prints when told to, which name oneDNN where
    # TensorFlow says it is on.
    loud = run_as_a_user(["-c", TENSORFLOW_STARTED, "verbose"], onednn=onednn)
    notes = [line for line in loud.stderr.splitlines() if START_UP_NOISE.search(line)]
    assert ("oneDNN custom operations are on" in "\n".join(notes)) == json.loads(loud.stdout)[
        "onednn"
    ]
