"""PyTorch on this machine's CPU as the yardstick for kiln-bench's Hugging
Face figures (`kiln-bench --only hf`): GPT-2 small and TinyLlama's 1.1B
shape from transformers with random weights, in f32 and bf16, timed as
kiln-bench times them: prefill of 128 tokens (the logits of one forward
pass), and decoding N tokens greedily after a 1-token prompt through the
KV cache (`generate`; 16 tokens for GPT-2, 4 for TinyLlama). Prints one
JSON line per figure in kiln-bench's form (median of 3 timed repetitions
after a warm-up, and their min-max), so `kiln-bench --from-json` puts
PyTorch beside kiln. Run in the venv scripts/make-hf-fixtures makes:

    ~/.cache/kiln/hf-venv/bin/python scripts/torch-hf-yardstick.py >> docs/benchmarks-hf.jsonl
"""
import json
import os
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

PREFILL = 128
ADAPTER = f"PyTorch {torch.__version__} CPU ({torch.get_num_threads()} threads, {os.cpu_count()} cores)"


def seconds(run, reps=3):
    run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def emit_rate(bench, times, work, unit):
    print(json.dumps({"bench": bench, "adapter": ADAPTER, "median": work / statistics.median(times), "unit": unit,
                      "spread": [work / max(times), work / min(times)]}), flush=True)


SHAPES = {
    "gpt2-124m": (lambda: GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12,
                                                     n_head=12)), 16),
    "tinyllama-1.1b": (lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
        num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False)), 4),
}

torch.manual_seed(0)
with torch.inference_mode():
    for name, (make, new_tokens) in SHAPES.items():
        model = make().eval()
        for dtype, label in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
            model = model.to(dtype)
            ids = (torch.arange(PREFILL) * 7919 % 1000).unsqueeze(0)
            emit_rate(f"hf {name} {label} prefill {PREFILL}", seconds(lambda: model(ids).logits[:, -1]), PREFILL,
                      "tokens/s")
            one = torch.tensor([[1]])
            decode = lambda: model.generate(one, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                            do_sample=False, pad_token_id=0, eos_token_id=None)
            emit_rate(f"hf {name} {label} decode", seconds(decode), new_tokens, "tokens/s")
        del model
