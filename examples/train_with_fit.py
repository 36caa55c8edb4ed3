"""Train a Transformer with your own `model.fit`, then export it for TensorFlow Serving.

A plain Keras script on keras-transformer's public API (`keras-transformer train` adds run
directories, resumption and BLEU): a preset `TransformerConfig`; the token-budget `tf.data`
batches of `pipelines` on Multi30k, English to German; the `Transformer` with Adam on the
learning-rate schedule of Eq. 3 and the label-smoothed loss (§5.3, §5.4); `model.fit` under a
`tf.distribute.MirroredStrategy` (every local GPU, or the CPU); then a SavedModel version that
translates raw strings. The vocabulary is learned on the first run and kept in
`<output>/subwords.model`; each run exports the next version, `<output>/<n>/`.

    python examples/train_with_fit.py --preset small --steps 1000 --epochs 10
    python examples/train_with_fit.py --preset tiny --steps 3 --epochs 1 --output /tmp/export
"""

import argparse
from pathlib import Path

from keras_transformer import runtime

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--preset", default="small", help="a TransformerConfig preset")
parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
parser.add_argument("--output", type=Path, default=Path("saved_models/example"))
parser.add_argument("--steps", type=int, default=1000, help="steps per epoch")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-tokens", type=int, help="tokens a batch (default: the preset's)")
args = parser.parse_args()

runtime.configure()  # TensorFlow's process settings, before it is imported

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import (  # noqa: E402
    LabelSmoothedCrossEntropy,
    MaskedAccuracy,
    Transformer,
    TransformerConfig,
    TransformerSchedule,
    Translator,
    export_saved_model,
)
from pipelines import corpus_files, load_or_train_tokenizer, make_translation_dataset  # noqa: E402
from pipelines.batching import BatchingSettings  # noqa: E402

config = TransformerConfig.preset(args.preset)
if args.batch_tokens:
    config = config.replace(batch_tokens=args.batch_tokens)
keras.utils.set_random_seed(1234)

# One vocabulary shared by both languages (§5.1), learned on the training files.
files = corpus_files("multi30k", args.data_dir, "en", "de")  # {split: (source, target)}
tokenizer = load_or_train_tokenizer(
    args.output / "subwords.model", files["train"], config.vocab_size
)


def dataset(split):
    # Elements ((source_ids, target_in_ids), target_out_ids), batched by token budget.
    training = split == "train"
    return make_translation_dataset(
        *files[split],
        tokenizer,
        BatchingSettings(
            config.batch_tokens,
            config.max_length,
            shuffle=training,
            seed=1234,
            repeat=training,  # endless: steps_per_epoch says where an epoch ends
        ),
    )


strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = Transformer(config)
    schedule = TransformerSchedule(config.d_model, config.warmup_steps, config.learning_rate_scale)
    optimizer = keras.optimizers.Adam(
        schedule, beta_1=config.adam_beta_1, beta_2=config.adam_beta_2, epsilon=config.adam_epsilon
    )
    loss = LabelSmoothedCrossEntropy(config.label_smoothing)
    model.compile(optimizer, loss, metrics=[MaskedAccuracy()])

# One pass over the validation pairs, its length stated so that Keras does not report the end
# of the data as "ran out of data".
validation = dataset("validation")
batches = int(validation.reduce(0, lambda count, _: count + 1))
validation = validation.apply(tf.data.experimental.assert_cardinality(batches))
model.fit(
    dataset("train"),
    validation_data=validation,
    steps_per_epoch=args.steps,
    epochs=args.epochs,
    shuffle=False,  # the pipeline shuffles the pairs; Keras cannot shuffle a tf.data.Dataset
)

translator = Translator(model, tokenizer)
exported = export_saved_model(translator, args.output)
print(f"exported {exported}")
sentence = "A man in a blue shirt is riding a bicycle down the street."
print(f"{sentence} -> {translator.translate([sentence])[0]}")
