"""An import hook under which importing TensorFlow fails, as where it is not installed: the
processes that show code to run on JAX without TensorFlow install it first
(`refuse_tensorflow()`), with this folder on their path (`PYTHONPATH`, see `python_path`)."""

import os
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
