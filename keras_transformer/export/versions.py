"""Version directories in TensorFlow Serving's layout, `<base>/<version>/`, as the SavedModel and
TFLite exports write them: the next integer version, written to a hidden directory first,
flushed to the disk and renamed into place, so a server watching `<base>` never sees half a
model. Exports to one base take turns (an advisory lock on `<base>`), so that concurrent ones get
versions of their own; one that cannot write (a full disk) leaves no version and says why. Each
version also holds `layout.MODEL_INFO`: the languages it translates and its search.
"""

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

import tensorflow as tf

from durable_files import WriteError, hold_lock, sync_to_disk, write_atomically, write_error
from keras_transformer.export.layout import MODEL_INFO
from keras_transformer.search_settings import SearchSettings

logger = logging.getLogger(__name__)


def versions(base) -> list[int]:
    """The integer version directories under `base`, ascending."""
    base = Path(base)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def write_next_version(base, write) -> Path:
    """Calls `write(staging)` to fill the next version of `base` in a hidden staging directory,
    then renames it into place; returns the version's path."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    with hold_lock(base):
        version = (versions(base) or [0])[-1] + 1
        final, staging = base / str(version), base / f".{version}.partial"
        shutil.rmtree(staging, ignore_errors=True)  # a killed export's
        try:
            staging.mkdir()
            write(staging)
            for path in [*staging.rglob("*"), staging]:
                sync_to_disk(path)
        except WriteError:  # one of our own files', naming it
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except (OSError, tf.errors.OpError) as error:
            shutil.rmtree(staging, ignore_errors=True)
            raise write_error(staging, error) from error
        os.rename(staging, final)
        sync_to_disk(base)
    logger.info("exported version %d to %s", version, final)
    return final


def model_info(translator, languages, search: SearchSettings, max_length=None) -> dict:
    """The `MODEL_INFO` of `translator` translating `languages`, (source, target) codes, with
    `search` its default, taking sources of at most `max_length` subwords with EOS (default:
    the model's)."""
    tokens = {code: f">>{code}<<" for code in getattr(translator.tokenizer, "target_languages", [])}
    return {
        "source_language": languages[0],
        "target_language": languages[1],
        "target_language_tokens": tokens,
        "max_length": max_length or translator.model.config.max_length,
        "search": dataclasses.asdict(search),
    }


def write_model_info(version_dir: Path, info: dict):
    path = version_dir / MODEL_INFO
    path.parent.mkdir(exist_ok=True)
    text = json.dumps(info, ensure_ascii=False, indent=2) + "\n"
    write_atomically(path, lambda partial: partial.write_text(text, encoding="utf-8"))
