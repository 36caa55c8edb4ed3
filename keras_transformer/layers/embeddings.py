"""Embeddings and softmax, §3.4.

"We use learned embeddings to convert the input tokens and output tokens to vectors of dimension
d_model ... we share the same weight matrix between the two embedding layers and the pre-softmax
linear transformation ... In the embedding layers, we multiply those weights by √d_model."

`SharedEmbedding` is that one matrix: `call` looks tokens up (×√d_model) and `logits` applies the
transposed matrix as the pre-softmax projection. The paper's projection has no bias; with
`output_bias=True` one is added to the logits, as pretrained Marian models (OPUS-MT) hold one
(`final_logits_bias`).
"""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """A token embedding scaled by √d_model whose transpose also produces the output logits.

    Weights are drawn from N(0, d_model^-1/2), so that after the √d_model scaling the embeddings
    have unit variance, the scale of the sinusoidal encodings they are added to.

    Args:
        vocab_size: number of tokens.
        d_model: embedding width.
        output_bias: add a learned bias `[vocab_size]` (initially 0) to `logits`.

    Call arguments:
        token_ids: int `[batch, length]`.

    Returns:
        `[batch, length, d_model]`.

    Example:
    >>> import numpy as np
    >>> embedding = SharedEmbedding(vocab_size=10, d_model=4)
    >>> hidden = embedding(np.array([[1, 2, 3]]))
    >>> tuple(embedding.logits(hidden).shape)
    (1, 3, 10)
    """

    def __init__(self, vocab_size, d_model, output_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.output_bias = output_bias

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )
        self.logits_bias = (
            self.add_weight(name="logits_bias", shape=(self.vocab_size,), initializer="zeros")
            if self.output_bias
            else None
        )

    def call(self, token_ids):
        embedded = ops.take(self.embeddings, ops.cast(token_ids, "int32"), axis=0)
        return ops.cast(embedded, self.compute_dtype) * math.sqrt(self.d_model)

    def logits(self, hidden):
        """The pre-softmax linear transformation: `[..., d_model]` → float32 `[..., vocab]`.

        Computed in float32 even under mixed precision: the softmax over a large vocabulary is
        where half precision loses the most.
        """
        logits = ops.matmul(
            ops.cast(hidden, "float32"), ops.transpose(ops.cast(self.embeddings, "float32"))
        )
        if self.logits_bias is None:
            return logits
        return logits + ops.cast(self.logits_bias, "float32")

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, d_model=self.d_model, output_bias=self.output_bias
        )
        return config
