"""Fixed sets of names that options and configs accept, in a module without heavy imports so the
command line can declare them as choices (listed in --help, completed, checked while parsing)."""

DEVICES = ("auto", "cpu", "cuda", "mps")  # cuda:N also works
INDEXED_DEVICE = r"cuda:\d+"  # the further --device values, a regex
EVAL_MODES = ("nonoverlap", "sliding")
LANGS = ("en", "zh")
ROPE_SCALING = ("none", "linear", "ntk", "dynamic", "yarn", "longrope")  # posenc's own, for every rotary run
HF_ROPE_SCALING = ("llama3",)  # transformers' own implementations, for `hf:` models only
# training-free context extension beside a scaling (model/extension): at most one remap, and log-n
CONTEXT_REMAPS = ("self_extend", "rerope", "leaky_rerope", "dca", "string", "streaming")
LOGN = "logn"
# transformers' model_type of a posenc export (`posenc export`): its config.json, and how `hf:` loading
# knows one; here, not in hf/, because evaluation/hf_modeling.py (at the path exports import) names it too
EXPORT_MODEL_TYPE = "posenc"
HF_DTYPES = ("fp32", "bf16")  # the weights of `hf:` models
HF_DEVICE_MAPS = ("auto",)  # accelerate's big-model placement of `hf:` models (GPUs, then CPU)
# posenc probe --task (data/needles.py; vt and cwe: RULER's variable tracking and common-words extraction)
PROBE_TASKS = ("passkey", "multikey", "multivalue", "multiquery", "vt", "cwe")
LEARNED_OVERFLOWS = ("dash", "window")  # eval past a position table (evaluation.perplexity)
ROPE_LAYOUTS = ("half", "interleaved")  # rope and xpos pairings: rope.LAYOUTS, by name
ALIBI_SLOPES = ("paper", "chapter")  # alibi slope rules: alibi.SLOPE_RULES, by name
# the comparison the chapters' table asks for: their four schemes and the no-position baseline
CHAPTER_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi")
MULTIRUN_FLAGS = ("-m", "--multirun")  # Hydra's flags for a sweep
# what train.precision asks for (core.device computes them); bf16-fp32-attention: bf16 autocast with the
# attention kernel kept in fp32, faster where bf16 SDPA is slower than fp32's (docs/training.md)
PRECISIONS = ("auto", "fp32", "bf16", "bf16-fp32-attention")
TOKENIZERS = ("char", "byte", "bpe")  # data.tokenizer's kinds (data.tokenizers implements them)
# the effective-length rule's defaults (report.effective_length.LengthRule; --ppl-tolerance, --retrieval-threshold)
# a length, distance or position any option names (train.block_size, scheme options, --hf-context):
# past any sequence and any memory, and past int64 torch's sizes overflow
MAX_LENGTH = 10**12
PPL_TOLERANCE = 0.10  # perplexity at most 10 % above its value at the reference length
RETRIEVAL_THRESHOLD = 0.50  # at least half the keys retrieved, where probed

# options every positional scheme takes, for the attention layer it serves (model/positional build_scheme):
# which keys its queries see (model/window.py) and their temperature (model/temperature.py)
LAYER_OPTIONS = ("window", "chunk", "temperature", "temperature_beta", "temperature_floor", "sinks")
# the kernels posenc's own models attend with (--attention-backend): auto (flex on CUDA), sdpa, flex
ATTENTION_BACKENDS = ("auto", "sdpa", "flex")
