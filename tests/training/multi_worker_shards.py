"""One worker of the 2-process prepared-shards test (run by test_multi_worker_shards.py).

Usage: python multi_worker_shards.py PREPARED_DIR OUTPUT.json BATCH_TOKENS MAX_LENGTH
(TF_CONFIG set by the caller)

Builds MultiWorkerMirroredStrategy, reads one epoch of the prepared train split through
`strategy.distribute_datasets_from_function`, as the trainer's `prepared_shards` does, and writes
every real (non-padding) row this worker's replicas got, with the input context it was given.
"""

import json
import sys

import tensorflow as tf

from pipelines.batching import BatchingSettings
from pipelines.prepared import prepared_dataset


def main(directory, output, batch_tokens, max_length):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
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
            BatchingSettings(batch_tokens, max_length, shuffle=True, seed=7, repeat=False),
            num_shards=context.num_input_pipelines,
            shard_index=context.input_pipeline_id,
        )

    dataset = strategy.distribute_datasets_from_function(batches)
    rows, batch_count, empty_batches = [], 0, 0
    # The iterator agrees with the other worker on whether any still has data: a worker whose
    # share runs out first gets empty batches until the other's ends too.
    for batch in dataset:
        batch_count += 1
        (sources, _), targets = tf.nest.map_structure(strategy.experimental_local_results, batch)
        empty_batches += not any(len(source) for source in sources)
        for source, target in zip(sources, targets, strict=True):  # this worker's replicas
            for source_row, target_row in zip(source.numpy(), target.numpy(), strict=True):
                if source_row.any():  # not a padding row
                    rows.append(
                        [source_row[source_row != 0].tolist(), target_row[target_row != 0].tolist()]
                    )
    result = {
        "contexts": contexts,
        "task_id": strategy.cluster_resolver.task_id,
        "num_replicas_in_sync": strategy.num_replicas_in_sync,
        "batches": batch_count,
        "empty_batches": empty_batches,
        "rows": rows,
    }
    with open(output, "w") as file:
        json.dump(result, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
