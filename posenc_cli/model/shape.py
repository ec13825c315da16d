"""The model's shape (`ModelSize`, the `model` config group) and what a GPT is built from (`ModelConfig`:
that shape with its vocabulary, training length and scheme). Torch-free: the typed config imports it
before anything heavy is."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from posenc_cli.core.errors import UsageError, require_bool, require_int, require_number, require_positive_int

MAX_MODEL_SIZE = 2**20  # model.n_layer, n_head, n_embd: past any model a machine holds


@dataclass
class ModelSize:
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads (n_embd must divide by it)
    n_embd: int = 128  # model width
    embed_std: float = 0.02  # init std of the (tied) token embedding; experiment=probe raises it
    qk_norm: bool = False  # RMS-normalise q and k over all heads before the split, as DroPE's recalibration

    def __post_init__(self) -> None:
        # 0 is "not a positive integer"; past MAX_MODEL_SIZE torch's sizes overflowed before the memory check
        for key in ("n_layer", "n_head", "n_embd"):
            require_positive_int(f"model.{key}", getattr(self, key))
            require_int(f"model.{key}", getattr(self, key), at_least=1, at_most=MAX_MODEL_SIZE)
        require_number("model.embed_std", self.embed_std, above=0)
        require_bool("model.qk_norm", self.qk_norm)
        if self.n_embd % self.n_head:
            raise UsageError(
                f"model.n_embd={self.n_embd} is not divisible by model.n_head={self.n_head}; "
                "choose n_embd as a multiple of n_head"
            )


@dataclass
class ModelConfig:
    vocab_size: int
    block_size: int
    size: ModelSize = field(default_factory=ModelSize)
    scheme: str = "none"
    scheme_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in ("vocab_size", "block_size"):
            require_positive_int(key, getattr(self, key))

    def to_dict(self) -> dict[str, Any]:
        """The flat form a run's record and an export's config.json keep: the size's keys in its place."""
        flat: dict[str, Any] = {}
        for key, value in asdict(self).items():
            flat.update(value if key == "size" else {key: value})
        return flat

    @classmethod
    def from_dict(cls, flat: Mapping[str, Any]) -> ModelConfig:
        """to_dict's form read back (a key this version does not know is a TypeError, as a constructor's)."""
        sizes = {f.name for f in fields(ModelSize)}
        size = ModelSize(**{k: v for k, v in flat.items() if k in sizes})
        return cls(**{k: v for k, v in flat.items() if k not in sizes}, size=size)
