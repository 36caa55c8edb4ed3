"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in
Keras 3, with the tools to train, decode, evaluate and serve it.

The public API of a `model.fit` script (examples/train_with_fit.py):

    from keras_transformer import (
        LabelSmoothedCrossEntropy, Transformer, TransformerConfig, TransformerSchedule,
        Translator, export_saved_model)

Packages by role, each importing only those below it (docs/DESIGN.md; tests/test_architecture.py
holds the contract):

    cli             the `keras-transformer` command: parses and calls
    server          the TF-Serving-compatible server, LibreTranslate's API and the web page
    export          SavedModel, TFLite and CTranslate2 exports, the version layout, model info
    training        `model.fit` under a tf.distribute strategy or on JAX (§5), callbacks, averaging
    analysis        BLEU / F1 scoring, learning curves, attention plots, Table 3, parameters
    decoding        greedy and beam search on the cache (§6.1), ensembles, `Translator`
    parsing         constituency parsing (§6.3): tree scoring, EVALB, the PCFG baseline
    run_directory   every file of a training run
    model           the `Transformer` (§3)
    objectives      the loss (§5.4), token metrics, the schedule of Eq. 3 (§5.3)
    layers          one Keras layer per concept of §3
    config          `TransformerConfig` and its presets
    runtime         Keras's backend, TensorFlow/XLA process settings, applied by the CLI
    keras_internals every private Keras/TensorFlow API used, and why; a test checks them

Importing the package has no side effects and loads no framework: the names below are imported
on first use.
"""

import importlib

__version__ = "0.2.0"

_PUBLIC = {
    "PRESETS": "keras_transformer.config",
    "ConfigError": "keras_transformer.config",
    "TransformerConfig": "keras_transformer.config",
    "Transformer": "keras_transformer.model",
    "TransformerSchedule": "keras_transformer.objectives.schedule",
    "ConstantSchedule": "keras_transformer.objectives.schedule",
    "create_optimizer": "keras_transformer.training.optimizer",
    "LabelSmoothedCrossEntropy": "keras_transformer.objectives.losses",
    "MaskedAccuracy": "keras_transformer.objectives.metrics",
    "Perplexity": "keras_transformer.objectives.metrics",
    "Translator": "keras_transformer.decoding.translator",
    "load_run": "keras_transformer.decoding.translator",
    "export_saved_model": "keras_transformer.export.saved_model",
    "export_tflite": "keras_transformer.export.tflite",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])
