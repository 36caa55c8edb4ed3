"""Every command line that README.md, docs/, examples/ and the Makefile show still parses to the
values the hand-written parser gave it (tests/cli/documented_commands.json, written from that
parser before the flags were generated from the settings dataclasses).

The flags keep their names; what changed is where their values land: a value now lands under
its setting's field name (`--beam` in `beam_size`), and a few flags say declaratively what the
old handlers did by hand (`--data DIR` is dataset "prepared" in DIR, `--bleu-every 0` is None).
`RENAMED` and `as_settings` write down each of those; every other value must be equal. The
command lines are collected anew at each run, so that one added to the docs is parsed too.
"""

import json
import shlex
from pathlib import Path

import pytest
from documented_commands import documented_commands, parsed

from keras_transformer.cli import build_parser

GOLDEN = json.loads((Path(__file__).with_name("documented_commands.json")).read_text())
# The old parser's names of values, by command, and the fields they are now.
RENAMED = {
    "*": {"beam": "beam_size"},
    "train": {"src": "source_language", "tgt": "target_language", "data": "data_dir"},
    "prepare": {"src_lang": "source_language", "tgt_lang": "target_language", "tfds": "tfds_name"},
    "serve": {"max_sentences_per_request": "max_sentences_per_request"},
}


def as_settings(command: str, values: dict) -> dict:
    """The old parser's `values` of `command` under the new parser's names and meanings."""
    names = {**RENAMED["*"], **RENAMED.get(command, {})}
    settings = {names.get(name, name): value for name, value in values.items()}
    if command == "train":
        # `_training_corpus`: --data DIR was the prepared corpus DIR, else multi30k by default.
        settings["dataset"] = "prepared" if values["data"] else values["dataset"] or "multi30k"
        settings["data_dir"] = values["data"] or values["data_dir"]
        settings["bleu_every"] = values["bleu_every"] or None  # `args.bleu_every or None`
    return settings


def documented():
    return {shlex.join(argv): argv for argv in documented_commands()}


def test_every_documented_command_line_is_in_the_golden_file_or_parses():
    new = {line: argv for line, argv in documented().items() if line not in GOLDEN}
    refused = [line for line, argv in new.items() if "exit" in parsed(build_parser(), argv)]
    assert not refused, f"documented command lines the parser refuses: {refused}"


@pytest.mark.parametrize("line", sorted(GOLDEN))
def test_a_documented_command_line_parses_to_the_same_values(line):
    old = GOLDEN[line]
    new = parsed(build_parser(), shlex.split(line))
    if "exit" in old:
        assert new == old
        return
    command = old["values"]["command"]
    expected = as_settings(command, old["values"])
    assert "values" in new, f"{line}: refused"
    # Every value the old parser gave is the new parser's, under its new name.
    assert {name: new["values"].get(name) for name in expected} == expected
