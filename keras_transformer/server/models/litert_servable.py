"""A version whose directory holds a TFLite export (`layout.TFLITE_MODEL`, the file TensorFlow
Serving's `--prefer_tflite_model` reads) served through LiteRT: the server's int8 path on a CPU
(`export --format tflite --quantize dynamic` to a base path), where TensorFlow's own int8 kernels
are slower than its float32 ones (docs/PRETRAINED_PERFORMANCE.md).

It offers the signatures of the SavedModel's that a TFLite model can answer, with its search
fixed at export:

    serving_default    text [None] string              -> translations [None] string,
                                                          scores [None] float32
    translate_options  text, beam_size [] int32, alpha [] float32,
                       extra_length [] int32           -> translations, scores,
                                                          n_best_translations [None, beam],
                                                          n_best_scores [None, beam]
    source_lengths     text                            -> source_lengths [None] int32

`translate_options` takes only the export's own search (any other is refused, naming it) and
returns one hypothesis: its n-best columns after the first are the empty slots of a SavedModel's
(an empty translation, `NEG_INF`), and the first holds the best's score as `scores` gives it
(log P for a greedy export, where a SavedModel's n-best scores divide by the length penalty).
There is no `attention` signature and no `translate_ids`.
The interpreter decodes the batch size fixed at export (`export --batch-size`, 1 by default) a
call, in turns; sentences longer than the export's source length are cut, as the SavedModel cuts
at the model's `max_length`.
"""

import json
import logging
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2

from keras_transformer.decoding.beam_search import NEG_INF
from keras_transformer.export.layout import MODEL_INFO, TFLITE_MODEL
from keras_transformer.export.tflite_translator import TFLiteTranslator
from keras_transformer.server.errors import bad_request
from keras_transformer.server.models.servable import AVAILABLE, Servable

logger = logging.getLogger(__name__)

TEXT = tf.TensorSpec([None], tf.string, name="text")
SEARCH_INPUTS = {
    "beam_size": tf.TensorSpec([], tf.int32, name="beam_size"),
    "alpha": tf.TensorSpec([], tf.float32, name="alpha"),
    "extra_length": tf.TensorSpec([], tf.int32, name="extra_length"),
}
PREDICT_METHOD = "tensorflow/serving/predict"


@dataclass
class PythonSignature:
    """A signature run in Python, shaped as a loaded SavedModel's concrete function is where the
    server reads one: named input specs, named outputs, called with tensors."""

    inputs: dict
    outputs: dict  # name -> tf.TensorSpec
    function: object  # (**numpy arrays) -> {name: numpy array}

    @property
    def structured_input_signature(self):
        return (), self.inputs

    @property
    def structured_outputs(self):
        return self.outputs

    def __call__(self, **tensors):
        outputs = self.function(**{name: tensor.numpy() for name, tensor in tensors.items()})
        return {name: tf.constant(value) for name, value in outputs.items()}

    def signature_def(self) -> meta_graph_pb2.SignatureDef:
        definition = meta_graph_pb2.SignatureDef(method_name=PREDICT_METHOD)
        for specs, infos in ((self.inputs, definition.inputs), (self.outputs, definition.outputs)):
            for name, spec in specs.items():
                infos[name].CopyFrom(
                    meta_graph_pb2.TensorInfo(
                        name=f"{name}:0",
                        dtype=spec.dtype.as_datatype_enum,
                        tensor_shape=spec.shape.as_proto(),
                    )
                )
        return definition


class LiteRTServable(Servable):
    """Version `version` of model `name`: the TFLite export in `path` (see the module doc)."""

    def load(self):
        model = self.path / TFLITE_MODEL
        self.translator = TFLiteTranslator(model)
        if self.translator.search is None:
            raise ValueError(f"{model}'s tokenizer note records no search: export it again")
        info = self.path / MODEL_INFO
        self.info = json.loads(info.read_text(encoding="utf-8")) if info.is_file() else {}
        self.weight_bytes = model.stat().st_size
        self.signatures = self._signatures()
        for name, signature in self.signatures.items():
            self.signature_def_map.signature_def[name].CopyFrom(signature.signature_def())
        self.state = AVAILABLE
        logger.info("version %d of %s is available (%s, LiteRT)", self.version, self.name, model)

    def unload(self):
        super().unload()
        self.translator = None  # the interpreter and its memory

    def _signatures(self) -> dict[str, PythonSignature]:
        beam = self.translator.search.beam_size
        translations = tf.TensorSpec([None], tf.string, name="translations")
        scores = tf.TensorSpec([None], tf.float32, name="scores")
        n_best = {
            "n_best_translations": tf.TensorSpec([None, beam], tf.string),
            "n_best_scores": tf.TensorSpec([None, beam], tf.float32),
        }
        lengths = tf.TensorSpec([None], tf.int32, name="source_lengths")
        return {
            "serving_default": PythonSignature(
                {"text": TEXT},
                {"translations": translations, "scores": scores},
                self._translate,
            ),
            "translate_options": PythonSignature(
                {"text": TEXT, **SEARCH_INPUTS},
                {"translations": translations, "scores": scores, **n_best},
                self._translate_options,
            ),
            "source_lengths": PythonSignature(
                {"text": TEXT}, {"source_lengths": lengths}, self._source_lengths
            ),
        }

    def _translate(self, text):
        translations, scores = self.translator.translate(_strings(text))
        return {"translations": np.array(translations, object), "scores": scores}

    def _translate_options(self, text, beam_size, alpha, extra_length):
        search = self.translator.search
        asked = (int(beam_size), np.float32(alpha), int(extra_length))
        if asked != (search.beam_size, np.float32(search.alpha), search.extra_length):
            raise bad_request(
                f"this version is a TFLite model that searches with beam_size "
                f"{search.beam_size}, alpha {search.alpha} and extra_length "
                f"{search.extra_length} only (fixed at export); asked beam_size {int(beam_size)}, "
                f"alpha {float(alpha):g}, extra_length {int(extra_length)}"
            )
        outputs = self._translate(text)
        rows = len(outputs["scores"])
        n_best = np.full([rows, search.beam_size], b"", object)
        n_best[:, 0] = [text.encode("utf-8") for text in outputs["translations"]]
        n_best_scores = np.full([rows, search.beam_size], NEG_INF, np.float32)
        n_best_scores[:, 0] = outputs["scores"]
        return {**outputs, "n_best_translations": n_best, "n_best_scores": n_best_scores}

    def _source_lengths(self, text):
        return {
            "source_lengths": np.array(self.translator.source_lengths(_strings(text)), np.int32)
        }


def _strings(text) -> list[bytes]:
    """A request's strings as the tokenizer takes them: bytes, decoded in its graph as a
    SavedModel's are (so bytes that are not UTF-8 get its answer, not a server error)."""
    return np.ravel(text).tolist()
