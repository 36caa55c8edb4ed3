"""English constituency parsing as sequence to sequence (§6.3) on NLTK's Penn Treebank sample.

The paper trains on the WSJ part of the Penn Treebank; its licence keeps it out of reach, but
NLTK's sample of it (`treebank.zip`: WSJ files wsj_0001-wsj_0199, 3,914 parsed sentences) is
public. The trees are read offline with NLTK's `BracketParseCorpusReader` straight from the zip
and split by file, so that no article straddles two splits:

    train        wsj_0001-wsj_0159
    validation   wsj_0160-wsj_0179
    test         wsj_0180-wsj_0199

Each tree is cleaned as EVALB's usual preprocessing does: function tags and co-indices are
stripped (NP-SBJ-1 → NP, PP-LOC=2 → PP; labels that begin with "-", such as -NONE- or -LRB-, are
kept), and -NONE- elements are removed together with the constituents they leave empty. NLTK
has already dropped the unlabeled bracket that wraps every tree in the .mrg files, so the root is
the sentence's own constituent (S, SINV, FRAG, ...).

The source is the sentence's words; the target is the tree linearized as in Vinyals & Kaiser et
al. (2015): an opening bracket with its label, "(NP", a closing bracket ")", and one token per
word for its part of speech. Tags are normalized to XX except the punctuation tags that EVALB's
COLLINS.prm ignores (, : `` '' .), which stay as they are:

    (S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))) (. .))
    → words:  Ms. Haag plays Elianti .
    → target: (S (NP XX XX ) (VP XX (NP XX ) ) . )

Keeping those five tags makes the linearization lossless for everything the labeled bracket
score reads (the brackets, and which words it leaves out), so a split's two text files suffice
to score a parser.

A second target, "lexicalized", writes each word in place of its XX (punctuation tags stay):

    → lexicalized: (S (NP Ms. Haag ) (VP plays (NP Elianti ) ) . )

It departs from Vinyals & Kaiser et al. for a treebank a tenth the size of the WSJ: a decoder
that must find the n-th input word for its n-th XX has to learn to count, while one that copies
each word sees in its own output which word it is at (`--tgt lexicalized`; README, "Constituency
parsing"). Both read back into the same trees.

`delinearize` is the inverse given the words; `repair` turns any decoder output into a
well-formed linearization with the right number of words.

`corpus_files` writes each split as aligned text files (`<split>.words`, `<split>.tree`,
`<split>.lexicalized`) into a cache directory and returns the paths of a source and a target,
as `multi30k.corpus_files` does for its files;
`PennTreebankSample` is the same data as a TensorFlow Datasets builder.

Example:
>>> from nltk import Tree
>>> tree = preprocess(Tree.fromstring(
...     "(S (NP-SBJ-1 (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti))"
...     " (S (NP-SBJ (-NONE- *-1)))) (. .))"))
>>> linearize(tree)
'(S (NP XX XX ) (VP XX (NP XX ) ) . )'
>>> print(delinearize(linearize(tree), tree.leaves()))
(S (NP (XX Ms.) (XX Haag)) (VP (XX plays) (NP (XX Elianti))) (. .))
>>> repair("(S (NP XX XX ) (VP XX ) ) )", 5)
('(S (NP XX XX ) (VP XX ) XX XX )', True)
"""

import contextlib
import functools
import hashlib
import logging
import os
import re
from pathlib import Path

import nltk
import tensorflow_datasets as tfds
from nltk.corpus.reader import BracketParseCorpusReader

from pipelines.corpus import CorpusError

logger = logging.getLogger(__name__)

ARCHIVE = "treebank.zip"
ARCHIVE_TREES = "treebank/combined/"
DOWNLOAD_URL = (
    "https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip"
)
# Split by file number: 159 articles to train on, 20 to select on, 20 to report.
SPLIT_FILES = {"train": (1, 159), "validation": (160, 179), "test": (180, 199)}
SOURCE, TARGET = "words", "tree"
LEXICALIZED = "lexicalized"  # the target with words in place of XX
TARGETS = (TARGET, LEXICALIZED)
TAG = "XX"  # every part-of-speech tag but punctuation (Vinyals & Kaiser et al., 2015)
# The preterminals EVALB's COLLINS.prm deletes (DELETE_LABEL), kept in the linearization.
PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
NONE_TAG = "-NONE-"
UNKNOWN_WORD = "\u2047"  # "⁇": how SentencePiece detokenizes UNK, in a lexicalized output
# The root `repair` adds when a decoder output has none: the commonest root of the treebank.
FALLBACK_ROOT = "S"
FORMAT_VERSION = 2  # of the cached text files; bump it when their content changes
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "keras_transformer"


# -- reading and preprocessing ------------------------------------------------------------------


def archive_path(data_dir) -> Path:
    path = Path(data_dir) / ARCHIVE
    if not path.is_file():
        raise CorpusError(
            f"Penn Treebank sample not found: {path}; NLTK's corpus treebank.zip ({DOWNLOAD_URL}) "
            "belongs there"
        )
    return path


@contextlib.contextmanager
def _nltk_may_read(directory: Path):
    """NLTK reads files only below the directories of `nltk.data.path`: add one for a while."""
    entry = str(directory)
    nltk.data.path.append(entry)
    try:
        yield
    finally:
        nltk.data.path.remove(entry)


@functools.cache
def _read_archive(path: Path) -> tuple[tuple[str, tuple[nltk.Tree, ...]], ...]:
    with _nltk_may_read(path.parent):
        root = nltk.data.ZipFilePathPointer(str(path), ARCHIVE_TREES)
        reader = BracketParseCorpusReader(root, r"wsj_\d{4}\.mrg")
        return tuple((name, tuple(reader.parsed_sents(name))) for name in reader.fileids())


def read_treebank(data_dir) -> dict[str, tuple[nltk.Tree, ...]]:
    """The raw trees of `<data_dir>/treebank.zip` by file name ("wsj_0001.mrg": trees), read once
    a process. The trees are shared: copy them before changing them (`preprocess` does)."""
    return dict(_read_archive(archive_path(data_dir).resolve()))


def file_number(name: str) -> int:
    """The number of a treebank file: wsj_0163.mrg → 163."""
    return int(re.fullmatch(r"wsj_(\d{4})\.mrg", name).group(1))


def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 → NP, PP-LOC=2 → PP, as EVALB reads labels; -NONE-, -LRB- stay as they are."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def preprocess(tree: nltk.Tree) -> nltk.Tree | None:
    """A cleaned copy of a treebank tree (module docstring); None if nothing but -NONE- is left."""
    if is_preterminal(tree):
        return None if tree.label() == NONE_TAG else nltk.Tree(tree.label(), list(tree))
    children = [child for child in map(preprocess, tree) if child is not None]
    return nltk.Tree(strip_function_tags(tree.label()), children) if children else None


def is_preterminal(tree) -> bool:
    """A part-of-speech node: one child, a word."""
    return isinstance(tree, nltk.Tree) and len(tree) == 1 and isinstance(tree[0], str)


def split_treebank(data_dir) -> dict[str, list[nltk.Tree]]:
    """The preprocessed trees of each split (`SPLIT_FILES`), in file and sentence order."""
    files = read_treebank(data_dir)
    splits = {}
    for split, (first, last) in SPLIT_FILES.items():
        trees = (t for name, ts in files.items() if first <= file_number(name) <= last for t in ts)
        splits[split] = [t for t in map(preprocess, trees) if t is not None]
    return splits


# -- linearization ------------------------------------------------------------------------------
# A skeleton is an `nltk.Tree` whose leaves are the tokens that stand for words: XX (or, in the
# lexicalized target, the word itself) or a punctuation tag. It is what a linearization spells
# out, bracket for bracket.


def _skeleton(tree: nltk.Tree, lexicalized: bool):
    if is_preterminal(tree):
        if tree.label() in PUNCTUATION_TAGS:
            return tree.label()
        return tree[0] if lexicalized else TAG
    return nltk.Tree(tree.label(), [_skeleton(child, lexicalized) for child in tree])


def _tokens(skeleton) -> list[str]:
    if isinstance(skeleton, str):
        return [skeleton]
    return [f"({skeleton.label()}", *(t for child in skeleton for t in _tokens(child)), ")"]


def linearize(tree: nltk.Tree, lexicalized: bool = False) -> str:
    """A preprocessed tree → its target string, "(S (NP XX XX ) (VP XX ) . )", or with
    `lexicalized` "(S (NP Ms. Haag ) (VP plays ) . )"."""
    if is_preterminal(tree):
        raise ValueError(f"a tree of one preterminal has no bracket to linearize: {tree}")
    return " ".join(_tokens(_skeleton(tree, lexicalized)))


def _parse_tokens(tokens, words=()):
    """Tokens → the forest of skeletons they spell, and what keeps it from being one tree.

    The forest is an `nltk.Tree` labeled "" whose children are the top-level items; the i-th
    token that stands for a word becomes `Tree(tag, [words[i]])` while there are words (its
    punctuation tag, else XX), else a leaf.
    Unmatched closing brackets are skipped; brackets left open are closed at the end.
    """
    stack = [nltk.Tree("", [])]
    unmatched = unlabeled = empty = count = 0
    for token in tokens:
        if token.startswith("("):
            unlabeled += token == "("
            stack.append(nltk.Tree(token[1:], []))
            stack[-2].append(stack[-1])
        elif token == ")":
            if len(stack) == 1:
                unmatched += 1
            else:
                empty += not stack.pop()
        else:
            tag = token if token in PUNCTUATION_TAGS else TAG
            stack[-1].append(nltk.Tree(tag, [words[count]]) if count < len(words) else token)
            count += 1
    forest = stack[0]
    problems = [
        f"{unmatched} unmatched ')'" if unmatched else "",
        f"{len(stack) - 1} unclosed '('" if len(stack) > 1 else "",
        f"{len(forest)} top-level items, not one tree" if len(forest) != 1 else "",
        "no root bracket" if forest and _is_preterminal_token(forest[0]) else "",
        f"{count} words for {len(words)}" if count != len(words) else "",
        f"{unlabeled} brackets without a label" if unlabeled else "",
        f"{empty} empty constituents" if empty else "",
    ]
    return forest, [problem for problem in problems if problem]


def _is_preterminal_token(item) -> bool:
    return isinstance(item, str) or is_preterminal(item)


def delinearize(linearized: str, words) -> nltk.Tree:
    """A well-formed linearization (either target) and the sentence's words → the tree, its POS
    tags XX or punctuation. The sentence gives the words, whatever a lexicalized target spells.
    Raises ValueError when `linearized` is not well-formed (see `repair`)."""
    forest, problems = _parse_tokens(linearized.split(), list(words))
    if problems:
        raise ValueError(f"not a well-formed linearization ({'; '.join(problems)}): {linearized}")
    return forest[0]


def _is_word_token(token: str) -> bool:
    return not token.startswith("(") and token != ")"


def _leaf_matches(token: str, word: str) -> bool:
    """Whether a decoded leaf can stand for `word`: the word itself, the decoder's unknown word
    (SentencePiece writes UNK as ⁇), or a punctuation tag for a word without letters or digits."""
    if token in (word, UNKNOWN_WORD):
        return True
    return token in PUNCTUATION_TAGS and not any(c.isalnum() for c in word)


def align_leaves(linearized: str, words) -> str:
    """A lexicalized output's leaves aligned to the sentence's words, brackets left as they are.

    A decoder that copies words sometimes skips one or writes one twice. Left to `repair`, a
    skipped word would be appended to the root and every word after it would shift into the
    constituent of its predecessor. Here the leaves are aligned to `words` by edit distance (a
    leaf matches the word it spells, see `_leaf_matches`; substituting one word for another
    costs 1, as does a leaf or word left over): a leftover leaf is dropped, and a skipped word
    becomes an XX right after the leaf before it. An output in the XX form (no leaf spells a
    word) comes back unchanged.
    """
    tokens = linearized.split()
    leaf_positions = [i for i, token in enumerate(tokens) if _is_word_token(token)]
    if all(tokens[i] == TAG or tokens[i] in PUNCTUATION_TAGS for i in leaf_positions):
        return linearized
    kept, inserted_after = _edit_alignment([tokens[i] for i in leaf_positions], list(words))
    leaf_at = {position: leaf for leaf, position in enumerate(leaf_positions)}
    aligned = []
    for position, token in enumerate(tokens):
        leaf = leaf_at.get(position)
        if leaf is None:
            aligned.append(token)
            continue
        if leaf == 0:
            aligned += [TAG] * inserted_after.get(-1, 0)
        if leaf in kept:
            aligned.append(token)
        aligned += [TAG] * inserted_after.get(leaf, 0)
    return " ".join(aligned)


def _edit_alignment(leaves, words):
    """Least-cost alignment of `leaves` to `words`: (indices of the leaves kept, {leaf index:
    how many words go right after it}, -1 for before the first leaf)."""
    mismatch = [[int(not _leaf_matches(leaf, word)) for word in words] for leaf in leaves]
    rows, columns = len(leaves) + 1, len(words) + 1
    cost = [[i + j if i == 0 or j == 0 else 0 for j in range(columns)] for i in range(rows)]
    for i in range(1, rows):
        for j in range(1, columns):
            substitute = cost[i - 1][j - 1] + mismatch[i - 1][j - 1]
            cost[i][j] = min(substitute, cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    kept, inserted_after = set(), {}
    i, j = len(leaves), len(words)
    while i or j:  # back from the end; ties prefer keeping a leaf, then dropping one
        if i and j and cost[i][j] == cost[i - 1][j - 1] + mismatch[i - 1][j - 1]:
            kept.add(i - 1)
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            inserted_after[i - 1] = inserted_after.get(i - 1, 0) + 1
            j -= 1
    return kept, inserted_after


def repair(linearized: str, num_words: int) -> tuple[str, bool]:
    """Any string → a well-formed linearization of `num_words` words, and whether it changed.

    Unmatched closing brackets are dropped and open ones closed at the end; items after the
    root's closing bracket move into the root (a missing root becomes `FALLBACK_ROOT`); surplus
    words are removed from the end and missing ones appended to the root as XX; constituents
    left empty are removed, and brackets without a label are labeled X.
    """
    tokens = linearized.split()
    _, problems = _parse_tokens(tokens, [""] * num_words)
    if not problems:
        return " ".join(tokens), False
    forest, _ = _parse_tokens(tokens)
    for subtree in forest.subtrees():
        if subtree is not forest and not subtree.label():
            subtree.set_label("X")
    items = list(forest)
    if items and isinstance(items[0], nltk.Tree):
        root = items[0]
        root.extend(items[1:])
    else:
        root = nltk.Tree(FALLBACK_ROOT, items)
    leaves = root.treepositions("leaves")
    for position in reversed(leaves[num_words:]):
        del root[position]
    root.extend([TAG] * (num_words - len(leaves)))
    root = _without_empty_constituents(root) or nltk.Tree(FALLBACK_ROOT, [TAG] * num_words)
    return " ".join(_tokens(root)), True


def _without_empty_constituents(skeleton):
    if isinstance(skeleton, str):
        return skeleton
    children = [c for c in map(_without_empty_constituents, skeleton) if c is not None]
    return nltk.Tree(skeleton.label(), children) if children else None


# -- the corpus as files and as a TFDS builder --------------------------------------------------


def _archive_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def corpus_files(data_dir, source_language=SOURCE, target_language=TARGET, cache_dir=None):
    """`{split: (words_path, target_path)}`, written on first use under `cache_dir`.

    The files go to `<cache_dir>/ptb-<digest of the zip>-v<FORMAT_VERSION>/<split>.<side>`
    (default cache directory: $KT_CACHE_DIR, else ~/.cache/keras_transformer), so the data
    directory stays as it is and a changed archive gets files of its own.
    """
    if source_language != SOURCE or target_language not in TARGETS:
        raise CorpusError(
            f"the Penn Treebank sample pairs {SOURCE!r} with {TARGET!r} or {LEXICALIZED!r}, not "
            f"{source_language!r} with {target_language!r}: use source_language {SOURCE!r} and "
            f"target_language {TARGET!r} (or {LEXICALIZED!r})"
        )
    archive = archive_path(data_dir)
    cache_dir = Path(cache_dir or os.environ.get("KT_CACHE_DIR") or DEFAULT_CACHE_DIR)
    directory = cache_dir / f"ptb-{_archive_digest(archive)}-v{FORMAT_VERSION}"
    sides = (SOURCE, *TARGETS)
    if not all(
        (directory / f"{split}.{side}").is_file() for split in SPLIT_FILES for side in sides
    ):
        write_corpus(split_treebank(data_dir), directory)
    return {
        split: (directory / f"{split}.{source_language}", directory / f"{split}.{target_language}")
        for split in SPLIT_FILES
    }


def write_corpus(splits, directory) -> None:
    """Writes `{split: trees}` as aligned `<split>.words` / `.tree` / `.lexicalized` files; each
    is written under a temporary name and renamed, so a concurrent reader never sees half of one."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split, trees in splits.items():
        texts = {
            SOURCE: [" ".join(t.leaves()) for t in trees],
            TARGET: [linearize(t) for t in trees],
            LEXICALIZED: [linearize(t, lexicalized=True) for t in trees],
        }
        for side, lines in texts.items():
            path = directory / f"{split}.{side}"
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            partial.replace(path)
        logger.info("wrote %d %s sentences to %s", len(trees), split, directory)


class PennTreebankSample(tfds.core.GeneratorBasedBuilder):
    """NLTK's Penn Treebank sample as TFDS splits train / validation / test of
    `{"words": ..., "tree": ...}` (see the module docstring).

    Built from a manual directory holding `treebank.zip`.

    Example (prepares the data on disk, so not run as a doctest)::

        builder = PennTreebankSample(data_dir="/tmp/tfds")
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir="../shared/data/ptb_sample"))
        builder.as_dataset(split="test")  # {"words": tf.string, "tree": tf.string}
    """

    VERSION = tfds.core.Version("1.0.0")
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        f"Place NLTK's {ARCHIVE} ({DOWNLOAD_URL}) in the manual directory"
    )

    def _info(self):
        return self.dataset_info_from_configs(
            features=tfds.features.Translation(languages=(SOURCE, TARGET)),
            supervised_keys=(SOURCE, TARGET),
            homepage="https://www.nltk.org/nltk_data/",
        )

    def _split_generators(self, dl_manager):
        splits = split_treebank(dl_manager.manual_dir)
        return {split: self._generate_examples(trees) for split, trees in splits.items()}

    def _generate_examples(self, trees):
        for index, tree in enumerate(trees):
            yield index, {SOURCE: " ".join(tree.leaves()), TARGET: linearize(tree)}
