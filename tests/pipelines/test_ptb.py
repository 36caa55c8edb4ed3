"""The Penn Treebank sample as parsing data (§6.3): split by file, EVALB's preprocessing, a
linearization that round-trips every tree, repair of any string, and the cached text files."""

import random

import nltk
import pytest
import tensorflow as tf

from pipelines import (
    CorpusError,
    corpus_files,
    load_or_train_tokenizer,
    vocabulary_kind,
)
from pipelines.corpus import read_lines
from pipelines.ptb import (
    PUNCTUATION_TAGS,
    TAG,
    align_leaves,
    delinearize,
    file_number,
    linearize,
    preprocess,
    read_treebank,
    repair,
    strip_function_tags,
)
from pipelines.ptb import corpus_files as ptb_corpus_files
from pipelines.tokenizer import UNK_ID

SIZES = {"train": 3396, "validation": 273, "test": 245}


def tree(text):
    return nltk.Tree.fromstring(text)


def test_splits_follow_file_boundaries(ptb_dir, ptb_splits):
    files = read_treebank(ptb_dir)
    assert sorted(map(file_number, files)) == list(range(1, 200))
    assert sum(map(len, files.values())) == 3914 == sum(SIZES.values())
    assert {split: len(trees) for split, trees in ptb_splits.items()} == SIZES
    for split, first, last in [("train", 1, 159), ("validation", 160, 179), ("test", 180, 199)]:
        trees = ptb_splits[split]
        assert trees[0] == preprocess(files[f"wsj_{first:04d}.mrg"][0])
        assert trees[-1] == preprocess(files[f"wsj_{last:04d}.mrg"][-1])


def test_function_tags_traces_and_the_constituents_they_empty_are_removed():
    raw = tree(
        "(S (NP-SBJ-1 (DT The) (NN index)) (VP (VBD rose) (S (NP-SBJ (-NONE- *-1)))"
        " (PP-TMP=2 (IN in) (NP (-LRB- -LRB-) (NNS days) (-RRB- -RRB-)))) (. .))"
    )
    assert preprocess(raw) == tree(
        "(S (NP (DT The) (NN index)) (VP (VBD rose)"
        " (PP (IN in) (NP (-LRB- -LRB-) (NNS days) (-RRB- -RRB-)))) (. .))"
    )
    assert preprocess(tree("(S (NP-SBJ (-NONE- *T*-1)))")) is None
    assert [strip_function_tags(x) for x in ("NP-SBJ-1", "ADVP=3", "-NONE-", "-LRB-", "PP")] == [
        "NP",
        "ADVP",
        "-NONE-",
        "-LRB-",
        "PP",
    ]


def test_no_function_tag_trace_or_empty_constituent_is_left(ptb_dir, ptb_splits):
    trees = [t for split in ptb_splits.values() for t in split]
    for t in trees:
        for subtree in t.subtrees():
            assert len(subtree) > 0 and subtree.label() != "-NONE-"
            assert strip_function_tags(subtree.label()) == subtree.label()
    raw = [t for ts in read_treebank(ptb_dir).values() for t in ts]
    words = sum(sum(tag != "-NONE-" for _, tag in t.pos()) for t in raw)
    assert words == sum(len(t.leaves()) for t in trees) == 94_084


def tags_as_linearized(t):
    """The tree `delinearize` should give back: part-of-speech tags XX but punctuation."""
    if isinstance(t[0], str):
        return nltk.Tree(t.label() if t.label() in PUNCTUATION_TAGS else TAG, list(t))
    return nltk.Tree(t.label(), [tags_as_linearized(child) for child in t])


@pytest.mark.parametrize("lexicalized", [False, True])
def test_every_tree_of_the_sample_round_trips(ptb_splits, lexicalized):
    longest = 0
    for t in (t for split in ptb_splits.values() for t in split):
        linearized = linearize(t, lexicalized)
        assert delinearize(linearized, t.leaves()) == tags_as_linearized(t)
        assert repair(linearized, len(t.leaves())) == (linearized, False)
        longest = max(longest, len(linearized.split()))
    assert longest == 573


def test_the_linearization_of_vinyals_and_kaiser():
    t = tree("(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))")
    assert linearize(t) == "(S (NP XX ) (VP XX (NP XX XX ) ) . )"
    assert linearize(t, lexicalized=True) == "(S (NP John ) (VP has (NP a dog ) ) . )"
    with pytest.raises(ValueError, match="one preterminal"):
        linearize(tree("(NN dog)"))


@pytest.mark.parametrize(
    "linearized, words, repaired",
    [
        ("(S (NP XX ) (VP XX ) )", 2, "(S (NP XX ) (VP XX ) )"),  # well-formed: unchanged
        ("(S (NP XX ) (VP XX ) ) ) )", 2, "(S (NP XX ) (VP XX ) )"),  # unmatched ")"
        ("(S (NP XX ) (VP XX (NP XX", 3, "(S (NP XX ) (VP XX (NP XX ) ) )"),  # unclosed "("
        ("(S (NP XX XX XX ) (VP XX ) )", 2, "(S (NP XX XX ) )"),  # too many words
        ("(S (NP XX ) )", 3, "(S (NP XX ) XX XX )"),  # too few words
        ("(S XX ) (NP XX ) .", 3, "(S XX (NP XX ) . )"),  # items after the root
        ("XX (NP XX )", 2, "(S XX (NP XX ) )"),  # no root bracket
        ("", 2, "(S XX XX )"),  # nothing at all
        ("(S (NP ) (VP XX ) )", 1, "(S (VP XX ) )"),  # empty constituent
        ("( XX (NP XX ) )", 2, "(X XX (NP XX ) )"),  # bracket without a label
    ],
)
def test_repair_balances_brackets_and_restores_the_word_count(linearized, words, repaired):
    assert repair(linearized, words) == (repaired, repaired != linearized)
    assert len(delinearize(repaired, ["w"] * words).leaves()) == words


def test_repair_makes_any_token_sequence_a_tree_of_the_words():
    rng = random.Random(7)
    vocabulary = ["(S", "(NP", "(VP", "(", ")", ")", "XX", "XX", ".", ","]
    for _ in range(500):
        tokens = " ".join(rng.choices(vocabulary, k=rng.randrange(0, 30)))
        words = [f"w{i}" for i in range(rng.randrange(1, 12))]
        repaired, _ = repair(tokens, len(words))
        assert delinearize(repaired, words).leaves() == words
        assert repair(repaired, len(words)) == (repaired, False)


@pytest.mark.parametrize(
    "decoded, sentence, aligned",
    [
        # A skipped word goes right after the leaf before it, not to the end of the root.
        ("(S (NP a net loss ) . )", "a third-quarter net loss .", "(S (NP a XX net loss ) . )"),
        ("(S (VP fell ) . )", "Rain fell .", "(S (VP XX fell ) . )"),  # before the first leaf
        ("(S (NP it ) (VP said said ) . )", "it said .", "(S (NP it ) (VP said ) . )"),  # twice
        # The unknown word, punctuation tags and a miscopied word each stand for one word.
        ("(S (NP ⁇ ) (VP fall ) . )", "Rain fell !", "(S (NP ⁇ ) (VP fall ) . )"),
        ("(S (NP XX ) (VP XX ) )", "Rain fell .", "(S (NP XX ) (VP XX ) )"),  # XX form: as is
    ],
)
def test_align_leaves_puts_each_word_of_a_lexicalized_output_in_its_place(
    decoded, sentence, aligned
):
    assert align_leaves(decoded, sentence.split()) == aligned


def test_aligned_lexicalized_outputs_have_one_leaf_per_word():
    rng = random.Random(11)
    words = "the cat sat on a mat with ⁇ and , it purred .".split()
    vocabulary = ["(S", "(NP", "(VP", ")", ")", *words]
    for _ in range(300):
        sentence = rng.sample(words[:8], rng.randrange(1, 8))
        tokens = " ".join(rng.choices(vocabulary, k=rng.randrange(1, 25)))
        aligned = align_leaves(tokens, sentence)
        leaves = [t for t in aligned.split() if not t.startswith("(") and t != ")"]
        if any(t not in (TAG, *PUNCTUATION_TAGS) for t in tokens.split() if t in words):
            assert len(leaves) == len(sentence)
        repaired, _ = repair(aligned, len(sentence))
        assert delinearize(repaired, sentence).leaves() == sentence


def test_delinearize_names_what_is_ill_formed():
    with pytest.raises(ValueError, match="1 unmatched '\\)'"):
        delinearize("(S XX ) )", ["a"])
    with pytest.raises(ValueError, match="2 words for 1"):
        delinearize("(S XX XX )", ["a"])
    with pytest.raises(ValueError, match="no root bracket"):
        delinearize("XX", ["a"])


@pytest.fixture(scope="module")
def cached(tmp_path_factory, ptb_dir):
    """A cache directory and the split files `corpus_files` wrote into it."""
    cache_dir = tmp_path_factory.mktemp("cache")
    return cache_dir, ptb_corpus_files(ptb_dir, cache_dir=cache_dir)


def test_corpus_files_are_written_once_aligned_and_cached(ptb_dir, ptb_splits, cached):
    cache_dir, files = cached
    assert set(files) == set(SIZES)
    for split, (words, trees) in files.items():
        sources, targets = read_lines(words), read_lines(trees)
        assert len(sources) == len(targets) == SIZES[split]
        assert sources[0] == " ".join(ptb_splits[split][0].leaves())
        assert targets[0] == linearize(ptb_splits[split][0])
    lexicalized = ptb_corpus_files(ptb_dir, "words", "lexicalized", cache_dir=cache_dir)
    for split, (words, trees) in lexicalized.items():
        assert words == files[split][0]
        assert read_lines(trees)[-1] == linearize(ptb_splits[split][-1], lexicalized=True)
    written = {path: path.stat().st_mtime_ns for pair in files.values() for path in pair}
    assert ptb_corpus_files(ptb_dir, cache_dir=cache_dir) == files
    assert {path: path.stat().st_mtime_ns for path in written} == written


def test_the_trainer_finds_the_dataset_by_name(ptb_dir, cached, tmp_path, monkeypatch):
    cache_dir, files = cached
    monkeypatch.setenv("KT_CACHE_DIR", str(cache_dir))
    assert corpus_files("ptb", ptb_dir, "words", "tree") == files
    lexicalized = corpus_files("ptb", ptb_dir, "words", "lexicalized")
    assert lexicalized["test"][1].name == "test.lexicalized"
    with pytest.raises(CorpusError, match="source_language .words. and target_language .tree."):
        corpus_files("ptb", ptb_dir, "en", "de")
    with pytest.raises(CorpusError, match="treebank.zip"):
        corpus_files("ptb", tmp_path, "words", "tree")
    with pytest.raises(CorpusError, match="datasets: \\['multi30k', 'prepared', 'ptb', 'wmt14'\\]"):
        corpus_files("wsj", ptb_dir, "words", "tree")


def test_vocabulary_has_one_token_per_word_and_tree_symbol(cached, tmp_path):
    """The ptb dataset's vocabulary is Vinyals & Kaiser et al.'s: words. Each input word and
    each output symbol ("(NP", ")", "XX") is one token, so the n-th "XX" of a tree lines up
    with the n-th token of its sentence; a word outside the vocabulary is one UNK."""
    files = cached[1]["train"]
    path = tmp_path / "words.model"
    tokenizer = load_or_train_tokenizer(path, files, 1000, kind=vocabulary_kind("ptb"))
    tree = "(S (NP XX XX ) (VP XX (PP XX (NP XX ) ) ) . )"
    sentence = "The company said Zyxwvut rose 4.5 % ."
    tree_ids, sentence_ids = tokenizer.tokenize(tf.constant([tree, sentence])).numpy()

    assert tokenizer.pieces(tree_ids) == ["▁" + token for token in tree.split()]
    assert len(sentence_ids) == len(sentence.split())
    assert sentence_ids[3] == UNK_ID and UNK_ID not in sentence_ids[:3]
