"""Algorithmic tasks (data=task): instances made on the fly, as causal LM sequences scored on the answer.

A sequence is `prompt = answer .` in a character vocabulary, padded with `_` to the training window; the
targets are IGNORE everywhere but the answer and its end mark, so the loss is the answer's alone. An
instance's length n is its input size (symbols, bits or operands); training draws n uniformly from
1..data.max_train_len with the run's own generator (checkpointed, so a resume draws the same ones),
and evaluation asks for longer n. The tasks are those of Delétang et al. 2023 and Kazemnejad et al.
2023: copy, reverse, duplicate, parity, sort, binary addition (digits least significant first with
data.reversed_digits, as in Zhou et al. 2024) and modular arithmetic (+ and − of digits mod 5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from posenc_cli.core.errors import UsageError, require_bool, require_positive_int
from posenc_cli.data.corpus import Corpus
from posenc_cli.data.vocab import Vocab

SYMBOLS = "abcdefgh"  # the alphabet of the string tasks
BITS = "01"
MODULUS = 5
DIGITS = "".join(str(d) for d in range(MODULUS))
SEPARATOR, END, PAD = "=", ".", "_"
IGNORE = -100  # a target that is not scored: F.cross_entropy's ignore_index


@dataclass(frozen=True)
class Instance:
    prompt: str
    answer: str


def draw(alphabet: str, n: int, generator: torch.Generator) -> str:
    return "".join(alphabet[i] for i in torch.randint(len(alphabet), (n,), generator=generator).tolist())


def copy_task(n: int, generator: torch.Generator) -> Instance:
    text = draw(SYMBOLS, n, generator)
    return Instance(text, text)


def reverse_task(n: int, generator: torch.Generator) -> Instance:
    text = draw(SYMBOLS, n, generator)
    return Instance(text, text[::-1])


def duplicate_task(n: int, generator: torch.Generator) -> Instance:
    text = draw(SYMBOLS, n, generator)
    return Instance(text, text + text)


def parity_task(n: int, generator: torch.Generator) -> Instance:
    bits = draw(BITS, n, generator)
    return Instance(bits, str(bits.count("1") % 2))


def sort_task(n: int, generator: torch.Generator) -> Instance:
    text = draw(SYMBOLS, n, generator)
    return Instance(text, "".join(sorted(text)))


def addition_task(n: int, generator: torch.Generator, *, reversed_digits: bool = False) -> Instance:
    """Two n-bit numbers (leading zeros kept) and their (n + 1)-bit sum."""
    a, b = draw(BITS, n, generator), draw(BITS, n, generator)
    total = format(int(a, 2) + int(b, 2), f"0{n + 1}b")
    if reversed_digits:
        return Instance(f"{a[::-1]}+{b[::-1]}", total[::-1])
    return Instance(f"{a}+{b}", total)


def modular_task(n: int, generator: torch.Generator) -> Instance:
    """n digits joined by + and −, and the value mod MODULUS."""
    digits = draw(DIGITS, n, generator)
    signs = draw("+-", n - 1, generator)
    value = int(digits[0]) + sum(int(d) * (1 if s == "+" else -1) for s, d in zip(signs, digits[1:]))
    return Instance(digits[0] + "".join(s + d for s, d in zip(signs, digits[1:])), str(value % MODULUS))


@dataclass(frozen=True)
class Task:
    make: Callable[..., Instance]
    alphabet: str  # every character its prompts and answers use


TASKS = {
    "copy": Task(copy_task, SYMBOLS),
    "reverse": Task(reverse_task, SYMBOLS),
    "duplicate": Task(duplicate_task, SYMBOLS),
    "parity": Task(parity_task, BITS),
    "sort": Task(sort_task, SYMBOLS),
    "addition": Task(addition_task, BITS + "+"),
    "modular": Task(modular_task, DIGITS + "+-"),
}


def check_task_options(task: str, max_train_len: object, reversed_digits: object) -> None:
    if task not in TASKS:
        raise UsageError(f"data.task={task} is not known; choose one of: {', '.join(TASKS)}")
    require_positive_int("data.max_train_len", max_train_len)
    require_bool("data.reversed_digits", reversed_digits)
    if reversed_digits and task != "addition":
        raise UsageError(f"data.reversed_digits=true applies only to data.task=addition, not {task}; drop it")


@dataclass(frozen=True)
class TaskSpec:
    """One task as a run trains it: the task, its longest training instance, how digits are written."""

    task: str
    max_train_len: int
    reversed_digits: bool = False

    def __post_init__(self) -> None:
        check_task_options(self.task, self.max_train_len, self.reversed_digits)

    def instance(self, n: int, generator: torch.Generator) -> Instance:
        if self.task == "addition":
            return addition_task(n, generator, reversed_digits=self.reversed_digits)
        return TASKS[self.task].make(n, generator)

    @property
    def vocab(self) -> Vocab:
        return Vocab(tuple(sorted(set(TASKS[self.task].alphabet + SEPARATOR + END + PAD))))

    def input_len(self, n: int) -> int:
        """Tokens the model reads for an instance of length n: the whole sequence but its last token."""
        made = self.instance(n, torch.Generator().manual_seed(0))
        return len(made.prompt) + len(made.answer) + 1

    def check_fits(self, block_size: int) -> None:
        longest = self.input_len(self.max_train_len)
        if block_size < longest:
            raise UsageError(
                f"train.block_size={block_size} is shorter than data.task={self.task}'s longest training "
                f"sequence at data.max_train_len={self.max_train_len} ({longest} tokens); use "
                f"train.block_size >= {longest} or a smaller data.max_train_len"
            )


def encode(spec: TaskSpec, instances: list[Instance], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Instances -> (inputs, targets), each (B, width): the sequences padded to width + 1 tokens, the
    targets IGNORE but where the next token is part of the answer or its end mark."""
    vocab = spec.vocab
    inputs = torch.full((len(instances), width + 1), vocab.chars.index(PAD), dtype=torch.long)
    targets = torch.full((len(instances), width), IGNORE, dtype=torch.long)
    for row, made in enumerate(instances):
        ids = torch.from_numpy(vocab.encode_array(made.prompt + SEPARATOR + made.answer + END))
        inputs[row, : len(ids)] = ids
        start = len(made.prompt)  # the separator's position predicts the answer's first token
        targets[row, start : len(ids) - 1] = ids[start + 1 :]
    return inputs[:, :-1], targets


class TaskCorpus(Corpus):
    """A task as training reads a corpus: no token arrays, fresh instances per batch (training and
    validation alike; validation's come from its own fixed generator)."""

    def __init__(self, spec: TaskSpec):
        empty = np.zeros(0, dtype=np.int64)
        stats = {"task": spec.task, "max_train_len": spec.max_train_len}
        super().__init__("task", empty, empty, spec.vocab, stats)
        self.spec = spec

    @property
    def window_limit(self) -> int | None:
        return None

    def batch(
        self, split: Literal["train", "val"], batch_size: int, block_size: int, *, generator: torch.Generator
    ):
        lengths = torch.randint(1, self.spec.max_train_len + 1, (batch_size,), generator=generator).tolist()
        return encode(self.spec, [self.spec.instance(n, generator) for n in lengths], block_size)
