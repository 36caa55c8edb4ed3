"""An invented language pair in two non-Latin scripts, for tests of corpora the code has never
heard of (`prepare`, `train --data`)."""

import gzip
import random

LETTERS = "abcdefghiklmnoprstuvz"
# Source words in Greek letters, target words in Hangul syllables (ㄱ and each vowel).
GREEK = {letter: chr(0x03B1 + index) for index, letter in enumerate(LETTERS)}
HANGUL = {letter: chr(0xAC00 + 28 * index) for index, letter in enumerate(LETTERS)}


def invented_pairs(count, seed, long_pairs=0, empty_pairs=0) -> list[tuple[str, str]]:
    """Sentences of an invented language and their translations: each word has its own target
    word, and the target reverses the word order."""
    rng = random.Random(seed)
    lexicon = random.Random(0)
    words = ["".join(lexicon.choices(LETTERS, k=lexicon.randint(2, 6))) for _ in range(60)]
    meaning = dict(zip(words, lexicon.sample(words, len(words)), strict=True))

    def pair(length):
        sentence = rng.choices(words, k=length)
        source = " ".join("".join(GREEK[c] for c in word) for word in sentence)
        target = " ".join("".join(HANGUL[c] for c in meaning[w]) for w in reversed(sentence))
        return source, target

    pairs = [pair(rng.randint(1, 12)) for _ in range(count)]
    pairs += [pair(60) for _ in range(long_pairs)]
    pairs += [("", pairs[i][1]) if i % 2 else (pairs[i][0], "") for i in range(empty_pairs)]
    rng.shuffle(pairs)
    return pairs


def write_side(path, lines):
    text = "".join(f"{line}\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path


def write_pairs(directory, stem, pairs, suffixes=("", "")):
    """The two sides of `pairs` as `stem.xx` and `stem.yy` (plus `suffixes`, e.g. ".gz")."""
    return tuple(
        write_side(directory / f"{stem}.{language}{suffix}", [pair[side] for pair in pairs])
        for side, (language, suffix) in enumerate(zip(("xx", "yy"), suffixes, strict=True))
    )
