"""The GPT around the schemes: its config's sizes, its initialisation, and checkpoints of older versions."""

from __future__ import annotations

import pytest
import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.model import GPT, ModelConfig


def test_model_config_rejects_bad_sizes():
    with pytest.raises(UsageError, match="not divisible"):
        ModelConfig(vocab_size=5, block_size=8, n_head=3, n_embd=8)
    with pytest.raises(UsageError, match="positive integer"):
        ModelConfig(vocab_size=5, block_size=0)


def test_embed_std_sets_the_tied_embedding_init_only():
    """model.embed_std scales the token embedding (shared with the output head) and nothing else."""
    torch.manual_seed(0)
    small, large = (
        GPT(ModelConfig(vocab_size=500, block_size=8, n_embd=64, embed_std=s)) for s in (0.02, 0.1)
    )
    assert small.tok.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert large.tok.weight.std().item() == pytest.approx(0.1, rel=0.05)
    assert large.head.weight is large.tok.weight
    assert large.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_a_checkpoint_from_before_the_rename_loads_its_scheme_weights():
    """Runs saved when the scheme attribute was called `pos` evaluate with the same weights."""
    config = ModelConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8, scheme="kerple")
    saved = GPT(config).state_dict()
    legacy = {key.replace("scheme.", "pos.", 1): value for key, value in saved.items()}
    assert any(key.startswith("pos.") for key in legacy)
    torch.manual_seed(1)
    model = GPT(config)
    model.load_state_dict(legacy)
    assert all(torch.equal(value, saved[key]) for key, value in model.state_dict().items())
