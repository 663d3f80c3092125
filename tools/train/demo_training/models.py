"""Construction, precision rounding and export of the demo Llama models."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from .checkpoint import atomic_replace_folder
from .config import ModelShape

EXPORT_DTYPE = torch.bfloat16


def llama_config(shape: ModelShape, vocab_size: int, context_length: int, eot_id: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        intermediate_size=shape.intermediate_size,
        max_position_embeddings=context_length,
        # Tying halves the embedding cost, which dominates at this size.
        tie_word_embeddings=True,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
        pad_token_id=eot_id,
    )


def build_model(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """Freshly initialised float32 model; initialisation depends only on seed."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).float()


def parameter_count(model: torch.nn.Module) -> int:
    """Unique parameters (tied embedding counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@torch.no_grad()
def round_to_export_precision(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """Round weights through the export dtype so training sees what ships."""
    for parameter in model.parameters():
        parameter.copy_(parameter.to(EXPORT_DTYPE).float())
    return model


def generation_config(eot_id: int) -> GenerationConfig:
    return GenerationConfig(bos_token_id=eot_id, eos_token_id=eot_id, pad_token_id=eot_id)


def export_model(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """Write safetensors weights in the export dtype plus tokenizer files."""
    eot_id = tokenizer.eos_token_id

    def fill(tmp: Path) -> None:
        exported = LlamaForCausalLM(model.config).to(EXPORT_DTYPE)
        exported.load_state_dict(model.state_dict())
        exported.config.dtype = EXPORT_DTYPE
        exported.generation_config = generation_config(eot_id)
        exported.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    atomic_replace_folder(folder, fill)
