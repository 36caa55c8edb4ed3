"""Fine-tune an imported OPUS-MT (Marian) model with your own `model.fit` on in-domain pairs.

A plain Keras script on keras-transformer's public API (the command's `train --init-from` does
the same with run directories, resumption and BLEU): the `Transformer` of a run directory
that the importer wrote from a pretrained Marian checkpoint (its config.json and
model.weights.h5) and its two tokenizers over one vocabulary (`MarianTokenizer`: source.spm,
target.spm, vocabulary.txt); the token-budget `tf.data` batches of `pipelines` on Multi30k,
English to German, as the in-domain corpus; Adam at a constant learning rate after a short
linear warmup (`ConstantSchedule`: Eq. 3 peaks near 7e-4 for base, a rate that would undo the
pretraining) with the label-smoothed loss (§5.4); `model.fit`. The in-domain validation loss is
printed before and after. The fine-tuned weights are saved beside a copy of the run's other
files, a run directory that `translate`, `evaluate`, `export` and `serve` take as they take the
imported one.

Import the model first (`import` writes runs/opus-mt-en-de), then:

    python examples/finetune_opus_mt.py --model runs/opus-mt-en-de --output runs/en-de-multi30k
"""

import argparse
from pathlib import Path

from keras_transformer import runtime

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--model", type=Path, required=True, help="the imported run directory")
parser.add_argument("--output", type=Path, required=True, help="the fine-tuned run directory")
parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
parser.add_argument("--src", default="en", help="the model's source language, in Multi30k")
parser.add_argument("--tgt", default="de", help="the model's target language, in Multi30k")
parser.add_argument("--steps", type=int, default=500, help="steps per epoch")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--learning-rate", type=float, default=5e-5)
parser.add_argument("--warmup", type=int, default=100, help="updates of linear warmup")
parser.add_argument("--batch-tokens", type=int, default=4096, help="tokens a batch and side")
args = parser.parse_args()

runtime.configure()  # TensorFlow's process settings, before it is imported

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import (  # noqa: E402
    ConstantSchedule,
    LabelSmoothedCrossEntropy,
    MaskedAccuracy,
    Transformer,
    TransformerConfig,
    Translator,
)
from keras_transformer.run_directory import copy_atomically, save_weights_atomically  # noqa: E402
from pipelines import MarianTokenizer, corpus_files, make_translation_dataset  # noqa: E402
from pipelines.batching import BatchingSettings  # noqa: E402

keras.utils.set_random_seed(1234)
config = TransformerConfig.from_file(args.model / "config.json")
model = Transformer(config)
model.load_weights(args.model / "model.weights.h5")
# Sources through source.spm, targets through target.spm, into the one shared vocabulary.
tokenizer = MarianTokenizer(args.model)

files = corpus_files("multi30k", args.data_dir, args.src, args.tgt)  # {split: (source, target)}


def dataset(split):
    # Elements ((source_ids, target_in_ids), target_out_ids), batched by token budget.
    training = split == "train"
    batches = make_translation_dataset(
        *files[split],
        tokenizer,
        BatchingSettings(
            args.batch_tokens,
            config.max_length,
            shuffle=training,
            seed=1234,
            repeat=training,  # endless: steps_per_epoch says where an epoch ends
        ),
    )
    if training:
        return batches
    # One pass, its length stated so that Keras does not report its end as "ran out of data".
    count = int(batches.reduce(0, lambda count, _: count + 1))
    return batches.apply(tf.data.experimental.assert_cardinality(count))


optimizer = keras.optimizers.Adam(
    ConstantSchedule(args.learning_rate, args.warmup),
    beta_1=config.adam_beta_1,
    beta_2=config.adam_beta_2,
    epsilon=config.adam_epsilon,
)
loss = LabelSmoothedCrossEntropy(config.label_smoothing)
model.compile(optimizer, loss, metrics=[MaskedAccuracy()])

validation = dataset("validation")
before = model.evaluate(validation, verbose=0, return_dict=True)["loss"]
model.fit(
    dataset("train"),
    validation_data=validation,
    steps_per_epoch=args.steps,
    epochs=args.epochs,
    shuffle=False,  # the pipeline shuffles the pairs; Keras cannot shuffle a tf.data.Dataset
)
after = model.evaluate(validation, verbose=0, return_dict=True)["loss"]
print(f"in-domain validation loss: {before:.4f} before, {after:.4f} after fine-tuning")

# The imported run's files (configuration, settings, tokenizers), then the new weights.
args.output.mkdir(parents=True, exist_ok=True)
for path in args.model.iterdir():
    if path.is_file() and not path.name.endswith(".weights.h5"):
        copy_atomically(path, args.output / path.name)
save_weights_atomically(model, args.output / "model.weights.h5")
print(f"saved {args.output / 'model.weights.h5'}")
sentence = "A man in a blue shirt is riding a bicycle down the street."
print(f"{sentence} -> {Translator(model, tokenizer).translate([sentence])[0]}")
