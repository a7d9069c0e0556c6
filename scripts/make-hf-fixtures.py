"""Small Hugging Face checkpoints and transformers' own outputs for them, as
fixtures for kiln-models' tests (models/tests/fixtures/, committed; CI does
not run this script).

    bash scripts/make-hf-fixtures      # makes a venv with transformers and torch, then runs this

Each model is random-initialized from a fixed seed, saved with
`save_pretrained` beside a byte-level BPE tokenizer trained here on the KJV
corpus (300 tokens), and run by transformers on fixed ids:
- gpt2: GPT2LMHeadModel (tied head, Conv1D weights, gelu_new);
- llama: LlamaForCausalLM with grouped-query attention (4 heads, 2 of keys
  and values), an untied head, a non-default rope theta and Llama 3's rope
  scaling, saved in shards with an index;
- gpt2-f16 and llama-bf16: the same weights stored in f16 and bf16, run by
  transformers in those dtypes;
- gpt2-lora and llama-lora: PEFT LoRA adapters (rank 4, alpha 8, both
  factors random so that the update is not zero) on the gpt2 and llama
  folders' projections, saved with PEFT's `save_pretrained`, and the
  logits of the adapted models (`python make-hf-fixtures.py lora` remakes
  only these, from the committed base folders).
`expected.safetensors` in each folder holds `input_ids` (i32 [2, 12]), the
`logits` transformers computed for them (f32 [2, 12, vocab]), `greedy`
(i32 [32]: the 32 tokens `generate` picks greedily after the first row),
and `sample_ids` with `sample_lengths` (the tokenizer's ids of SAMPLES).
"""
import json
import pathlib
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "models" / "tests" / "fixtures"
SAMPLES = ["In the beginning God created the heaven and the earth.",
           "And the LORD said unto Moses, Stretch out thine hand!",
           "Ruth 1:16 — whither thou goest, I will go; 42 times."]
IDS = [[5, 17, 42, 99, 3, 250, 7, 7, 64, 128, 1, 299],
       [200, 11, 0, 45, 46, 47, 180, 2, 33, 90, 271, 8]]


def tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    text = (ROOT / "data" / "kjv" / "genesis-ruth.txt").read_text().splitlines()[:2000]
    tok.train_from_iterator(text, trainer)
    assert tok.get_vocab_size() == 300, tok.get_vocab_size()
    return tok


def save(name, model, dtype, tok, shard=None):
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    model = model.to(dtype).eval()
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, safe_serialization=True, **kwargs)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    if name.startswith("gpt2"):
        tok.model.save(str(folder))  # vocab.json and merges.txt, GPT-2's own files
    ids = torch.tensor(IDS)
    with torch.no_grad():
        logits = model(ids).logits.float()
        greedy = model.generate(ids[:1], max_new_tokens=32, do_sample=False, min_new_tokens=32,
                                pad_token_id=0, eos_token_id=None)[0, ids.shape[1]:]
    encoded = [tok.encode(s).ids for s in SAMPLES]
    save_file({
        "input_ids": ids.to(torch.int32),
        "logits": logits.contiguous(),
        "greedy": greedy.to(torch.int32).contiguous(),
        "sample_ids": torch.tensor([i for e in encoded for i in e], dtype=torch.int32),
        "sample_lengths": torch.tensor([len(e) for e in encoded], dtype=torch.int32),
    }, folder / "expected.safetensors")
    (folder / "samples.json").write_text(json.dumps(SAMPLES, ensure_ascii=False, indent=1) + "\n")
    print(f"{name}: {sum(p.stat().st_size for p in folder.iterdir())} bytes", file=sys.stderr)


def lora(name, base, targets):
    from peft import LoraConfig, get_peft_model
    folder = OUT / name
    torch.manual_seed(2)
    model = get_peft_model(base.from_pretrained(OUT / name.removesuffix("-lora")).eval(),
                           LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0,
                                      init_lora_weights=False))
    model.peft_config["default"].base_model_name_or_path = f"../{name.removesuffix('-lora')}"
    model.save_pretrained(folder)
    (folder / "README.md").unlink()  # PEFT's model-card template
    ids = torch.tensor(IDS)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    save_file({"input_ids": ids.to(torch.int32), "logits": logits.contiguous()}, folder / "expected.safetensors")
    print(f"{name}: {sum(p.stat().st_size for p in folder.iterdir())} bytes", file=sys.stderr)


def loras():
    lora("gpt2-lora", GPT2LMHeadModel, ["c_attn", "c_proj", "c_fc"])
    lora("llama-lora", LlamaForCausalLM, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                          "down_proj"])


def main():
    if sys.argv[1:] == ["lora"]:
        return loras()
    tok = tokenizer()
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      bos_token_id=0, eos_token_id=0))
    save("gpt2", gpt2, torch.float32, tok)
    save("gpt2-f16", gpt2, torch.float16, tok)
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0,
                         rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    llama = LlamaForCausalLM(config)
    save("llama", llama, torch.float32, tok, shard="200KB")
    save("llama-bf16", llama, torch.bfloat16, tok)
    loras()


if __name__ == "__main__":
    main()
