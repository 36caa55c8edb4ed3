"""Packaging that works without the Makefile: the version, the declared dependencies (deptry),
pins for every declared package in the requirements files, and the wheel's package data."""

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import keras_transformer
from keras_transformer import cli
from repo_paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def pinned(requirements: str) -> set[str]:
    """The names pinned with == in a requirements file and the files it includes with -r."""
    names = set()
    for line in (REPO_ROOT / requirements).read_text().splitlines():
        if line.startswith("-r "):
            names |= pinned(line.split()[1])
        elif "==" in line:
            names.add(canonical(line.split("==")[0]))
    return names


def canonical(requirement: str) -> str:
    return re.split(r"[<>=!\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_version_is_the_packages(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"keras-transformer {keras_transformer.__version__}"


def test_every_import_is_declared_and_every_declaration_used():
    deptry = Path(sys.executable).with_name("deptry")
    result = subprocess.run([str(deptry), "."], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_declared_package_is_pinned():
    runtime = {canonical(r) for r in PYPROJECT["dependencies"]}
    extras = PYPROJECT["optional-dependencies"]
    optional = {canonical(r) for name in ("serving", "tflite") for r in extras[name]}
    assert runtime | optional <= pinned("requirements.txt")
    development = {canonical(r) for r in extras["dev"] if not r.startswith("keras-transformer")}
    tested_extras = {
        canonical(r) for name in ("parsing", "ctranslate2", "jax") for r in extras[name]
    }
    assert development | tested_extras <= pinned("requirements-dev.txt")


def test_the_wheel_ships_the_web_page(tmp_path):
    """`keras-transformer serve` answers / from files beside its code: they are package data."""
    source = tmp_path / "source"  # a clean copy: an in-tree build would leave build/ behind
    for package in ("keras_transformer", "pipelines", "durable_files", "base_errors"):
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO_ROOT / package, source / package, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    built = subprocess.run([*pip, str(source), "-w", str(tmp_path)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    web = REPO_ROOT / "keras_transformer" / "server" / "page" / "web"
    page = {f"keras_transformer/server/page/web/{path.name}" for path in web.iterdir()}
    assert page <= set(zipfile.ZipFile(wheel).namelist())
