"""Fixed sets of names that options and configs accept, in a module without heavy imports so the
command line can declare them as choices (listed in --help, completed, checked while parsing)."""

DEVICES = ("auto", "cpu", "cuda", "mps")  # cuda:N also works
EVAL_MODES = ("nonoverlap", "sliding")
LANGS = ("en", "zh")
ROPE_SCALING = ("none", "linear", "ntk", "dynamic", "yarn")
ROPE_SCALING_HF_ONLY = ("llama3",)  # transformers' own implementations, for `hf:` models (see hf.py)
