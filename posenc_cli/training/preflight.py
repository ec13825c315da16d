"""The pre-flight: every job of `posenc train` checked before Hydra starts one (keys, ranges, scheme
options, corpus, lengths, memory, init_from and resume), so a bad override is one line and no run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from posenc_cli.config.hydra_args import (
    composing,
    output_key,
    override_errors,
    parse_hydra_args,
    sweep_points,
)
from posenc_cli.config.memory_model import check_run_memory, scheme_footprint
from posenc_cli.config.schema import PosencConfig, SyntheticData, anchored_paths, check_keys
from posenc_cli.core.device import cpu_bf16, resolve_device, resumed_precision
from posenc_cli.core.errors import (
    UsageError,
)
from posenc_cli.core.paths import writable_place
from posenc_cli.data import corpus_kind, corpus_tokenizer, require_same_corpus, stream
from posenc_cli.data.binary import load_bin
from posenc_cli.data.hf_datasets import hf_source
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.rundir.layout import SUMMARY
from posenc_cli.rundir.lineage import (
    check_same_shape,
    check_same_vocabulary,
    initial_state,
    lineage,
    saved_tokenizer,
    source_checkpoint,
)
from posenc_cli.rundir.resume import restated_values, resumed_config, stored_record
from posenc_cli.rundir.summary import read_summary
from posenc_cli.training.session import model_config
from posenc_cli.training.tracking import check_loggers


def validate(cfg: DictConfig | dict[str, Any]) -> PosencConfig:
    """Everything checkable without training: keys, ranges, divisibility, scheme options, corpus, lengths,
    and whether the run fits in memory."""
    cfg = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    typed_cfg = check_keys(cfg)
    tc, mc = typed_cfg.train, typed_cfg.model
    ModelConfig(
        vocab_size=1, block_size=tc.block_size, n_layer=mc.n_layer, n_head=mc.n_head, n_embd=mc.n_embd
    )
    max_len, positional, bias = scheme_footprint(
        typed_cfg.scheme, mc.n_embd, mc.n_head, block_size=tc.block_size, n_layer=mc.n_layer
    )
    trained_positions = tc.max_position or tc.block_size  # positions 0 .. this - 1 are trained on
    if max_len is not None and max_len < trained_positions:
        given = "train.max_position" if tc.max_position else "train.block_size"
        raise UsageError(
            f"scheme.max_len={max_len} is below {given}={trained_positions}: positions up to "
            f"{trained_positions - 1} are trained on; use scheme.max_len >= {trained_positions} (or null)"
        )
    device = resolve_device(typed_cfg.device)
    if device.type == "cpu":  # a bad POSENC_CPU_BF16 is one line before any directory, whatever is asked
        cpu_bf16()
    check_loggers(typed_cfg.logger)
    n_chars, split_len = corpus_size(typed_cfg.data)
    if split_len is not None and tc.block_size + 1 > split_len:
        raise UsageError(
            f"train.block_size={tc.block_size} does not fit the corpus: its smaller split has {split_len} "
            "characters; use "
            + (f"train.block_size <= {split_len - 1}, " if split_len > 1 else "")
            + "a larger corpus or another data.val_fraction"
        )
    cache_dir = getattr(typed_cfg.data, "cache_dir", None)
    if cache_dir is not None:  # the token cache is written while training: a bad place is found now
        if Path(writable_place("data.cache_dir", cache_dir)).is_file():
            raise UsageError(f"data.cache_dir={cache_dir} is a file; give a directory for the token cache")
    in_memory = isinstance(typed_cfg.data, SyntheticData)  # the others stream into a memory-mapped cache
    check_run_memory(typed_cfg, n_chars if in_memory else None, device, positional=positional, bias=bias)
    if tc.init_from:
        validate_init_from(typed_cfg)
    if tc.resume and (Path(tc.resume) / SUMMARY).is_file():  # a changed corpus: before tokenizing
        stored = read_summary(Path(tc.resume)).description
        require_same_corpus(dataclasses.asdict(typed_cfg.data), stored and stored.corpus_sha256, tc.resume)
        record = stored and stored.precision
        if record and record.effective is not None:  # the checkpoint's own
            resumed_precision(device, tc.precision, record.effective, run=tc.resume)  # is checked on load
    return typed_cfg


def preflight(args: list[str], first: DictConfig | None = None) -> Path | None:
    """Validate every job that `posenc train ARGS` would launch; raise UsageError on the first bad one.
    Returns the directory Hydra will write to (the run's, or the sweep's), read from the first job's
    composition so that claiming it does not compose the config again; None when nothing will run.
    `first`: that composition, Hydra's config included, where check_first_point made it for ARGS."""
    parsed = parse_hydra_args(args)
    if parsed.help or parsed.hydra_help or parsed.shell_completion:
        return None
    with composing(parsed) as compose_point:
        points = sweep_points(parsed.overrides) if parsed.multirun else [parsed.overrides]
        if parsed.cfg or parsed.info:  # nothing runs: the first point composes or is one line (with -m,
            compose_point(points[0])  # print_sweep composes each point as it prints it)
            return None
        directory = None
        for overrides in points:
            if directory is None:  # with Hydra's own config, which names the directory
                whole = compose_point(overrides, select="") if first is None else first
                if parsed.multirun:
                    refuse_per_job_sweep_dir(whole)
                else:  # ${hydra:...} in a run's directory resolves as in Hydra's run
                    HydraConfig.instance().set_config(whole)
                with override_errors():
                    directory = Path(str(OmegaConf.select(whole, output_key(parsed))))
                    if "${" in str(directory):  # an escaped \${...}: Hydra would resolve it again later
                        raise UsageError(
                            f"{output_key(parsed)}={directory} holds '${{', which Hydra reads as an "
                            "interpolation when it writes there; give a directory name without it"
                        )
                    with open_dict(whole):
                        del whole["hydra"]
                    cfg = OmegaConf.to_container(whole, resolve=True)
            else:
                cfg = compose_point(overrides)
            cfg = anchored_paths(cfg)
            if cfg["train"]["resume"]:
                defaults = anchored_paths(compose_point([]))
                restated_values(
                    cfg, defaults, overrides, stored=stored_record(Path(cfg["train"]["resume"]))[0]
                )
                cfg = resumed_config(cfg, overrides)
            validate(cfg)
        return directory


PER_JOB = {
    "${hydra:": "${hydra:...}",
    **{f"hydra.job.{k}": f"${{hydra.job.{k}}}" for k in ("override_dirname", "num", "id")},
}


def refuse_per_job_sweep_dir(whole: DictConfig) -> None:
    """A sweep's directory holds all its jobs, so it cannot be named by one job's values (Hydra refuses
    ${hydra:...} there; the first job's override_dirname would file every job under its name)."""
    raw = str(OmegaConf.to_container(whole.hydra.sweep, resolve=False)["dir"])
    named = next((shown for token, shown in PER_JOB.items() if token in raw), None)
    if named:
        raise UsageError(
            f"hydra.sweep.dir={raw} names one job's value ({named}), but a sweep's directory holds "
            "all its jobs; put per-job names in hydra.sweep.subdir"
        )


def validate_init_from(cfg: PosencConfig) -> None:
    """train.init_from: RUN exists and its weights fit this run (same scheme, shape and vocabulary)."""
    source, saved = source_checkpoint(cfg.train.init_from)
    if (source / SUMMARY).is_file():
        lineage(source)  # its recorded ancestry is readable: checked before any directory
    theirs = saved_tokenizer(source, saved)
    with torch.device("meta"):
        model = GPT(model_config(cfg, len(theirs)))
    check_same_shape(source, saved, model.cfg.to_dict())  # before any corpus is read or tokenized
    initial_state(source, saved, model)
    data = dataclasses.asdict(cfg.data)
    if saved.record.data != data:  # another corpus: its vocabulary must be RUN's
        check_same_vocabulary(source, saved, corpus_tokenizer(data))


def corpus_size(data: Any) -> tuple[int | None, int | None]:
    """(characters in the corpus, characters in its smaller split, training or validation), read in a streaming pass
    without tokenizing: the split bounds its tokens for char and bpe (a BPE token covers at least one
    character). None where there is nothing to bound (byte tokens; pre-tokenized arrays, checked here by
    loading their headers and checked again once loaded)."""
    values = dataclasses.asdict(data)
    kind = corpus_kind(values)
    if kind == "bin":
        load_bin(values)
        return None, None
    if kind == "task":  # instances are made per batch: no text to bound the window
        return None, None
    if kind == "synthetic":
        source, n = None, data.n_chars
    elif kind == "text":
        source = stream.file_source(data.path)
        n = stream.scan(source)[1]
    else:
        source = hf_source(values)[0]
        n = stream.scan(source)[1]
    first_val = (
        stream.split_point(n, data.val_fraction)
        if source is None
        else stream.validation_start(source, n, data.val_fraction)
    )
    return n, None if data.tokenizer == "byte" else min(first_val, n - first_val)
