"""`posenc export` writes a transformers model: AutoModelForCausalLM with trust_remote_code gives posenc's
logits exactly for every scheme, PreTrainedTokenizerFast gives posenc's ids for char, byte and bpe
tokenizers, and `posenc eval` of an export says what it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import ALL_SCHEMES, BEYOND_CHAPTERS, assert_refused, posenc
from posenc_cli.data.tokenizers import ByteTokenizer
from posenc_cli.data.vocab import UNK, Vocab
from posenc_cli.evaluation.export import export_run, tokenizer_json
from posenc_cli.rundir.loading import load_run

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

TEXT = "héllo, wörld: ∑ 🙂 the end\n"


def fast_tokenizer(tokenizer):
    import tokenizers

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer.from_str(tokenizer_json(tokenizer))
    )


@pytest.mark.parametrize(
    "tokenizer, text",
    [
        (Vocab.from_text(TEXT), TEXT),
        (Vocab.from_text("abc ", with_unk=True), "a cab, bad"),  # unseen characters map to its <unk>
        (ByteTokenizer(), TEXT),
    ],
    ids=["char", "char-with-unk", "byte"],
)
def test_the_exported_tokenizer_gives_posencs_ids_and_decodes_back(tokenizer, text):
    fast = fast_tokenizer(tokenizer)
    ids = fast(text)["input_ids"]
    assert ids == tokenizer.encode(text, strict=False).tolist()
    if not (isinstance(tokenizer, Vocab) and tokenizer.has_unk):
        assert fast.decode(ids) == text
    else:
        assert ids.count(tokenizer.chars.index(UNK)) == len([c for c in text if c not in "abc "])


def exported_logits_match(run: Path, out: Path) -> None:
    export_run(run, out)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True)
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(out))
    posenc_run = load_run(run)
    text = posenc_run.tokenizer.decode(torch.arange(len(posenc_run.tokenizer)).tolist()) * 2
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == posenc_run.tokenizer.encode(text).tolist()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, posenc_run.model(ids)), run.name
        greedy = model.generate(ids[:, :8], max_new_tokens=4, do_sample=False)
        expected = ids[:, :8]
        for _ in range(4):  # posenc's own greedy decoding, token by token
            expected = torch.cat([expected, posenc_run.model(expected)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(greedy, expected)


@pytest.mark.parametrize("scheme", ALL_SCHEMES)
def test_a_chapter_scheme_loads_in_transformers_with_posencs_logits(scheme, smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith(f"{scheme}_seed0"))
    exported_logits_match(run, tmp_path / "export")


@pytest.mark.parametrize("scheme", BEYOND_CHAPTERS)
def test_a_scheme_beyond_the_chapters_loads_in_transformers_with_posencs_logits(
    scheme, beyond_chapters_sweep, tmp_path
):
    run = next(p for p in beyond_chapters_sweep.iterdir() if p.name.endswith(f"{scheme}_seed0"))
    exported_logits_match(run, tmp_path / "export")


def test_eval_of_an_export_says_it_is_one_and_names_its_run(smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    export_run(run, tmp_path / "export")
    run_id = load_run(run).record.run_id
    assert_refused(*posenc("eval", str(tmp_path / "export")), "is a posenc export of run", run_id)
