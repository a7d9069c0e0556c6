"""PyTorch on the same GPU as the yardstick for kiln-bench's CUDA figures
(scripts/device-check runs it): matmul 4096^3 f32 (TF32 off, as kiln's
f32 is exact), softmax and layer norm over [4096, 1024] f32 (8 bytes per
element, as kiln-bench counts), and the demo MLP's training step (784-512-10,
batch 64, cross-entropy, Adam). Prints one JSON line per figure in
kiln-bench's form (median of 7 timed repetitions after a warm-up, each
synchronized, and their min-max), so `kiln-bench --from-json` puts PyTorch
beside kiln in the GPU's table."""
import json
import statistics
import time

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")


def seconds(run, reps=7):
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


ADAPTER = f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}"


def emit_rate(bench, times, work, unit):
    """A rate of `work` units per second (the slowest run is the low end)."""
    print(json.dumps({"bench": bench, "adapter": ADAPTER, "median": work / statistics.median(times), "unit": unit,
                      "spread": [work / max(times), work / min(times)]}))


def emit_ms(bench, times):
    print(json.dumps({"bench": bench, "adapter": ADAPTER, "median": statistics.median(times) * 1e3, "unit": "ms",
                      "spread": [min(times) * 1e3, max(times) * 1e3]}))


n = 4096
a, b = torch.rand(n, n, device=dev), torch.rand(n, n, device=dev)
emit_rate("matmul 4096³", seconds(lambda: a @ b), 2 * n**3 / 1e9, "GFLOP/s")
x = torch.rand(4096, 1024, device=dev)
emit_rate("softmax [4096,1024]", seconds(lambda: torch.softmax(x, -1)), 8 * x.numel() / 1e9, "GB/s")
emit_rate("layer norm [4096,1024]", seconds(lambda: F.layer_norm(x, (1024,), eps=1e-5)), 8 * x.numel() / 1e9,
          "GB/s")

model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
images, labels = torch.rand(64, 784, device=dev), torch.randint(0, 10, (64,), device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(images), labels).backward()
    opt.step()


emit_ms("mlp train step (batch 64)", seconds(step))
