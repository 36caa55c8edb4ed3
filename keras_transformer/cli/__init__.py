"""The `keras-transformer` command line: it parses arguments and calls the library, nothing more.

Each setting's flag is generated from its field in a settings dataclass (`cli.arguments`):
`TrainingRun`, `SearchSettings`, `CorpusOptions` and `PrepareOptions`, `ExportOptions`,
`ImportOptions`, and the server's `ModelsToServe` and `ServerSettings` (a group of flags for
each of its parts). Flags
several commands share are declared once, on parent parsers. What each command does is in
`cli.commands`. Every error in what the user gave (a `KerasTransformerError`, the data
pipelines' `CorpusError` and `durable_files.WriteError` included) ends the command with one line
and exit code 2.

Its `--help` is kept in tests/cli/help/; after a change to a flag, regenerate it with
`.venv/bin/python tests/cli/test_help.py`.
"""

import argparse
import keyword
import logging
import shlex
import signal
import sys
from pathlib import Path

from keras_transformer import __version__, runtime
from keras_transformer.cli import commands
from keras_transformer.cli.arguments import (
    DeferredParser,
    add_arguments,
    add_nested_arguments,
    at_least,
)
from keras_transformer.config import PRESETS, TABLE3_CHANGES
from keras_transformer.errors import KerasTransformerError
from keras_transformer.search_settings import SearchSettings

# The order of `run_directory.run_weights`.
WEIGHTS_HELP = (
    "weights file (default: the newest averaged*.weights.h5, else model.weights.h5, else the "
    "last checkpoint)"
)
SEARCH_TITLE = "search (default: the task's, §6.1's for translation or §6.3's for ptb)"


# -- the parser ----------------------------------------------------------------------------


def _parent(*add) -> argparse.ArgumentParser:
    """A parent parser holding flags several commands share; each of `add` adds some."""
    parent = argparse.ArgumentParser(add_help=False)
    for adding in add:
        adding(parent)
    return parent


def _model_flags(parser):
    parser.add_argument(
        "--model",
        type=Path,
        required=True,
        help="training run directory (translate: or a TFLite export's .tflite file)",
    )
    parser.add_argument("--weights", type=Path, help=WEIGHTS_HELP)


def _ensemble_flag(parser):
    parser.add_argument(
        "--ensemble",
        type=Path,
        nargs="+",
        metavar="RUN_OR_WEIGHTS",
        help="decode with these models too, averaging the next token's probabilities: run "
        "directories (their default weights) or weights files in them; same subword vocabulary",
    )


def _search_flags(parser):
    unset = {name: None for name in ("beam_size", "alpha", "penalty", "extra_length", "min_length")}
    add_arguments(parser, SearchSettings, SEARCH_TITLE, defaults=unset, skip=("n_best",))
    parser.add_argument(
        "--well-formed",
        action="store_true",
        help="parsing with --tgt lexicalized: search only well-formed trees of the input's words",
    )


def _jit_compile_flag(parser):
    parser.add_argument(
        "--jit-compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="compile the search with XLA: faster for single sentences and small batches; "
        "without it, sentences leave a batch as they finish, which large batches gain more "
        "from. Exports: SavedModel only (TF Serving needs --xla_cpu_compilation_enabled=true)",
    )


def _verbose_flag(parser):
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up messages and its INFO log records",
    )


def _output_flag(parser, help, required=False, default=None):
    parser.add_argument("--output", type=Path, required=required, default=default, help=help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description='The Transformer of "Attention Is All You Need" in Keras 3.',
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=DeferredParser)
    verbose = _parent(_verbose_flag)
    model = _parent(_model_flags)
    decoding = _parent(_model_flags, _ensemble_flag, _search_flags, _jit_compile_flag)
    for name, parents, add_flags in (
        ("params", [], _params),
        ("presets", [], None),
        ("variations", [], _variations),
        ("import", [], _import),
        ("prepare", [], _prepare),
        ("train", [], _train),
        ("average", [], _average),
        ("translate", [decoding], _translate),
        ("score", [model], _score),
        ("evaluate", [decoding], _evaluate),
        ("distill", [decoding], _distill),
        ("export", [decoding], _export),
        ("serve", [], _serve),
        ("attention", [model], _attention),
        ("curve", [], _curve),
    ):
        # A command named as a Python keyword has its handler named with "_" after it.
        handler = getattr(commands, f"{name}_" if keyword.iskeyword(name) else name)
        summary = " ".join(handler.__doc__.split("\n\n")[0].split())
        parents = [*parents, verbose]
        command = subparsers.add_parser(name, help=summary, parents=parents, add_flags=add_flags)
        command.set_defaults(handler=handler)
    return parser


def _params(parser):
    parser.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary size")


def _variations(parser):
    parser.add_argument("runs", type=Path, help="holds recipe/ and one run per row")
    parser.add_argument("--rows", nargs="+", choices=sorted(TABLE3_CHANGES))
    parser.add_argument(
        "--plot", type=Path, help="also draw the differences and validation curves into this PNG"
    )


def _import(parser):
    from keras_transformer.pretrained.importer import ImportOptions

    parser.add_argument(
        "source",
        help="an OPUS-MT (Marian) model: a Hugging Face checkpoint's directory or its name on "
        "the Hugging Face Hub (Helsinki-NLP/opus-mt-en-de, downloaded with the pretrained "
        "extra), or the directory of Marian's own release (decoder.yml, model .npz)",
    )
    _output_flag(parser, "the new run directory", required=True)
    add_arguments(parser, ImportOptions, "import")


def _prepare(parser):
    from keras_transformer.prepare_options import CorpusOptions, PrepareOptions

    add_arguments(parser, CorpusOptions, "corpus: one of --train, --tsv, --tfds or --dataset")
    add_arguments(parser, PrepareOptions, "vocabulary and shards")
    _output_flag(parser, "the prepared directory", required=True)


def _train(parser):
    from keras_transformer.training.training_run import TrainingRun

    model = parser.add_argument_group("model (TransformerConfig)")
    model.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="default: small, or with --init-from that run's configuration",
    )
    model.add_argument(
        "--variation",
        choices=sorted(TABLE3_CHANGES),
        help="change the preset as this Table 3 row changes base (§6.2), e.g. A-h1",
    )
    model.add_argument("--batch-tokens", type=int, help="tokens per batch and side (§5.1)")
    model.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    parser.add_argument(
        "--backend",
        choices=runtime.BACKENDS,
        help="Keras's backend (default: $KERAS_BACKEND, else tensorflow); jax trains the same "
        "model on JAX, fed by the same tf.data pipeline, and writes the same checkpoints",
    )
    add_arguments(parser, TrainingRun, "run (TrainingRun)")


def _average(parser):
    parser.add_argument("run", type=Path, help="run directory")
    parser.add_argument("--last", type=at_least(1), default=5)
    _output_flag(parser, "weights file (default RUN/averaged-lastN.weights.h5)")


def _translate(parser):
    parser.add_argument("--input", type=Path, help="text file (plain or .gz); default stdin")
    _output_flag(parser, "default stdout")
    parser.add_argument(
        "--target-language",
        metavar="CODE",
        help="a multilingual imported model's target language (its >>CODE<< token, e.g. fra), "
        "put before each sentence",
    )
    n_best = add_arguments(
        parser,
        SearchSettings,
        "n-best output: one line a hypothesis, INDEX ||| TRANSLATION ||| SCORE ||| LOG_PROB "
        "[||| ALIGNMENT] (README, Translation output)",
        defaults={"n_best": None},
        skip=("beam_size", "alpha", "penalty", "extra_length", "min_length"),
    )
    n_best.add_argument(
        "--scores",
        action="store_true",
        help="the best hypothesis with its score (log P / lp, §6.1) and log-probability",
    )
    n_best.add_argument(
        "--alignments",
        action="store_true",
        help="add Pharaoh word alignments i-j from the encoder-decoder attention",
    )


def _score(parser):
    _ensemble_flag(parser)
    parser.add_argument("--source", type=Path, required=True, help="sources (plain or .gz)")
    parser.add_argument("--target", type=Path, required=True, help="their translations, aligned")
    only_alpha = ("beam_size", "extra_length", "n_best", "min_length")
    add_arguments(
        parser, SearchSettings, defaults={"alpha": None, "penalty": None}, skip=only_alpha
    )
    parser.add_argument("--alignments", action="store_true", help="add Pharaoh word alignments")
    _output_flag(parser, "default stdout; one line a pair: INDEX ||| TARGET ||| SCORE ||| LOG_PROB")


def _evaluate(parser):
    parser.add_argument("--data-dir", type=Path, help="default: the run's data directory")
    parser.add_argument("--dataset", help="default: the run's; given, it must be the run's")
    parser.add_argument(
        "--split", help="default: the dataset's test split (test_2016_flickr; test for ptb, wmt14)"
    )
    _output_flag(parser, "directory for hypotheses and scores (default RUN/eval/WEIGHTS)")
    parser.add_argument(
        "--tune-alpha",
        type=float,
        nargs="+",
        metavar="ALPHA",
        help="decode the validation split with each length penalty α first, and the split with "
        "the one that scores best there (§6.1 chose α on the development set)",
    )
    parser.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="append the command, commit, CPU, model, split, search and scores to FILE as one "
        "JSON line (docs/RESULTS.md's figures name such records)",
    )


def _distill(parser):
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="default: the run's data directory (of a prepared corpus: the text it was prepared "
        "from is distilled)",
    )
    _output_flag(parser, "the new data directory, for train --data-dir or prepare --subwords", True)
    parser.add_argument(
        "--translations-only",
        action="store_true",
        help="train on the translations alone, without the original pairs",
    )


def _export(parser):
    from keras_transformer.export.exporter import ExportOptions

    _output_flag(
        parser,
        "SavedModel base path; TFLite: a .tflite file, or a base path for a server's version; "
        "or the new CTranslate2 directory",
        True,
    )
    add_arguments(parser, ExportOptions, "format")


def _serve(parser):
    try:
        from keras_transformer.server.models.model_config import ModelsToServe
        from keras_transformer.server.settings import ServerSettings
    except ModuleNotFoundError as error:  # grpc, tensorflow_serving: the [serving] extra
        raise SystemExit(
            f"keras-transformer serve needs the serving extra ({error}): "
            "pip install 'keras-transformer[serving]'"
        ) from None
    add_arguments(parser, ModelsToServe, "models: one by name and base path, or a config file")
    add_nested_arguments(parser, ServerSettings)


def _attention(parser):
    parser.add_argument("--sentence", required=True)
    parser.add_argument("--layer", type=int, default=-1, help="layer index (default: last)")
    _output_flag(parser, "PNG (default: %(default)s)", default=Path("attention.png"))


def _curve(parser):
    parser.add_argument("run", type=Path, help="training run directory")
    _output_flag(parser, "PNG (default RUN/learning_curve.png)")


# -- running -------------------------------------------------------------------------------


def _quiet_tensorflow_info():
    """Keeps TensorFlow's and absl's INFO records out of the log; their warnings stay.

    They are TensorFlow's notes to itself, and long: at each export, absl's logger lists every
    captured tensor of a signature it renames, thousands of characters a signature, and
    TensorFlow's own logger prints its records twice (its handler and ours).
    """
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # Only `train` runs on JAX; decoding, export and serving are TensorFlow's.
        runtime.select_backend(getattr(args, "backend", "tensorflow"))
    except (ValueError, RuntimeError) as error:
        raise commands.CommandError(args.command, error) from None
    runtime.configure(quiet=not args.verbose, xla=bool(getattr(args, "jit_compile", False)))
    # Past a file-size limit, a write fails (EFBIG: a WriteError naming the file) rather than
    # the process being killed.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_tensorflow_info()
    args.command_line = shlex.join(["keras-transformer", *(sys.argv[1:] if argv is None else argv)])
    try:
        args.handler(args)
    except KerasTransformerError as error:  # the data pipelines' and file writes' too
        raise commands.CommandError(args.command, error) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
