import numpy as np
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.masks import (
    causal_mask,
    decode_step_attention_mask,
    decoder_self_attention_mask,
    key_padding_attention_mask,
    padding_mask,
)


def test_padding_mask_marks_real_tokens():
    ids = np.array([[4, 5, 2, 0], [7, 2, 0, 0]])
    np.testing.assert_array_equal(
        ops.convert_to_numpy(padding_mask(ids)), [[1, 1, 1, 0], [1, 1, 0, 0]]
    )


def test_the_masks_pad_id_is_the_tokenizers():
    from pipelines import tokenizer

    assert masks.PAD_ID == tokenizer.PAD_ID


def test_causal_mask_is_lower_triangular():
    np.testing.assert_array_equal(ops.convert_to_numpy(causal_mask(4)), np.tril(np.ones((4, 4))))


def test_decoder_self_attention_mask_combines_causality_and_padding():
    ids = np.array([[1, 5, 0]])
    mask = ops.convert_to_numpy(decoder_self_attention_mask(padding_mask(ids)))
    assert mask.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(mask[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])


def test_key_padding_mask_broadcasts_over_heads_and_queries():
    mask = ops.convert_to_numpy(key_padding_attention_mask(padding_mask(np.array([[3, 0]]))))
    assert mask.shape == (1, 1, 1, 2)
    np.testing.assert_array_equal(mask[0, 0, 0], [1, 0])


def test_decode_step_mask_admits_positions_up_to_step():
    np.testing.assert_array_equal(
        ops.convert_to_numpy(decode_step_attention_mask(2, 5))[0, 0, 0], [1, 1, 1, 0, 0]
    )
