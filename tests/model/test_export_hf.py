"""HF export: transformers' LlamaForCausalLM gives this model's logits (fp32, CPU), and loads the tokenizer."""
import pytest
import torch

from model.export_hf import export
from model.llama import ModelArgs, Transformer
from tasks.common.outputs import read_json

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("tie", [False, True])
def test_llama_for_causal_lm_matches_our_logits(prepared_run, tmp_path, tie):
    _, root = prepared_run
    rows = read_json(root / "tokenizer" / "report.json")["embedding_rows"]
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=rows, ffn_hidden=160, max_seq_len=64,
                     rope_theta=500000.0, tie_embeddings=tie)
    torch.manual_seed(0)
    ours = Transformer(args).eval()
    with torch.no_grad():  # norms away from 1, so a swapped norm would show
        for name, p in ours.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    out = export(ours.state_dict(), args, root / "tokenizer", tmp_path / "hf", dtype=torch.float32)
    hf = transformers.LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, rows, (2, 48))
    with torch.no_grad():
        torch.testing.assert_close(hf(tokens).logits, ours(tokens), rtol=1e-4, atol=1e-5)
    assert hf.config.tie_word_embeddings == tie and hf.config.num_key_value_heads == 2
    tok = transformers.AutoTokenizer.from_pretrained(out)
    text = "导出测试 export 123"
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(root / "tokenizer" / "tokenizer.json"))
    assert tok(text, add_special_tokens=False)["input_ids"] == raw.encode(text, add_special_tokens=False).ids
    assert tok.eos_token_id == hf.config.eos_token_id == raw.token_to_id("<|eos|>")
