# %% [markdown]
# # posenc from a notebook
#
# `import posenc` offers the calls a notebook needs; each is the function the `posenc` command runs, and
# each returns pandas objects. These cells use `experiment=smoke` (seconds, numbers not meaningful);
# drop it, and raise the lengths, for the chapters' recipe. `tests/test_api.py` runs this file.

# %%
import posenc

posenc.schemes()[["kind", "relative", "extrapolation"]]

# %% [markdown]
# The chapters' properties of a scheme, checked on tensors (figures under outputs/inspect/):

# %%
checks = posenc.inspect("rope", dim=16, length=16, heads=2)
checks[["claim", "passed", "measured"]]

# %% [markdown]
# Two tiny trainings (data.passkey_rate>0 teaches the passkey phrasing that `posenc.probe` asks):

# %%
runs = [
    posenc.train(
        overrides=[
            "experiment=smoke",
            f"scheme={scheme}",
            "data.passkey_rate=0.5",
            "train.block_size=128",
            "train.threads=1",
            f"hydra.run.dir=runs/{scheme}",
        ]
    )
    for scheme in ("rope", "alibi")
]

# %%
result = posenc.evaluate(runs, lengths=[128, 256], max_tokens=512, out="eval")
result.ppl.pivot_table(index="eval_len", columns="scheme", values="ppl")

# %% [markdown]
# Passkey retrieval into the same output set: comparison.md gains its rows, and `eval/results.json`
# records how both were made (`posenc report eval` rebuilds the tables from it).

# %%
passkey = posenc.probe(runs, lengths=[128], depths=[0.5], trials=2, out="eval")
passkey.groupby("scheme")["accuracy"].mean()
