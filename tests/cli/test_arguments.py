"""`cli.arguments`: a dataclass's fields as argparse flags, each from its annotation and
metadata, and a parsed namespace back into the dataclass."""

import argparse
import dataclasses
from pathlib import Path

import pytest

from keras_transformer.cli.arguments import DeferredParser, add_arguments, fields_of


def setting(default, help="h", **metadata):
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass
class Settings:
    output: Path = dataclasses.field(metadata={"help": "required: no default"})
    beam_size: int = setting(4, flag="--beam")
    alpha: float | None = setting(None)
    files: list[Path] | None = setting(None, metavar="FILE")
    pair: tuple[str, str] | None = setting(None, nargs=2)
    lowercase: bool = setting(False)
    jit_compile: bool = setting(False, negatable=True)
    every: int | None = setting(1000, none_at=0)
    kind: str = setting("bpe", choices=["bpe", "word"])
    data_dir: Path | None = setting(
        None, alias={"flag": "--data", "help": "h", "implies": {"dataset": "prepared"}}
    )
    dataset: str = setting("multi30k")
    verbose: int = setting(1, cli=False)


def parse(*argv, **options) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser, Settings, **options)
    return Settings(**fields_of(parser.parse_args(["--output", "run", *argv]), Settings))


def test_unset_flags_leave_the_fields_defaults():
    assert parse() == Settings(output=Path("run"))


def test_each_flag_is_typed_by_its_annotation():
    settings = parse(
        "--beam",
        "2",
        "--alpha",
        "0.5",
        "--files",
        "a",
        "b",
        "--pair",
        "x",
        "y",
        "--lowercase",
        "--kind",
        "word",
    )
    assert (settings.beam_size, settings.alpha) == (2, 0.5)
    assert settings.files == [Path("a"), Path("b")] and settings.pair == ["x", "y"]
    assert settings.lowercase and settings.kind == "word"


def test_a_negatable_flag_has_its_no_form():
    assert parse("--jit-compile").jit_compile and not parse("--no-jit-compile").jit_compile


def test_the_none_at_value_means_none():
    assert parse("--every", "0").every is None and parse("--every", "5").every == 5


def test_an_alias_sets_its_field_and_the_fields_it_implies():
    settings = parse("--data", "prepared-dir")
    assert (settings.data_dir, settings.dataset) == (Path("prepared-dir"), "prepared")
    assert parse("--data-dir", "d").dataset == "multi30k"


def test_an_alias_excludes_its_flag_and_a_contrary_implied_value(capsys):
    with pytest.raises(SystemExit):
        parse("--data", "a", "--data-dir", "b")
    assert "not allowed with argument --data" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("--dataset", "wmt14", "--data", "a")
    assert "--data sets dataset to 'prepared', not 'wmt14'" in capsys.readouterr().err


def test_a_field_marked_cli_false_is_no_flag_and_not_taken_from_the_namespace(capsys):
    with pytest.raises(SystemExit):
        parse("--verbose", "0")
    assert "unrecognized arguments: --verbose" in capsys.readouterr().err


def test_a_field_without_default_is_required(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser, Settings)
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert "the following arguments are required: --output" in capsys.readouterr().err


def test_defaults_replace_the_fields_and_skipped_fields_are_no_flags():
    parser = argparse.ArgumentParser()
    add_arguments(parser, Settings, defaults={"beam_size": None}, skip=("alpha",))
    args = parser.parse_args(["--output", "o"])
    assert args.beam_size is None and not hasattr(args, "alpha")


def test_the_help_says_the_default_once_it_means_something():
    parser = argparse.ArgumentParser()
    add_arguments(parser, Settings)
    text = parser.format_help()
    assert "(default: 4)" in text and "(default: None)" not in text


def test_a_deferred_parser_adds_its_flags_when_first_used():
    added = []

    def add_flags(parser):
        added.append(parser)
        parser.add_argument("--x", type=int)

    parser = DeferredParser(add_flags=add_flags)
    assert not added
    assert parser.parse_args(["--x", "3"]).x == 3 and parser.parse_args([]).x is None
    assert len(added) == 1


def test_a_metadata_type_parses_the_text_and_its_error_is_shown(capsys):
    def pair(text):
        key, _, value = text.partition("=")
        if not value:
            raise ValueError(f"{text!r} is not KEY=VALUE")
        return {key: value}

    @dataclasses.dataclass
    class Named:
        names: dict | None = setting(None, type=pair)

    parser = argparse.ArgumentParser()
    add_arguments(parser, Named)
    assert parser.parse_args(["--names", "a=b"]).names == {"a": "b"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--names", "a"])
    assert "argument --names: 'a' is not KEY=VALUE" in capsys.readouterr().err
