"""The tutorial-style peer (`../shared/peers/tf_tutorial_style.py`) trained with its dropout on.

Table: docs/PERFORMANCE.md#speed-against-peers (the peer with its dropout on).

Its `Transformer.call(self, inputs)` takes no `training` argument, as on tensorflow.org. Keras 3's
`fit` passes `training=True` only to a model whose `call` takes it, so the peer's `fit` runs
every Dropout layer in inference mode: its benchmark trains with no dropout at all, where the
workload says 0.1 (its compiled step holds no random-number op; docs/PERFORMANCE.md). Keras 2 set
the training phase for nested layers either way, which is why the tutorial never needed the
argument.

This runs the peer's own benchmark, unchanged except that its model's `call` takes `training`
(and passes nothing on: Keras hands the flag to the nested layers itself), and records it as
variant "<variant>, dropout on". Arguments are the peer's:

    .venv/bin/python benchmarks/tutorial_dropout_on.py --size small --jit --no-decode --out F
"""

import os

# `workload` imports our package, which would give the peer our CPU allocator
# (keras_transformer/runtime.py): it keeps TensorFlow's default, as the peer ships, so that
# only dropout differs from the peer's own run.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "false")

from workload import PEER_VARIANT_SUFFIX  # noqa: E402  (and the peers' directory on the path)

# isort: split
import common
import tf_tutorial_style


class TransformerTrainedWithDropout(tf_tutorial_style.Transformer):
    """The peer's model with a `call` that Keras 3's `fit` passes `training=True`."""

    def call(self, inputs, training=None):
        return super().call(inputs)


def base_record_dropout_on(peer, variant, size, extra=None, *, base_record=common.base_record):
    return base_record(peer, variant + PEER_VARIANT_SUFFIX, size, extra)


def main():
    probe = TransformerTrainedWithDropout(
        enc_layers=1, dec_layers=1, d_model=8, num_heads=1, dff=8, vocab_size=16
    )
    # What Keras's train step checks before it passes training=True.
    assert probe._call_has_training_arg, "Keras would still call the model without training=True"
    tf_tutorial_style.Transformer = TransformerTrainedWithDropout
    common.base_record = base_record_dropout_on
    tf_tutorial_style.main()


if __name__ == "__main__":
    main()
