"""The package's layering (docs/DESIGN.md): one-way imports, no cycles, no import side effects.

The contracts themselves are in pyproject.toml (`[tool.importlinter]`); `make test` also runs
`lint-imports` and `deptry` before the suite.
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from repo_paths import REPO_ROOT
from without_tensorflow import run_script


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("keras_transformer", "pipelines", "durable_files", "base_errors")


def test_the_import_contracts_hold():
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports"))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_no_module_imports_itself_through_others(graph):
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append(graph.find_shortest_chain(importer=imported, imported=module))
    assert not cycles, f"import cycles: {cycles}"


def test_nothing_imports_the_cli(graph):
    importers = graph.find_modules_that_directly_import("keras_transformer.cli")
    assert importers <= {"keras_transformer.__main__"}


def test_the_layer_contract_names_every_package(graph):
    """A new package must take its place in the layering rather than escape it."""
    with open(REPO_ROOT / "pyproject.toml", "rb") as file:
        config = tomllib.load(file)["tool"]["importlinter"]["contracts"][0]
    layered = {name.strip() for layer in config["layers"] for name in layer.split("|")}
    children = {m.rsplit(".", 1)[1] for m in graph.find_children("keras_transformer")}
    assert children - {"__main__"} == layered


def test_importing_the_package_changes_nothing_and_loads_no_framework():
    probe = (
        "import json, os, sys; before = dict(os.environ); import keras_transformer; "
        "print(json.dumps({'environ_changed': dict(os.environ) != before, "
        "'frameworks': sorted(m for m in ('tensorflow', 'keras', 'jax') if m in sys.modules)}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"},
    )
    assert json.loads(result.stdout) == {"environ_changed": False, "frameworks": []}


def test_the_public_api_resolves_lazily():
    import keras_transformer

    assert set(keras_transformer.__all__) <= set(dir(keras_transformer))
    for name in keras_transformer.__all__:
        assert getattr(keras_transformer, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        keras_transformer.nothing  # noqa: B018


# The backend-neutral packages (pyproject's third contract), imported on JAX where importing
# TensorFlow fails, as in an environment without it.
WITHOUT_TENSORFLOW = """
import importlib, pkgutil, sys
from without_tensorflow import refuse_tensorflow

refuse_tensorflow()
for package in ("config", "layers", "model", "objectives"):
    module = importlib.import_module(f"keras_transformer.{package}")
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), module.__name__ + "."):
        importlib.import_module(info.name)
import keras
print(keras.backend.backend(), "tensorflow" in sys.modules)
"""


def test_the_model_core_imports_on_jax_without_tensorflow():
    assert run_script(WITHOUT_TENSORFLOW, KERAS_BACKEND="jax").split() == ["jax", "False"]


# The file utilities and the pipelines' corpus reader, imported where importing TensorFlow (and
# so tensorflow-text and TFDS, which import it) fails: importing them loads no framework.
FILE_UTILITIES = """
import sys
from without_tensorflow import refuse_tensorflow

refuse_tensorflow()
import durable_files, pipelines, pipelines.corpus
from durable_files import WriteError, hold_lock, sync_to_disk, write_atomically
frameworks = ("tensorflow", "tensorflow_text", "tensorflow_datasets", "keras", "numpy")
print(sorted(name for name in frameworks if name in sys.modules))
"""


def test_the_file_utilities_and_the_pipelines_package_import_without_tensorflow():
    assert run_script(FILE_UTILITIES).split() == ["[]"]
