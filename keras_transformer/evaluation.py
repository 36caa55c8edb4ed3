"""BLEU as §6.1 reports it, in the two forms in use today.

- sacreBLEU on detokenized, cased text with its standard 13a tokenization, and its signature,
  so that the number can be reproduced (Post, 2018); chrF beside it.
- BLEU on lowercased, Moses-tokenized text (sacremoses, then sacreBLEU with `tokenize="none"`):
  the `multi-bleu.perl` style that published Multi30k results use.

Example:
>>> scores = corpus_scores(["Ein Hund rennt."], ["Ein Hund rennt."], "de")
>>> scores["bleu"], scores["bleu_tokenized_lowercase"]
(100.00000000000004, 100.00000000000004)
"""

import json
import logging
import time
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesTokenizer

logger = logging.getLogger(__name__)


def moses_lowercase(sentences, language):
    tokenizer = MosesTokenizer(lang=language)
    return [tokenizer.tokenize(s, return_str=True, escape=False).lower() for s in sentences]


def corpus_scores(hypotheses, references, target_language) -> dict:
    """sacreBLEU (cased, detokenized), chrF and tokenized-lowercased BLEU of one corpus."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(), CHRF()
    detokenized = bleu.corpus_score(hypotheses, [references])
    tokenized = BLEU(tokenize="none", force=True).corpus_score(
        moses_lowercase(hypotheses, target_language),
        [moses_lowercase(references, target_language)],
    )
    return {
        "bleu": detokenized.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "bleu_tokenized_lowercase": tokenized.score,
        "sentences": len(hypotheses),
    }


def evaluate_corpus(translator, source_path, target_path, target_language, output_dir, **search):
    """Translates a split, scores it, and writes `<stem>.hyp` and `<stem>.scores.json`.

    Args:
        translator: a `Translator`.
        source_path, target_path: the aligned split files (plain or .gz).
        output_dir: where hypotheses and scores go; the file stem names split and search.
        search: `beam_size`, `alpha`, `extra_length` for `Translator.translate`.
    """
    from pipelines.corpus import read_lines

    sources, references = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(references):
        raise ValueError(
            f"line counts differ: {source_path} has {len(sources)}, {target_path} {len(references)}"
        )
    start = time.perf_counter()
    hypotheses = translator.translate(sources, **search)
    seconds = time.perf_counter() - start
    scores = corpus_scores(hypotheses, references, target_language)
    scores.update(search, source=str(source_path), decode_seconds=round(seconds, 2))
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    split = Path(source_path).name.split(".")[0]
    stem = f"{split}.beam{search.get('beam_size', 4)}"
    (output_dir / f"{stem}.hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    (output_dir / f"{stem}.scores.json").write_text(json.dumps(scores, indent=2) + "\n")
    return scores
