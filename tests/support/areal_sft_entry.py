"""An AReaL SFT entry point written as AReaL's own are (examples/math/gsm8k_sft.py in AReaL's repository): the
config parser, the tokenizer, the datasets and AReaL's SFTTrainer, which builds the scheduler `scheduler.type` names
and trains. Nothing here knows of areal-workers: run as `python areal_sft_entry.py --config sft.yaml` with
`scheduler.type: kubernetes` it ends in AReaL's `NotImplementedError: Unknown scheduler type`, and through
`python -m areal_workers.launch` (what `areal-workers submit` runs) it trains on the cluster's workers."""

import sys

from areal import SFTTrainer
from areal.api.cli_args import SFTConfig, load_expr_config
from areal.dataset import get_custom_dataset
from areal.utils.hf_utils import load_hf_tokenizer


def main(argv: list[str]) -> None:
    config, _ = load_expr_config(argv, SFTConfig)
    tokenizer = load_hf_tokenizer(config.tokenizer_path)
    train_dataset = get_custom_dataset(split="train", dataset_config=config.train_dataset, tokenizer=tokenizer)
    valid_dataset = get_custom_dataset(split="test", dataset_config=config.valid_dataset, tokenizer=tokenizer)
    with SFTTrainer(config, train_dataset=train_dataset, valid_dataset=valid_dataset) as trainer:
        trainer.train()


if __name__ == "__main__":
    main(sys.argv[1:])
