"""`posenc sample`: text from a trained run, as far past its training length as its scheme allows.

The context either grows with the text (positions keep rising, past the training length: the
quickest way to see extrapolation fail by eye) or, with a window, slides so the model only ever sees
the last W tokens. A scheme with a position table (learned) cannot grow past the table: generation
stops there with a message unless a window keeps the context inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

from posenc_cli.config.forward_memory import forward_of
from posenc_cli.core import ui
from posenc_cli.core.device import free_memory
from posenc_cli.core.errors import UsageError, require_int, require_positive_int, require_seed
from posenc_cli.model import GPT
from posenc_cli.rundir.loading import LoadedRun

MAX_TOKENS = 1_000_000  # --tokens: a million steps is hours on a small model already


@dataclass(frozen=True)
class SamplePlan:
    """How many tokens will be generated, and why fewer than asked (None when all of them)."""

    tokens: int
    stopped_early: str | None


def plan(run: LoadedRun, prompt_len: int, tokens: int, *, window: int | None, sinks: int = 0) -> SamplePlan:
    """Check the lengths against the scheme's limit before anything is generated."""
    require_int("--tokens", tokens, at_least=1, at_most=MAX_TOKENS)
    limit = run.model.scheme.max_len  # None: the scheme computes any position
    check_sinks(sinks, window)
    if window is not None:
        require_positive_int("--window", window)
        if limit is not None and window > limit:
            raise UsageError(
                f"--window {window} is past {run.scheme}'s table of {limit} positions; "
                f"use --window <= {limit}"
            )
        return SamplePlan(tokens, None)
    return within_table(limit, prompt_len, tokens, who=run.scheme, slides=True)


def check_sinks(sinks: int, window: int | None) -> None:
    """--sink-tokens: StreamingLLM's first tokens, kept within --window's context; fewer than it."""
    require_int("--sink-tokens", sinks, at_least=0, at_most=MAX_TOKENS)
    if sinks and window is None:
        raise UsageError(f"--sink-tokens {sinks} keeps the first tokens of a sliding context; add --window W")
    if sinks and window is not None and sinks >= window:
        raise UsageError(
            f"--sink-tokens {sinks} leaves no room for recent tokens in --window {window}; use fewer than {window}"
        )


def kept_context(context: torch.Tensor, window: int | None, sinks: int) -> torch.Tensor:
    """What the model sees of the text: all of it; its last `window` tokens; or StreamingLLM's cache, the
    first `sinks` tokens and the last window − sinks, at positions 0..window−1 (the paper's re-indexing)."""
    if window is None or len(context) <= window:
        return context
    return torch.cat([context[:sinks], context[len(context) - (window - sinks) :]])


def within_table(limit: int | None, prompt_len: int, tokens: int, *, who: str, slides: bool) -> SamplePlan:
    """The tokens a context growing from the prompt can take before it passes a table of `limit`
    positions (None: no table); `slides`: whether --window can keep it inside, and so is suggested."""
    if limit is None:
        return SamplePlan(tokens, None)
    if prompt_len > limit:
        slide = f" or slide the context with --window <= {limit}" if slides else ""
        raise UsageError(
            f"--prompt is {prompt_len} tokens but {who} positions stop at {limit - 1}; shorten it{slide}"
        )
    room = limit + 1 - prompt_len  # the token after the table's last position is still predicted
    if tokens <= room:
        return SamplePlan(tokens, None)
    slide = f"; add --window {limit} to slide the context and go on" if slides else ""
    return SamplePlan(
        room,
        f"{who} stopped after {room} tokens: its table has {limit} positions and the context reached them all{slide}",
    )


def check_context_memory(run: LoadedRun, context: int, device: torch.device) -> None:
    """The last step reads `context` tokens at once (the window, or the prompt and every token): what that
    forward holds (config.forward_memory) must fit, or the run is refused before it starts, not killed later."""
    need = forward_of(run.model.cfg.size, len(run.tokenizer), batch=1, length=context).bytes()
    free = free_memory(device)
    if free is not None and need > free:
        raise UsageError(
            f"--tokens: a context of {context:,} tokens needs about {need / 2**30:,.1f} GiB, but {device} has "
            f"{free / 2**30:,.1f} GiB free; ask for fewer --tokens or slide the context with --window"
        )


@dataclass(frozen=True)
class Sampling:
    """How each next token is drawn: --temperature (0 is greedy), --top-k, --seed."""

    temperature: float
    top_k: int | None
    seed: int


@torch.inference_mode()
def generate(
    model: GPT,
    prompt_ids: torch.Tensor,
    tokens: int,
    *,
    sampling: Sampling,
    window: int | None,
    device: torch.device,
    cached: bool = True,
    sinks: int = 0,
) -> Iterator[int]:
    """Token ids one at a time; the same ids for the same seed. Each step's logits are the model's on the
    context (its last `window` tokens, or its first `sinks` and last window − sinks as StreamingLLM keeps
    them, at positions 0..W-1): with `cached`, a KV cache runs only the new
    token while the context grows; once the window slides every position shifts, so it is run whole, as
    it is at every step for a rotation that reads the context's length (dynamic NTK scaling)."""
    model = model.to(device)
    generator = torch.Generator().manual_seed(sampling.seed)
    context = prompt_ids.to(device)
    cached = cached and not model.scheme.rotation_reads_length
    cache = model.new_cache()
    for _ in range(tokens):
        seen = kept_context(context, window, sinks)
        if not cached or len(seen) < len(context):
            cache = model.new_cache()
        logits = model(seen[cache.length :][None], cache=cache)[0, -1].float().cpu()
        next_id = pick(logits, sampling.temperature, sampling.top_k, generator=generator)
        context = torch.cat([context, torch.tensor([next_id], device=device)])
        yield next_id


def generate_hf(hf, prompt_ids: list[int], tokens: int, *, sampling: Sampling) -> Iterator[int]:
    """An `hf:` model's token ids one at a time (drawn_hf). A model with a learned table (GPT-2's
    n_positions) stops where its table does, as a posenc run does, and says so; a prompt already past
    it is refused here, before anything is drawn or shown."""
    require_int("--tokens", tokens, at_least=1, at_most=MAX_TOKENS)
    steps = within_table(hf.max_len, len(prompt_ids), tokens, who=str(hf.path), slides=False)
    return drawn_hf(hf, prompt_ids, steps, sampling=sampling)


@torch.no_grad()
def drawn_hf(hf, prompt_ids: list[int], steps: SamplePlan, *, sampling: Sampling) -> Iterator[int]:
    """Drawn as generate draws them (pick, one generator per seed), each step running only the new token
    through the model's own KV cache (transformers' `cache`); why it stopped early, once it has."""
    generator = torch.Generator().manual_seed(sampling.seed)
    model, cache, context = hf.model.eval(), None, list(prompt_ids)
    for _ in range(steps.tokens):
        seen = context[-1:] if cache is not None else context
        out = model(
            input_ids=torch.tensor([seen], dtype=torch.long, device=hf.device), cache=cache, use_cache=True
        )
        cache = getattr(out, "cache", None)  # None: a model without one (a posenc export's): whole context
        logits = out.logits[0, -1].float().cpu()
        context.append(pick(logits, sampling.temperature, sampling.top_k, generator=generator))
        yield context[-1]
    if steps.stopped_early:
        ui.err.print(f"\n{steps.stopped_early}", highlight=False, soft_wrap=True, markup=False)


def pick(logits: torch.Tensor, temperature: float, top_k: int | None, *, generator: torch.Generator) -> int:
    """Sample from softmax(logits / temperature) restricted to the top_k most likely tokens. The logits
    are shifted to a maximum of 0 first and divided in float64, so a tiny temperature (1e-40) cannot
    overflow: it samples among the most likely tokens only, as greedy does."""
    if temperature == 0:
        return int(logits.argmax())
    if top_k is not None and top_k < len(logits):
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax((logits - logits.max()).double() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def check_sampling(temperature: float, top_k: int | None, seed: int, *, count: int = 1) -> Sampling:
    """The sampling options, and --num-samples (`count`): its last seed, seed + count - 1, in range too."""
    require_int("--num-samples", count, at_least=1, at_most=100)
    require_seed("--seed", seed + count - 1)
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise UsageError(f"--temperature must be a finite number >= 0 (0 is greedy), got {temperature}")
    if top_k is not None:
        require_positive_int("--top-k", top_k)
    require_seed("--seed", seed)
    return Sampling(temperature, top_k, seed)


def stream_text(run: LoadedRun, ids: Iterator[int]) -> Iterator[str]:
    """Decode as the ids come: each piece is what the text gained. Only the tokens since the last piece,
    and those of the piece before as context, are decoded at each step, so a step costs the same at the
    1,000th token as at the first; what the tokenizer puts between tokens (a space, a character whose
    bytes span tokens) comes out as it does in the whole text's decoding."""
    decode = run.tokenizer.decode
    generated: list[int] = []
    prefix = read = 0  # generated[prefix:read] was shown last; it is decoded again as context
    for token in ids:
        generated.append(token)
        shown, text = decode(generated[prefix:read]), decode(generated[prefix:])
        if len(text) > len(shown) and not text.endswith("\ufffd"):  # not mid-character
            yield text[len(shown) :]
            prefix, read = read, len(generated)
    shown, text = decode(generated[prefix:read]), decode(generated[prefix:])
    if len(text) > len(shown):
        yield text[len(shown) :]
