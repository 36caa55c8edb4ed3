"""`keras-transformer import`: a pretrained Marian (OPUS-MT) checkpoint as a run directory.

The run directory it writes is one every command accepts as a trained run:

    config.json          the `TransformerConfig` read from the checkpoint's config.json
    run.json             `imported_from` (the directory or hub name), the language codes, and
                         `search`: the checkpoint's own search (`generation_config`), which
                         every command decodes with unless its flags change it
    model.weights.h5     the weights, in this package's id order
    source.spm           the source SentencePiece model  } `pipelines.MarianTokenizer`
    target.spm           the target SentencePiece model  }
    vocabulary.txt       the shared vocabulary in this package's id order
    vocab.json           Marian's own vocabulary, which exports give Marian's id order back with

It is written into `partial-NAME/` beside the output and renamed to it once complete: an import
that fails (a refused setting, a broken weights file, a full disk) or is killed leaves no run
directory behind. A source is a Hugging Face checkpoint directory, a Marian release directory
(`marian_release`: it holds decoder.yml), or a name like `owner/name`, downloaded from the
Hugging Face Hub with `huggingface_hub` (the `pretrained` extra).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
from pathlib import Path

from durable_files import copy_atomically, sync_to_disk
from keras_transformer import run_directory
from keras_transformer.config import ConfigError
from keras_transformer.errors import KerasTransformerError
from keras_transformer.model import Transformer
from keras_transformer.pretrained.generation_config import generation_search
from keras_transformer.pretrained.marian import (
    CHECKPOINT_FILES,
    SOURCE_SPM,
    TARGET_SPM,
    WEIGHTS_FILES,
    MarianCheckpoint,
    assign_weights,
    vocabulary_pieces,
)
from keras_transformer.pretrained.marian_release import MarianRelease, holds_marian_release
from pipelines.marian_tokenizer import VOCABULARY

logger = logging.getLogger(__name__)

# A Hugging Face Hub repository id: `Helsinki-NLP/opus-mt-en-de`.
HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")


@dataclasses.dataclass(frozen=True)
class ImportOptions:
    """How a checkpoint is imported."""

    max_length: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "longest sequence, source or target, the imported model handles (default: "
            "the checkpoint's max_position_embeddings; a Marian release's decoder.yml "
            "max-length, else 1000; it may only lower it): the size of the decoding cache, "
            "preallocated at it, and of exports"
        },
    )


class DownloadError(KerasTransformerError, RuntimeError):
    """A checkpoint could not be downloaded from the Hugging Face Hub; the message says why."""


def import_checkpoint(source, output, options: ImportOptions = ImportOptions()) -> Path:
    """Imports the Marian checkpoint `source` (a directory, or a hub name) into the new run
    directory `output`; returns `output`."""
    output = Path(output)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ConfigError(f"output {output} exists: an import writes a new run directory")
    directory, imported_from = checkpoint_directory(source)
    reader = MarianRelease if holds_marian_release(directory) else MarianCheckpoint
    checkpoint = reader(directory)
    config = checkpoint.transformer_config(options.max_length)
    order = checkpoint.vocabulary_order()
    model = Transformer(config)
    assign_weights(model, checkpoint.tensors, order)
    source_language, target_language = checkpoint.languages
    search, left_out = generation_search(checkpoint.generation, checkpoint.generation_path)
    settings = {
        "imported_from": imported_from,
        "source_language": source_language,
        "target_language": target_language,
        "search": search,
    }
    with _new_directory(output) as partial:
        run_directory.write_text_atomically(partial / run_directory.CONFIG_FILE, config.to_json())
        run_directory.write_settings(partial, {k: v for k, v in settings.items() if v})
        run_directory.save_weights_atomically(model, partial / run_directory.FINAL_WEIGHTS)
        for name in (SOURCE_SPM, TARGET_SPM):
            copy_atomically(directory / name, partial / name)
        marian_ids = {piece: i for i, piece in enumerate(checkpoint.vocabulary)}
        text = json.dumps(marian_ids, ensure_ascii=False)
        run_directory.write_text_atomically(partial / run_directory.MARIAN_VOCABULARY_JSON, text)
        pieces = vocabulary_pieces(checkpoint, order)
        run_directory.write_text_atomically(partial / VOCABULARY, "".join(p + "\n" for p in pieces))
    logger.info(
        "%s decodes as %s says: %s%s",
        output,
        checkpoint.generation_path,
        ", ".join(f"{name} {value}" for name, value in search.items()),
        f"; left out: {', '.join(left_out)}" if left_out else "",
    )
    return output


@contextlib.contextmanager
def _new_directory(output: Path):
    """Yields `partial-NAME/` beside `output`, renamed to `output` when the block ends well
    (atomic: `output` is absent or empty) and removed when it raises."""
    partial = output.with_name(f"partial-{output.name}")
    shutil.rmtree(partial, ignore_errors=True)  # left by an import that was killed
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    os.replace(partial, output)
    sync_to_disk(output.parent)


def checkpoint_directory(source) -> tuple[Path, str]:
    """The checkpoint directory of `source`, and what run.json records it as: a directory as
    itself (absolute), a hub name as downloaded (`download`)."""
    path = Path(source)
    if path.is_dir():
        return path, str(path.resolve())
    if path.exists() or not HUB_NAME.fullmatch(str(source)):
        raise ConfigError(f"source {source} is neither a checkpoint directory nor a hub name")
    return download(str(source)), str(source)


def download(name: str) -> Path:
    """The files of hub repository `name` that an import reads (model.safetensors where the
    repository has it, else pytorch_model.bin), downloaded into huggingface_hub's cache."""
    try:
        import huggingface_hub
    except ModuleNotFoundError:
        raise DownloadError(
            f"importing {name} from the Hugging Face Hub needs huggingface_hub: "
            "pip install 'keras-transformer[pretrained]'"
        ) from None
    try:
        directory = None
        for weights in WEIGHTS_FILES:  # the first the repository has; each call adds to one copy
            directory = Path(
                huggingface_hub.snapshot_download(name, allow_patterns=[*CHECKPOINT_FILES, weights])
            )
            if (directory / weights).is_file():
                break
    except (OSError, huggingface_hub.errors.HFValidationError) as error:
        raise DownloadError(f"cannot download {name} from the Hugging Face Hub: {error}") from error
    return directory
