"""Fixtures the serving tests share."""

import json
import shutil

import pytest

from keras_transformer.export.layout import MODEL_INFO


@pytest.fixture(scope="session")
def multilingual(exported, tmp_path_factory):
    """A copy of `exported` whose model_info.json names it a multilingual model: English into
    French and Czech, each led by its token, as an imported tc-big model is."""
    base = tmp_path_factory.mktemp("multilingual") / "m30k-en-multi"
    shutil.copytree(exported, base)
    info_path = base / "1" / MODEL_INFO
    info = json.loads(info_path.read_text())
    info |= {"target_language": None, "target_language_tokens": {"fr": ">>fra<<", "cs": ">>ces<<"}}
    info_path.write_text(json.dumps(info))
    return base
