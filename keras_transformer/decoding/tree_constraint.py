"""Searching only well-formed trees of the input's words, for a lexicalized parsing target.

Beyond the paper. §6.3 decodes parse trees freely, as translations are; a decoded string that is
not a tree of the sentence is repaired afterwards (`pipelines.ptb.repair`). With the lexicalized
target (`(S (NP Ms. Haag ) (VP plays ) . )`: every leaf is the input word itself, one id per
word in the shared word vocabulary) the search can instead be kept to prefixes of well-formed
trees, so that nothing needs repair: after each prefix the only tokens allowed are

- an opening bracket `(X`, while words remain to be written and the hypothesis' length limit
  still leaves room to write them, close every bracket and end (a model may otherwise nest
  brackets until the limit, as an untrained one does);
- the next input word (its source id: source and target share the vocabulary), inside the root,
  with the probability the model gives to writing any word there: EVALB scores the brackets,
  not which word a leaf copies, and a decoder that would write a wrong word here (or skip one)
  still says that a leaf comes next;
- `)`, closing a constituent that holds something, the root only after the last word;
- EOS, once the root is closed and every word written.

Every other token's log-probability is set to `NEG_INF`, so the search renormalizes over the
allowed ones (as the searches do for PAD and BOS, `decoding.NEVER_GENERATED`). The state of each
hypothesis (words written, brackets open) travels in the search's cache, so beam search reorders
it with the hypotheses and greedy search carries it along.

Example:
>>> import numpy as np
>>> from keras_transformer import Transformer, TransformerConfig
>>> from keras_transformer.decoding.search import greedy_decode
>>> model = Transformer(TransformerConfig.preset("tiny"))
>>> trees = WellFormedTrees(open_ids=[5, 6], close_id=4)
>>> ids = greedy_decode(model, np.array([[9, 8, 2]]), extra_length=20, constraint=trees).ids
>>> trees.is_well_formed(ids[0].numpy().tolist(), words=[9, 8])
True
"""

import numpy as np
import tensorflow as tf

from keras_transformer.decoding.beam_search import FIXED, NEG_INF
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

SPECIAL_IDS = (PAD_ID, BOS_ID, EOS_ID)


class WellFormedTrees:
    """The constraint `search.greedy_decode` and `search.beam_decode` take as `constraint`.

    Args:
        open_ids: the ids of the opening brackets (`(S`, `(NP`, ...).
        close_id: the id of `)`.
    """

    def __init__(self, open_ids, close_id):
        self.open_ids = sorted(set(open_ids))
        self.close_id = close_id
        if close_id in self.open_ids or not self.open_ids:
            raise ValueError(f"need opening brackets apart from `)`: {self.open_ids}, {close_id}")

    @classmethod
    def from_tokenizer(cls, tokenizer):
        """Finds the brackets in a word vocabulary (`pipelines.ptb`'s symbols, one id each)."""
        pieces = [p.lstrip("▁") for p in tokenizer.pieces(range(tokenizer.vocab_size))]
        if ")" not in pieces:
            raise ValueError(f"{tokenizer.path} has no `)` token: is it a parser's vocabulary?")
        opens = [i for i, p in enumerate(pieces) if p.startswith("(") and len(p) > 1]
        return cls(opens, pieces.index(")"))

    def is_well_formed(self, ids, words) -> bool:
        """Whether `ids` (EOS and PAD after it allowed) is a tree whose leaves are `words`."""
        ids = ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
        depth, leaves, after_open = 0, [], False
        for position, token in enumerate(ids):
            if token in self.open_ids:
                if position > 0 and depth == 0:
                    return False  # a second root
                depth, after_open = depth + 1, True
                continue
            if token == self.close_id:
                if depth == 0 or after_open:
                    return False
                depth -= 1
            elif depth == 0:
                return False  # a word outside the root
            else:
                leaves.append(token)
            after_open = False
        return depth == 0 and leaves == list(words) and bool(ids)

    def __call__(self, symbols_to_logits, cache, source_ids, max_lengths):
        """Wraps a search's step function.

        Args:
            symbols_to_logits, cache: the search's step function and its initial cache.
            source_ids: int `[rows, source_length]`, one row per hypothesis.
            max_lengths: int `[rows]`, the most tokens (EOS included) each may have.

        Returns:
            The constrained `symbols_to_logits` and its initial cache.
        """
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        rows = tf.shape(source_ids)[0]
        word_counts = tf.reduce_sum(tf.cast(~_is_special(source_ids), tf.int32), axis=1)
        state = (tf.zeros([rows], tf.int32), tf.zeros([rows], tf.int32))
        sentence = (source_ids, word_counts, tf.cast(max_lengths, tf.int32))

        def constrained(ids, step, cache):
            (written, depth), sentence, inner = cache  # `written`, `depth`: before `ids`
            source_ids, word_counts, max_lengths = sentence
            opened, closed = self._is_open(ids), ids == self.close_id
            written += tf.cast(self._is_leaf(ids), tf.int32)
            depth += tf.cast(opened, tf.int32) - tf.cast(closed, tf.int32)
            logits, inner = symbols_to_logits(ids, step, inner)
            vocabulary, opens, leaves = self._vocabulary_masks(logits.shape[-1])
            last_word = tf.shape(source_ids)[1] - 1
            next_word = tf.gather(source_ids, tf.minimum(written, last_word), batch_dims=1)
            words_left = word_counts - written
            # Room left after the next token; an opening bracket then needs one per word left,
            # depth + 1 closing brackets and EOS.
            room = max_lengths - (step + 1)
            is_next_word = vocabulary == next_word[:, None]
            allowed = self._allowed(
                vocabulary=vocabulary,
                opens=opens,
                is_next_word=is_next_word,
                may_open=(words_left > 0) & (room >= words_left + depth + 2),
                may_write=(words_left > 0) & (depth > 0),
                may_close=~opened & ((depth > 1) | ((depth == 1) & (words_left == 0))),
                may_end=(depth == 0) & (words_left == 0),
            )
            log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
            leaf = tf.reduce_logsumexp(tf.where(leaves, log_probs, NEG_INF), -1)
            log_probs = tf.where(is_next_word, leaf[:, None], log_probs)
            return tf.where(allowed, log_probs, NEG_INF), ((written, depth), sentence, inner)

        return constrained, (state, sentence, cache)

    @staticmethod
    def position_axes(inner_axes):
        """The position axes of the wrapped cache (`search.greedy_decode`'s `constraint`): none
        for the per-hypothesis counts, `FIXED` for the sentence's words and limit, the inner
        cache's own."""
        return (None, None), (FIXED, FIXED, FIXED), inner_axes

    def _is_open(self, ids):
        return tf.reduce_any(ids[..., None] == tf.constant(self.open_ids, tf.int32), axis=-1)

    def _is_leaf(self, ids):
        """Whether each id is a word: neither a bracket nor PAD, BOS or EOS."""
        return ~self._is_open(ids) & (ids != self.close_id) & ~_is_special(ids)

    def _vocabulary_masks(self, size):
        """`[1, size]` ids and which are opening brackets and which words, as numpy constants:
        fixed for the vocabulary, so not recomputed at every step of the search."""
        vocabulary = np.arange(size)[None, :]
        opens = np.isin(vocabulary, self.open_ids)
        leaves = ~np.isin(vocabulary, [*self.open_ids, self.close_id, *SPECIAL_IDS])
        return vocabulary, opens, leaves

    def _allowed(self, vocabulary, opens, is_next_word, may_open, may_write, may_close, may_end):
        """`[rows, vocab]` from what each row may do next (`[rows]` each)."""
        return (
            (opens & may_open[:, None])
            | (is_next_word & may_write[:, None])
            | ((vocabulary == self.close_id) & may_close[:, None])
            | ((vocabulary == EOS_ID) & may_end[:, None])
        )


def _is_special(ids):
    return tf.reduce_any(ids[..., None] == SPECIAL_IDS, axis=-1)
