"""Command-line flags generated from a settings dataclass, as fairseq's `gen_parser_from_dataclass`.

A field is the one place a setting's name, type, default and help live; each becomes one flag
whose `dest` is the field's name, so `settings_class(**fields_of(args, settings_class))` builds
the settings from a parsed namespace. What a field's `metadata` may say:

- `help`: the flag's help; a default that is not None or False is added to it.
- `flag`: the flag where it is not `--field-name` (`--beam` for `beam_size`).
- `cli`: False for a field that is no flag.
- `choices`, `metavar`, `nargs`: as argparse takes them (`nargs` for a list or tuple).
- `type`: a function that parses the text, where the annotation's type does not
  (`"train=train,validation=dev"` → a dict); the message of its ValueError is the error shown.
- `none_at`: the value that means None on the command line (`--bleu-every 0`: never).
- `negatable`: a bool flag that also has `--no-flag` (argparse's BooleanOptionalAction); other
  bool flags are `store_true`.
- `alias`: a second flag, exclusive of the first, setting the same field and, with it, other
  fields to fixed values (`--data DIR` sets `data_dir` and `dataset="prepared"`):
  `{"flag", "help", "metavar", "implies"}`.

The annotation gives the type: int, float, str or Path, optionally `| None`; `list[X]` and
`tuple[X, ...]` take one or more values. A field without a default is a required flag.

Example:
>>> import argparse
>>> @dataclasses.dataclass
... class Settings:
...     beam_size: int = dataclasses.field(default=4, metadata={"help": "beam", "flag": "--beam"})
...     every: int | None = dataclasses.field(
...         default=1000, metadata={"help": "steps (0: never)", "none_at": 0})
>>> parser = argparse.ArgumentParser()
>>> _ = add_arguments(parser, Settings)
>>> Settings(**fields_of(parser.parse_args(["--beam", "2", "--every", "0"]), Settings))
Settings(beam_size=2, every=None)
"""

import argparse
import dataclasses
import types
import typing
from pathlib import Path

SCALARS = (bool, int, float, str, Path)


def add_arguments(parser, settings_class, title=None, defaults=None, skip=()):
    """Adds a flag for each field of `settings_class` to `parser` (in an argument group named
    `title`, if given); `defaults` replaces fields' defaults, e.g. None for "the task's"."""
    group = parser.add_argument_group(title) if title else parser
    hints = typing.get_type_hints(settings_class)
    for field in flag_fields(settings_class):
        if field.name in skip:
            continue
        default = _default(field, defaults or {})
        # A flag and its alias set the same field: one or the other.
        flags = group.add_mutually_exclusive_group() if "alias" in field.metadata else group
        flags.add_argument(_flag(field), **_options(field, hints[field.name], default))
        if "alias" in field.metadata:
            _add_alias(flags, field, hints[field.name])
    return group


def add_nested_arguments(parser, settings_class):
    """Adds the flags of each part of `settings_class` (a field whose type is a settings
    dataclass), in an argument group titled by the part's `help`."""
    hints = typing.get_type_hints(settings_class)
    for field in dataclasses.fields(settings_class):
        add_arguments(parser, hints[field.name], field.metadata["help"])


def nested_settings(args: argparse.Namespace, settings_class):
    """`settings_class` built from `args`: each part from its own flags."""
    hints = typing.get_type_hints(settings_class)
    return settings_class(
        **{
            field.name: hints[field.name](**fields_of(args, hints[field.name]))
            for field in dataclasses.fields(settings_class)
        }
    )


def flag_fields(settings_class):
    """The fields of `settings_class` that are flags."""
    return [
        field
        for field in dataclasses.fields(settings_class)
        if field.init and field.metadata.get("cli", True)
    ]


def fields_of(args: argparse.Namespace, settings_class) -> dict:
    """The values of `args` that are flags of `settings_class`, by field name."""
    names = {field.name for field in flag_fields(settings_class)}
    return {name: value for name, value in vars(args).items() if name in names}


def _flag(field):
    return field.metadata.get("flag", "--" + field.name.replace("_", "-"))


def _default(field, defaults):
    if field.name in defaults:
        return defaults[field.name]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _options(field, annotation, default) -> dict:
    metadata = field.metadata
    options = {"dest": field.name, "help": metadata["help"]}
    if default is dataclasses.MISSING:
        options["required"] = True
    else:
        options["default"] = default
        if default is not None and default is not False:  # 0 is a default worth saying
            options["help"] += " (default: %(default)s)"
    for key in ("choices", "metavar"):
        if key in metadata:
            options[key] = metadata[key]
    if "type" in metadata:
        scalar, many = _with_its_message(metadata["type"]), False
    else:
        scalar, many = _scalar_type(annotation)
    if scalar is bool:
        negatable = metadata.get("negatable", False)
        options["action"] = argparse.BooleanOptionalAction if negatable else "store_true"
        return options
    options["type"] = _parse(scalar, metadata)
    if many:
        options["nargs"] = metadata.get("nargs", "+")
    return options


def _with_its_message(parse):
    """A metadata `type` whose ValueError says what is wrong: argparse shows its message."""

    def parse_text(text):
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse_text


def _parse(parse, metadata):
    if "none_at" not in metadata:
        return parse
    none_at = metadata["none_at"]

    def parse_or_none(text):
        value = parse(text)
        return None if value == none_at else value

    parse_or_none.__name__ = getattr(parse, "__name__", "value")  # argparse's error names it
    return parse_or_none


def _scalar_type(annotation):
    """(the element type, whether the flag takes several values) of a field's annotation."""
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _scalar_type(arguments[0])
    if origin in (list, tuple):
        return arguments[0], True
    if annotation in SCALARS:
        return annotation, False
    raise TypeError(f"no command-line type for {annotation!r}")


def _add_alias(group, field, annotation):
    alias = field.metadata["alias"]
    scalar, _ = _scalar_type(annotation)
    group.add_argument(
        alias["flag"],
        dest=field.name,
        type=scalar,
        metavar=alias.get("metavar"),
        help=alias["help"],
        action=_implying(alias["implies"]),
        default=argparse.SUPPRESS,
    )


def _implying(implied: dict):
    """An argparse action that stores its value and sets the fields of `implied` to theirs,
    refusing a flag given before it that set one of them otherwise."""

    class StoreImplying(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            for name, value in implied.items():
                given = getattr(namespace, name, None)
                if given not in (None, value, parser.get_default(name)):
                    parser.error(f"{option_string} sets {name} to {value!r}, not {given!r}")
                setattr(namespace, name, value)
            setattr(namespace, self.dest, values)

    return StoreImplying


def at_least(minimum: int):
    """An argparse `type`: an int of at least `minimum`, refused by argparse with its value."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value

    return parse


class DeferredParser(argparse.ArgumentParser):
    """A command's parser whose own flags are added on first use, when the command is parsed or
    its help shown: a command imports the settings modules of its flags only, not every
    command's (the server's, say, which need the serving extra)."""

    def __init__(self, *args, add_flags=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._add_flags = add_flags

    def parse_known_args(self, args=None, namespace=None):
        self._with_flags()
        return super().parse_known_args(args, namespace)

    def format_help(self):
        self._with_flags()
        return super().format_help()

    def _with_flags(self):
        if self._add_flags:
            add_flags, self._add_flags = self._add_flags, None
            add_flags(self)
