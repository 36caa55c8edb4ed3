"""Attention masks (§3.2.3): padding masks and the decoder's causal mask.

Every mask is boolean, `True` where attention is allowed, and broadcastable to the attention
scores `[batch, heads, query_length, key_length]`.

Example:
>>> import numpy as np
>>> ids = np.array([[5, 6, 0]])
>>> ops.convert_to_numpy(padding_mask(ids))
array([[ True,  True, False]])
>>> ops.convert_to_numpy(causal_mask(3)).astype(int)
array([[1, 0, 0],
       [1, 1, 0],
       [1, 1, 1]])
"""

from keras import ops

# The tokenizer's PAD id (`pipelines.tokenizer.PAD_ID`, which a test holds equal): not imported
# from there, since that module needs TensorFlow and this one is backend-neutral.
PAD_ID = 0


def padding_mask(token_ids, pad_id=PAD_ID):
    """`[batch, length]` bool: `True` at real tokens, `False` at padding."""
    return ops.not_equal(token_ids, pad_id)


def causal_mask(length):
    """`[length, length]` bool: position i may attend to positions j <= i (§3.2.3)."""
    positions = ops.arange(length)
    return ops.greater_equal(positions[:, None], positions[None, :])


def key_padding_attention_mask(key_padding_mask):
    """`[batch, 1, 1, key_length]`: every query may attend to every real key."""
    return key_padding_mask[:, None, None, :]


def decoder_self_attention_mask(target_padding_mask):
    """`[batch, 1, target_length, target_length]`: causal and not onto padding."""
    length = ops.shape(target_padding_mask)[1]
    return ops.logical_and(
        causal_mask(length)[None, None, :, :], key_padding_attention_mask(target_padding_mask)
    )


def decode_step_attention_mask(step, cache_length):
    """`[1, 1, 1, cache_length]`: at `step`, the positions written so far, 0..step."""
    return (ops.arange(cache_length) <= step)[None, None, None, :]
