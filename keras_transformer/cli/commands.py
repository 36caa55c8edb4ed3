"""What each `keras-transformer` command does with its parsed arguments: it builds the
settings objects from them and calls the library. A command's docstring, up to its first blank
line, is its help."""

import dataclasses
import logging
import sys

from keras_transformer.cli.arguments import fields_of
from keras_transformer.config import PRESETS, ConfigError, TransformerConfig
from keras_transformer.search_settings import SearchSettings


class CommandError(SystemExit):
    """Ends a command as argparse ends a usage error: one line on stderr, exit code 2. Its
    `str()` is that line."""

    def __init__(self, command: str, error):
        super().__init__(2)
        self.line = f"keras-transformer {command}: error: {error}"
        print(self.line, file=sys.stderr)

    def __str__(self):
        return self.line


def params(args):
    """parameter counts of base, big and every Table 3 row beside the paper's"""
    from keras_transformer.analysis.parameter_count import format_table3

    print(format_table3(args.vocab_size))


def presets(args):
    """list the configuration presets"""
    for name in PRESETS:
        config = TransformerConfig.preset(name)
        print(
            f"{name:10s} N={config.num_layers} d_model={config.d_model} d_ff={config.d_ff} "
            f"h={config.num_heads} d_k={config.d_k} d_v={config.d_v} "
            f"P_drop={config.residual_dropout} ε_ls={config.label_smoothing} "
            f"positions={config.positional_encoding}"
        )


def variations(args):
    """Table 3 rows tried on a recipe (make table3-multi30k) as a table"""
    from keras_transformer.analysis.model_variations import plot_variations, variations_table

    print(variations_table(args.runs, args.rows))
    if args.plot:  # logged, not printed: stdout is the table, which make redirects to a file
        logging.info("wrote %s", plot_variations(args.runs, args.plot, args.rows))


def import_(args):
    """a pretrained Marian (OPUS-MT) checkpoint as a run directory that every command takes"""
    from keras_transformer.pretrained.importer import ImportOptions, import_checkpoint

    options = ImportOptions(**fields_of(args, ImportOptions))
    print(f"imported {args.source} into {import_checkpoint(args.source, args.output, options)}")


def prepare(args):
    """tokenize a parallel corpus once into sharded TFRecord files that training streams"""
    from keras_transformer.prepare_options import CorpusOptions, PrepareOptions
    from pipelines.prepare import prepare as prepare_corpus
    from pipelines.prepared import summary

    corpus = CorpusOptions(**fields_of(args, CorpusOptions)).description()
    options = PrepareOptions(**fields_of(args, PrepareOptions))
    manifest = prepare_corpus(args.output, corpus, **dataclasses.asdict(options))
    print("\n".join(summary(manifest, args.output)))


def train_config(args) -> TransformerConfig:
    """The preset (default small, or the configuration of the run that --init-from starts from),
    changed by its Table 3 row (--variation), then by --set and --batch-tokens."""
    from keras_transformer import run_directory

    if args.init_from and not args.preset:
        config = run_directory.read_config(args.init_from)
    else:
        config = TransformerConfig.preset(args.preset or "small")
    if args.variation:
        config = config.variation(args.variation)
    config = config.with_overrides(args.set)
    return config.replace(batch_tokens=args.batch_tokens) if args.batch_tokens else config


def train(args):
    """train or resume a run with model.fit"""
    from keras_transformer.training.trainer import train as train_model
    from keras_transformer.training.training_run import TrainingRun

    if args.devices and args.devices > 1:
        from keras_transformer.training.distribution import configure_logical_cpus

        configure_logical_cpus(args.devices)
    from keras_transformer.training.distribution import WorkerLostError

    config = train_config(args)
    try:
        print(f"final weights: {train_model(config, TrainingRun(**fields_of(args, TrainingRun)))}")
    except WorkerLostError as error:  # TensorFlow's error, not the user's: no traceback either
        raise SystemExit(f"keras-transformer train: error: {error}") from None


def average(args):
    """average the last checkpoints of a run (§6.1)"""
    from keras_transformer.training.checkpoint_averaging import average_run

    output, used = average_run(args.run, args.last, args.output)
    print(f"averaged {[p.name for p in used]} into {output}")


def task_and_search(args):
    """The run's task, and the search a command decodes with (`searched`)."""
    from keras_transformer.analysis.evaluation import run_task

    task = run_task(args.model)
    return task, searched(task, args)


def searched(task, args) -> SearchSettings:
    """The task's search, changed by the search flags given: the one place a command's
    `SearchSettings` is built."""
    return task.search.replace(**fields_of(args, SearchSettings))


def load_translator(args, jit_compile=False):
    """The `Translator` of a run (`--well-formed`: lexicalized parsers), with its ensemble."""
    from keras_transformer.decoding.translator import load_run

    ensemble = args.ensemble or ()
    return load_run(args.model, args.weights, jit_compile, args.well_formed, ensemble)


def translate(args):
    """translate lines of a file or stdin"""
    from keras_transformer.decoding.translator import n_best_text, with_target_language

    if args.model.suffix == ".tflite":
        return translate_with_tflite(args)
    task, search = task_and_search(args)
    translator = load_translator(args, args.jit_compile)
    lines = read_input(args.input)
    if args.target_language:
        lines = with_target_language(lines, translator.tokenizer, args.target_language)
    if args.n_best or args.scores or args.alignments:
        n_best = translator.translate_n_best(lines, search, alignments=args.alignments)
        write_output(args.output, n_best_text(lines, n_best, task.present))
        return
    translations = translator.translate(lines, search)
    text = "".join(task.present(s, t) + "\n" for s, t in zip(lines, translations, strict=True))
    write_output(args.output, text)


# What `translate` offers a run directory only: a TFLite model returns one hypothesis and its
# score, with the search and weights fixed at export.
RUN_ONLY_TRANSLATE_OPTIONS = (
    "weights",
    "ensemble",
    "well_formed",
    "jit_compile",
    "n_best",
    "scores",
    "alignments",
)


def translate_with_tflite(args):
    """`translate` with a TFLite export (`--model x.tflite`), on LiteRT: the search is the one
    fixed in the model, which search parameters may repeat but not change."""
    from keras_transformer.decoding.translator import with_target_language
    from keras_transformer.export.tflite_translator import TFLiteTranslator

    given = [name for name in RUN_ONLY_TRANSLATE_OPTIONS if getattr(args, name, None)]
    if given:
        raise CommandError(
            "translate",
            f"{', '.join(given)} need a run directory, not the TFLite model {args.model}",
        )
    try:
        translator = TFLiteTranslator(args.model)
    except (FileNotFoundError, ValueError) as error:
        raise CommandError("translate", error) from None
    fixed = translator.search
    if fixed and fixed.replace(**fields_of(args, SearchSettings)) != fixed:
        raise CommandError(
            "translate",
            f"the TFLite model {args.model} searches as fixed at export ({fixed}); export it "
            "again with the search parameters wanted",
        )
    lines = read_input(args.input)
    if args.target_language:
        lines = with_target_language(lines, translator.tokenizer, args.target_language)
    translations, _ = translator.translate(lines)
    write_output(args.output, "".join(text + "\n" for text in translations))


def score(args):
    """the model's log-probability of given translations (forced decoding)"""
    from keras_transformer.decoding.translator import load_run, n_best_text
    from pipelines.corpus import read_aligned_lines

    _, search = task_and_search(args)
    sources, targets = read_aligned_lines(args.source, args.target)
    translator = load_run(args.model, args.weights, ensemble=args.ensemble or ())
    scored = translator.score(sources, targets, search, args.alignments, target_name=args.target)
    write_output(args.output, n_best_text(sources, [[h] for h in scored]))


def write_output(path, text):
    if path:
        path.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def read_input(path):
    """Lines of `path` (plain or .gz), or of stdin; undecodable bytes name the line."""
    from pipelines.corpus import CorpusError, read_lines

    if path:
        return read_lines(path)
    lines = []
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise CorpusError(f"stdin, line {number}: invalid UTF-8 ({error.reason})") from error
    return lines


def run_corpus(args):
    from keras_transformer import run_directory

    return run_directory.run_corpus(args.model, args.data_dir, getattr(args, "dataset", None))


def evaluate(args):
    """sacreBLEU, chrF and tokenized BLEU of a split, or parsing F1 for ptb"""
    from keras_transformer import run_directory
    from keras_transformer.analysis.evaluation import (
        append_record,
        evaluate_corpus,
        evaluation_record,
        tune_alpha,
    )
    from pipelines.datasets import default_split

    run, dataset, _, files = run_corpus(args)
    split = args.split or default_split(dataset)
    split = "validation" if split == "val" else split
    if split not in files:
        raise ConfigError(f"unknown split {split!r}; splits: {sorted(files)}")
    if args.tune_alpha and args.alpha is not None:
        raise ConfigError("tune_alpha chooses alpha: give one or the other")
    task, search = task_and_search(args)
    translator = load_translator(args, args.jit_compile)
    output = args.output or run_directory.evaluation_directory(
        args.model, translator.weights_path, args.ensemble or ()
    )
    if args.tune_alpha:
        alpha, tuned = tune_alpha(
            translator, *files["validation"], output, task, args.tune_alpha, search
        )
        search = search.replace(alpha=alpha)
        print(f"validation: length penalty α {alpha:g} of {args.tune_alpha} scores best")
    if args.tune_alpha and split == "validation":
        scores = tuned  # decoded at the chosen α already
    else:
        scores = evaluate_corpus(translator, *files[split], output, task.score, search)
    languages = f"{run['source_language']}->{run['target_language']}"
    print(f"{split} {languages} beam {search.beam_size}: {task.summary(scores)}")
    if args.record:
        model = {
            "run": str(args.model),
            "weights": str(translator.weights_path),
            "ensemble": [str(path) for path in args.ensemble or ()],
        }
        record = evaluation_record(args.command_line, model, split, search, scores)
        append_record(args.record, record)


def distill(args):
    """a data directory of the training pairs plus their translations by this model or
    ensemble (sequence-level knowledge distillation)"""
    from keras_transformer import run_directory
    from keras_transformer.training.distillation import distill_data_dir, text_to_distill

    _, dataset, data_dir, files = run_corpus(args)
    data_dir, files = text_to_distill(dataset, data_dir, files)
    task, search = task_and_search(args)
    translator = load_translator(args, args.jit_compile)
    teachers = [translator.weights_path, *(args.ensemble or ())]
    distill_data_dir(
        translator,
        files,
        data_dir,
        args.output,
        task.present,
        teachers,
        with_references=not args.translations_only,
        search=search,
    )
    subwords = args.model / run_directory.SUBWORDS_FILE
    student = (
        f"prepare it with --subwords {subwords}, then train a student with --data on that"
        if dataset == "prepared"
        else f"train --data-dir {args.output} --subwords {subwords} trains a student on it"
    )
    print(f"{args.output}: {student} (the teacher's vocabulary)")


def export(args):
    """SavedModel for TF Serving (<output>/<next version>/), TFLite, or CTranslate2"""
    from keras_transformer.export.exporter import ExportOptions, export_size
    from keras_transformer.export.exporter import export as export_translator

    options = ExportOptions(jit_compile=args.jit_compile, **fields_of(args, ExportOptions))
    _, search = task_and_search(args)
    path = export_translator(load_translator(args), args.output, options, search, args.model)
    print(f"exported {path} ({export_size(path) / 2**20:.1f} MiB)")


def serve(args):
    """TF-Serving-compatible REST and gRPC endpoint over export base paths: one model, or a model
    config file's"""
    from keras_transformer.cli.arguments import nested_settings
    from keras_transformer.server.apis.libretranslate import LibreTranslate
    from keras_transformer.server.models.model_config import ModelsToServe
    from keras_transformer.server.models.model_manager import ModelManager
    from keras_transformer.server.page.api_docs import api_docs
    from keras_transformer.server.page.web_page import WebPage
    from keras_transformer.server.server import ModelServer, raise_file_limit
    from keras_transformer.server.settings import ServerSettings

    settings = nested_settings(args, ServerSettings)
    raise_file_limit(settings.network)
    to_serve = ModelsToServe(**fields_of(args, ModelsToServe))
    try:
        models = ModelManager.to_serve(to_serve)
        server = ModelServer(models, settings)
    except (OSError, ValueError) as error:  # no version, none loads, a port taken
        raise CommandError("serve", error) from None
    LibreTranslate.add_to(server, settings.libretranslate)
    if settings.network.ui:
        server.add_routes(WebPage().routes() + api_docs().routes())
    server.start()
    served = ", ".join(f"{model.name} v{model.version}" for model in models.available())
    host = settings.network.host
    print(
        f"serving {served}: http://{host}:{server.rest_port}/v1/models/{to_serve.model_name or ''} "
        f"and gRPC {host}:{server.grpc_port}; Ctrl-C or SIGTERM drains and stops",
        flush=True,
    )
    server.serve_until_signal()


def attention(args):
    """plot attention heads (Figures 3-5)"""
    from keras_transformer.analysis.attention_plot import plot_attention
    from keras_transformer.decoding.translator import load_run

    translator = load_run(args.model, args.weights)
    translation = plot_attention(translator, args.sentence, args.layer, args.output)
    print(f"{args.sentence} -> {translation}\nwrote {args.output}")


def curve(args):
    """plot loss and validation BLEU against minutes"""
    from keras_transformer import run_directory
    from keras_transformer.analysis.learning_curve import plot_learning_curve

    output = args.output or args.run / "learning_curve.png"
    metrics = args.run / run_directory.METRICS_FILE
    print(f"wrote {plot_learning_curve(metrics, output, title=str(args.run))}")
