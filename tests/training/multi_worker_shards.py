"""One worker of the 2-process prepared-shards test (run by test_multi_worker_shards.py).

Usage: python multi_worker_shards.py PREPARED_DIR OUTPUT.json BATCH_TOKENS MAX_LENGTH
(TF_CONFIG set by the caller)

Builds MultiWorkerMirroredStrategy and reads one epoch of the prepared train split in the
trainer's own mode: repeated through `strategy.distribute_datasets_from_function`, as the
trainer's `prepared_shards` reads it, for the steps `trainer.steps_per_epoch` counts from the
pairs' lengths. Writes every row this worker's replicas got, with the input context it was given
and the steps it read.
"""

import json
import sys

import tensorflow as tf

from keras_transformer.training.trainer import steps_per_epoch
from pipelines.batching import BatchingSettings, batches_per_pass
from pipelines.prepared import prepared_dataset, prepared_length_counts


def main(directory, output, batch_tokens, max_length):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    boundaries = [max_length + 1]  # one bucket: every batch holds the same number of pairs
    contexts = []

    def batches(context):
        contexts.append(
            {
                "num_input_pipelines": context.num_input_pipelines,
                "input_pipeline_id": context.input_pipeline_id,
                "num_replicas_in_sync": context.num_replicas_in_sync,
            }
        )
        return prepared_dataset(
            directory,
            "train",
            BatchingSettings(
                batch_tokens, max_length, boundaries, shuffle=True, seed=7, repeat=True
            ),
            num_shards=context.num_input_pipelines,
            shard_index=context.input_pipeline_id,
        )

    counts = prepared_length_counts(directory, "train", max_length)
    pass_batches = batches_per_pass(counts, batch_tokens, max_length, boundaries)
    steps = steps_per_epoch(pass_batches, strategy.num_replicas_in_sync)
    rows = []
    dataset = strategy.distribute_datasets_from_function(batches)
    for _, batch in zip(range(steps), dataset, strict=False):  # the steps of one epoch
        (sources, _), targets = tf.nest.map_structure(strategy.experimental_local_results, batch)
        for source, target in zip(sources, targets, strict=True):  # this worker's replicas
            for source_row, target_row in zip(source.numpy(), target.numpy(), strict=True):
                rows.append(
                    [source_row[source_row != 0].tolist(), target_row[target_row != 0].tolist()]
                )
    result = {
        "contexts": contexts,
        "task_id": strategy.cluster_resolver.task_id,
        "num_replicas_in_sync": strategy.num_replicas_in_sync,
        "steps": steps,
        "rows": rows,
    }
    with open(output, "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
