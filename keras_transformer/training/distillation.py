"""Sequence-level knowledge distillation (Kim & Rush, 2016): beyond the paper.

A trained model, or an ensemble of them, translates the source side of the training split by
beam search (§6.1's search), and a student trains on the original pairs together with these
translations (or, `--translations-only`, on the translations alone). The beam's outputs are
more regular than human references, so a small student learns the teacher's mode rather than
the spread of the references; on Multi30k an ensemble teacher lifts a single student that way
(docs/RESULTS.md).

`distill_data_dir` writes that training data as a data directory laid out like the original
one: the training split's files hold the original pairs followed by the distilled ones (or the
distilled ones only), and every other split's files are links to the originals, so validation
and test still score against the references. A teacher trained on a prepared corpus
(`train --data`) translates the text files the corpus was prepared from (`text_to_distill`);
the copy is then prepared with the teacher's vocabulary (`prepare --subwords`), the ids a
student resuming the teacher's weights must read.

Example:

```
keras-transformer distill --model runs/teacher --ensemble runs/teacher2 \\
    --output runs/distilled-text --jit-compile
keras-transformer prepare --dataset multi30k --data-dir runs/distilled-text \\
    --subwords runs/teacher/subwords.model --output runs/distilled
keras-transformer train --preset multi30k --data runs/distilled --output runs/student
```

A teacher trained on text files (`train --data-dir`) writes a copy that a student trains on as
text: `train --data-dir runs/distilled-text --subwords runs/teacher/subwords.model`.
"""

import dataclasses
import gzip
import json
import logging
import os
import time
from pathlib import Path

from durable_files import write_atomically
from keras_transformer.errors import ConfigError
from pipelines.corpus import CorpusError, read_aligned_lines
from pipelines.prepared import input_text_files

logger = logging.getLogger(__name__)

RECORD = "distillation.json"


def distill_data_dir(
    translator,
    files,
    data_dir,
    output_dir,
    present,
    teachers,
    with_references=True,
    search=None,
) -> Path:
    """Writes `output_dir`: `files`' training pairs plus the translator's, other splits linked.

    Args:
        translator: the teacher, a `Translator` (one model or an ensemble).
        files: `{split: (source_path, target_path)}` of the original data, `corpus_files`'.
        data_dir: the directory `files` were found in; `output_dir` mirrors its layout.
        output_dir: the new data directory, for `train --data-dir`.
        present: `(source, translation) -> text`, the task's, as `translate` writes lines.
        teachers: the weights files decoding, recorded in `distillation.json`.
        with_references: keep the original pairs before the translated ones; without them the
            student learns the teacher's outputs alone (its validation loss against the
            references then rises, docs/RESULTS.md).
        search: the `SearchSettings` of `Translator.translate` (default: the translator's).
    """
    search = search or translator.search
    if Path(output_dir).resolve() == Path(data_dir).resolve():
        raise ConfigError(f"output_dir {output_dir} holds the original data: name a new directory")
    mirrored = mirrored_paths(files, data_dir, output_dir)  # fails before minutes of decoding
    source_path, target_path = files["train"]
    sources, references = read_aligned_lines(source_path, target_path)
    start = time.perf_counter()
    translations = translator.translate(sources, search)
    seconds = time.perf_counter() - start
    distilled = [present(s, t) for s, t in zip(sources, translations, strict=True)]

    kept = (sources, references) if with_references else ([], [])
    write_lines(mirrored["train"][0], kept[0] + sources)
    write_lines(mirrored["train"][1], kept[1] + distilled)
    for split, paths in files.items():
        if split != "train":
            for path, copy in zip(paths, mirrored[split], strict=True):
                link(copy, Path(path))
    record = {
        "teachers": [str(t) for t in teachers],
        "search": dataclasses.asdict(search),
        "training_pairs": len(sources),
        "with_references": with_references,
        "empty_translations": sum(not t.strip() for t in distilled),
        "same_as_reference": sum(t == r for t, r in zip(distilled, references, strict=True)),
        "decode_seconds": round(seconds, 1),
    }
    # Last and whole: its presence means the data directory is complete (make's mark of it).
    text = json.dumps(record, indent=2) + "\n"
    write_atomically(Path(output_dir) / RECORD, lambda partial: partial.write_text(text))
    logger.info("distilled %d training pairs into %s: %s", len(sources), output_dir, record)
    return output_dir


def text_to_distill(dataset, data_dir, files) -> tuple[Path, dict]:
    """The directory and `{split: (source_path, target_path)}` that `distill` translates and
    mirrors, given a run's corpus (`run_directory.run_corpus`). A prepared corpus keeps no
    training text: the files it was prepared from stand in, in the directory that holds them all
    (the Multi30k layout of `prepare --dataset multi30k`, which the copy keeps)."""
    if dataset != "prepared":
        return Path(data_dir), files
    files = input_text_files(data_dir)
    parents = [path.parent for paths in files.values() for path in paths]
    return Path(os.path.commonpath(parents)), files


def mirrored_paths(files, data_dir, output_dir) -> dict:
    """`files` with `output_dir` in place of `data_dir`; raises for a file read from elsewhere
    (a dataset prepared from an archive into a cache, as ptb is, would never read the copy)."""
    data_dir = Path(os.path.abspath(data_dir))
    mirrored = {}
    for split, paths in files.items():
        try:
            relative = [Path(os.path.abspath(path)).relative_to(data_dir) for path in paths]
        except ValueError:
            raise CorpusError(
                f"{paths[0]} is not a file of {data_dir}: this dataset is not read from files "
                "in data_dir, so a distilled copy of them would never be trained on"
            ) from None
        mirrored[split] = tuple(Path(output_dir) / path for path in relative)
        mirrored[split][0].parent.mkdir(parents=True, exist_ok=True)
    return mirrored


def write_lines(path: Path, lines) -> None:
    """One line each, gzipped when `path` ends in .gz (as the file it stands in for); written
    whole or not at all, so an interrupted run never leaves a truncated training split."""

    def write(partial):
        opener = gzip.open if partial.suffix == ".gz" else open
        with opener(partial, "wt", encoding="utf-8") as file:
            file.writelines(line + "\n" for line in lines)

    write_atomically(path, write)


def link(path: Path, original: Path) -> None:
    """`path` → the absolute `original`; an existing link is replaced (a rerun)."""
    path.unlink(missing_ok=True)
    os.symlink(original.resolve(), path)
