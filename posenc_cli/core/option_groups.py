"""Eval's and probe's options, each defined once (core.options): the groups they share (the device,
RoPE scaling and its extensions, hf: loading, the effective-length rule, the outputs) and their own
(eval's scoring and text, probe's needles). `posenc eval`'s parameters, `posenc.evaluate`'s keywords
and results.json's record of them are all made from EvalOptions; probe's from ProbeOptions."""

from __future__ import annotations

from dataclasses import dataclass

from posenc_cli.core.choices import (
    ATTENTION_BACKENDS,
    CONTEXT_REMAPS,
    DEVICES,
    EVAL_MODES,
    HF_DEVICE_MAPS,
    HF_DTYPES,
    HF_ROPE_SCALING,
    INDEXED_DEVICE,
    LANGS,
    LEARNED_OVERFLOWS,
    LOGN,
    PPL_TOLERANCE,
    PROBE_TASKS,
    RETRIEVAL_THRESHOLD,
    ROPE_SCALING,
)
from posenc_cli.core.options import Choice, option

DEVICE_HELP = "Where the model runs (auto: cuda, then mps, then cpu; cuda:N also works)."
FORCE_HELP = (
    "Write into --out even where it holds another kind of output set (an export, eval's tables, bench's): "
    "the files that set's manifest.json lists are removed once the new set is written, and no other file."
)
ROPE_SCALING_HELP = (
    "Comma list of RoPE context-extension methods: each RoPE-based run is scored once per method "
    "(labelled rope+yarn, rope+self_extend (G=8, W=64) etc.), no retraining; a run without a rotary scheme "
    f"once, as trained. A METHOD is a frequency scaling ({', '.join(ROPE_SCALING)}; "
    f"{', '.join(HF_ROPE_SCALING)} for hf: models only, which go through transformers' own "
    f"rope_parameters), a training-free extension of attention ({', '.join(CONTEXT_REMAPS)}) or {LOGN} "
    "(log-n query scaling), or one of each joined by + (yarn+logn, ntk+dca)."
)

ROPE_METHOD_PARTS = ROPE_SCALING + HF_ROPE_SCALING + CONTEXT_REMAPS + (LOGN,)  # --rope-scaling's names


def complete_methods(incomplete: str) -> list[str]:
    """--rope-scaling's names for a shell, after a comma or a +: the names joined by + are checked by one
    parser, the one the Python API runs too (model.extension.method.parse_methods)."""
    cut = max(incomplete.rfind(","), incomplete.rfind("+")) + 1
    return [incomplete[:cut] + name for name in ROPE_METHOD_PARTS if name.startswith(incomplete[cut:])]


@dataclass(frozen=True)
class Running:
    """Where the targets run, and whether each is also scored at its own training length."""

    device: str = option("auto", DEVICE_HELP, choice=Choice(DEVICES, also=INDEXED_DEVICE))
    add_context: bool = option(
        False, "Also score each target at its own training length when it is longer than every --lengths."
    )
    attention_backend: str = option(
        "auto",
        "The kernels posenc's own models attend with: sdpa (posenc's executor), flex (torch's FlexAttention, "
        "compiled; its first call on a CPU compiles for about a minute) or auto (flex on CUDA, else sdpa). "
        "results.json records what computed each column.",
        choice=Choice(ATTENTION_BACKENDS),
    )


@dataclass(frozen=True)
class Scaling:
    """The RoPE context-extension methods a rotary run is scored with (model.extension.method parses them)."""

    rope_scaling: str = option(
        "none", ROPE_SCALING_HELP, listed=True, metavar="METHOD[+METHOD],...", complete=complete_methods
    )
    rope_factor: float | None = option(
        None,
        "Scale factor s for --rope-scaling, from 1 to 10,000 (default: the length scored / training length; "
        "dynamic: 1, it scales with the length itself).",
    )
    longrope_factors: str | None = option(
        None,
        "With --rope-scaling longrope: LongRoPE's factors from a file, one number per rotary pair (head_dim/2) "
        "a line, each at least 1, non-decreasing (as a searched long_factor); default: the rule that seeds "
        "LongRoPE's search, YaRN's ramp as per-pair factors from 1 to s. See docs/training-free.md.",
        path=True,
    )


@dataclass(frozen=True)
class Extension:
    """The training-free extensions' parameters: field for field model.extension.method.ExtensionSettings,
    which the work builds from this group whole (None: the paper's default for the training length)."""

    self_extend_group: int | None = option(
        None,
        "With --rope-scaling self_extend: the group size G, distant keys sharing positions floor(pos/G) (default 8).",
    )
    self_extend_window: int | None = option(
        None,
        "With --rope-scaling self_extend: the neighbour window W, at most the training length; nearer keys "
        "keep their exact positions (default: a quarter of the training length).",
    )
    rerope_window: int | None = option(
        None,
        "With --rope-scaling rerope or leaky_rerope: the window w, at most the training length; farther "
        "distances are clipped at w (default: an eighth of the training length).",
    )
    rerope_leak: float | None = option(
        None,
        "With --rope-scaling leaky_rerope: k, above 1; past the window distances grow with slope 1/k (default 16).",
    )
    dca_chunk: int | None = option(
        None,
        "With --rope-scaling dca: Dual Chunk Attention's chunk size s (default: 5/8 of the training length).",
    )
    dca_local: int | None = option(
        None,
        "With --rope-scaling dca: the local window w across neighbouring chunks; s + w at most the training "
        "length (default: 1/8 of the training length).",
    )
    string_offset: int | None = option(
        None,
        "With --rope-scaling string: STRING's offset S, at most the training length; pairs S or more apart are "
        "shifted down by S - W (default: a third of the training length).",
    )
    string_window: int | None = option(
        None,
        "With --rope-scaling string: the distance W a pair S apart is read at, at most S (default: 1/16 of the "
        "training length, the paper's 128 at 2K).",
    )
    streaming_sinks: int | None = option(
        None,
        "With --rope-scaling streaming: StreamingLLM's k, the first tokens every query keeps (default 4).",
    )
    streaming_window: int | None = option(
        None,
        "With --rope-scaling streaming: the W most recent tokens a query keeps, itself included; k + W at most "
        "the training length (default: the training length minus k).",
    )


@dataclass(frozen=True)
class HfLoading:
    """How hf: models are loaded (hf.loading_options checks them); refused without an hf: target."""

    hf_context: int | None = option(
        None,
        "Training length of hf: models, when their config is silent or misleading (default: n_positions / "
        "max_position_embeddings / the like).",
    )
    dtype: str = option(
        "fp32", "The weights of hf: models (posenc runs always score in fp32).", choice=Choice(HF_DTYPES)
    )
    device_map: str | None = option(
        None,
        "Place hf: models with accelerate's big-model loading (GPUs, then CPU), not on --device.",
        choice=Choice(HF_DEVICE_MAPS),
    )


@dataclass(frozen=True)
class Rule:
    """The effective-length rule (report.effective_length.LengthRule, which the work builds from it whole)."""

    ppl_tolerance: float = option(
        PPL_TOLERANCE,
        "Effective length (comparison.md): the longest length up to which perplexity stays within this "
        "fraction of its value at the reference length (probe reads it where eval wrote ppl.csv into --out).",
    )
    retrieval_threshold: float = option(
        RETRIEVAL_THRESHOLD,
        "Effective length (comparison.md): the longest length up to which at least this share of keys (0-1] "
        "is retrieved, depths and seeds averaged (eval reads it where probe wrote probe.csv into --out).",
    )


@dataclass(frozen=True)
class Outputs:
    """Where the output set goes, its language, and whether it may replace another kind of set."""

    out: str | None = option(
        None,
        "Output directory (default: outputs/eval/<time> or outputs/probe/<time>). Probe into eval's --out to "
        "get passkey rows in its comparison.md.",
        path=True,
    )
    lang: str = option(
        "en", "en, or zh to add the chapters' own words to comparison.md.", choice=Choice(LANGS)
    )
    force: bool = option(False, FORCE_HELP)


@dataclass(frozen=True)
class Scoring:
    """Eval's lengths and windows: what is scored at each length."""

    lengths: str = option(
        "512,1024,2048",
        "Comma list of evaluation lengths. A target's training length is added (said up front) when it is "
        "shorter than the longest length asked; a context longer than every length is not (the longest "
        "length asked is then the reference), unless --add-context.",
        "-l",
        listed=True,
    )
    mode: str = option(
        "nonoverlap",
        "nonoverlap: consecutive windows, every token scored. sliding: windows advance by --stride, only "
        "their last stride tokens scored.",
        choice=Choice(EVAL_MODES),
    )
    stride: int | None = option(None, "Stride for --mode sliding (default: half the length).")
    max_tokens: int = option(
        32768,
        "Tokens scored at every length, never raised (a multiple of the longest length, at least one "
        "window). With --data every column scores the same bytes: those the column with the longest tokens "
        "covers in this many, each column in its own tokens.",
    )
    learned_overflow: str = option(
        "dash",
        "Past a position table's max_len (learned): dash shows —; window scores with sliding windows of "
        "max_len tokens, labelled learned+window. A comma list shows both.",
        choice=Choice(LEARNED_OVERFLOWS, comma_list=True),
        listed=True,
    )


@dataclass(frozen=True)
class Text:
    """The text eval scores: each run's validation split, or --data (a file, or a dataset's split)."""

    data: str | None = option(
        None,
        "Evaluate on this UTF-8 text file, or a dataset's split (hf:NAME:SPLIT, hf:NAME:CONFIG:SPLIT, or a "
        "save_to_disk directory as hf:DIR or hf:DIR:SPLIT; its rows each followed by a newline), instead of "
        "each run's validation split (required for hf: models, tokenized by each model's own tokenizer).",
        path=True,
    )
    text_field: str = option("text", "The column of text of an hf: --data.")
    documents: bool = option(
        False,
        "With --data hf:...: score each row as a document of its own (PI's and YaRN's protocol): at each "
        "length the documents of at least L+1 tokens, their first L tokens (or sliding windows inside them "
        "with --mode sliding, up to --max-tokens each); ppl.csv's documents column says how many.",
    )


@dataclass(frozen=True)
class Needles:
    """Probe's trials: the lengths, depths and needle task, and how many of each."""

    lengths: str = option(
        "256,512,1024,2048",
        "Comma list of trial lengths. A run's training length is added (said up front) when it is shorter "
        "than the longest asked, or with --add-context.",
        "-l",
        listed=True,
    )
    depths: str = option(
        "0.1,0.5,0.9",
        "Comma list of relative depths of the key sentence in the filler (0 = start, 1 = end).",
        listed=True,
    )
    trials: int = option(
        50, "Trials per run, length and depth (a fresh key and filler each; at most 10,000)."
    )
    seed: int = option(0, "Seed for keys and filler: the same trials for every run.")
    task: str = option(
        "passkey",
        "The needle task (RULER's family beside the passkey): multikey hides distractor keys of other names "
        "and asks one; multivalue hides 4 keys of one name and asks all; multiquery hides 4 keys of 4 names "
        "and asks all; vt (RULER's variable tracking) asks every name bound to a value through a 4-hop chain; "
        "cwe (common-words extraction) asks the most common words of a numbered list (no --depths). vt and "
        "cwe are also scored by RULER's recall. See docs/probe.md.",
        choice=Choice(PROBE_TASKS),
    )
    distractors: int | None = option(
        None, "multikey only: needles beside the asked one, 1 to 16 (default 3, as RULER's multikey)."
    )


@dataclass(frozen=True)
class EvalOptions:
    """Every option of `posenc eval`, as the command spells them (comma lists as text), in its groups."""

    runs: list[str]
    scoring: Scoring = Scoring()
    text: Text = Text()
    running: Running = Running()
    scaling: Scaling = Scaling()
    extension: Extension = Extension()
    hf: HfLoading = HfLoading()
    rule: Rule = Rule()
    outputs: Outputs = Outputs()


@dataclass(frozen=True)
class ProbeOptions:
    """Every option of `posenc probe`, as the command spells them (comma lists as text), in its groups."""

    runs: list[str]
    needles: Needles = Needles()
    running: Running = Running()
    scaling: Scaling = Scaling()
    extension: Extension = Extension()
    hf: HfLoading = HfLoading()
    rule: Rule = Rule()
    outputs: Outputs = Outputs()
