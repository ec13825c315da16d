"""posenc's GPT as transformers sees a model: a `PretrainedConfig` and a `PreTrainedModel` that wraps
posenc's own GPT (never a copy of it), so that `AutoModelForCausalLM.from_pretrained(EXPORT,
trust_remote_code=True)` loads an export (hf.export writes `modeling_posenc.py`, which imports
these classes: posenc must be installed where the export is loaded). Its logits are posenc's exactly."""

from __future__ import annotations

from functools import cached_property
from typing import Any

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast
from transformers.modeling_outputs import CausalLMOutput

from posenc_cli.core.choices import EXPORT_MODEL_TYPE
from posenc_cli.core.errors import UsageError
from posenc_cli.data.vocab import describe_chars
from posenc_cli.model import GPT, ModelConfig, token_nll


class PosencConfig(PretrainedConfig):
    """config.json of an export: posenc's model config, and what transformers reads (vocab_size, the
    context). posenc's own fields (format, run id, tokenizer, step) ride along as they are."""

    model_type = EXPORT_MODEL_TYPE

    def __init__(self, model_config: dict[str, Any] | None = None, train_len: int | None = None, **kwargs):
        self.model_config = dict(model_config or {})
        self.train_len = train_len
        kwargs.setdefault("vocab_size", self.model_config.get("vocab_size"))
        kwargs.setdefault("max_position_embeddings", train_len)
        kwargs.setdefault("tie_word_embeddings", True)  # GPT ties its head to the token embedding
        for name, key in (
            ("num_hidden_layers", "n_layer"),
            ("num_attention_heads", "n_head"),
            ("hidden_size", "n_embd"),
        ):
            kwargs.setdefault(name, self.model_config.get(key))
        kwargs.setdefault("use_cache", False)  # posenc's GPT keeps no KV cache
        super().__init__(**kwargs)


class PosencForCausalLM(PreTrainedModel, GenerationMixin):
    """posenc's GPT under transformers' interface: logits for input_ids, a loss given labels. No KV cache:
    every forward recomputes the whole window (posenc's model has none), so generate() is exact but slow."""

    config_class = PosencConfig
    base_model_prefix = "gpt"
    _tied_weights_keys = {"gpt.head.weight": "gpt.tok.weight"}
    _supports_cache_class = False

    def __init__(self, config: PosencConfig):
        super().__init__(config)
        self.gpt = GPT(ModelConfig.from_dict(config.model_config))
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        """GPT initialises itself; the export's weights replace it all (restore_buffers does the rest)."""

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> PosencForCausalLM:
        model = super().from_pretrained(*args, **kwargs)
        model.restore_buffers()
        return model

    def restore_buffers(self) -> None:
        """The buffers a scheme computes and never saves (RoPE's inv_freq, ALiBi's slopes), computed again
        on the CPU: transformers builds the model on the meta device, where they were never computed."""
        with torch.device("cpu"):
            fresh = GPT(self.gpt.cfg)
        saved = set(fresh.state_dict())
        for name, buffer in fresh.named_buffers():
            if name not in saved:
                owner, _, leaf = name.rpartition(".")
                module = self.gpt.get_submodule(owner)
                module.register_buffer(leaf, buffer.to(self.gpt.tok.weight.device), persistent=False)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.gpt.tok

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.gpt.head

    def forward(
        self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **_: Any
    ) -> CausalLMOutput:
        logits = self.gpt(input_ids)
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = token_nll(logits[:, :-1], labels[:, 1:]).mean()
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, **_: Any) -> dict[str, Any]:
        return {"input_ids": input_ids}


class PosencTokenizerFast(PreTrainedTokenizerFast):
    """An export's tokenizer: posenc's ids (tokenizer.json), and as its end of text the token that ends
    every document posenc reads (export.DOCUMENT_END; tokenizer_config.json's document_end_id), which
    lm-evaluation-harness puts before each rolling window. It is the eos id without being added as a
    special token: an added token is matched in the text before the byte-level split, so byte and BPE
    vocabularies' 'Ċ' (their newline) would take the letter Ċ's place. No __init__ of its own, so
    transformers loads tokenizer.json as it is."""

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
        """Text with characters a char vocabulary without <unk> lacks is refused, as posenc refuses it:
        tokenizers would drop them unsaid, and a text scored shorter than it is reads as a better model."""
        pieces = [text, text_pair]
        strings = []
        while pieces:
            piece = pieces.pop()
            if isinstance(piece, str):
                strings.append(piece)
            elif isinstance(piece, (list, tuple)):
                pieces.extend(piece)
        unknown = set().union(*map(set, strings)) - self.known_characters if self.known_characters else set()
        if unknown:
            raise UsageError(
                f"text has {len(unknown)} character(s) outside the export's vocabulary: {describe_chars(unknown)}"
            )
        return super()._encode_plus(text=text, text_pair=text_pair, **kwargs)

    @cached_property
    def known_characters(self) -> frozenset[str]:
        """A char vocabulary's characters (no pre-tokenizer, no <unk>): every other one is lost in
        encoding. Empty for byte-level vocabularies (byte, bpe), which represent any text."""
        backend = self.backend_tokenizer
        if backend.pre_tokenizer is not None or getattr(backend.model, "unk_token", None) is not None:
            return frozenset()
        return frozenset(self.get_vocab())

    @property
    def eos_token_id(self) -> int | None:
        return self.init_kwargs.get("document_end_id")

    @property
    def eos_token(self) -> str | None:
        end = self.eos_token_id
        return None if end is None else self.convert_ids_to_tokens(end)
