"""What names a column of a result: a structured `Label`, made where the model is known (a posenc run or
an `hf:` model), so that tables and figures read its parts instead of parsing a string."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from posenc_cli.data.tokenizers import TOKENIZERS
from posenc_cli.model.positional import SCHEMES


@dataclass(frozen=True, eq=False)
class Label:
    """A column: `rope`, `rope+yarn`, `learned+window`, `rope [bpe]`, `smollm2 (rope+yarn)`.

    A label equals (and hashes as) the text it shows, so a column read back from a csv file is the same
    column; two labels that show the same text could not be told apart in a table anyway."""

    scheme: str  # the positional scheme as built: rope, alibi, sinusoidal+learned (a composite)
    variant: str = ""  # an option that changes what it computes: yarn, unscaled, interleaved+ntk
    model: str = ""  # a pretrained model's short name (hf:); "" for posenc's own runs
    overflow: str = ""  # window: a position table scored past its end through windows of its size
    tokenizer: str = ""  # set where a table mixes posenc's tokenizers

    @property
    def positional(self) -> str:
        """The scheme with its variant and overflow, as the chapters' claims are keyed: `rope+yarn`."""
        return "+".join(part for part in (self.scheme, self.variant, self.overflow) if part)

    @property
    def family(self) -> str:
        """The scheme a figure colours the column by: a composite takes its first part's colour."""
        return self.scheme.split("+")[0]

    @property
    def beyond_family(self) -> str:
        """What the column adds to its family: `yarn` for rope+yarn, `learned` for sinusoidal+learned;
        tables order and figures style the columns of one family by it."""
        return self.positional[len(self.family) + 1 :]

    def __str__(self) -> str:
        text = f"{self.model} ({self.positional})" if self.model else self.positional
        return f"{text} [{self.tokenizer}]" if self.tokenizer else text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (Label, str)) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: Label | str) -> bool:  # pandas sorts group keys: by the text, as before
        return str(self) < str(other)


def as_label(value: Label | str) -> Label:
    """A column value as a Label: itself, or a column read back from a file, taken whole as the scheme."""
    return value if isinstance(value, Label) else Label(scheme=str(value))


def mixes_own_tokenizers(targets) -> bool:
    """Whether posenc's own runs among `targets` use more than one tokenizer (Hugging Face models are
    named by their model, so they never need the tokenizer in their label)."""
    return len({t.tokenizer_name for t in targets if t.tokenizer_name in TOKENIZERS}) > 1


def with_tokenizer(label: Label, tokenizer: str, mixed: bool) -> Label:
    """The label a column shows: with its tokenizer (`rope [bpe]`) where the table mixes posenc's own."""
    return replace(label, tokenizer=tokenizer) if mixed and tokenizer in TOKENIZERS else label


def scheme_order(columns: Iterable[Label | str]) -> list[Label | str]:
    """SCHEMES' order, unknown schemes after, each `rope+yarn`-style variant after its base, each
    scheme's tokenizers side by side; Hugging Face models ('gpt2 (learned)') after posenc's runs, by name."""
    order = list(SCHEMES)

    def key(column: Label | str):
        label = as_label(column)
        rank = order.index(label.family) if label.family in order else len(order)
        return label.model != "", label.model, rank, label.family, label.beyond_family, label.tokenizer

    return sorted(dict.fromkeys(columns), key=key)
