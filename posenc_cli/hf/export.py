"""A run's model for sharing: `model.safetensors` (weights, no pickle) and `config.json` (posenc's
model config, tokenizer, training length and the run's id), one output set whose `manifest.json`,
written last, holds every file's sha256 and size and the run id. `load_export`
(hf.export_loading) rebuilds the same model from the two files alone, so nothing that loads it
can run code, and only when the manifest vouches for both: an export killed mid-write (B's weights
beside A's config) is refused, never loaded.

The same directory is a transformers model: config.json also carries `model_type` and `auto_map`,
`modeling_posenc.py` imports evaluation.hf_modeling's classes (which wrap posenc's GPT: posenc must be
installed where it is loaded), and `tokenizer.json` is the run's tokenizer (hf_modeling.PosencTokenizerFast,
whose end of text is the newline that ends posenc's documents), so `AutoModelForCausalLM` and
`AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)` give posenc's logits and ids. posenc itself
loads it so as `hf:DIR` (or DIR named as a target), after the one verification every way of naming an
export goes through (export_loading.private_export, load_export's too), giving trust_remote_code only
when the one code it names is the modeling_posenc.py this posenc writes, byte for byte
(hf.remote_code), and loading only a private copy of the bytes it checked, beside a
modeling_posenc.py it wrote itself."""

from __future__ import annotations

import json
from pathlib import Path

from posenc_cli.core.atomic import write_text, write_with
from posenc_cli.core.choices import EXPORT_MODEL_TYPE
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import SetKind, hashed_entry, output_set
from posenc_cli.core.install import install_hint
from posenc_cli.hf.remote_code import (
    CONFIG,
    MODELING,
    MODELING_SOURCE,
    OWN_AUTO_MAPS,
    TOKENIZER_CONFIG,
)
from posenc_cli.rundir.claim import is_locked
from posenc_cli.rundir.destinations import owned_out
from posenc_cli.rundir.loading import load_run

FORMAT = "posenc-model"
VERSION = 3  # 2: the run id, and a manifest of hashes; 3: the tokenizer's own class and end of document
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
DOCUMENT_END = "\n"  # posenc ends every document with it (data.hf_datasets), as GPT-2's <|endoftext|>
TEXT_TOKENIZERS = ("char", "byte", "bpe")  # the tokenizers of text, which an export carries for transformers
HF_FIELDS = {
    "model_type": EXPORT_MODEL_TYPE,
    "architectures": ["PosencForCausalLM"],
    "auto_map": OWN_AUTO_MAPS[CONFIG],
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}


def safetensors_torch():
    try:
        import safetensors.torch
    except ImportError:
        raise UsageError(f"export needs safetensors: {install_hint('hf')}") from None
    return safetensors.torch


def export_run(run_dir: str | Path, out: str | Path | None = None, *, force: bool = False) -> Path:
    """Write RUN's model as model.safetensors + config.json into `out` (default: the run directory), an
    output set of its own kind: a directory holding another kind of set is refused unless `force`."""

    st = safetensors_torch()
    out = owned_out(None if out is None else str(out), SetKind.EXPORT, force=force) or Path(run_dir)
    if is_locked(Path(run_dir)):
        raise UsageError(
            f"{run_dir} is being trained right now, so its checkpoint moves on; export it once training stops"
        )
    run = load_run(run_dir)
    run_id = run.record.run_id or f"unnamed run in {Path(run_dir).resolve()}"  # a run from before run ids
    config = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": run_id,
        "model_config": run.model.cfg.to_dict(),
        "tokenizer": run.tokenizer.payload(),
        "train_len": run.train_len,
        "data": run.record.data,
        "corpus_sha256": run.record.corpus_sha256,  # eval on the run's own text scores its validation split
        "step": run.checkpoint.step,  # the run's step: an export left in a run that trains on goes stale
    }
    config |= HF_FIELDS | {"vocab_size": run.model.cfg.vocab_size, "max_position_embeddings": run.train_len}
    tokenizer = tokenizer_json(run.tokenizer)
    # the weights as safetensors' save_model stores them (a tied pair once, under its last name), made in
    # memory so that Python writes the file: a full disk is then atomic's one line, not safetensors' error
    state = run.model.state_dict(keep_vars=True)
    kept = {id(tensor): name for name, tensor in state.items()}
    weights = st.save(
        {name: t.detach().contiguous() for name, t in state.items() if kept[id(t)] == name},
        metadata={name: kept[id(t)] for name, t in state.items() if kept[id(t)] != name} or None,
    )
    with output_set(out, [run_id], kind=SetKind.EXPORT, run_id=run_id) as result:
        write_with(out / WEIGHTS, lambda p: p.write_bytes(weights))
        write_text(out / MODELING, MODELING_SOURCE)
        result.written += [out / WEIGHTS, out / MODELING]
        if tokenizer is not None:
            write_text(out / TOKENIZER, tokenizer)
            write_text(out / TOKENIZER_CONFIG, json.dumps(tokenizer_config(run.tokenizer)) + "\n")
            result.written += [out / TOKENIZER, out / TOKENIZER_CONFIG]
        else:
            drop_replaced(result, [TOKENIZER, TOKENIZER_CONFIG])
        write_text(out / CONFIG, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        result.written.append(out / CONFIG)
    return out


def drop_replaced(result, names: list[str]) -> None:
    """Remove the files among `names` that the export this one replaces wrote and listed, unchanged:
    left there, transformers would load a text tokenizer beside a model of token ids (data=bin), and
    export_loading.verified_config refuses the export. A file its manifest did not vouch for is left to
    that refusal."""
    listed = result.previous.get("files", {})
    for name in names:
        path = result.out / name
        if name in listed and path.is_file() and hashed_entry(path) == listed[name]:
            path.unlink()


def tokenizers_module():
    try:
        import tokenizers
    except ImportError:
        raise UsageError(f"export needs tokenizers: {install_hint('hf')}") from None
    return tokenizers


def gpt2_byte_chars() -> list[str]:
    """GPT-2's byte-to-character map (tokenizers' ByteLevel): printable bytes stand for themselves, the
    others for the characters from U+0100 on, in byte order."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def tokenizer_json(tokenizer) -> str | None:
    """The run's tokenizer as a `tokenizer.json` for PreTrainedTokenizerFast, giving posenc's ids for
    the same text: char, one token per character (its <unk> for unseen ones, where the run has one);
    byte, one per UTF-8 byte; bpe, its own file. None for token ids without a text (data=bin)."""
    if tokenizer.kind not in TEXT_TOKENIZERS:
        return None
    if tokenizer.kind == "bpe":
        return tokenizer.to_json()
    tk = tokenizers_module()
    if tokenizer.kind == "char":
        unk = tokenizer.chars[-1] if tokenizer.has_unk else None
        hf = tk.Tokenizer(tk.models.BPE({c: i for i, c in enumerate(tokenizer.chars)}, [], unk_token=unk))
        hf.decoder = tk.decoders.Fuse()
    else:
        hf = tk.Tokenizer(tk.models.BPE({c: b for b, c in enumerate(gpt2_byte_chars())}, []))
        hf.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        hf.decoder = tk.decoders.ByteLevel()
    return hf.to_str()


def document_end_id(tokenizer) -> int | None:
    """The id of DOCUMENT_END, where the vocabulary gives it one token (a char vocabulary may lack it)."""
    if tokenizer.missing(DOCUMENT_END):
        return None
    ids = tokenizer.encode_array(DOCUMENT_END)
    return int(ids[0]) if len(ids) == 1 else None


def tokenizer_config(tokenizer) -> dict:
    """tokenizer_config.json: transformers loads the tokenizer as hf_modeling.PosencTokenizerFast, whose
    end of text is the document end (lm-evaluation-harness starts every rolling window with it)."""
    return {
        "tokenizer_class": "PosencTokenizerFast",
        "auto_map": OWN_AUTO_MAPS[TOKENIZER_CONFIG],
        "document_end_id": document_end_id(tokenizer),
    }


def lacks_document_end(directory: Path) -> bool:
    """Whether an export just written has a text tokenizer without DOCUMENT_END, so that
    lm-evaluation-harness, which starts each rolling window with the end of text, needs prefix_token_id."""
    path = directory / TOKENIZER_CONFIG
    return path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("document_end_id") is None
