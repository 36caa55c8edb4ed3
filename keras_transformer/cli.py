"""The `keras-transformer` command line: it parses arguments and calls the library, nothing more."""

import argparse
import logging
import sys
from pathlib import Path

from keras_transformer.config import PRESETS, TransformerConfig

DEFAULT_DATA_DIR = Path("../shared/data/multi30k")


def _params(args):
    from keras_transformer.parameter_count import format_table3

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


def _train(args):
    from keras_transformer.training import TrainingRun, train

    if args.devices and args.devices > 1:
        from keras_transformer.distribution import configure_logical_cpus

        configure_logical_cpus(args.devices)
    config = TransformerConfig.preset(args.preset).with_overrides(args.set)
    if args.batch_tokens:
        config = config.replace(batch_tokens=args.batch_tokens)
    run = TrainingRun(
        output=args.output,
        data_dir=args.data_dir,
        dataset=args.dataset,
        source_language=args.src,
        target_language=args.tgt,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        epochs=args.epochs,
        checkpoint_every=args.checkpoint_every,
        checkpoint_minutes=args.checkpoint_minutes,
        keep_checkpoints=args.keep_checkpoints,
        devices=args.devices,
        precision=args.precision,
        jit_compile=args.jit_compile,
        seed=args.seed,
        deterministic=args.deterministic,
        log_every=args.log_every,
    )
    print(f"final weights: {train(config, run)}")


def _average(args):
    from keras_transformer.checkpoint_averaging import average_last_checkpoints
    from keras_transformer.transformer import Transformer

    config = TransformerConfig.from_json((args.run / "config.json").read_text())
    output = args.output or args.run / f"averaged-last{args.last}.weights.h5"
    used = average_last_checkpoints(
        Transformer(config), args.run / "checkpoints", args.last, output
    )
    print(f"averaged {[p.name for p in used]} into {output}")


def _add_train(commands):
    train = commands.add_parser("train", help="train or resume a run with model.fit")
    train.add_argument("--preset", default="small", choices=sorted(PRESETS))
    train.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    train.add_argument("--dataset", default="multi30k")
    train.add_argument("--src", default="en", help="source language")
    train.add_argument("--tgt", default="de", help="target language")
    train.add_argument("--output", type=Path, required=True, help="run directory")
    train.add_argument("--batch-tokens", type=int, help="tokens per batch and side (§5.1)")
    train.add_argument("--max-steps", type=int)
    train.add_argument("--max-minutes", type=float, help="wall-clock budget of this process")
    train.add_argument("--epochs", type=int, default=1000)
    train.add_argument("--checkpoint-every", type=int, default=500, help="steps")
    train.add_argument("--checkpoint-minutes", type=float)
    train.add_argument("--keep-checkpoints", type=int, default=5)
    train.add_argument("--devices", type=int, help="replicas (logical CPU devices without GPUs)")
    train.add_argument(
        "--precision", default="float32", choices=["float32", "mixed_float16", "mixed_bfloat16"]
    )
    train.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=False)
    train.add_argument(
        "--log-every", type=int, default=50, help="steps between metrics.jsonl lines"
    )
    train.add_argument("--seed", type=int, default=1234)
    train.add_argument("--deterministic", action="store_true", help="deterministic TF ops")
    train.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    train.set_defaults(run=_train)


def _add_average(commands):
    average = commands.add_parser("average", help="average the last checkpoints of a run (§6.1)")
    average.add_argument("run", type=Path, help="run directory")
    average.add_argument("--last", type=int, default=5)
    average.add_argument("--output", type=Path)
    average.set_defaults(run=_average)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description='The Transformer of "Attention Is All You Need" in Keras 3.',
    )
    commands = parser.add_subparsers(dest="command", required=True)

    params = commands.add_parser(
        "params", help="parameter counts of base, big and every Table 3 row beside the paper's"
    )
    params.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary size")
    params.set_defaults(run=_params)

    presets = commands.add_parser("presets", help="list the configuration presets")
    presets.set_defaults(run=_presets)
    _add_train(commands)
    _add_average(commands)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
