"""Schemes with no position index at all: what they add to a score is read from the content of the query
and of the keys between it and the key (CoPE, the Forgetting Transformer), through `content_bias`.

A content scheme ignores positions, randomized training positions included: only the order of the
tokens, which the keys carry, reaches it. Each attention layer has its own parameters, as in both papers'
code, so `for_layers` gives every block a fresh copy.
"""

from __future__ import annotations

import copy

from torch import nn

from posenc_cli.model.positional.base import PositionalScheme


class ContentScheme(PositionalScheme):
    kind = "content"
    # a score reads only the tokens from its key to its query, never where they sit: shifting the whole
    # sequence, or putting any text before it, leaves it as it was, as a bias of i − j would
    relative = "explicit"

    def __init__(self, n_embd: int, n_head: int, block_size: int):
        super().__init__(n_embd, n_head, block_size)
        self.later_layers = nn.ModuleList()  # the schemes of blocks 1.. (for_layers builds them)

    def reset_parameters(self) -> None:
        """Draw the parameters as the paper initialises them."""
        raise NotImplementedError

    def for_layers(self, n_layer: int) -> list[PositionalScheme]:
        """This scheme for the first block, and a copy freshly initialised (window and temperature kept)
        for each other: the papers' one set of parameters per attention layer."""
        self.later_layers = nn.ModuleList()
        copies = [copy.deepcopy(self) for _ in range(n_layer - 1)]
        for layer in copies:
            layer.reset_parameters()
        self.later_layers = nn.ModuleList(copies)
        formula = type(self).param_formula
        self.param_formula = f"{n_layer}·({formula})" if n_layer > 1 else formula
        return [self, *self.later_layers]
