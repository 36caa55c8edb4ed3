"""The `keras-transformer` command line: it parses arguments and calls the library, nothing more."""

import argparse
import sys

from keras_transformer.config import PRESETS, TransformerConfig


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
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
