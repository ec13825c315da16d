"""Hugging Face causal LMs as evaluation targets: `hf:ID_OR_PATH` beside posenc runs.

An `HFModel` offers what `evaluate_runs` and `probe_runs` ask of a posenc run (`runs.LoadedRun`): a
name, a scheme label, a training length, tokens for a text with their UTF-8 bytes, token NLLs for
windows, passkey trials, RoPE scaling variants. The model's own tokenizer, its SDPA attention where
it has one, batch 1, and logits computed a chunk of positions at a time so a 16k-token window never
holds 16k × vocabulary floats.

RoPE scaling goes through the model's own rotary module, rebuilt from a copy of its config with
`rope_parameters` set (transformers' implementations: hf.rope_config); a training-free
context extension through posenc's attention function (hf.extended_attention).
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch

from posenc_cli.core.choices import EXPORT_MODEL_TYPE
from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import UsageError
from posenc_cli.core.install import install_hint
from posenc_cli.data import needles
from posenc_cli.data.needles import ENGLISH, Episode, NeedleTask
from posenc_cli.evaluation.labels import Label
from posenc_cli.hf.extended_attention import HFVariant, use_extension
from posenc_cli.hf.layouts import (
    ExtendedLayers,
    decoder,
    extended_layers,
    output_logits,
    rotary_modules,
)
from posenc_cli.hf.memory import LOGITS_CHUNK, extended_bytes, forward_bytes
from posenc_cli.hf.model_files import local_path
from posenc_cli.hf.rope_config import scaled_config
from posenc_cli.model import token_nll
from posenc_cli.model.extension import ContextExtension
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional import SCHEMES, PositionalScheme
from posenc_cli.model.positional.alibi import ALiBi
from posenc_cli.model.positional.learned import Learned
from posenc_cli.model.positional.rope import RoPE
from posenc_cli.model.positional.rope_scaling import RopeScaling
from posenc_cli.rundir.record import TrainedText

PREFIX = "hf:"
# model_type -> the class of the chapters' scheme it uses: what it is (scalable, relative) is read from it
MODEL_TYPE_SCHEMES: dict[str, type[PositionalScheme]] = {
    **dict.fromkeys(("gpt2", "opt", "gpt_neo", "gpt_bigcode"), Learned),
    **dict.fromkeys(("llama", "qwen2", "qwen3", "mistral", "gpt_neox", "olmo"), RoPE),
    "smollm3": RoPE,  # and NoPE layers: the layers are read by hf.layouts
    **dict.fromkeys(("llama4_text", "gemma3_text", "cohere2", "gpt_oss", "phi3"), RoPE),  # phi3: LongRoPE
    **dict.fromkeys(("bloom", "mpt"), ALiBi),
}


def model_scheme(config) -> type[PositionalScheme] | None:
    """The positional scheme's class of a transformers config: by its model type, or a posenc export's
    own (None for a composite: an ExportModel reads its built scheme instead)."""
    if config.model_type == EXPORT_MODEL_TYPE:
        return SCHEMES.get(dict(getattr(config, "model_config", None) or {}).get("scheme"))
    return MODEL_TYPE_SCHEMES.get(config.model_type)


def learned_table(scheme: type[PositionalScheme] | None) -> bool:
    """Whether the scheme's positions are rows of a learned table, which stops at the training context."""
    return scheme is not None and issubclass(scheme, Learned)


def is_hf(name: str) -> bool:
    return str(name).startswith(PREFIX)


def transformers_module():
    """transformers, imported quietly (no retry chatter on stderr), or one line saying how to get it."""
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    try:
        import transformers
    except ImportError:
        raise UsageError(f"hf: models need transformers: {install_hint('hf')}") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return transformers


def short_name(name: str) -> str:
    """The label a column shows: a hub id as given, a local directory by its last component, a GGUF file
    by its name without `.gguf`."""
    source = name[len(PREFIX) :].rstrip("/")
    local = local_path(source)
    return local.name if local.is_dir() else local.stem if local.is_file() else source


class HFModel:
    """A pretrained causal LM, seen the way evaluation and the probe see a posenc run."""

    seed = 0
    training_precision = ""  # not trained by posenc: nothing to compare
    tokenizer_name: str

    def __init__(
        self,
        name: str,
        model,
        tokenizer,
        *,
        train_len: int,
        real_context: int,
        attention: str,
        device: torch.device,
        mapped: bool = False,
        trained_text: TrainedText | None = None,
    ):
        self.path = name  # the `run` column of ppl.csv
        self.model, self.tokenizer, self.train_len, self.attention = model, tokenizer, train_len, attention
        self.real_context = real_context  # its config's context, whatever --hf-context pretends
        self.trained_text = trained_text  # a posenc export's run's corpus; None for a pretrained model
        if not mapped:  # with --device-map, accelerate placed it already
            model.to(device)
        self.device = model.get_input_embeddings().weight.device  # where its inputs go
        self.config = model.config
        self.scheme = model_scheme(self.config)  # its class: None for a composite export's
        self.tokenizer_name = name
        self.rotary = rotary_modules(model)
        self.layers: ExtendedLayers | None = None  # the layers an extension computes (variants)
        self.scaling: RopeScaling | None = None
        self.built: tuple[str, float] | None = None  # (method, factor) the rotary modules hold; None: own
        self.extensions: list[ContextExtension] = []  # the asked columns' extensions (memory_needed)

    @property
    def max_len(self) -> int | None:
        """Learned position tables stop at the context; rotary and ALiBi models run any length."""
        return self.train_len if learned_table(self.scheme) else None

    @property
    def model_id(self) -> str:
        return str(self.path)  # hf:NAME: a pretrained model is named by where it is loaded from

    def facts(self) -> dict:
        tables = [
            m.weight
            for n, m in self.model.named_modules()
            if learned_table(self.scheme)
            and isinstance(m, torch.nn.Embedding)
            and (n.endswith("wpe") or "position" in n)
        ]
        return {
            "positional_params": sum(t.numel() for t in tables),
            "relative": self.scheme.relative,
            "used_by": short_name(self.path),
        }

    # -- text -------------------------------------------------------------------------------------
    def eval_tokens(self, text: str | None):
        """(token ids, weights) with the model's own tokenizer, no special tokens: windows start anywhere
        in the text. Token i accounts for the text from the end of token i-1 to its own end, so the bytes
        and characters of any run of targets add up exactly; weights(start, n) gives them, (2, n)."""
        if text is None:
            raise UsageError(
                f"{self.path} needs --data FILE: the text to evaluate it on (its own tokenizer is used)"
            )
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ends = [end for _, end in encoded["offset_mapping"]]
        pieces = [text[prev:end] for prev, end in zip([0] + ends[:-1], ends)]
        counts = torch.tensor(
            [[len(p.encode("utf-8")) for p in pieces], [len(p) for p in pieces]], dtype=torch.float64
        )
        return torch.tensor(encoded["input_ids"], dtype=torch.long), lambda start, n: counts[
            :, start : start + n
        ]

    # -- memory -----------------------------------------------------------------------------------
    def memory_needed(self, length: int) -> int:
        """Bytes a forward over `length` tokens needs, batch 1, without gradients (forward_bytes)."""
        weights = sum(
            p.numel() * p.element_size() for p in self.model.parameters() if p.device == self.device
        )
        element = next(self.model.parameters()).element_size()
        plain = forward_bytes(
            self.config, length, weights=weights, element=element, eager=self.attention == "eager"
        )
        return plain + max((extended_bytes(self.config, e, length) for e in self.extensions), default=0)

    def check_fits(self, lengths: list[int], device: torch.device) -> None:
        """A forward at the longest length must fit what the device has free; no lengths (every one past a
        learned table) need nothing."""
        if not lengths:
            return
        longest = max(lengths)
        need, have = self.memory_needed(longest), free_memory(device)
        if have is not None and need > have:
            raise UsageError(
                f"{self.path} at {longest} tokens needs about {need / 2**30:.1f} GiB ({self.attention} "
                f"attention, batch 1), more than the {have / 2**30:.1f} GiB free on {self.device}; "
                "use shorter --lengths, --dtype bf16, or --device cuda"
            )

    # -- scoring ----------------------------------------------------------------------------------
    def scorer(self, device) -> HFModel:
        return self  # placed on its device when loaded: --device

    def batch_size(self, length: int) -> int:
        return 1

    def hidden_states(self, inputs: torch.Tensor) -> torch.Tensor:
        self.build_rotary(inputs.size(1))
        out = decoder(self.model)(input_ids=inputs.to(self.device), use_cache=False)
        return out.last_hidden_state

    def chunked_logits(self, hidden: torch.Tensor):
        for start in range(0, hidden.size(1), LOGITS_CHUNK):
            yield start, output_logits(self.model, hidden[:, start : start + LOGITS_CHUNK]).float()

    @torch.no_grad()
    def token_nll(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.hidden_states(inputs)
        return torch.cat(
            [
                token_nll(logits, targets[:, s : s + logits.size(1)].to(logits.device)).to(self.device)
                for s, logits in self.chunked_logits(hidden)
            ],
            dim=1,
        )

    @torch.no_grad()
    def last_logits(self, inputs: torch.Tensor, n: int) -> torch.Tensor:
        hidden = self.hidden_states(inputs)[:, -n:]
        return output_logits(self.model, hidden).float()

    # -- RoPE scaling -----------------------------------------------------------------------------
    @property
    def label(self) -> Label:
        return Label((self.scheme.name,), model=short_name(self.path))

    def variants(self, methods: list[ContextMethod], factor: float | None) -> list[HFVariant | None]:
        """A rotary model once per --rope-scaling method (None: as published), any other model once; a
        method that changes attention (model/extension) checked against the model before any work."""
        if not self.scheme.scalable:
            return [None]
        variants = [self.variant(m, factor) for m in methods]
        self.extensions = [v.extension for v in variants if v is not None and v.extension is not None]
        return variants

    def variant(self, method: ContextMethod, factor: float | None) -> HFVariant | None:
        """One column's frequencies and attention, its extension's parameters resolved for this model's
        context (or --hf-context); None: the model as published."""
        scaling = None
        if method.scales:
            scaling = RopeScaling(method.scaling, self.train_len, factor, long_factors=method.long_factors)
        extension = None
        if method.extends:
            self.layers = extended_layers(self.model, self.rotary, name=self.path, method=method.text)
            extension = method.extension(self.train_len)
        return None if scaling is None and extension is None else HFVariant(scaling, extension)

    def use_variant(self, variant: HFVariant | None) -> Label:
        """Evaluate as this variant from now on: its frequencies through the rotary modules, its extension
        through posenc's attention function (hf.extended_attention); its label, e.g. 'smollm2 (rope+self_extend)'."""
        self.scaling = variant.scaling if variant is not None else None
        if self.rotary:  # the attention of a model that takes no extension is never switched
            extension = variant.extension if variant is not None else None
            use_extension(
                self.model, extension, layers=self.layers, plain=self.attention, tf=transformers_module()
            )
        return self.label if variant is None else replace(self.label, variant=variant.variant)

    def build_rotary(self, seq_len: int) -> None:
        """Give every rotary module the frequencies of the current scaling at this sequence length."""
        if not self.rotary:
            return
        wanted = None if self.scaling is None else (self.scaling.method, self.scaling.scale(seq_len))
        if wanted == self.built:
            return
        config, given = self.config, None if self.scaling is None else self.scaling.long_factors
        if wanted is not None:
            config = scaled_config(self.config, *wanted, train_len=self.train_len, long_factors=given)
        for name, original in self.rotary.items():
            module = (
                original
                if self.scaling is None
                else type(original)(config=config).to(next(original.buffers()).device)
            )
            parent, _, attr = name.rpartition(".")
            setattr(self.model.get_submodule(parent), attr, module)
        self.built = wanted

    # -- passkey ----------------------------------------------------------------------------------
    def check_probe(self, task: NeedleTask) -> None:
        pass  # any text tokenizes

    def shortest_trial(self, task: NeedleTask) -> int:
        return self.trial_length(0, needles.placeholder(task))  # no filler sentence

    def probe_trials(
        self, task: NeedleTask, length: int, depth: float, *, trials: int, seed: int, cache: dict
    ):
        """One (trial, answer tokens) pair per trial, the trial a (1, n) tensor ending in the answer's
        tokens: the task in English (Mohtashami & Jaggi's prompt for the passkey), as long as whole filler
        sentences allow within `length` tokens."""
        import numpy as np

        rng = np.random.default_rng([seed, length, round(depth * 1_000_000)])
        episodes = [needles.draw_episode(task, rng, depth) for _ in range(trials)]
        n = self.filler_sentences(needles.placeholder(task, depth), length)
        out = []
        for episode in episodes:
            count = n
            while True:
                prompt, answer = self.encode_trial(count, episode)
                if len(prompt) + len(answer) <= length or count == 0:
                    break
                count -= 1
            if len(prompt) + len(answer) > length:
                raise UsageError(
                    f"a {task.name} trial for {self.path} needs {len(prompt) + len(answer)} tokens; "
                    f"length {length} is too short"
                )
            out.append((torch.tensor([prompt + answer]), torch.tensor([len(answer)])))
        return out

    def filler_sentences(self, episode: Episode, length: int) -> int:
        """The most filler sentences whose prompt, with this episode, fits in `length` tokens."""
        low, high = 0, 1
        while self.trial_length(high, episode) <= length:
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.trial_length(middle, episode) <= length else (low, middle)
        return low

    def trial_length(self, sentences: int, episode: Episode) -> int:
        prompt, answer = self.encode_trial(sentences, episode)
        return len(prompt) + len(answer)

    def encode_trial(self, sentences: int, episode: Episode) -> tuple[list[int], list[int]]:
        """(prompt ids, answer ids): the tokenizer's own encoding of prompt + " " + answer, split where it
        stops agreeing with the prompt's encoding (special tokens as the tokenizer adds them)."""
        text = needles.natural_prompt(episode, sentences)
        full, prompt = (self.tokenizer(t)["input_ids"] for t in (text + " " + ENGLISH.answer(episode), text))
        special = set(self.tokenizer.all_special_ids)
        while prompt and full and prompt[-1] in special and full[-1] == prompt[-1]:  # a trailing EOS
            prompt, full = prompt[:-1], full[:-1]
        split = next((i for i, (a, b) in enumerate(zip(prompt, full)) if a != b), len(prompt))
        return full[:split], full[split:]
