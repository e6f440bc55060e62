"""Export a checkpoint to the Hugging Face Llama format: config.json, model.safetensors, tokenizer files.

The result loads with `transformers.LlamaForCausalLM` / `AutoTokenizer` and serves with vLLM.
Our attention rotates interleaved pairs (Meta's layout); HF's Llama rotates
halves, so wq and wk rows are permuted per head as in HF's own conversion script.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from model.llama import ModelArgs
from model.safe_load import weights_only_loads

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def hf_config(args: ModelArgs, special_ids: dict[str, int], dtype: torch.dtype) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": args.dim, "intermediate_size": args.ffn_hidden, "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads, "num_key_value_heads": args.n_kv_heads, "head_dim": args.head_dim,
        "vocab_size": args.vocab_size, "max_position_embeddings": args.max_seq_len,
        "rms_norm_eps": args.norm_eps, "rope_theta": args.rope_theta, "tie_word_embeddings": args.tie_embeddings,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02,
        "bos_token_id": special_ids["bos"], "eos_token_id": special_ids["eos"], "pad_token_id": special_ids["pad"],
        "torch_dtype": str(dtype).removeprefix("torch."), "use_cache": True,
    }


def _interleaved_to_halves(w: torch.Tensor, heads: int) -> torch.Tensor:
    rows, cols = w.shape
    return w.view(heads, rows // heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def hf_state_dict(state: dict[str, torch.Tensor], args: ModelArgs, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Our parameter names and layouts -> HF Llama's."""
    out = {"model.embed_tokens.weight": state["tok_embeddings.weight"], "model.norm.weight": state["norm.weight"]}
    if not args.tie_embeddings:
        out["lm_head.weight"] = state["output.weight"]
    for i in range(args.n_layers):
        ours, hf = f"layers.{i}.", f"model.layers.{i}."
        out[hf + "self_attn.q_proj.weight"] = _interleaved_to_halves(state[ours + "attention.wq.weight"], args.n_heads)
        out[hf + "self_attn.k_proj.weight"] = _interleaved_to_halves(state[ours + "attention.wk.weight"], args.n_kv_heads)
        out[hf + "self_attn.v_proj.weight"] = state[ours + "attention.wv.weight"]
        out[hf + "self_attn.o_proj.weight"] = state[ours + "attention.wo.weight"]
        out[hf + "mlp.gate_proj.weight"] = state[ours + "feed_forward.w1.weight"]
        out[hf + "mlp.up_proj.weight"] = state[ours + "feed_forward.w3.weight"]
        out[hf + "mlp.down_proj.weight"] = state[ours + "feed_forward.w2.weight"]
        out[hf + "input_layernorm.weight"] = state[ours + "attention_norm.weight"]
        out[hf + "post_attention_layernorm.weight"] = state[ours + "ffn_norm.weight"]
    return {k: v.detach().to(dtype).contiguous().clone() for k, v in out.items()}


def load_checkpoint_state(ckpt_dir: Path, tag: str) -> dict[str, torch.Tensor]:
    """The full model state of a DeepSpeed checkpoint, fp32 (ZeRO partitions merged) when it has them."""
    tag_dir = Path(ckpt_dir) / tag
    with weights_only_loads():  # files from shared storage: unpickled as data only, DeepSpeed's merge included
        if any(tag_dir.glob("*optim_states.pt")) and any(tag_dir.glob("*zero_pp_rank_*")):  # bf16_zero_pp_rank_ too
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            return get_fp32_state_dict_from_zero_checkpoint(str(ckpt_dir), tag=tag)
        states = sorted(tag_dir.glob("mp_rank_*_model_states.pt"))
        if not states:
            raise FileNotFoundError(f"{tag_dir} holds no DeepSpeed model states; is it a checkpoint directory?")
        module = torch.load(states[0], map_location="cpu", weights_only=True)["module"]
    return {k: v.float() for k, v in module.items()}


def export(state: dict[str, torch.Tensor], args: ModelArgs, tokenizer_dir: Path, out_dir: Path,
           dtype: torch.dtype = torch.bfloat16, source: str = "") -> Path:
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    special = {name: tok.token_to_id(f"<|{name}|>") for name in ("bos", "eos", "pad")}
    (out_dir / "config.json").write_text(json.dumps(hf_config(args, special, dtype), indent=2) + "\n")
    (out_dir / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": special["bos"], "eos_token_id": special["eos"], "pad_token_id": special["pad"]}, indent=2) + "\n")
    save_file(hf_state_dict(state, args, dtype), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    for name in TOKENIZER_FILES:
        shutil.copyfile(Path(tokenizer_dir) / name, out_dir / name)
    (out_dir / "pretrain_export.json").write_text(json.dumps({"model_args": asdict(args), "source": source}, indent=2))
    return out_dir
