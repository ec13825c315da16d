"""Algorithmic tasks (data=task): each generator checked by hand and as a property over random instances,
the answer-only loss, exact match as greedy decoding, and task runs through train and eval."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from conftest import assert_refused, invoke, train
from posenc_cli.data.tasks import END, IGNORE, MODULUS, SEPARATOR, TASKS, TaskCorpus, TaskSpec, encode
from posenc_cli.evaluation.task_accuracy import greedy_exact

HAND_CHECKED = {  # seed 0, length 5, worked out by hand from the prompt
    "copy": ("ehfad", "ehfad"),
    "reverse": ("ehfad", "dafhe"),
    "duplicate": ("ehfad", "ehfadehfad"),
    "parity": ("01101", "1"),  # three ones
    "sort": ("ehfad", "adefh"),
    "addition": ("01101+11111", "101100"),  # 13 + 31 = 44
    "modular": ("4-4-3-0-3", "4"),  # 4 - 4 - 3 - 0 - 3 = -6 ≡ 4 (mod 5)
}


def instance(task: str, n: int, seed: int = 0, **options):
    return TaskSpec(task, 8, **options).instance(n, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("task", TASKS)
def test_each_task_makes_the_hand_checked_instance(task):
    made = instance(task, 5)
    assert (made.prompt, made.answer) == HAND_CHECKED[task]


def test_reversed_digits_write_operands_and_sum_least_significant_first():
    made = instance("addition", 5, reversed_digits=True)
    assert (made.prompt, made.answer) == ("10110+11111", "001101")  # 01101, 11111, 101100 reversed


def answer_rule(task: str, prompt: str, reversed_digits: bool) -> str:
    """Each task's answer, computed independently of its generator."""
    if task == "copy":
        return prompt
    if task == "reverse":
        return prompt[::-1]
    if task == "duplicate":
        return prompt * 2
    if task == "parity":
        return "1" if prompt.count("1") % 2 else "0"
    if task == "sort":
        return "".join(sorted(prompt))
    if task == "modular":
        return str(eval(prompt) % MODULUS)
    a, b = (x[::-1] if reversed_digits else x for x in prompt.split("+"))
    total = bin(int(a, 2) + int(b, 2))[2:].zfill(len(a) + 1)
    return total[::-1] if reversed_digits else total


@pytest.mark.parametrize("task, reversed_digits", [(t, False) for t in TASKS] + [("addition", True)])
def test_every_random_instance_has_the_rules_answer_and_its_length(task, reversed_digits):
    spec = TaskSpec(task, 8, reversed_digits=reversed_digits)
    generator = torch.Generator().manual_seed(1)
    for n in [1, 2, 3, 7, 30, 200] * 5:
        made = spec.instance(n, generator)
        assert made.answer == answer_rule(task, made.prompt, reversed_digits)
        inputs = made.prompt.replace("+", "").replace("-", "")
        assert len(inputs) == (2 * n if task == "addition" else n)
        assert set(made.prompt + made.answer) <= set(TASKS[task].alphabet)
        assert spec.input_len(n) == len(made.prompt) + len(made.answer) + 1


def test_only_the_answer_and_its_end_mark_are_scored():
    spec = TaskSpec("reverse", 8)
    made = instance("reverse", 3)
    x, y = encode(spec, [made], width=10)
    vocab = spec.vocab
    sequence = made.prompt + SEPARATOR + made.answer + END
    assert vocab.decode(x[0, : len(sequence) - 1]) == sequence[:-1]
    scored = y[0] != IGNORE
    assert vocab.decode(y[0][scored]) == made.answer + END
    assert scored.nonzero().squeeze(1).tolist() == list(range(3, 7))  # from the separator on


def test_training_batches_draw_lengths_up_to_max_train_len_and_fit_the_window():
    spec = TaskSpec("copy", 6)
    x, y = TaskCorpus(spec).batch("train", 256, spec.input_len(6), generator=torch.Generator().manual_seed(0))
    answer_tokens = (y != IGNORE).sum(1) - 1  # the end mark is scored too
    assert answer_tokens.min() == 1 and answer_tokens.max() == 6
    assert x.shape == y.shape == (256, spec.input_len(6))


class Oracle(torch.nn.Module):
    """A deterministic 'model': its argmax after any prefix is a hash of the prefix."""

    vocab = 5

    def forward(self, x):
        codes = (x.cumsum(1) * 7 + torch.arange(1, x.size(1) + 1)) % self.vocab
        return torch.nn.functional.one_hot(codes, self.vocab).float()


def greedy_decode(model, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    out = prompt
    for _ in range(steps):
        out = torch.cat([out, model(out)[:, -1:].argmax(-1)], dim=1)
    return out[:, prompt.size(1) :]


def test_teacher_forced_argmax_scores_exactly_the_greedy_answers():
    """The shortcut eval takes: all answer tokens argmax-right under the true prefix <=> the greedy
    decode is the answer. Half the rows' answers are the greedy ones, half have one token changed."""
    oracle, generator = Oracle(), torch.Generator().manual_seed(0)
    prompts = torch.randint(oracle.vocab, (40, 6), generator=generator)
    answers = greedy_decode(oracle, prompts, 4)
    wrong = torch.arange(40) % 2 == 1
    position = torch.randint(4, (40,), generator=generator)
    answers[wrong, position[wrong]] = (answers[wrong, position[wrong]] + 1) % oracle.vocab
    sequences = torch.cat([prompts, answers], 1)
    targets = torch.full((40, 9), IGNORE)
    targets[:, 5:] = answers
    right = greedy_exact(oracle, sequences[:, :-1], targets)
    assert torch.equal(right, (greedy_decode(oracle, prompts, 4) == answers).all(1))
    assert torch.equal(right, ~wrong)


BAD_TASK_OPTIONS = {
    "unknown task": (["data.task=multiply"], ["data.task=multiply", "copy, reverse"]),
    "max_train_len zero": (["data.max_train_len=0"], ["data.max_train_len", "got 0"]),
    "max_train_len negative": (["data.max_train_len=-3"], ["data.max_train_len", "got -3"]),
    "reversed digits off addition": (["data.reversed_digits=true"], ["data.reversed_digits", "addition"]),
    "window too short": (["train.block_size=20"], ["train.block_size=20", "41 tokens"]),
}


@pytest.mark.parametrize("case", BAD_TASK_OPTIONS)
def test_bad_task_options_are_one_line_and_nothing_on_disk(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides, needles = BAD_TASK_OPTIONS[case]
    result = invoke("train", "data=task", "train.block_size=41", *overrides)
    assert_refused(result.code, result.stderr, *needles)
    assert list(tmp_path.iterdir()) == []


TASK_RUN = ["data=task", "data.task=parity", "data.max_train_len=4", "train.block_size=6"]


@pytest.fixture(scope="module")
def task_runs(tmp_path_factory):
    """Two tiny parity runs (seeds 0, 1) and a text run, trained once for the module."""
    cwd = tmp_path_factory.mktemp("tasks")
    runs = [train(cwd, *TASK_RUN, f"seed={seed}", run=f"parity{seed}") for seed in (0, 1)]
    return cwd, runs, train(cwd, run="text")


@pytest.mark.slow
def test_task_runs_evaluate_to_accuracy_by_length_with_seeds_aggregated(task_runs):
    cwd, (first, second), _ = task_runs
    result = invoke("eval", str(first), str(second), "--lengths", "2,8", "--out", str(cwd / "out"))
    assert result.code == 0, result.stderr
    df = pd.read_csv(cwd / "out" / "task_accuracy.csv")
    assert list(df.columns) == [
        "run",
        "model_id",
        "task",
        "scheme",
        "seed",
        "length",
        "train_len",
        "accuracy",
        "n",
    ]
    assert sorted(df["length"].unique()) == [2, 4, 8]  # the training length is always added
    assert df["accuracy"].between(0, 1).all() and (df["n"] == 100).all()
    table = (cwd / "out" / "task_accuracy.md").read_text()
    assert "## parity (trained on lengths 1–4)" in table and "(0, 1)" in table and "8 (2×)" in table
    assert (cwd / "out" / "task_accuracy.png").is_file()


@pytest.mark.slow
def test_a_task_eval_writes_results_json_last_and_report_rebuilds_its_tables_from_it(task_runs):
    cwd, (first, second), _ = task_runs
    result = invoke("eval", str(first), str(second), "--lengths", "2,8", "--out", str(cwd / "tasks"))
    assert result.code == 0, result.stderr
    manifest = json.loads((cwd / "tasks" / "manifest.json").read_text())
    assert list(manifest["files"])[-1] == "results.json"  # written last, before the manifest
    results = json.loads((cwd / "tasks" / "results.json").read_text())
    (made,) = results["tasks"]["provenance"]
    assert made["options"]["lengths"] == "2,8" and [t["kind"] for t in made["targets"]] == ["run", "run"]
    assert len(results["tasks"]["results"]["task_accuracy"]["rows"]) == 6  # 2 runs x lengths 2, 4, 8
    written = {name: (cwd / "tasks" / name).read_text() for name in ("task_accuracy.csv", "task_accuracy.md")}
    report = invoke("report", str(cwd / "tasks"), "--out", str(cwd / "rebuilt"))
    assert report.code == 0, report.stderr
    assert {name: (cwd / "rebuilt" / name).read_text() for name in written} == written
    assert (cwd / "rebuilt" / "task_accuracy.png").is_file()


@pytest.mark.slow
def test_a_results_file_emptied_or_nested_too_deep_is_one_line_and_report_writes_nothing(task_runs):
    """Edited results.json (its manifest re-hashed to match): rows emptied or replaced, or JSON nested past
    Python's recursion limit, is refused in one line, exit 2, no output set (found by a hostile pass)."""
    import hashlib
    import shutil

    cwd, (first, _), _ = task_runs
    assert invoke("eval", str(first), "--lengths", "2,8", "--out", str(cwd / "set")).code == 0
    for name, edit in (
        ("emptied", lambda doc: doc["tasks"]["results"]["task_accuracy"].update(rows=[])),
        ("replaced", lambda doc: doc["tasks"]["results"]["task_accuracy"].update(rows={"a": 1})),
        ("deep", lambda doc: None),  # the whole file replaced below
    ):
        edited = cwd / name
        shutil.copytree(cwd / "set", edited)
        doc = json.loads((edited / "results.json").read_text())
        edit(doc)
        data = ("[" * 100_000 + "]" * 100_000 if name == "deep" else json.dumps(doc)).encode()
        (edited / "results.json").write_bytes(data)
        manifest = json.loads((edited / "manifest.json").read_text())
        manifest["files"]["results.json"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        (edited / "manifest.json").write_text(json.dumps(manifest))
        report = invoke("report", str(edited), "--out", str(cwd / f"out-{name}"))
        assert report.code == 2 and report.stderr.count("\n") == 1, report.stderr
        assert not (cwd / f"out-{name}").exists()


@pytest.mark.slow
def test_posenc_evaluate_scores_task_runs_as_the_command_does_and_writes_nothing_without_out(task_runs):
    import posenc

    cwd, (first, second), _ = task_runs
    before = set(cwd.iterdir())
    result = posenc.evaluate([first, second], lengths=[2, 8])
    assert result.out is None and result.ppl.empty and result.written == [] and set(cwd.iterdir()) == before
    assert invoke("eval", str(first), str(second), "--lengths", "2,8", "--out", str(cwd / "cli")).code == 0
    command = pd.read_csv(cwd / "cli" / "task_accuracy.csv")
    assert (
        result.tasks[["length", "accuracy"]].values.tolist()
        == command[["length", "accuracy"]].values.tolist()
    )


@pytest.mark.slow
def test_a_task_run_is_refused_beside_text_runs_by_perplexity_paths_and_past_memory(task_runs):
    cwd, (first, _), text = task_runs
    mixed = invoke("eval", str(first), str(text), "--lengths", "8", "--out", str(cwd / "o"))
    assert_refused(mixed.code, mixed.stderr, str(first), "separate calls")
    probe = invoke("probe", str(first), "--out", str(cwd / "p"))
    assert_refused(probe.code, probe.stderr, "task run", "posenc eval")
    sliding = invoke("eval", str(first), "--mode", "sliding", "--out", str(cwd / "s"))
    assert_refused(sliding.code, sliding.stderr, "--mode")
    huge = invoke(
        "eval", str(first), "--lengths", "100000000", "--out", str(cwd / "h")
    )  # before any instance
    assert_refused(huge.code, huge.stderr, "--lengths 100000000", "an instance of length 100000000 is", "GiB")
    assert not any((cwd / name).exists() for name in ("o", "p", "s", "h"))


@pytest.mark.slow
def test_options_a_task_eval_does_not_read_are_refused_in_one_line_not_recorded(task_runs):
    """Task runs are scored by exact match at instance lengths: an option only perplexity, retrieval, hf:
    models or the tables of text read (learned overflow, tokens, the effective-length rule, ...) was
    accepted and recorded in results.json; now it is refused by name, a learned run's too."""
    cwd, (first, _), _ = task_runs
    learned = train(cwd, *TASK_RUN, "scheme=learned", run="learned")
    cases = [
        (
            [str(learned), "--learned-overflow", "window"],
            "--learned-overflow window is not read for task runs",
        ),
        ([str(first), "--learned-overflow", "window"], "--learned-overflow window"),
        ([str(first), "--max-tokens", "64"], "--max-tokens 64 is not read"),
        ([str(first), "--ppl-tolerance", "0.5"], "--ppl-tolerance 0.5 is not read"),
        ([str(first), "--retrieval-threshold", "0.9"], "--retrieval-threshold 0.9"),
        ([str(first), "--add-context"], "--add-context is not read"),
        ([str(first), "--lang", "zh"], "--lang zh"),
        ([str(first), "--data", str(cwd / "none.txt")], "--data"),
    ]
    for args, needle in cases:
        result = invoke("eval", *args, "--lengths", "8", "--out", str(cwd / "unread"))
        assert_refused(result.code, result.stderr, needle, "drop it")
    assert not (cwd / "unread").exists()
