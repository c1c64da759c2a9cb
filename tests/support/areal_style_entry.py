"""An AReaL entry point written the way AReaL's own are (examples/math/gsm8k_sft.py): AReaL's config parser, then
AReaL's SFTTrainer picking the scheduler that `scheduler.type` names. Nothing here imports areal_workers: run as
`python areal_style_entry.py --config c.yaml scheduler.type=kubernetes` it ends in AReaL's NotImplementedError,
run through `python -m areal_workers.launch` it gets a KubernetesScheduler configured from AREAL_K8S_*.

SFTTrainer's constructor goes on to load a tokenizer, datasets and models, which a CPU test has not got, so this
script runs the part of it a scheduler serves: the trainer's own `_init_scheduler` (the if/elif chain every AReaL
trainer runs) on a trainer holding the parsed config; then what AReaL's TrainController asks of the scheduler for
`actor` (workers from the config's own scheduling_spec, an engine on each, a call, deletion) and prints what it saw
as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from areal.api.cli_args import SFTConfig, load_expr_config
from areal.api.scheduler_api import Job
from areal.trainer.sft_trainer import SFTTrainer

ENGINE = "localworker.areal_engines.Counter"


async def engines(scheduler, workers) -> tuple[list[int], list[str]]:
    for worker in workers:
        await scheduler.create_engine(worker.id, ENGINE, worker.id)
    counts = [
        await scheduler.async_call_engine(worker.id, "increment", worker.id, 1 + rank)
        for rank, worker in enumerate(workers)
    ]
    marks = [await scheduler.async_call_engine(worker.id, "env", worker.id, "PLATFORM_MARK") for worker in workers]
    return counts, marks


def main(argv: list[str]) -> None:
    config, _ = load_expr_config(argv, SFTConfig)
    trainer = SFTTrainer.__new__(SFTTrainer)
    trainer.config = config
    scheduler = trainer._init_scheduler()
    replicas = int(config.actor.backend.rpartition("d")[2])
    ids = scheduler.create_workers(Job(role="actor", replicas=replicas, tasks=list(config.actor.scheduling_spec)))
    workers = scheduler.get_workers("actor")
    counts, marks = asyncio.run(engines(scheduler, workers))
    release = scheduler.release
    scheduler.delete_workers(reverse_order=True)
    print(
        json.dumps(
            {
                "scheduler": type(scheduler).__name__,
                "namespace": scheduler.namespace,
                "release": release,
                "values_files": list(scheduler.config.values_files),
                "ids": ids,
                "workers": [[w.id, w.ip, w.worker_ports] for w in workers],
                "counts": counts,
                "platform_mark": marks,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
