"""The `keras-transformer` command line: it parses arguments and calls the library, nothing more."""

import argparse
import logging
import signal
import sys
from pathlib import Path

from keras_transformer import __version__, runtime
from keras_transformer.config import PRESETS, TABLE3_CHANGES, ConfigError, TransformerConfig

# The order of `run_directory.run_weights`.
WEIGHTS_HELP = (
    "weights file (default: the newest averaged*.weights.h5, else model.weights.h5, else the "
    "last checkpoint)"
)


def at_least(minimum: int):
    """An argparse `type`: an int of at least `minimum`, refused by argparse with its value."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value

    return parse


def _params(args):
    from keras_transformer.analysis.parameter_count import format_table3

    print(format_table3(args.vocab_size))


def _presets(args):
    for name in PRESETS:
        config = TransformerConfig.preset(name)
        print(
            f"{name:10s} N={config.num_layers} d_model={config.d_model} d_ff={config.d_ff} "
            f"h={config.num_heads} d_k={config.d_k} d_v={config.d_v} "
            f"P_drop={config.residual_dropout} ε_ls={config.label_smoothing} "
            f"positions={config.positional_encoding}"
        )


def train_config(args) -> TransformerConfig:
    """The preset, changed by its Table 3 row (--variation), then by --set and --batch-tokens."""
    config = TransformerConfig.preset(args.preset)
    if args.variation:
        config = config.variation(args.variation)
    config = config.with_overrides(args.set)
    return config.replace(batch_tokens=args.batch_tokens) if args.batch_tokens else config


def _train(args):
    from keras_transformer.training.distribution import WorkerLostError
    from keras_transformer.training.trainer import TrainingRun, train

    if args.devices and args.devices > 1:
        from keras_transformer.training.distribution import configure_logical_cpus

        configure_logical_cpus(args.devices)
    from pipelines.datasets import default_data_dir, default_languages

    config = train_config(args)
    dataset, data_dir = _training_corpus(args)
    source, target = default_languages(dataset, data_dir)
    run = TrainingRun(
        output=args.output,
        data_dir=data_dir or default_data_dir(dataset),
        dataset=dataset,
        source_language=args.src or source,
        target_language=args.tgt or target,
        lowercase=args.lowercase,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        patience=args.patience,
        epochs=args.epochs,
        checkpoint_every=args.checkpoint_every,
        checkpoint_minutes=args.checkpoint_minutes,
        keep_checkpoints=args.keep_checkpoints,
        devices=args.devices,
        accumulate=args.accumulate,
        skip_bad_batches=args.skip_bad_batches,
        allow_training_changes=args.allow_training_changes,
        precision=args.precision,
        jit_compile=args.jit_compile,
        seed=args.seed,
        subwords=args.subwords,
        deterministic=args.deterministic,
        log_every=args.log_every,
        bleu_every=args.bleu_every or None,
        bleu_sentences=args.bleu_sentences,
    )
    try:
        print(f"final weights: {train(config, run)}")
    except WorkerLostError as error:  # TensorFlow's error, not the user's: no traceback either
        raise SystemExit(f"keras-transformer train: error: {error}") from None


def _prepare(args):
    from pipelines.prepare import corpus_description, prepare
    from pipelines.prepared import summary

    corpus = corpus_description(
        train=args.train,
        tsv=args.tsv,
        tfds_name=args.tfds,
        validation=args.validation,
        test=args.test,
        languages=(args.src_lang, args.tgt_lang),
        tfds_data_dir=args.tfds_data_dir,
        splits=args.splits,
        dataset=args.dataset,
        data_dir=args.data_dir,
    )
    manifest = prepare(
        args.output,
        corpus,
        vocabulary=args.vocabulary,
        vocab_size=args.vocab_size,
        max_length=args.max_length,
        shard_pairs=args.shard_pairs,
        sample_sentences=args.sample_sentences,
        lowercase=args.lowercase,
        subwords=args.subwords,
    )
    print("\n".join(summary(manifest, args.output)))


def _average(args):
    from keras_transformer.training.checkpoint_averaging import average_run

    output, used = average_run(args.run, args.last, args.output)
    print(f"averaged {[p.name for p in used]} into {output}")


def _task(run_dir):
    from keras_transformer.analysis.evaluation import run_task

    return run_task(run_dir)


def _search(args, defaults):
    """The `SearchSettings` of `args`: `defaults` (a `Task`'s) where an option is not given."""
    return defaults.replace(
        beam_size=getattr(args, "beam", None),
        alpha=args.alpha,
        extra_length=getattr(args, "extra_length", None),
        n_best=getattr(args, "n_best", None),
    )


def _load_translator(args, jit_compile=False):
    """The `Translator` of `translate`, `evaluate` and `export` (`--well-formed`: lexicalized
    parsers)."""
    from keras_transformer.decoding.translator import load_run

    return load_run(args.model, args.weights, jit_compile, args.well_formed, args.ensemble or ())


def _translate(args):
    from keras_transformer.decoding.translator import n_best_text

    scoring = _task(args.model)
    translator = _load_translator(args, args.jit_compile)
    lines = _read_input(args.input)
    search = _search(args, scoring.search)
    if args.n_best or args.scores or args.alignments:
        n_best = translator.translate_n_best(lines, search, alignments=args.alignments)
        _write_output(args.output, n_best_text(lines, n_best, scoring.present))
        return
    translations = translator.translate(lines, search)
    text = "".join(scoring.present(s, t) + "\n" for s, t in zip(lines, translations, strict=True))
    _write_output(args.output, text)


def _score(args):
    from keras_transformer.decoding.translator import load_run, n_best_text
    from pipelines.corpus import read_aligned_lines

    search = _search(args, _task(args.model).search)
    sources, targets = read_aligned_lines(args.source, args.target)
    translator = load_run(args.model, args.weights, ensemble=args.ensemble or ())
    scored = translator.score(sources, targets, search, args.alignments, target_name=args.target)
    _write_output(args.output, n_best_text(sources, [[h] for h in scored]))


def _write_output(path, text):
    if path:
        path.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _read_input(path):
    """Lines of `path` (plain or .gz), or of stdin; undecodable bytes name the line."""
    from pipelines.corpus import read_lines

    if path:
        return read_lines(path)
    lines = []
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise SystemExit(f"stdin, line {number}: invalid UTF-8 ({error.reason})") from error
    return lines


def _run_corpus(args):
    from keras_transformer import run_directory

    return run_directory.run_corpus(args.model, args.data_dir, getattr(args, "dataset", None))


def _evaluate(args):
    from keras_transformer import run_directory
    from keras_transformer.analysis.evaluation import evaluate_corpus, tune_alpha
    from pipelines.datasets import default_split

    run, dataset, _, files = _run_corpus(args)
    source, target = run["source_language"], run["target_language"]
    split = args.split or default_split(dataset)
    split = "validation" if split == "val" else split
    if split not in files:
        raise SystemExit(f"unknown split {split!r}; splits: {sorted(files)}")
    scoring = _task(args.model)
    search = _search(args, scoring.search)
    if args.tune_alpha and (args.alpha is not None or search.beam_size < 2):
        raise SystemExit("--tune-alpha needs a beam search (--beam 2 or more) and no --alpha")
    translator = _load_translator(args, args.jit_compile)
    output = args.output or run_directory.evaluation_directory(
        args.model, translator.weights_path, args.ensemble or ()
    )
    if args.tune_alpha:
        alpha, tuned = tune_alpha(
            translator, *files["validation"], output, scoring, args.tune_alpha, search
        )
        search = search.replace(alpha=alpha)
        print(f"validation: length penalty α {alpha:g} of {args.tune_alpha} scores best")
    if args.tune_alpha and split == "validation":
        scores = tuned  # decoded at the chosen α already
    else:
        scores = evaluate_corpus(translator, *files[split], output, scoring.score, search)
    print(f"{split} {source}->{target} beam {search.beam_size}: {scoring.summary(scores)}")


def _distill(args):
    from keras_transformer import run_directory
    from keras_transformer.training.distillation import distill_data_dir, text_to_distill

    _, dataset, data_dir, files = _run_corpus(args)
    data_dir, files = text_to_distill(dataset, data_dir, files)
    if args.output.resolve() == data_dir.resolve():
        raise SystemExit(f"--output {args.output} holds the original data: name a new directory")
    scoring = _task(args.model)
    translator = _load_translator(args, args.jit_compile)
    teachers = [translator.weights_path, *(args.ensemble or ())]
    search = _search(args, scoring.search)
    distill_data_dir(
        translator,
        files,
        data_dir,
        args.output,
        scoring.present,
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


def _attention(args):
    from keras_transformer.analysis.attention_plot import plot_attention
    from keras_transformer.decoding.translator import load_run

    translator = load_run(args.model, args.weights)
    translation = plot_attention(translator, args.sentence, args.layer, args.output)
    print(f"{args.sentence} -> {translation}\nwrote {args.output}")


def _variations(args):
    from keras_transformer.analysis.model_variations import plot_variations, variations_table

    print(variations_table(args.runs, args.rows))
    if args.plot:  # logged, not printed: stdout is the table, which make redirects to a file
        logging.info("wrote %s", plot_variations(args.runs, args.plot, args.rows))


def _curve(args):
    from keras_transformer import run_directory
    from keras_transformer.analysis.learning_curve import plot_learning_curve

    output = args.output or args.run / "learning_curve.png"
    metrics = args.run / run_directory.METRICS_FILE
    print(f"wrote {plot_learning_curve(metrics, output, title=str(args.run))}")


def _export(args):
    if args.format == "ctranslate2":
        return _export_ctranslate2(args)
    if args.quantization:
        raise SystemExit("--quantization applies to --format ctranslate2 (TFLite: --quantize)")
    from keras_transformer.serving.saved_model import export_saved_model
    from keras_transformer.serving.tflite import export_tflite

    if args.jit_compile and args.format == "tflite":
        raise SystemExit("--jit-compile applies to SavedModel exports; LiteRT has no XLA")
    if args.warmup_batch_sizes and not args.jit_compile:
        raise SystemExit("--warmup-batch-sizes needs --jit-compile: only XLA compiles at warm-up")
    search = _search(args, _task(args.model).search)
    translator = _load_translator(args)
    if args.format == "tflite":
        path = export_tflite(
            translator,
            args.output,
            quantize=args.quantize,
            source_length=args.source_length,
            search=search,
        )
    else:
        path = export_saved_model(
            translator, args.output, search, args.jit_compile, args.warmup_batch_sizes or (1,)
        )
    print(f"exported {path}")


def _export_ctranslate2(args):
    """`export --format ctranslate2`: no search to fix, CTranslate2 takes it when it translates."""
    if args.jit_compile:
        raise SystemExit("--jit-compile applies to SavedModel exports; CTranslate2 has no XLA")
    try:
        from keras_transformer.serving.ctranslate2_export import export_ctranslate2
    except ModuleNotFoundError as error:  # ctranslate2: the [ctranslate2] extra
        raise SystemExit(
            f"export --format ctranslate2 needs the ctranslate2 extra ({error}): "
            "pip install 'keras-transformer[ctranslate2]'"
        ) from None
    path = export_ctranslate2(_load_translator(args), args.output, args.quantization)
    print(f"exported {path}")


def _serve(args):
    import signal
    import threading

    try:
        from keras_transformer.serving.batching import BatchingParameters
        from keras_transformer.serving.limits import Limits
        from keras_transformer.serving.server import ModelServer, ServedModel
    except ModuleNotFoundError as error:  # grpc, tensorflow_serving: the [serving] extra
        raise SystemExit(
            f"keras-transformer serve needs the serving extra ({error}): "
            "pip install 'keras-transformer[serving]'"
        ) from None

    try:
        model = ServedModel(args.model_name, args.model_base_path)
        server = ModelServer(
            model,
            args.host,
            args.rest_port,
            args.grpc_port,
            args.max_body_bytes,
            limits=Limits(args.max_sentences_per_request, args.max_source_length),
            batching=BatchingParameters(
                args.enable_batching,
                args.max_batch_size,
                args.batch_timeout_micros,
                args.num_batch_threads,
                args.max_enqueued_batches,
            ),
            rest_api_timeout_in_ms=args.rest_api_timeout_in_ms,
            socket_timeout_s=args.socket_timeout_s,
            poll_seconds=args.file_system_poll_wait_seconds or None,
        ).start()
    except (OSError, ValueError) as error:  # no version, none loads, a port taken
        raise SystemExit(f"keras-transformer serve: error: {error}") from None
    print(
        f"serving {args.model_name} v{model.version}: "
        f"http://{args.host}:{server.rest_port}/v1/models/{args.model_name} "
        f"and gRPC {args.host}:{server.grpc_port}; Ctrl-C or SIGTERM drains and stops",
        flush=True,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    server.drain(args.drain_timeout_s)


def _add_serve_limits(serve):
    """`serve`'s batching, queue, deadline, limit and version-polling flags (TF Serving's names
    where it has them)."""
    batching = serve.add_argument_group("batching (TF Serving's batching parameters)")
    batching.add_argument(
        "--enable-batching",
        action="store_true",
        help="decode concurrent requests together (default: each request on its own)",
    )
    batching.add_argument("--max-batch-size", type=at_least(1), default=32, help="sentences")
    batching.add_argument(
        "--batch-timeout-micros",
        type=at_least(0),
        default=5000,
        help="how long a batch waits for more requests after its first",
    )
    batching.add_argument(
        "--num-batch-threads", type=at_least(1), default=4, help="model calls at once"
    )
    batching.add_argument(
        "--max-enqueued-batches",
        type=at_least(1),
        default=64,
        help="queue bound in batches (a request each without batching); beyond: 503",
    )
    limits = serve.add_argument_group("limits and deadlines")
    limits.add_argument("--max-sentences-per-request", type=at_least(1), default=64)
    limits.add_argument(
        "--max-source-length",
        type=at_least(1),
        default=2048,
        help="UTF-8 bytes of a sentence, or ids of a source_ids row",
    )
    limits.add_argument(
        "--rest-api-timeout-in-ms",
        type=at_least(1),
        default=30_000,
        help="a REST request's deadline (gRPC requests take their RPC's)",
    )
    limits.add_argument(
        "--socket-timeout-s", type=float, default=30.0, help="a stalled REST connection's life"
    )
    limits.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="on SIGTERM or Ctrl-C, how long requests in flight may take to be answered",
    )
    serve.add_argument(
        "--file-system-poll-wait-seconds",
        type=at_least(0),
        default=1,
        help="how often the base path is looked at for a new version; 0: never",
    )


def _add_search_arguments(parser):
    parser.add_argument("--model", type=Path, required=True, help="training run directory")
    parser.add_argument("--weights", type=Path, help=WEIGHTS_HELP)
    parser.add_argument(
        "--beam",
        type=at_least(1),
        help="beam size; 1 decodes greedily (default 4; 21 for ptb, §6.3)",
    )
    parser.add_argument(
        "--alpha", type=float, help="length penalty α (default 0.6, §6.1; 0.3 for ptb, §6.3)"
    )
    parser.add_argument(
        "--extra-length",
        type=at_least(0),
        help="max output = input length + this (default 50, §6.1; 300 for ptb, §6.3)",
    )
    _add_ensemble(parser)
    parser.add_argument(
        "--jit-compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="compile the search with XLA: faster for single sentences and small batches; "
        "without it, sentences leave a batch as they finish, which large batches gain more from",
    )
    _add_well_formed(parser)


def _add_ensemble(parser):
    parser.add_argument(
        "--ensemble",
        type=Path,
        nargs="+",
        metavar="RUN_OR_WEIGHTS",
        help="decode with these models too, averaging the next token's probabilities: run "
        "directories (their default weights) or weights files in them; same subword vocabulary",
    )


def _add_well_formed(parser):
    parser.add_argument(
        "--well-formed",
        action="store_true",
        help="parsing with --tgt lexicalized: search only well-formed trees of the input's words",
    )


def _add_decoding(commands):
    translate = commands.add_parser("translate", help="translate lines of a file or stdin")
    _add_search_arguments(translate)
    translate.add_argument("--input", type=Path, help="text file (plain or .gz); default stdin")
    translate.add_argument("--output", type=Path, help="default stdout")
    output = translate.add_argument_group(
        "n-best output: one line a hypothesis, INDEX ||| TRANSLATION ||| SCORE ||| LOG_PROB "
        "[||| ALIGNMENT] (README, Translation output)"
    )
    output.add_argument(
        "--n-best", type=at_least(1), metavar="K", help="the K best hypotheses (K ≤ --beam)"
    )
    output.add_argument(
        "--scores",
        action="store_true",
        help="the best hypothesis with its score (log P / lp, §6.1) and log-probability",
    )
    output.add_argument(
        "--alignments",
        action="store_true",
        help="add Pharaoh word alignments i-j from the encoder-decoder attention",
    )
    translate.set_defaults(handler=_translate)

    score = commands.add_parser(
        "score", help="the model's log-probability of given translations (forced decoding)"
    )
    score.add_argument("--model", type=Path, required=True, help="training run directory")
    score.add_argument("--weights", type=Path, help=WEIGHTS_HELP)
    _add_ensemble(score)
    score.add_argument("--source", type=Path, required=True, help="sources (plain or .gz)")
    score.add_argument("--target", type=Path, required=True, help="their translations, aligned")
    score.add_argument(
        "--alpha", type=float, help="length penalty α of SCORE (default 0.6, §6.1; 0.3 for ptb)"
    )
    score.add_argument("--alignments", action="store_true", help="add Pharaoh word alignments")
    score.add_argument(
        "--output",
        type=Path,
        help="default stdout; one line a pair: INDEX ||| TARGET ||| SCORE ||| LOG_PROB",
    )
    score.set_defaults(handler=_score)

    evaluate = commands.add_parser(
        "evaluate", help="sacreBLEU, chrF and tokenized BLEU of a split, or parsing F1 for ptb"
    )
    _add_search_arguments(evaluate)
    evaluate.add_argument("--data-dir", type=Path, help="default: the run's data directory")
    evaluate.add_argument("--dataset", help="default: the run's; given, it must be the run's")
    evaluate.add_argument(
        "--split",
        help="default: the dataset's test split (test_2016_flickr; test for ptb and wmt14)",
    )
    evaluate.add_argument(
        "--output", type=Path, help="directory for hypotheses and scores (default RUN/eval/WEIGHTS)"
    )
    evaluate.add_argument(
        "--tune-alpha",
        type=float,
        nargs="+",
        metavar="ALPHA",
        help="decode the validation split with each length penalty α first, and the split with "
        "the one that scores best there (§6.1 chose α on the development set)",
    )
    evaluate.set_defaults(handler=_evaluate)

    distill = commands.add_parser(
        "distill",
        help="a data directory of the training pairs plus their translations by this model or "
        "ensemble (sequence-level knowledge distillation)",
    )
    _add_search_arguments(distill)
    distill.add_argument(
        "--data-dir",
        type=Path,
        help="default: the run's data directory (of a prepared corpus: the text it was prepared "
        "from is distilled)",
    )
    distill.add_argument(
        "--output",
        type=Path,
        required=True,
        help="the new data directory, for train --data-dir or prepare --subwords",
    )
    distill.add_argument(
        "--translations-only",
        action="store_true",
        help="train on the translations alone, without the original pairs",
    )
    distill.set_defaults(handler=_distill)

    export = commands.add_parser(
        "export",
        help="SavedModel for TF Serving (<output>/<next version>/), TFLite, or CTranslate2",
    )
    export.add_argument("--model", type=Path, required=True, help="training run directory")
    export.add_argument("--weights", type=Path, help=WEIGHTS_HELP)
    _add_ensemble(export)
    export.add_argument(
        "--output",
        type=Path,
        required=True,
        help="SavedModel base path, the .tflite file, or the new CTranslate2 directory",
    )
    export.add_argument(
        "--format", choices=["saved_model", "tflite", "ctranslate2"], default="saved_model"
    )
    export.add_argument(
        "--jit-compile",
        action="store_true",
        help="SavedModel: search with XLA, several times faster a request, compiled once per "
        "request shape; TF Serving needs --xla_cpu_compilation_enabled=true",
    )
    export.add_argument(
        "--warmup-batch-sizes",
        type=at_least(1),
        nargs="+",
        metavar="N",
        help="with --jit-compile: the request sizes (sentences) the warm-up compiles at every "
        "width when a server loads the export; default 1. Give a server's batch sizes, e.g. TF "
        "Serving's allowed_batch_sizes: each adds a compilation a width to the load",
    )
    search = export.add_argument_group(
        "search of serving_default, or of the TFLite model (fixed at export)"
    )
    search.add_argument(
        "--beam", type=at_least(1), help="default 4, or 21 for ptb; 1 decodes greedily"
    )
    search.add_argument("--alpha", type=float, help="default 0.6, or 0.3 for ptb")
    search.add_argument("--extra-length", type=at_least(0), help="default 50, or 300 for ptb")
    _add_well_formed(search)
    tflite = export.add_argument_group("tflite")
    tflite.add_argument("--quantize", choices=["dynamic"], help="int8 weights")
    tflite.add_argument(
        "--source-length",
        type=int,
        help="max source subwords with EOS (default 64, or the model's max_length if shorter)",
    )
    ctranslate2 = export.add_argument_group("ctranslate2")
    ctranslate2.add_argument(
        "--quantization",
        help="CTranslate2's weight type: int8, int8_float32, int8_float16, int16, float16, "
        "bfloat16 (default: float32)",
    )
    export.set_defaults(handler=_export)

    serve = commands.add_parser(
        "serve", help="TF-Serving-compatible REST and gRPC endpoint over an export base path"
    )
    serve.add_argument("--model-name", required=True)
    serve.add_argument("--model-base-path", type=Path, required=True)
    serve.add_argument("--rest-port", type=int, default=8501)
    serve.add_argument("--grpc-port", type=int, default=8500)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    serve.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    _add_serve_limits(serve)
    serve.set_defaults(handler=_serve)

    attention = commands.add_parser("attention", help="plot attention heads (Figures 3-5)")
    attention.add_argument("--model", type=Path, required=True, help="training run directory")
    attention.add_argument("--weights", type=Path, help=WEIGHTS_HELP)
    attention.add_argument("--sentence", required=True)
    attention.add_argument("--layer", type=int, default=-1, help="layer index (default: last)")
    attention.add_argument("--output", type=Path, default=Path("attention.png"))
    attention.set_defaults(handler=_attention)

    curve = commands.add_parser("curve", help="plot loss and validation BLEU against minutes")
    curve.add_argument("run", type=Path, help="training run directory")
    curve.add_argument("--output", type=Path, help="PNG (default RUN/learning_curve.png)")
    curve.set_defaults(handler=_curve)


def _training_corpus(args):
    """(dataset, data directory or None) of `train`: `--data DIR` is a prepared corpus."""
    if args.data and (args.data_dir or args.dataset):
        raise SystemExit("train --data DIR (a prepared corpus) takes no --data-dir or --dataset")
    if args.data:
        return "prepared", args.data
    return args.dataset or "multi30k", args.data_dir


def _add_train(commands):
    train = commands.add_parser("train", help="train or resume a run with model.fit")
    train.add_argument("--preset", default="small", choices=sorted(PRESETS))
    train.add_argument(
        "--variation",
        choices=sorted(TABLE3_CHANGES),
        help="change the preset as this Table 3 row changes base (§6.2), e.g. A-h1",
    )
    train.add_argument(
        "--data-dir",
        type=Path,
        help="default: ../shared/data/multi30k, or ptb_sample for ptb; wmt14 needs one",
    )
    train.add_argument(
        "--dataset",
        help="multi30k (default), wmt14 (through TFDS into --data-dir), or ptb for parsing (§6.3)",
    )
    train.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="a corpus of any language pair that `keras-transformer prepare` wrote: its shards "
        "are streamed, its languages and vocabulary used",
    )
    train.add_argument("--src", help="source language (default: en; words for ptb; --data's)")
    train.add_argument("--tgt", help="target language (default: de; tree for ptb; --data's)")
    train.add_argument("--output", type=Path, required=True, help="run directory")
    train.add_argument(
        "--lowercase",
        action="store_true",
        help="case-fold all text (in the vocabulary model); BLEU is then scored case-insensitively",
    )
    train.add_argument(
        "--subwords",
        type=Path,
        metavar="FILE",
        help="a subword model to use rather than learn one from the training split: a teacher "
        "run's subwords.model for a student on distilled data, or one file for every worker",
    )
    train.add_argument("--batch-tokens", type=int, help="tokens per batch and side (§5.1)")
    train.add_argument("--max-steps", type=int)
    train.add_argument("--max-minutes", type=float, help="wall-clock budget of this process")
    train.add_argument(
        "--patience",
        type=int,
        help="stop after N epochs without a lower validation loss (resumed runs included)",
    )
    train.add_argument("--epochs", type=int, default=1000)
    train.add_argument("--checkpoint-every", type=int, default=500, help="steps")
    train.add_argument("--checkpoint-minutes", type=float)
    train.add_argument("--keep-checkpoints", type=int, default=5)
    train.add_argument("--devices", type=int, help="replicas (logical CPU devices without GPUs)")
    train.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="micro-batches per update: the same --batch-tokens per update in 1/N the memory",
    )
    train.add_argument(
        "--skip-bad-batches",
        type=int,
        default=0,
        metavar="N",
        help="skip up to N batches whose gradient norm is NaN or infinite (logged, and counted in "
        "metrics.jsonl), as fairseq does, before stopping as diverged (default 0: none)",
    )
    train.add_argument(
        "--allow-training-changes",
        action="store_true",
        help="resume with changed batch tokens, dropout or label smoothing (recorded in run.json)",
    )
    train.add_argument(
        "--precision", default="float32", choices=["float32", "mixed_float16", "mixed_bfloat16"]
    )
    train.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=False)
    train.add_argument(
        "--backend",
        choices=runtime.BACKENDS,
        help="Keras's backend (default: $KERAS_BACKEND, else tensorflow); jax trains the same "
        "model on JAX, fed by the same tf.data pipeline, and writes the same checkpoints",
    )
    train.add_argument(
        "--log-every", type=int, default=50, help="steps between metrics.jsonl lines"
    )
    train.add_argument(
        "--bleu-every",
        type=int,
        default=1000,
        help="steps between greedy validation BLEU, or F1 for ptb (0: never)",
    )
    train.add_argument(
        "--bleu-sentences", type=int, default=200, help="validation sentences to score"
    )
    train.add_argument("--seed", type=int, default=1234)
    train.add_argument("--deterministic", action="store_true", help="deterministic TF ops")
    train.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    train.set_defaults(handler=_train)


def _add_average(commands):
    average = commands.add_parser("average", help="average the last checkpoints of a run (§6.1)")
    average.add_argument("run", type=Path, help="run directory")
    average.add_argument("--last", type=at_least(1), default=5)
    average.add_argument("--output", type=Path)
    average.set_defaults(handler=_average)


def split_names(text: str) -> dict[str, str]:
    """An argparse `type`: "train=train,validation=newstest2013" → {"train": "train", ...}."""
    names = dict(item.partition("=")[::2] for item in text.split(","))
    if not all(names) or not all(names.values()):
        raise argparse.ArgumentTypeError(f"{text!r} is not SPLIT=TFDS_SPLIT[,...]")
    return names


def _add_prepare(commands):
    prepare = commands.add_parser(
        "prepare",
        help="tokenize a parallel corpus once into sharded TFRecord files that training streams",
    )
    source = prepare.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--train",
        nargs=2,
        type=Path,
        metavar=("SRC", "TGT"),
        help="aligned training files, one sentence a line, plain or .gz; any language pair",
    )
    source.add_argument("--tsv", type=Path, metavar="FILE", help="training pairs: SRC<TAB>TGT")
    source.add_argument(
        "--tfds", metavar="NAME[/CONFIG]", help="a TensorFlow Datasets translation dataset"
    )
    source.add_argument(
        "--dataset",
        help="multi30k, wmt14 or ptb, as `train --dataset` reads them, with their splits",
    )
    for split in ("validation", "test"):
        prepare.add_argument(
            f"--{split}",
            nargs="+",
            type=Path,
            metavar="FILE",
            help=f"{split} files: SRC TGT with --train, one TSV file with --tsv",
        )
    prepare.add_argument("--tfds-data-dir", type=Path, help="where TFDS keeps its datasets")
    prepare.add_argument("--data-dir", type=Path, help="--dataset: where it is (or goes)")
    prepare.add_argument(
        "--splits",
        type=split_names,
        metavar="SPLIT=TFDS_SPLIT,...",
        help="--tfds: the splits to prepare, by TFDS name (default train, and validation and "
        "test where it has them)",
    )
    prepare.add_argument("--src-lang", help="source language: a label; for --tfds, its feature")
    prepare.add_argument("--tgt-lang", help="target language: a label; for --tfds, its feature")
    prepare.add_argument("--output", type=Path, required=True, help="the prepared directory")
    prepare.add_argument(
        "--vocabulary",
        choices=["bpe", "unigram", "word", "wordpiece"],
        help="default bpe (§5.1), or word for ptb (§6.3's word vocabulary)",
    )
    prepare.add_argument("--vocab-size", type=at_least(8), default=8000)
    prepare.add_argument(
        "--max-length",
        type=at_least(2),
        default=256,
        help="drop (and count) pairs with a longer side, EOS included",
    )
    prepare.add_argument(
        "--shard-pairs", type=at_least(1), default=100_000, help="pairs read into one shard"
    )
    prepare.add_argument(
        "--sample-sentences",
        type=at_least(2),
        default=1_000_000,
        help="the vocabulary learns from a random sample of this many training sentences",
    )
    prepare.add_argument(
        "--lowercase", action="store_true", help="a case-folding vocabulary (bpe or unigram)"
    )
    prepare.add_argument(
        "--subwords",
        type=Path,
        metavar="FILE",
        help="a SentencePiece model to use rather than learn one: a teacher run's subwords.model "
        "for the pairs it distilled, which its student resumes on",
    )
    prepare.set_defaults(handler=_prepare)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description='The Transformer of "Attention Is All You Need" in Keras 3.',
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    params = commands.add_parser(
        "params", help="parameter counts of base, big and every Table 3 row beside the paper's"
    )
    params.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary size")
    params.set_defaults(handler=_params)

    presets = commands.add_parser("presets", help="list the configuration presets")
    presets.set_defaults(handler=_presets)
    variations = commands.add_parser(
        "variations", help="Table 3 rows tried on a recipe (make table3-multi30k) as a table"
    )
    variations.add_argument("runs", type=Path, help="holds recipe/ and one run per row")
    variations.add_argument("--rows", nargs="+", default=None, choices=sorted(TABLE3_CHANGES))
    variations.add_argument(
        "--plot", type=Path, help="also draw the differences and validation curves into this PNG"
    )
    variations.set_defaults(handler=_variations)
    _add_prepare(commands)
    _add_train(commands)
    _add_average(commands)
    _add_decoding(commands)
    for command in commands.choices.values():
        command.add_argument(
            "--verbose",
            action="store_true",
            help="show TensorFlow's start-up messages and its INFO log records",
        )
    return parser


def _user_errors():
    """Errors in what the user gave (options, data, checkpoints): their message says it all."""
    from durable_files import WriteError
    from keras_transformer import run_directory
    from pipelines.corpus import CorpusError

    return (
        ConfigError,
        CorpusError,
        run_directory.CheckpointError,
        run_directory.DivergenceError,
        WriteError,
    )


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
        raise SystemExit(f"keras-transformer {args.command}: error: {error}") from None
    runtime.configure(quiet=not args.verbose)
    # Past a file-size limit, a write fails (EFBIG: a WriteError naming the file) rather than
    # the process being killed.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_tensorflow_info()
    try:
        args.handler(args)
    except _user_errors() as error:  # evaluated only once something is raised: no import cost
        raise SystemExit(f"keras-transformer {args.command}: error: {error}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
