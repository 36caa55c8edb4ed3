"""Sequence-level knowledge distillation (Kim & Rush, 2016): beyond the paper.

A trained model, or an ensemble of them, translates the source side of the training split by
beam search (§6.1's search), and a student trains on the original pairs together with these
translations. The beam's outputs are more regular than human references, so a small student
learns the teacher's mode rather than the spread of the references; on Multi30k an ensemble
teacher lifts a single student that way (docs/RESULTS.md).

`distill_data_dir` writes that training data as a data directory `train --data-dir` reads
like the original one: the training split's files hold the original pairs followed by the
distilled ones, and every other split's files are links to the originals, so validation and
test still score against the references.

Example:

```
keras-transformer distill --model runs/teacher --ensemble runs/teacher2 \\
    --data-dir ../shared/data/multi30k --output runs/distilled-data --jit-compile
keras-transformer train --preset multi30k --data-dir runs/distilled-data --output runs/student
```
"""

import gzip
import json
import logging
import os
import time
from pathlib import Path

logger = logging.getLogger(__name__)

RECORD = "distillation.json"


def distill_data_dir(translator, files, output_dir, present, teachers, **search) -> Path:
    """Writes `output_dir`: `files`' training pairs plus the translator's, other splits linked.

    Args:
        translator: the teacher, a `Translator` (one model or an ensemble).
        files: `{split: (source_path, target_path)}` of the original data, `corpus_files`'.
        output_dir: the new data directory; its files take the original files' names.
        present: `(source, translation) -> text`, the task's, as `translate` writes lines.
        teachers: the weights files decoding, recorded in `distillation.json`.
        search: `beam_size`, `alpha`, `extra_length` for `Translator.translate`.
    """
    from pipelines.corpus import read_aligned_lines

    source_path, target_path = files["train"]
    sources, references = read_aligned_lines(source_path, target_path)
    start = time.perf_counter()
    translations = translator.translate(sources, **search)
    seconds = time.perf_counter() - start
    distilled = [present(s, t) for s, t in zip(sources, translations, strict=True)]

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_lines(output_dir / Path(source_path).name, sources + sources)
    write_lines(output_dir / Path(target_path).name, references + distilled)
    for split, paths in files.items():
        if split != "train":
            for path in paths:
                link(output_dir / Path(path).name, Path(path))
    record = {
        "teachers": [str(t) for t in teachers],
        "search": search,
        "training_pairs": len(sources),
        "empty_translations": sum(not t.strip() for t in distilled),
        "same_as_reference": sum(t == r for t, r in zip(distilled, references, strict=True)),
        "decode_seconds": round(seconds, 1),
    }
    (output_dir / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    logger.info("distilled %d training pairs into %s: %s", len(sources), output_dir, record)
    return output_dir


def write_lines(path: Path, lines) -> None:
    """One line each, gzipped when `path` ends in .gz (as the file it stands in for)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as file:
        file.writelines(line + "\n" for line in lines)


def link(path: Path, original: Path) -> None:
    """`path` → the absolute `original`; an existing link is replaced (a rerun)."""
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(original.resolve(), path)
