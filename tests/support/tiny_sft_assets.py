"""What an SFT run on CPU needs and this machine cannot download: a tiny causal language model (Qwen2's
architecture, random weights, two layers), a word-level tokenizer for it, and a dataset in GSM8K's layout (a `main`
configuration with train and test splits of question/answer rows) that AReaL's gsm8k loader reads with
`datasets.load_dataset(path, name="main")`. Run in AReaL's environment (transformers, tokenizers, pyarrow):

    python -m tiny_sft_assets DIRECTORY      # writes DIRECTORY/model and DIRECTORY/gsm8k
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL = ["<unk>", "<pad>", "<eos>"]
DATASET_CARD = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
Sums of two numbers, in GSM8K's question/answer form.
"""


def sums(count: int, seed: int) -> list[dict[str, str]]:
    chosen = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = chosen.randint(1, 50), chosen.randint(1, 50)
        rows.append({"question": f"What is {a} plus {b}? ", "answer": f"{a} plus {b} is {a + b}. #### {a + b}"})
    return rows


def write_dataset(directory: Path, train: list[dict], test: list[dict]) -> None:
    (directory / "main").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(train), directory / "main" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(test), directory / "main" / "test-00000-of-00001.parquet")
    (directory / "README.md").write_text(DATASET_CARD)


def write_model(directory: Path, texts: list[str]) -> None:
    words = Tokenizer(models.WordLevel(unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    words.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=SPECIAL))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")
    tokenizer.save_pretrained(directory)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    Qwen2ForCausalLM(config).save_pretrained(directory)


def main(directory: Path) -> None:
    train, test = sums(64, seed=0), sums(16, seed=1)
    write_dataset(directory / "gsm8k", train, test)
    numbers = [str(n) for n in range(101)]
    write_model(directory / "model", [row["question"] + row["answer"] for row in train + test] + numbers)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
