"""The CUDA path (issue #50), checked where CUDA exists; every test skips with its reason elsewhere.

- bf16 autocast: `train.precision=auto` on a bf16 GPU computes in bf16 autocast, the loss in fp32.
- The SDPA kernel each scheme gets: none and rope call SDPA with `is_causal` and no mask, so a fused
  kernel serves them (flash, or memory-efficient; never math); alibi, t5, kerple and fire pass their
  bias as a dense additive mask (`attention.attend`), which flash cannot take, so they get the bias
  path: memory-efficient attention with the mask (which also gives a learned bias its gradient) or,
  where that kernel refuses the mask, math. Both are asserted (the kernels a forward and backward
  ran, from the profiler, and what each kernel set alone can run).
- KV-cache sampling: each cached step's logits are the uncached forward's, within 1e-3 (fused kernels
  round differently from the CPU's; the CPU law in test_model.py holds 1e-5), and `posenc sample
  --device cuda` gives the same text for the same seed past the training length.
- A checkpoint trained on the GPU (bf16 autocast) evaluated on the CPU: perplexity within 1e-3
  relative of the GPU's evaluation (both score in fp32; only kernels and summation order differ).
- A resume across devices, both ways: the first segment's metrics kept, the run finished on the other
  device, and its final validation loss within 0.01 nats of the same run trained in one go on the GPU
  (fp32 both; the devices' rounding moves the loss by ~1e-4 in 20 steps, a lost optimizer state or
  data position by far more).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from conftest import SMOKE, run_cli
from posenc_cli.core.device import autocast, effective_precision
from posenc_cli.model import GPT, ModelConfig

CUDA = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU: torch.cuda.is_available() is False here")

FUSED = {"flash", "efficient", "cudnn"}  # the kernels that never store the T x T scores
# SDPA's backend ops, as the profiler names them (their backward ops share the prefix)
BACKEND_OPS = {
    "flash": "aten::_scaled_dot_product_flash_attention",
    "efficient": "aten::_scaled_dot_product_efficient_attention",
    "cudnn": "aten::_scaled_dot_product_cudnn_attention",
    "math": "aten::_scaled_dot_product_attention_math",
}
CAUSAL_ONLY = ["none", "rope"]
BIASED = ["alibi", "t5", "kerple", "fire"]


def cuda_model(scheme: str, *, block_size: int = 64) -> GPT:
    """Head dimension 32 (flash and memory-efficient take it), every parameter random."""
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(vocab_size=13, block_size=block_size, n_layer=2, n_head=2, n_embd=64, scheme=scheme)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model.cuda()


def train_step(model: GPT) -> torch.Tensor:
    """One forward and backward under bf16 autocast; the logits."""
    idx = torch.randint(0, 13, (2, 64), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with autocast(torch.device("cuda"), "bf16-autocast"):
        logits = model(idx)
    F.cross_entropy(logits.float().flatten(0, 1), idx.flatten()).backward()
    return logits


def backends(run) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
        torch.cuda.synchronize()
    names = {event.key for event in prof.key_averages()}
    return {b for b, op in BACKEND_OPS.items() if any(n.startswith(op) and "for_cpu" not in n for n in names)}


def test_auto_precision_on_a_bf16_gpu_is_bf16_autocast_with_fp32_loss_and_gradients():
    assert torch.cuda.is_bf16_supported()
    assert effective_precision(torch.device("cuda"), "auto") == "bf16-autocast"
    model = cuda_model("rope").train()
    logits = train_step(model)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()
    assert all(p.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("scheme", CAUSAL_ONLY)
def test_none_and_rope_call_sdpa_causal_without_a_mask_and_get_a_fused_kernel(
    scheme, monkeypatch, record_property
):
    calls = spy_sdpa(monkeypatch)
    model = cuda_model(scheme).train()
    used = backends(lambda: train_step(model))
    record_property("sdpa_backends", sorted(used))
    assert calls and all(c == (False, True) for c in calls)  # (mask given, is_causal)
    assert used and used <= FUSED, used  # never the math path
    model.zero_grad()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        train_step(model)  # flash or memory-efficient alone can run it


@pytest.mark.parametrize("scheme", BIASED)
def test_bias_schemes_pass_a_dense_mask_that_flash_cannot_take_and_get_the_bias_path(
    scheme, monkeypatch, record_property
):
    calls = spy_sdpa(monkeypatch)
    model = cuda_model(scheme).train()
    used = backends(lambda: train_step(model))
    record_property("sdpa_backends", sorted(used))
    assert calls and all(c == (True, False) for c in calls)
    assert used and "flash" not in used and used <= {"efficient", "math", "cudnn"}, used
    learned = [p for n, p in model.named_parameters() if n.startswith("scheme.")]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in learned)  # the mask's gradient
    with pytest.raises(RuntimeError), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        train_step(model)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        train_step(model)


def spy_sdpa(monkeypatch) -> list[tuple[bool, bool]]:
    """(a mask was given, is_causal) for each SDPA call the model makes."""
    calls, sdpa = [], F.scaled_dot_product_attention

    def spy(*args, **options):  # (q, k, v, attn_mask=None, ...): SDPA's own signature
        mask = args[3] if len(args) > 3 else options.get("attn_mask")
        calls.append((mask is not None, options.get("is_causal", False)))
        return sdpa(*args, **options)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("scheme", [*CAUSAL_ONLY, *BIASED, "sinusoidal", "learned", "xpos", "rope+alibi"])
def test_a_kv_cache_on_cuda_gives_each_token_the_logits_of_its_whole_context(scheme):
    model = cuda_model(scheme, block_size=16).eval()
    length = 16 if scheme == "learned" else 40  # past the training length where the scheme allows
    idx = torch.randint(0, 13, (1, length), device="cuda", generator=torch.Generator("cuda").manual_seed(2))
    with torch.inference_mode():
        cache = model.new_cache()
        model(idx[:, :5], cache=cache)
        steps = torch.cat([model(idx[:, t : t + 1], cache=cache)[:, -1] for t in range(5, length)])
        uncached = torch.cat([model(idx[:, : t + 1])[:, -1] for t in range(5, length)])
    assert cache.length == length
    torch.testing.assert_close(steps, uncached, rtol=0, atol=1e-3)


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> Path:
    """experiment=smoke, rope, trained on the GPU at train.precision=auto."""
    where = tmp_path_factory.mktemp("cuda")
    done = run_cli("train", *SMOKE, "scheme=rope", "device=cuda", "hydra.run.dir=gpu_run", cwd=where)
    assert done.returncode == 0, done.stderr
    return where / "gpu_run"


@pytest.mark.slow
def test_a_run_trained_on_cuda_says_so_and_computed_in_bf16_autocast(gpu_run):
    summary = json.loads((gpu_run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["device"].startswith("cuda")
    assert summary["precision"]["effective"] == "bf16-autocast"


@pytest.mark.slow
def test_sampling_on_cuda_with_the_kv_cache_gives_the_same_text_for_a_seed_past_the_training_length(gpu_run):
    args = ("sample", str(gpu_run), "--prompt", "the ", "--tokens", "200", "--seed", "3", "--device", "cuda")
    first, again = (run_cli(*args, cwd=gpu_run.parent) for _ in range(2))
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout and len(first.stdout) == len("the ") + 200 + 1  # and a newline


@pytest.mark.slow
def test_a_gpu_trained_checkpoint_scores_the_same_perplexity_on_the_cpu(gpu_run):
    ppl = {}
    for device in ("cuda", "cpu"):
        out = gpu_run.parent / f"eval_{device}"
        done = run_cli(
            "eval",
            str(gpu_run),
            "--lengths",
            "64,128",
            "--max-tokens",
            "2048",
            "--device",
            device,
            "--out",
            str(out),
            cwd=gpu_run.parent,
        )
        assert done.returncode == 0, done.stderr
        with open(out / "ppl.csv", encoding="utf-8") as f:
            ppl[device] = {row["eval_len"]: float(row["ppl"]) for row in csv.DictReader(f)}
    assert ppl["cuda"].keys() == ppl["cpu"].keys() == {"64", "128"}
    for length, value in ppl["cuda"].items():
        assert ppl["cpu"][length] == pytest.approx(value, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize(("first", "then"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_run_resumed_on_the_other_device_continues_where_it_stopped(first, then, tmp_path):
    fp32 = ["scheme=rope", "train.precision=fp32", "train.checkpoint_interval=10"]
    whole = run_cli(
        "train", *SMOKE, *fp32, "device=cuda", "train.max_steps=20", "hydra.run.dir=whole", cwd=tmp_path
    )
    half = run_cli(
        "train", *SMOKE, *fp32, f"device={first}", "train.max_steps=10", "hydra.run.dir=run", cwd=tmp_path
    )
    assert whole.returncode == 0 and half.returncode == 0, whole.stderr + half.stderr
    before = metrics(tmp_path / "run")
    resumed = run_cli("train", "train.resume=run", f"device={then}", "train.max_steps=20", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 20 and summary["device"].startswith(then)
    after = metrics(tmp_path / "run")
    assert after[: len(before)] == before and [int(r["step"]) for r in after][-1] == 20
    reference = json.loads((tmp_path / "whole" / "summary.json").read_text())["final_val_loss"]
    assert summary["final_val_loss"] == pytest.approx(reference, abs=0.01)


def metrics(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", encoding="utf-8") as f:
        return list(csv.DictReader(f))
