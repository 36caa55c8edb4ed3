"""An import hook under which importing TensorFlow fails, as where it is not installed: the
processes that show code to run on JAX without TensorFlow install it first
(`refuse_tensorflow()`), with this folder on their path (`PYTHONPATH`, see `python_path`)."""

import os
import subprocess
import sys

from repo_paths import REPO_ROOT


class RefuseTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ImportError(f"{name} is not importable here")
        return None


def refuse_tensorflow():
    sys.meta_path.insert(0, RefuseTensorFlow())


def python_path() -> str:
    """`PYTHONPATH` for a subprocess: the checkout, and this folder for this module."""
    return os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")])


def run_script(script: str, **environment) -> str:
    """The output of `python -c script` in a process of its own, with `environment` added and
    this folder on its path; a failure shows the end of its errors."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=python_path(), **environment),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
