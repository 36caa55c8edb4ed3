"""A snapshot of every command's `--help` (tests/cli/help/COMMAND.txt): a change to a flag's
name, type, default or help shows in review as a change to these files.

After changing a flag, regenerate them and review the difference:

    .venv/bin/python tests/cli/test_help.py
"""

import os
import sys
from pathlib import Path
from unittest import mock

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from keras_transformer.cli import build_parser  # noqa: E402

SNAPSHOTS = Path(__file__).with_name("help")
REGENERATE = ".venv/bin/python tests/cli/test_help.py"


def help_texts() -> dict[str, str]:
    """{"keras-transformer": the top-level help, COMMAND: its help}, at a fixed width."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    with mock.patch.dict(os.environ, COLUMNS="100"):  # argparse wraps to the terminal's width
        texts = {"keras-transformer": parser.format_help()}
        texts.update({name: command.format_help() for name, command in commands.choices.items()})
    return texts


@pytest.mark.parametrize("name", sorted(help_texts()))
def test_help_is_the_snapshot(name):
    snapshot = SNAPSHOTS / f"{name}.txt"
    assert snapshot.exists(), f"no snapshot of {name} --help: {REGENERATE}"
    assert help_texts()[name] == snapshot.read_text(encoding="utf-8"), (
        f"{name} --help changed: review it, then {REGENERATE}"
    )


def test_every_snapshot_is_a_command():
    assert {path.stem for path in SNAPSHOTS.glob("*.txt")} == set(help_texts())


if __name__ == "__main__":
    SNAPSHOTS.mkdir(exist_ok=True)
    for old in SNAPSHOTS.glob("*.txt"):
        old.unlink()
    for name, text in help_texts().items():
        (SNAPSHOTS / f"{name}.txt").write_text(text, encoding="utf-8")
    print(f"wrote {len(help_texts())} snapshots into {SNAPSHOTS}")
