"""Where a training step (or a decoding call) of the peers' workload spends its time: a per-op
profile.

Table: none of its own; `ctranslate2.py --profile` and `alternated.py` use its helpers
(docs/PERFORMANCE.md#ctranslate2-against-our-beam-search).

Trains our Transformer on the peers' batch (as `throughput.py` does), or with `--decode greedy|beam`
decodes their decoding batch with the cache (as `decoding.py` does), records a few steps with
`tf.profiler` while XLA emits one trace event per HLO op, and prints the ops' summed thread time,
grouped by op name with the numeric suffix dropped (`fusion.12` → `fusion`), largest first.
The list also holds the runtime's enclosing events (`ThunkExecutor::Execute`, `EagerExecute`,
...), each spanning the whole step. Read the op names against an HLO dump: `--dump DIR` also
writes the compiled modules there. The profiler's per-op events slow small ops down, so time a
change with `throughput.py`, not with this.

    .venv/bin/python benchmarks/profile_step.py --size small [--steps 4] [--top 25] [--dump DIR]
    .venv/bin/python benchmarks/profile_step.py --decode greedy [--steps 4]   # `small`, batch 32
    .venv/bin/python benchmarks/profile_step.py --decode greedy --decode-batch 16 --slices 1 \
        --intra-op-threads 1          # one slice of the batch alone on one core
    .venv/bin/python benchmarks/profile_step.py --size small --peer tutorial[-dropout-on]
"""

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path


def xla_flags(dump: str | None) -> str:
    flags = [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_enable_xprof_traceme=true"]
    if dump:
        flags += [f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text"]
    return " ".join(flag for flag in flags if flag)


def op_times(logdir: Path) -> collections.Counter:
    """Summed duration (ms) of every host event in the profile, by event name."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = collections.Counter()
    for path in logdir.rglob("*.xplane.pb"):
        space = xplane_pb2.XSpace.FromString(path.read_bytes())
        for plane in space.planes:
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    totals[names.get(event.metadata_id, "?")] += event.duration_ps / 1e9
    return totals


def grouped(totals: collections.Counter) -> collections.Counter:
    groups = collections.Counter()
    for name, ms in totals.items():
        groups[re.sub(r"\.\d+$", "", name)] += ms
    return groups


def training_step(size):
    """One training step of the peers' batch a call."""
    from throughput import compiled_workload_model

    model, dataset = compiled_workload_model(size, jit_compile=True)
    batches = iter(dataset)
    return lambda: model.train_on_batch(*next(batches))


def tutorial_training_step(size, dropout_on):
    """One training step a call of the tensorflow.org tutorial-style peer
    (`../shared/peers/tf_tutorial_style.py`), compiled as its benchmark compiles it, with XLA:
    as shipped (no dropout under Keras 3), or with its dropout on as `tutorial_dropout_on.py`
    runs it."""
    import keras
    from workload import common  # puts the peers' directory on the import path

    # isort: split
    import tf_tutorial_style
    from tutorial_dropout_on import TransformerTrainedWithDropout

    keras.utils.set_random_seed(common.SEED)
    sizes = common.SIZES[size]
    peer_model = TransformerTrainedWithDropout if dropout_on else tf_tutorial_style.Transformer
    model = peer_model(
        enc_layers=sizes["enc_layers"],
        dec_layers=sizes["dec_layers"],
        d_model=sizes["d_model"],
        num_heads=sizes["heads"],
        dff=sizes["d_ff"],
        vocab_size=common.VOCAB,
        dropout_rate=common.DROPOUT,
    )
    return keras_peer_training_step(model)


def keras_peer_training_step(model):
    """One training step a call of a Keras peer's model on the peers' batch, compiled as their
    `keras_common.bench_fit` compiles it (their Adam and smoothed loss), with XLA."""
    import keras_common  # the peers' Keras helpers (their directory is on the import path)

    model.compile(
        optimizer=keras_common.adam(), loss=keras_common.smoothed_sparse_ce, jit_compile=True
    )
    (source, target_in), labels = next(iter(keras_common.train_dataset()))
    return lambda: model.train_on_batch((source, target_in), labels)


def decoding_call(search, batch, slices):
    """One cached decode of the peers' decoding batch (or its first `batch` sentences) a call,
    in `slices` decoded side by side (default: one per core), with the `small` model."""
    import tensorflow as tf
    from decoding import decode_sources, decoder
    from workload import common, workload_config

    from keras_transformer import Transformer

    tf.keras.utils.set_random_seed(common.SEED)
    model = Transformer(workload_config("small"))
    run = decoder(model, 1 if search == "greedy" else 4, True, True, slices)
    source = decode_sources(batch or common.DEC_BATCH)
    return lambda: int(run(source))


def main():
    # This loads TensorFlow before XLA_FLAGS is set below, which is still in time: XLA reads
    # XLA_FLAGS at its first compilation.
    from workload import add_intra_op_threads_option, set_intra_op_threads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=4, help="profiled steps")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--dump", help="also dump the compiled HLO modules here")
    parser.add_argument(
        "--decode", choices=["greedy", "beam"], help="profile decoding (`small`, beam 4) instead"
    )
    parser.add_argument("--decode-batch", type=int, help="sentences decoded a call (default 32)")
    parser.add_argument("--slices", type=int, help="slices side by side (default: one per core)")
    add_intra_op_threads_option(parser)
    parser.add_argument(
        "--peer",
        choices=["tutorial", "tutorial-dropout-on"],
        help="profile this peer's training step instead of ours",
    )
    args = parser.parse_args()
    os.environ["XLA_FLAGS"] = xla_flags(args.dump)

    import tensorflow as tf

    set_intra_op_threads(args)
    if args.decode:
        step = decoding_call(args.decode, args.decode_batch, args.slices)
    elif args.peer:
        step = tutorial_training_step(args.size, dropout_on=args.peer == "tutorial-dropout-on")
    else:
        step = training_step(args.size)
    for _ in range(3):  # compile and warm up
        step()
    logdir = Path(tempfile.mkdtemp(prefix="kt-profile-"))
    tf.profiler.experimental.start(str(logdir))
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    step_ms = 1000 * (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()

    what = f"decode {args.decode}" if args.decode else f"{args.peer or 'ours'} {args.size}"
    summary = f"{what}: {args.steps} steps of {step_ms:.0f} ms, profile in {logdir}"
    print(summary, file=sys.stderr)
    print(f"{'event':<48} {'ms/step':>9}")
    for name, ms in grouped(op_times(logdir)).most_common(args.top):
        print(f"{name[:48]:<48} {ms / args.steps:9.1f}")


if __name__ == "__main__":
    main()
