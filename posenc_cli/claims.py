"""The chapters' comparison table, as data: what each scheme is claimed to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    extrapolation: str
    extrapolation_zh: str
    relative: str
    parameters: str
    used_by: str


NOT_IN_CHAPTERS = Claim("not in the chapters", "章节未涉及", "—", "—", "—")

CLAIMS: dict[str, Claim] = {
    "none": Claim("not in the chapters", "章节未涉及", "none", "none", "NoPE studies (Kazemnejad et al. 2023)"),
    "sinusoidal": Claim("weak", "弱", "implicit", "none", "original Transformer"),
    "learned": Claim("none", "无", "none", "O(max_len·d)", "GPT-2"),
    "rope": Claim("medium–strong", "中等-强", "explicit", "none", "LLaMA/Qwen/Mistral"),
    "alibi": Claim("very strong", "极强", "explicit", "none", "BLOOM"),
    "t5": Claim("not in the chapters", "章节未涉及", "explicit", "buckets·heads, shared by all layers", "T5, Flan-T5"),
    "xpos": Claim("not in the chapters", "章节未涉及", "explicit", "none", "LEX Transformer (TorchScale)"),
    "kerple": Claim("not in the chapters", "章节未涉及", "explicit", "2 per head", "research (Chi et al. 2022)"),
}


def scheme_of(label: str) -> str:
    """The scheme in a column label: 'rope+yarn' itself; a Hugging Face model's 'pythia-160m (rope+yarn)'
    -> 'rope+yarn'."""
    return label[label.rindex(" (") + 2 : -1] if label.endswith(")") and " (" in label else label


def claim_for(label: str) -> Claim:
    """The chapters' claim for a column's scheme; a RoPE-scaled variant (rope+yarn) is not in the chapters."""
    return CLAIMS.get(scheme_of(label), NOT_IN_CHAPTERS)
