"""Every `keras-transformer` command line that README.md, docs/*.md, examples/ and the Makefile
show, as argument lists, and what a parser makes of each.

Docs: the lines of code blocks that start with `keras-transformer`, and inline code spans that
do; an optional `[--flag VALUE]` is taken as given (of `a|b` alternatives the first), a trailing
`# comment`, redirections and pipes are dropped, and the placeholder N is 2. A line that elides
its flags (`...`) or names no command (`COMMAND --help`) is left out.

Makefile: what `make -n -B TARGET` prints for each recipe, so make expands its own variables;
a shell `for` loop is unrolled, and each `python -m keras_transformer` is read up to the next
shell operator.
"""

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
from pathlib import Path

from repo_paths import REPO_ROOT

MAKE_TARGETS = (
    "demo",
    "train-multi30k",
    "train-multi30k-long",
    "train-multi30k-ensemble",
    "table3-multi30k",
)
# Fixed make variables: the commands do not depend on whether the data is beside the checkout.
MAKE_VARIABLES = ("DATA_DIR=.",)
PLACEHOLDERS = {"N": "2"}
SHELL_OPERATORS = {"<", ">", ">>", "|", "||", "&&", ";", "&"}


def documented_commands() -> list[list[str]]:
    """The command lines, arguments after the program name, each once, in the order found."""
    found = [*_doc_commands(), *_make_commands()]
    unique = {shlex.join(argv): argv for argv in found}
    return list(unique.values())


def _doc_files():
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))] + sorted(
        (REPO_ROOT / "examples").glob("*")
    )


def _doc_commands():
    for path in _doc_files():
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip().startswith("keras-transformer "):
                    yield from _doc_command(line.strip())
        for span in re.findall(r"(?<!`)`(keras-transformer [^`]+)`", text):
            yield from _doc_command(" ".join(span.split()))


def _doc_command(line):
    line = re.sub(r"\s#.*$", "", line)
    if "..." in line:
        return
    line = re.sub(r"\[([^\]]*)\]", lambda m: re.sub(r"(\S+?)\|\S+", r"\1", m[1]), line)
    argv = _until_operator(shlex.split(line, comments=False)[1:])
    if not argv or argv[0].isupper() or (len(argv) < 2 and not argv[0].startswith("-")):
        return
    yield [PLACEHOLDERS.get(word, word) for word in argv]


def _make_commands():
    for target in MAKE_TARGETS:
        shown = subprocess.run(
            ["make", "-n", "-B", target, *MAKE_VARIABLES],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        script = _unrolled(shown.replace("\\\n", " "))
        for line in script.splitlines():
            words = shlex.split(line)
            for index in range(len(words) - 1):
                if words[index : index + 2] == ["-m", "keras_transformer"]:
                    yield _until_operator(words[index + 2 :])


def _unrolled(script):
    """`for VAR in VALUES; do BODY; done` as BODY once a value, `$VAR` replaced by it."""

    def unroll(match):
        name, values, body = match.groups()
        return "\n".join(body.replace(f"${name}", value) for value in shlex.split(values))

    return re.sub(r"for (\w+) in (.*?);\s*do\s(.*?);\s*done", unroll, script, flags=re.S)


def _until_operator(words):
    for index, word in enumerate(words):
        if word in SHELL_OPERATORS:
            return words[:index]
    return words


def parsed(parser: argparse.ArgumentParser, argv) -> dict:
    """What `parser` makes of `argv`: its values, JSON-ready, or the exit status it stopped with
    (`--help`, `--version`, an error)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            namespace = parser.parse_args(argv)
    except SystemExit as stop:
        return {"exit": stop.code}
    values = {k: v for k, v in vars(namespace).items() if not callable(v)}
    return {"values": json.loads(json.dumps(values, default=_plain))}


def _plain(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "__dataclass_fields__"):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    raise TypeError(f"{value!r} is not JSON")
