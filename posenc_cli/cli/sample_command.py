"""`posenc sample`: text from a trained run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from posenc_cli.cli.app import app, device_option
from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError

SEPARATOR = "\n---------------\n"  # between samples, as nanoGPT's sample.py prints them
PROMPT_HELP = (
    "Text to continue; every character must be in the run's vocabulary (default: a newline, as nanoGPT "
    "starts, or a space where the vocabulary has no newline)."
)
RUN_HELP = (
    "A trained run directory, or hf:ID_OR_PATH (a Hugging Face model or a posenc export: in its own tokenizer "
    "and cache, drawn as a run is)."
)
NUM_SAMPLES_HELP = (
    "How many samples, the i-th drawn with seed --seed + i, separated by a line of dashes (at most 100)."
)

TEMPERATURE_HELP = "Softmax temperature; 0 is greedy, and a tiny one (1e-40) samples as greedy does."
WINDOW_HELP = (
    "Slide the context: the model sees only the last W tokens (default: the whole text, so positions grow past "
    "the training length)."
)
SINK_TOKENS_HELP = (
    "With --window: keep the text's first K tokens too, StreamingLLM's attention sinks, and the last W - K "
    "(positions 0..W-1, the paper's cache)."
)


@app.command()
def sample(
    run: str = typer.Argument(..., help=RUN_HELP),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help=PROMPT_HELP),
    num_samples: int = typer.Option(1, "--num-samples", help=NUM_SAMPLES_HELP),
    tokens: int = typer.Option(
        200, "--tokens", "-n", help="How many tokens to generate (at most 1,000,000)."
    ),
    temperature: float = typer.Option(0.8, "--temperature", "-t", help=TEMPERATURE_HELP),
    top_k: Optional[int] = typer.Option(
        None, "--top-k", "-k", help="Sample only from the k most likely tokens (default: all)."
    ),
    seed: int = typer.Option(0, "--seed", help="Sampling seed: the same seed gives the same text."),
    window: Optional[int] = typer.Option(None, "--window", "-w", help=WINDOW_HELP),
    sink_tokens: int = typer.Option(0, "--sink-tokens", help=SINK_TOKENS_HELP),
    out: Optional[str] = typer.Option(
        None, "--out", "-o", help="Also write the prompt and the generated text to this file."
    ),
    device: str = device_option(),
) -> None:
    """Generate text from a trained run, streamed to the terminal, past its training length if asked.

    Without --window the context grows with the text, so positions pass the training length: the
    quickest way to see a scheme's extrapolation fail by eye. A scheme with a position table (learned)
    stops at its table's end with a message unless --window keeps the context inside it.

    Example:
      posenc sample outputs/runs/RUN --prompt "the pass key is" --tokens 1000 --temperature 0.8 --top-k 40 --seed 0
    """
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.device import resolve_device
    from posenc_cli.evaluation.sample import check_context_memory, check_sampling, plan
    from posenc_cli.rundir.claim import warn_if_training
    from posenc_cli.rundir.destinations import checked_out_file
    from posenc_cli.rundir.loading import load_run

    out = checked_out_file(out)
    sampling = check_sampling(temperature, top_k, seed, count=num_samples)
    drawing: dict = dict(tokens=tokens, sampling=sampling, count=num_samples, window=window)
    if run.startswith("hf:"):
        return finish(
            SEPARATOR.join(hf_samples(run, prompt, **drawing, device=device)), out=out, stopped_early=None
        )
    loaded = load_run(Path(run))
    warn_if_training(run, f"sampling its checkpoint of step {loaded.checkpoint.step}")
    prompt = start_text(loaded) if prompt is None else prompt
    prompt_ids = encoded(prompt, loaded)
    steps = plan(loaded, len(prompt_ids), tokens, window=window, sinks=sink_tokens)
    target = resolve_device(device)
    check_context_memory(loaded, window or len(prompt_ids) + steps.tokens, target)
    texts = samples(
        loaded, prompt, prompt_ids, **drawing | {"tokens": steps.tokens, "sinks": sink_tokens}, device=target
    )
    finish(SEPARATOR.join(texts), out=out, stopped_early=steps.stopped_early)


def samples(
    loaded, prompt: str, prompt_ids, *, tokens: int, sampling, count: int, window, device, sinks: int = 0
) -> list[str]:
    """`count` samples, the i-th with seed + i, each streamed as it is drawn, dashes between them."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.evaluation.sample import generate

    texts = []
    for i in range(count):
        ui.out.file.write(SEPARATOR.lstrip("\n") if i else "")  # the sample before ended its line
        draw = replace(sampling, seed=sampling.seed + i)
        ids = generate(
            loaded.model, prompt_ids, tokens, sampling=draw, window=window, device=device, sinks=sinks
        )
        texts.append(stream(loaded, prompt, ids))
    return texts


def hf_samples(
    name: str, prompt: str | None, *, tokens: int, sampling, count: int, window, device: str
) -> list[str]:
    """`posenc sample hf:NAME`: the model in its own tokenizer (a newline to start from, as nanoGPT),
    sampled as a run is (the same pick, seed + i), through its own KV cache."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.device import resolve_device
    from posenc_cli.evaluation.sample import generate_hf
    from posenc_cli.hf.model_loading import load_hf_model

    if window is not None:
        raise UsageError(
            f"--window slides a posenc run's context; {name} generates with its own cache: drop --window"
        )
    if prompt == "":
        raise UsageError("--prompt is empty; give at least one character")
    hf = load_hf_model(name, device=resolve_device(device))
    prompt, ids = hf_start(hf, name, prompt)
    texts = []
    for i in range(count):
        ui.out.file.write(SEPARATOR.lstrip("\n") if i else "")
        drawn = generate_hf(hf, ids, tokens, sampling=replace(sampling, seed=sampling.seed + i))
        texts.append(stream(hf, prompt, drawn))
    return texts


def hf_start(hf, name: str, prompt: str | None) -> tuple[str, list[int]]:
    """The prompt and its ids in the model's tokenizer: --prompt, else as for a run a newline, else a
    space. An export's char tokenizer refuses a character its vocabulary lacks; others give no id."""
    for text in ["\n", " "] if prompt is None else [prompt]:
        try:
            ids = hf.tokenizer(text)["input_ids"]
        except UsageError as err:
            if prompt is not None:
                raise UsageError(f"--prompt: {err}") from None
            continue
        if ids:
            return text, ids
    if prompt is None:
        raise UsageError(f"{name}'s tokenizer has neither a newline nor a space to start from; give --prompt")
    raise UsageError(f"--prompt {prompt!r} is no token of {name}'s tokenizer; give text it has")


def start_text(loaded) -> str:
    """What a sample starts from without --prompt: a newline as nanoGPT's, else a space, whichever the
    run's vocabulary has."""
    for text in ("\n", " "):
        if not loaded.tokenizer.missing(text):
            return text
    raise UsageError("the run's vocabulary has neither a newline nor a space to start from; give --prompt")


def encoded(prompt: str, loaded):
    """--prompt as the run's token ids; a character outside its vocabulary is refused by name."""
    if not prompt:
        raise UsageError("--prompt is empty; give at least one character of the run's vocabulary")
    try:
        return loaded.tokenizer.encode(prompt)
    except UsageError as err:
        raise UsageError(f"--prompt: {err}") from None


def stream(loaded, prompt: str, ids) -> str:
    """The prompt and each piece of text as it is generated, on stdout; returns the whole text."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.evaluation.sample import stream_text

    ui.out.file.write(prompt)
    pieces = [prompt]
    for piece in stream_text(loaded, ids):
        ui.out.file.write(piece)
        ui.out.file.flush()
        pieces.append(piece)
    ui.out.file.write("\n")
    return "".join(pieces)


def finish(text: str, *, out: Path | None, stopped_early: str | None) -> None:
    """The text to --out if given; why it stopped short, and what was written, on stderr."""
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.core.atomic import write_text

    if out:
        write_text(out, text)
    if stopped_early:
        ui.err.print(stopped_early, highlight=False, soft_wrap=True)
    if out:
        ui.err.print(f"wrote {out}", highlight=False)
