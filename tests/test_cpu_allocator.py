"""Importing the package makes TensorFlow keep freed CPU memory for reuse
(keras_transformer/cpu_allocator.py): a compiled function that returns a fresh 64 MiB tensor at
every call takes no page faults once warm. (`malloc` mapped and faulted in all 16,384 pages again
at each call on the CI machine until 2026-11-27, and none on the one of 2026-11-28: what `malloc`
does depends on the C library and the kernel, so the setting kept is checked on TensorFlow's
allocator itself, which counts a small tensor's bytes only when it is the BFC one.) Imported after
TensorFlow has started, too late to change its allocator, the package warns."""

import os
import subprocess
import sys

from keras_transformer.cpu_allocator import BFC_VARIABLE, TOO_LATE

OUTPUT_PAGES = 16 * 2**20 * 4 // 4096

FAULTS_A_CALL = (
    "import resource, keras_transformer, tensorflow as tf\n"
    "x = tf.ones([16 * 2**20])\n"
    "double = tf.function(lambda a: a * 2.0, jit_compile=True)\n"
    "double(x), double(x)\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(5):\n"
    "    double(x)\n"
    "print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)\n"
)

BYTES_IN_USE = (
    "import keras_transformer, tensorflow as tf\n"
    "x = tf.ones([1000])\n"
    "print(tf.config.experimental.get_memory_info('CPU:0')['current'])\n"
)

IMPORT_AFTER_AN_OPERATION = (
    "import tensorflow as tf\ntf.constant(1.0) + 1\nimport keras_transformer\n"
)


def run_as_a_user(script, setting=None) -> subprocess.CompletedProcess:
    """`script` in a process of its own, as a user's, with `setting` (or nothing) in
    `TF_CPU_ALLOCATOR_USE_BFC` before it imports the package."""
    environment = {name: value for name, value in os.environ.items() if name != BFC_VARIABLE}
    if setting is not None:
        environment[BFC_VARIABLE] = setting
    return subprocess.run(
        [sys.executable, "-c", script], env=environment, check=True, capture_output=True, text=True
    )


def page_faults_a_call():
    return float(run_as_a_user(FAULTS_A_CALL).stdout.split()[-1])


def test_importing_the_package_reuses_freed_cpu_memory():
    assert page_faults_a_call() < OUTPUT_PAGES / 10


def test_an_allocator_setting_already_made_is_kept():
    # The BFC allocator counts the live 4,000-byte tensor; TensorFlow's malloc-based one counts
    # only large blocks.
    assert int(run_as_a_user(BYTES_IN_USE).stdout.split()[-1]) >= 4000
    assert int(run_as_a_user(BYTES_IN_USE, "false").stdout.split()[-1]) == 0


def test_importing_after_tensorflow_started_warns_that_it_is_too_late():
    warned = run_as_a_user(IMPORT_AFTER_AN_OPERATION).stderr
    assert TOO_LATE in warned
    # At the user's own import line (line 3 of the script), not inside the package.
    assert "<string>:3: RuntimeWarning" in warned
    assert TOO_LATE not in run_as_a_user(IMPORT_AFTER_AN_OPERATION, "false").stderr
    assert TOO_LATE not in run_as_a_user("import keras_transformer\n").stderr
