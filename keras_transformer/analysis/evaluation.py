"""Scoring a split: BLEU as §6.1 reports it, or parsing F1 (§6.3) for the parsing dataset.

BLEU comes in the two forms in use today:

- sacreBLEU on detokenized, cased text with its standard 13a tokenization, and its signature,
  so that the number can be reproduced (Post, 2018); chrF beside it.
- BLEU on lowercased, Moses-tokenized text (sacremoses, then sacreBLEU with `tokenize="none"`):
  the `multi-bleu.perl` style that published Multi30k results use.

`task` says for a dataset how its outputs are searched for and scored: translation's §6.1 search
and BLEU, or for "ptb" §6.3's search and `keras_transformer.parsing.constituency.parse_scores`.

`tune_alpha` picks the length penalty α on the development set, as §6.1 chose its α ("after
experimentation on the development set"); on another corpus the paper's 0.6 need not be best.

Example:
>>> scores = corpus_scores(["Ein Hund rennt."], ["Ein Hund rennt."], "de")
>>> scores["bleu"], scores["bleu_tokenized_lowercase"]
(100.00000000000004, 100.00000000000004)
"""

import dataclasses
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesTokenizer

from keras_transformer.errors import ConfigError
from keras_transformer.search_settings import PARSING_SEARCH, SearchSettings

logger = logging.getLogger(__name__)


def moses_lowercase(sentences, language):
    tokenizer = MosesTokenizer(lang=language)
    return [tokenizer.tokenize(s, return_str=True, escape=False).lower() for s in sentences]


def corpus_scores(hypotheses, references, target_language, lowercase=False) -> dict:
    """sacreBLEU (detokenized), chrF and tokenized-lowercased BLEU of one corpus.

    sacreBLEU and chrF are cased unless `lowercase` (a model trained on lowercased text); the
    signature says which (`case:mixed` or `case:lc`). `length_ratio` (hypothesis to reference
    tokens, sacreBLEU's) and its `brevity_penalty` come along: they show what the search's
    length penalty α does to the score.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(lowercase=lowercase), CHRF(lowercase=lowercase)
    detokenized = bleu.corpus_score(hypotheses, [references])
    tokenized = BLEU(tokenize="none", force=True).corpus_score(
        moses_lowercase(hypotheses, target_language),
        [moses_lowercase(references, target_language)],
    )
    return {
        "bleu": detokenized.score,
        "bleu_signature": str(bleu.get_signature()),
        "length_ratio": detokenized.ratio,
        "brevity_penalty": detokenized.bp,
        "chrf": chrf.corpus_score(hypotheses, [references]).score,
        "bleu_tokenized_lowercase": tokenized.score,
        "sentences": len(hypotheses),
    }


@dataclasses.dataclass(frozen=True)
class Task:
    """How the outputs of a dataset's model are decoded and scored.

    Attributes:
        name: "bleu" or "parsing"; names the validation records of a training run.
        score: `(sources, hypotheses, references) -> dict` of scores (floats are the metrics).
        search: the default `SearchSettings` of its search.
        summary: `scores -> str`, one line for people.
        primary: the score that ranks searches (`tune_alpha`): "bleu" or "f1".
        present: `(source, hypothesis) -> str`, a decoded string as `translate` prints it.
    """

    name: str
    score: Callable[[list[str], list[str], list[str]], dict]
    search: SearchSettings
    summary: Callable[[dict], str]
    primary: str
    present: Callable[[str, str], str] = lambda source, hypothesis: hypothesis


def task(dataset: str, target_language: str, lowercase: bool = False) -> Task:
    """Parsing (§6.3) for the "ptb" dataset, translation (§6.1) for any other.

    `lowercase`: the translation model was trained on case-folded text (`train --lowercase`).
    """
    if dataset == "ptb":
        from keras_transformer.parsing import constituency as parsing

        return Task(
            "parsing", parsing.parse_scores, PARSING_SEARCH, parsing.summary, "f1", parsing.present
        )

    def score(sources, hypotheses, references):
        return corpus_scores(hypotheses, references, target_language, lowercase)

    return Task("bleu", score, SearchSettings(), bleu_summary, "bleu")


def run_task(run_dir) -> Task:
    """The `Task` of a training run's dataset (translation for runs without a run.json), its
    search the run's own where run.json records one (`run_directory.run_search`: an imported
    checkpoint's)."""
    from keras_transformer.run_directory import read_settings, run_search

    run = read_settings(run_dir)
    # A run on a prepared corpus records the dataset it was prepared from (ptb: parsing).
    dataset = run.get("task_dataset") or run.get("dataset", "multi30k")
    found = task(dataset, run.get("target_language", "de"), run.get("lowercase", False))
    return dataclasses.replace(found, search=run_search(run_dir, found.search))


def bleu_summary(scores) -> str:
    return (
        f"sacreBLEU {scores['bleu']:.2f} ({scores['bleu_signature']}), chrF {scores['chrf']:.2f}, "
        f"tokenized lowercased BLEU {scores['bleu_tokenized_lowercase']:.2f}, "
        f"length ratio {scores['length_ratio']:.3f}"
    )


def file_stem(split, search: SearchSettings, well_formed=False) -> str:
    """`val.beam4.alpha0.6`: the name of a split's hypotheses and scores under a search
    (`.length` after the α with the |Y|^α penalty, `.min20` with a minimum length)."""
    stem = f"{split}.beam{search.beam_size}"
    if search.beam_size > 1:  # the length penalty does not change a greedy search
        stem += f".alpha{search.alpha:g}" + ("" if search.penalty == "gnmt" else ".length")
    if search.min_length:
        stem += f".min{search.min_length}"
    return stem + (".well_formed" if well_formed else "")


def evaluate_corpus(translator, source_path, target_path, output_dir, score, search=None):
    """Decodes a split, scores it, and writes `<stem>.hyp` and `<stem>.scores.json`.

    Args:
        translator: a `Translator`.
        source_path, target_path: the aligned split files (plain or .gz).
        output_dir: where hypotheses and scores go; the file stem names split and search
            (`test.beam4.alpha0.6`), so runs with other searches never overwrite each other.
        score: `(sources, hypotheses, references) -> dict`, a `Task`'s.
        search: the `SearchSettings` of `Translator.translate` (default: the translator's).
    """
    from pipelines.corpus import read_aligned_lines

    search = search or translator.search

    sources, references = read_aligned_lines(source_path, target_path)
    start = time.perf_counter()
    hypotheses = translator.translate(sources, search)
    seconds = time.perf_counter() - start
    scores = score(sources, hypotheses, references)
    well_formed = translator.constraint is not None
    scores.update(
        dataclasses.asdict(search),
        source=str(source_path),
        decode_seconds=round(seconds, 2),
        well_formed_trees=well_formed,
    )
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = file_stem(split_name(source_path), search, well_formed)
    (output_dir / f"{stem}.hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    (output_dir / f"{stem}.scores.json").write_text(json.dumps(scores, indent=2) + "\n")
    return scores


def evaluation_record(command, model, split, search: SearchSettings, scores) -> dict:
    """What `evaluate --record` appends, one JSON line: the `command` line, the source's git
    commit, the CPU, the `model` (run, weights, ensemble), the split, the search and the
    scores of `evaluate_corpus` (without the search, which has its own key)."""
    search_fields = dataclasses.asdict(search)
    return {
        "date": time.strftime("%Y-%m-%dT%H%MZ", time.gmtime()),
        "command": command,
        "commit": source_commit(),
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)),
        "model": model,
        "split": split,
        "search": search_fields,
        "scores": {key: value for key, value in scores.items() if key not in search_fields},
    }


def append_record(path, record: dict):
    """Appends `record` to the JSON-lines file `path` (created with its directory if new)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def source_commit() -> str | None:
    """The git commit this package's source is at, `+dirty` after it with uncommitted changes;
    None outside a git checkout (an installed copy) or without git."""
    here = Path(__file__).resolve().parent

    def git(*arguments):
        return subprocess.run(
            ["git", *arguments], cwd=here, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("unknown" without one)."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return "unknown"
    names = (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    return next(names, "unknown")


def split_name(source_path) -> str:
    """`test_2016_flickr` of `.../test_2016_flickr.en.gz`: what output files are named by."""
    return Path(source_path).name.split(".")[0]


def tune_alpha(
    translator, source_path, target_path, output_dir, task, alphas, search=None
) -> tuple[float, dict]:
    """The α of `alphas` under which the (development) split scores best by `task.primary`,
    and that α's scores.

    Each α's hypotheses and scores go to `output_dir` as `evaluate_corpus` writes them, and the
    comparison to `<split>.beam<k>.alpha_tuning.json`; a tie goes to the α listed first.
    `search` (default: the translator's) gives the rest of the search (its own α aside). The
    `Translator` takes α as a tensor, so its search is traced once for all of them.
    """
    search = search or translator.search
    if search.beam_size < 2:
        raise ConfigError(
            f"tuning alpha needs a beam search: beam_size {search.beam_size} must be 2 or more"
        )
    results = {}
    for alpha in alphas:
        results[alpha] = evaluate_corpus(
            translator,
            source_path,
            target_path,
            output_dir,
            task.score,
            search.replace(alpha=alpha),
        )
        logger.info("α %g: %s", alpha, task.summary(results[alpha]))
    scores = {alpha: result[task.primary] for alpha, result in results.items()}
    chosen = max(scores, key=scores.get)
    split = split_name(source_path)
    record = {
        "split": split,
        "metric": task.primary,
        "scores": {f"{alpha:g}": score for alpha, score in scores.items()},
        "chosen_alpha": chosen,
    }
    path = Path(output_dir) / f"{split}.beam{search.beam_size}.alpha_tuning.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return chosen, results[chosen]
