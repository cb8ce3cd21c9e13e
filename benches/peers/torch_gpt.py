#!/usr/bin/env python3
"""The GPT that triaxis trains, in PyTorch, for a side-by-side throughput figure.

Same model as triaxis: token and position embeddings; pre-layernorm blocks of causal
self-attention (a fused qkv projection with bias, an output projection with bias) and a 4x MLP
(tanh GELU, both projections with bias); a final layernorm and an untied LM head without bias.
Same optimizer (AdamW, lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and
embeddings only, global-norm clipping at 1.0) and the same data: uniform random tokens over a
`--vocab`-token vocabulary.
The parameter count is printed so a reader can check both sides train the same model.

    python3 benches/peers/torch_gpt.py --layers 4 --channels 128 --heads 4 --seq 64 --batch 16

Prints one JSON line: params, median step seconds, min and max, tokens/s (median), threads.
`--device cuda` runs it on a CUDA GPU in true f32 (TF32 off), synchronising before each step's
clock stops, for a GPU beside triaxis on the same card.
`cargo run --release --example throughput -- --torch` runs this script between its own rounds.
"""
import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print(json.dumps({"error": "PyTorch is not installed (pip install torch)"}))
    sys.exit(3)


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.attproj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fcproj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attproj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, c, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if "proj" in name else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50, help="measured steps")
    ap.add_argument("--warmup", type=int, default=5, help="steps before measuring")
    ap.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on a CUDA GPU")
    a = ap.parse_args()
    if a.channels % a.heads:
        ap.error(f"--heads {a.heads} must divide --channels {a.channels}")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "--device cuda: PyTorch sees no CUDA GPU"}))
        sys.exit(3)
    if a.device not in ("cpu", "cuda"):
        ap.error(f"--device {a.device}: cpu or cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    torch.manual_seed(a.seed)
    model = Gpt(a.vocab, a.seq, a.channels, a.heads, a.layers).to(a.device)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
    )
    gen = torch.Generator().manual_seed(a.seed)
    times = []
    for s in range(a.warmup + a.steps):
        data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)
        x, y = data[:, :-1].to(a.device), data[:, 1:].to(a.device)
        sync()
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    print(json.dumps({
        "params": sum(p.numel() for p in model.parameters()),
        "step_s": med,
        "step_min_s": min(times),
        "step_max_s": max(times),
        "tokens_per_s": a.batch * a.seq / med,
        "threads": torch.get_num_threads(),
        "loss": loss.item(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
    }))


if __name__ == "__main__":
    main()
