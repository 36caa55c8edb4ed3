"""One version of a model as TensorFlow Serving holds it: loaded signatures, the SignatureDefMap
its metadata API returns, its state (LOADING, AVAILABLE, UNLOADING, END), and the requests in
flight on it, so that it is unloaded only once they are answered.
"""

import json
import logging
import re
import threading
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, prediction_log_pb2

from keras_transformer.export.layout import (
    MODEL_INFO,
    TFLITE_MODEL,
    TFLITE_TOKENIZER_NOTE,
    WARMUP_REQUESTS,
    tflite_tokenizer_directory,
)
from keras_transformer.server.errors import ServingError, bad_request
from keras_transformer.server.models.limits import Limits, declared_shape

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"

LOADING, AVAILABLE, UNLOADING, END = "LOADING", "AVAILABLE", "UNLOADING", "END"


def is_tflite_version(path: Path) -> bool:
    """Whether the version directory `path` holds a TFLite export rather than a SavedModel."""
    return (Path(path) / TFLITE_MODEL).is_file()


def incomplete(path: Path) -> str | None:
    """Why the version directory `path` is not (yet) a whole SavedModel or TFLite export, or
    None."""
    if is_tflite_version(path):
        note = tflite_tokenizer_directory(path / TFLITE_MODEL) / TFLITE_TOKENIZER_NOTE
        return None if note.is_file() else f"no {note.relative_to(path)}"
    if not (path / "saved_model.pb").is_file():
        return "no saved_model.pb"
    if not (path / "variables" / "variables.index").is_file():
        return "no variables/variables.index"
    return None


# What TensorFlow wraps around an op's error: the node and function it ran in, and an Assert's
# "assertion failed: [...]" around the message the graph gave it.
NODE_NAMES = re.compile(r"\s*\[\[\{\{node [^}]*\}\}\]\]|\s*\[Op:[^\]]*\]")
ASSERTION = re.compile(r"assertion failed: \[(.*)\]")


def graph_error_message(message: str) -> str:
    """The words of a signature's InvalidArgumentError: an Assert's own message (the graph's
    checks name the input and what it may be), or the failing op's, without TensorFlow's
    header, stack and node names."""
    last = NODE_NAMES.sub("", message).strip().splitlines()[-1].strip()
    assertion = ASSERTION.fullmatch(last)
    return assertion.group(1) if assertion else last


def variable_bytes(functions) -> int:
    """The bytes of the variables that the concrete `functions` read, each counted once."""
    variables = {id(v): v for function in functions for v in function.variables}.values()
    return sum(v.shape.num_elements() * v.dtype.size for v in variables)


class Servable:
    """Version `version` of model `name` at `path`; `load()` makes it AVAILABLE."""

    def __init__(self, name, version: int, path: Path):
        self.name = name
        self.version = version
        self.path = Path(path)
        self.state = LOADING
        self.error = ""
        self.signatures = {}
        self.signature_def_map = get_model_metadata_pb2.SignatureDefMap()
        self.warmup_requests = 0
        self.info = {}  # MODEL_INFO: the languages it translates; {} for an export without it
        self.weight_bytes = 0  # the loaded variables'
        self._in_flight = 0
        self._idle = threading.Condition()

    def load(self):
        """Loads the SavedModel and runs its warm-up requests; AVAILABLE once done."""
        loaded = tf.saved_model.load(str(self.path))
        self.signatures = dict(loaded.signatures)
        self.weight_bytes = variable_bytes(self.signatures.values())  # while `loaded` holds them
        info = self.path / MODEL_INFO
        self.info = json.loads(info.read_text(encoding="utf-8")) if info.is_file() else {}
        saved_model = saved_model_pb2.SavedModel.FromString(
            (self.path / "saved_model.pb").read_bytes()
        )
        for key, signature in saved_model.meta_graphs[0].signature_def.items():
            if not key.startswith("__"):  # TF's internal entries (e.g. __saved_model_init_op)
                self.signature_def_map.signature_def[key].CopyFrom(signature)
        self.warmup_requests = self._warm_up(self.path / WARMUP_REQUESTS)
        self.state = AVAILABLE
        logger.info("version %d of %s is available (%s)", self.version, self.name, self.path)

    def _warm_up(self, records) -> int:
        """Runs the version's warm-up requests, as TensorFlow Serving does at load (an export
        with XLA compiles its search for the common source widths there); returns their count."""
        if not records.exists():
            return 0
        start = time.perf_counter()
        count = 0
        unlimited = Limits(max_sentences_per_request=2**31, max_source_length=2**31)
        for count, serialized in enumerate(tf.data.TFRecordDataset(str(records)), start=1):
            request = prediction_log_pb2.PredictionLog.FromString(serialized.numpy()).predict_log
            try:
                name = request.request.model_spec.signature_name
                self.run(name, self.arrays_from_protos(name, request.request.inputs, unlimited))
            except ServingError as error:
                raise ValueError(f"warm-up request {count} of {records} failed: {error}") from None
        logger.info("ran %d warm-up requests in %.1f s", count, time.perf_counter() - start)
        return count

    def unload(self):
        """UNLOADING until the requests in flight are answered, then END."""
        self.state = UNLOADING
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)
        self.signatures = {}
        self.state = END
        logger.info("version %d of %s is unloaded", self.version, self.name)

    def acquire(self):
        with self._idle:
            self._in_flight += 1

    def release(self):
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def signature(self, signature_name):
        """(name, concrete function) of `signature_name`, or the default signature's."""
        name = signature_name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise bad_request(
                f'Serving signature name: "{name}" not found in signature def; '
                f"signatures: {sorted(self.signatures)}"
            )
        return name, self.signatures[name]

    def input_specs(self, signature_name) -> dict:
        return self.signature(signature_name)[1].structured_input_signature[1]

    def output_names(self, signature_name) -> list:
        return sorted(self.signature(signature_name)[1].structured_outputs)

    def arrays(self, signature_name, inputs: dict, limits: Limits) -> dict:
        """Named inputs (JSON values: nested lists or scalars) as numpy arrays of the
        signature's dtypes, checked against its specs and `limits`: the shape their lists
        declare before numpy builds anything of that size, as `arrays_from_protos` does."""
        specs = self._exact_inputs(signature_name, inputs)
        arrays = {}
        for name, spec in specs.items():
            limits.check_shape(name, declared_shape(inputs[name], spec.shape.rank), spec)
            try:
                array = np.asarray(inputs[name])
            except (TypeError, ValueError) as error:
                raise bad_request(f"input {name!r} is not a tensor: {error}") from None
            limits.check_shape(name, list(array.shape), spec)
            arrays[name] = self._typed(name, array, spec, limits)
        return arrays

    def arrays_from_protos(self, signature_name, protos, limits: Limits) -> dict:
        """`PredictRequest.inputs` as numpy arrays: each declared shape is checked against the
        limits before `tf.make_ndarray` allocates it."""
        specs = self._exact_inputs(signature_name, protos)
        arrays = {}
        for name, spec in specs.items():
            proto = protos[name]
            if proto.tensor_shape.unknown_rank:
                raise bad_request(f"input {name!r} has no shape")
            limits.check_shape(name, [d.size for d in proto.tensor_shape.dim], spec)
            try:
                array = tf.make_ndarray(proto)
            except (TypeError, ValueError) as error:
                raise bad_request(f"malformed input tensor: {error}") from None
            arrays[name] = self._typed(name, array, spec, limits)
        return arrays

    def _exact_inputs(self, signature_name, inputs) -> dict:
        specs = self.input_specs(signature_name)
        missing, unknown = sorted(set(specs) - set(inputs)), sorted(set(inputs) - set(specs))
        if missing or unknown:
            raise bad_request(
                f"inputs must be exactly {sorted(specs)}; missing {missing}, unknown {unknown}"
            )
        return specs

    @staticmethod
    def _typed(name, array, spec, limits):
        limits.check_values(name, array, spec)
        try:
            return tf.constant(array, dtype=spec.dtype).numpy()
        except (TypeError, ValueError) as error:
            raise bad_request(f"input {name!r} is not {spec.dtype.name}: {error}") from None

    def run(self, signature_name, arrays: dict) -> dict:
        """Runs a signature on checked arrays; returns numpy outputs."""
        _, function = self.signature(signature_name)
        try:
            outputs = function(**{k: tf.constant(v) for k, v in arrays.items()})
        except tf.errors.InvalidArgumentError as error:
            raise bad_request(graph_error_message(error.message)) from None
        return {name: value.numpy() for name, value in outputs.items()}
