"""What one forward of a posenc model holds at once, in fp32: the one estimate every memory check reads
(training's memory_needed, eval's memory_short, sample's check_context_memory, and an `hf:` model's
extended columns). Its attention term reads the executor's own block rule (model.blocks.query_block,
MASK_BUDGET) and an extension's own bytes (ContextExtension.extra_bytes), so what is predicted is what
the loop holds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from posenc_cli.model.blocks import query_block
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.window import FULL

FLOAT = 4  # bytes: a forward that is estimated runs in fp32
FLOATS_PER_LAYER_WIDTH = (
    16  # a layer's activations per token, in units of n_embd (q, k, v, MLP's 4d twice, ...)
)
BLOCK_COPIES = 8  # a block of queries: its mask, scores, softmax, and a content score's gates, sums and their temporaries


@dataclass(frozen=True)
class Forward:
    """One forward of `batch` sequences of `length` tokens through a posenc model of this size."""

    batch: int
    length: int
    n_embd: int
    n_layer: int
    n_head: int
    vocab: int

    @property
    def tokens(self) -> int:
        return self.batch * self.length

    def activations(self) -> int:
        """The layers' activations: FLOATS_PER_LAYER_WIDTH floats of n_embd per token and layer."""
        return FLOAT * self.tokens * FLOATS_PER_LAYER_WIDTH * self.n_embd * self.n_layer

    def logits(self, copies: int = 1) -> int:
        """The logits of every position, `copies` times (a loss and its gradient hold more than one)."""
        return FLOAT * self.tokens * self.vocab * copies

    def attention(self) -> int:
        """A block of queries as the executor attends it (model.blocks.query_block): its masks for every
        head and sequence within MASK_BUDGET, BLOCK_COPIES times; a whole causal layer without a bias
        goes to the kernel and holds less."""
        planes = self.batch * self.n_head
        rows = query_block(self.length, self.length, planes=planes, window=FULL)
        return FLOAT * BLOCK_COPIES * planes * rows * self.length

    def extension(self, extensions: Iterable[ContextExtension]) -> int:
        """The most any one of `extensions` adds at this forward (extension_bytes)."""
        return extension_bytes(
            extensions,
            batch=self.batch,
            heads=self.n_head,
            length=self.length,
            head_dim=self.n_embd // self.n_head,
        )

    def held(self, extensions: Iterable[ContextExtension] = ()) -> dict[str, int]:
        """Bytes held at once by what holds them, without gradients (evaluation, sampling)."""
        return {
            "activations": self.activations(),
            "logits": self.logits(),
            "attention": self.attention(),
            "extension": self.extension(extensions),
        }

    def bytes(self, extensions: Iterable[ContextExtension] = ()) -> int:
        return sum(self.held(extensions).values())


def extension_bytes(
    extensions: Iterable[ContextExtension], *, batch: int, heads: int, length: int, head_dim: int
) -> int:
    """The most any one of `extensions` holds beyond plain attention (ContextExtension.extra_bytes, read
    from the executor's block rule): the columns are scored one at a time."""
    return max(
        (e.extra_bytes(batch=batch, heads=heads, length=length, head_dim=head_dim) for e in extensions),
        default=0,
    )


def forward_of(size, vocab: int, *, batch: int, length: int) -> Forward:
    """The forward of a model of `size` (a ModelConfig's size: n_embd, n_layer, n_head)."""
    return Forward(batch, length, size.n_embd, size.n_layer, size.n_head, vocab)
