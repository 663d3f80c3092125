"""hf_compat: the load-time probe keeps the lean forward and the growing cache where they give the public forward's
logits, falls back to the public forward where they do not (another transformers release), and the private
names of transformers stay in that one module."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from app.engine import hf_compat
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.errors import ModelLoadError
from app.engine.loading import load_models
from app.engine.runtime.cached_model import CachedModel, forward_plan
from app.engine.runtime.execution import Execution
from tests.engine.helpers import PROMPTS, run

ROOT = Path(__file__).resolve().parents[2]
OLD_MASK_ERROR = "create_causal_mask() got an unexpected keyword argument 'cache'"  # transformers 5.0 to 5.23


def tiny_llama_model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, head_dim=8)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def public_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids[None], use_cache=False).logits[0].float()  # (T, V)


def old_mask(**kwargs):
    raise TypeError(OLD_MASK_ERROR)


def no_layer_class(layer_class):
    raise AttributeError("'DynamicCache' object has no attribute 'layer_class_to_replicate'")


def visible_everywhere(config, embeds, cache, positions):
    """A mask that lets every row see the future: a lean forward with it computes other logits, with no error."""
    seen = cache.get_seq_length() + embeds.shape[1]
    return torch.zeros(1, 1, embeds.shape[1], seen, dtype=embeds.dtype)


def test_the_probe_chooses_the_lean_forward_and_the_growing_cache_on_this_transformers():
    execution = Execution()
    plan = forward_plan(tiny_llama_model(), execution, "target")
    assert plan.cache_keyword in hf_compat.CACHE_KEYWORDS
    assert plan.lean and plan.growing and plan.path == "lean forward"
    assert plan.notes == () and execution.notices == []


def test_a_mask_of_another_release_falls_back_to_the_public_forward_with_a_notice(monkeypatch):
    monkeypatch.setattr(hf_compat, "create_causal_mask", old_mask)
    model, execution = tiny_llama_model(), Execution()
    cached = CachedModel(model, execution=execution, role="target")
    plan = forward_plan(model, execution, "target")
    assert not plan.lean and plan.path == "public forward"
    assert any("lean forward fails" in notice and OLD_MASK_ERROR in notice for notice in execution.notices)
    ids = torch.tensor([5, 9, 2, 7, 1, 3])
    assert torch.allclose(cached.advance_to(ids), public_logits(model, ids), atol=1e-5)  # rows of the whole prompt
    step = cached.advance_to(torch.cat([ids, torch.tensor([8])]))  # the mask raises on every multi-row lean call
    assert torch.allclose(step, public_logits(model, torch.cat([ids, torch.tensor([8])]))[-1:], atol=1e-5)


def test_a_lean_forward_that_computes_other_logits_is_not_used(monkeypatch):
    monkeypatch.setattr("app.engine.runtime.lean_forward.causal_mask", visible_everywhere)
    plan = forward_plan(tiny_llama_model(), Execution(), "target")
    assert not plan.lean
    assert any("other logits" in note for note in plan.notes)


def test_a_cache_keyword_the_forward_ignores_is_skipped_and_none_that_works_is_refused(monkeypatch):
    """An unknown keyword is swallowed by the forward's **kwargs on some releases (no error, no cache)."""
    monkeypatch.setattr(hf_compat, "CACHE_KEYWORDS", ("not_a_cache", *hf_compat.CACHE_KEYWORDS))
    assert forward_plan(tiny_llama_model(), Execution(), "target").cache_keyword in hf_compat.CACHE_KEYWORDS
    monkeypatch.setattr(hf_compat, "CACHE_KEYWORDS", ("not_a_cache",))
    with pytest.raises(ModelLoadError, match="install transformers"):
        forward_plan(tiny_llama_model(), Execution(), "target")


def test_greedy_identity_holds_on_the_fallback_path(tiny_llama, monkeypatch):
    """Lean forward and growing cache both refused by the probe: every drafter still equals plain decoding."""
    monkeypatch.setattr(hf_compat, "create_causal_mask", old_mask)
    monkeypatch.setattr("app.engine.runtime.growing_cache.replicating_cache", no_layer_class)
    target, draft = tiny_llama
    models = load_models(str(target), str(draft))
    plans = [forward_plan(model, models.execution, who) for model, who in ((models.target, "target"),
                                                                           (models.draft, "draft model"))]
    assert all(not plan.lean and not plan.growing for plan in plans)
    decoder = SpeculativeDecoder(models)
    prompt = PROMPTS[0]
    ids = models.tokenizer(prompt, return_tensors="pt").input_ids
    for drafters in (("draft-model",), ("layer-skip",), ("prompt-lookup",)):
        _, end = run(decoder, prompt, drafters=drafters, k=3, max_new_tokens=32)
        hf = models.target.generate(ids, max_new_tokens=len(end.token_ids), min_new_tokens=len(end.token_ids),
                                    do_sample=False, eos_token_id=None, pad_token_id=0)
        assert list(end.token_ids) == hf[0, ids.shape[1]:].tolist(), drafters


def test_versions_name_transformers_and_torch():
    found = hf_compat.versions()
    assert found["torch"] == torch.__version__ and found["transformers"][0].isdigit()


# ---- the private names stay in hf_compat -------------------------------------------------------------------------

# The tokenizer backend's `_decode` is left out: the name is too common to scan for.
PRIVATE_ATTRIBUTES = {"lazy_initialization", "cumulative_length", "layer_class_to_replicate", "_attn_implementation",
                      "is_croppable", "past_key_values"}


def private_uses(source: str) -> list[str]:
    """What ruff's banned-api rule cannot see: private attributes and keywords of transformers' objects."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in PRIVATE_ATTRIBUTES:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Call):
            keywords = {keyword.arg for keyword in node.keywords}
            if "past_key_values" in keywords or {"cache", "use_cache"} <= keywords:  # a forward's cache keyword
                found.append(f"line {node.lineno}: a forward's cache keyword")
    return found


def test_the_scan_finds_each_kind_of_private_use():
    source = ("layer.cumulative_length.fill_(0)\ngetattr(config, '_attn_implementation')\n"
              "model(input_ids=ids, cache=cache, use_cache=True)\nmodel(input_ids=ids, past_key_values=cache)\n")
    assert len(private_uses(source)) == 4
    assert private_uses("load_models(target, cache='static')\n") == []


def test_only_hf_compat_reaches_below_transformers_public_api():
    allowed = ROOT / "app" / "engine" / "hf_compat.py"
    sources = [path for folder in ("app", "tools") for path in (ROOT / folder).rglob("*.py") if path != allowed]
    found = {str(path.relative_to(ROOT)): uses for path in sources if (uses := private_uses(path.read_text()))}
    assert found == {}


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
def test_ruff_refuses_transformers_private_modules_outside_hf_compat():
    def lint(path: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ruff", "check", "--select", "TID251", "--stdin-filename", path, "-"], cwd=ROOT,
                              input="from transformers.masking_utils import create_causal_mask\n",
                              capture_output=True, text=True, check=False)

    refused = lint("app/engine/lean_forward.py")
    assert refused.returncode == 1 and "TID251" in refused.stdout
    assert lint("app/engine/hf_compat.py").returncode == 0


def test_the_range_a_refusal_names_is_pyprojects():
    dependencies = (ROOT / "pyproject.toml").read_text()
    assert f'"transformers{hf_compat.TESTED_TRANSFORMERS}"' in dependencies
