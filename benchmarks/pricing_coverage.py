"""How much of a training step prof understands, on the models people train (issue 9).

Per model: one training step (forward, loss, backward, optimizer step; the eval cases a forward)
captured under nsys with `pyprof.init()` and `pyprof.profiled(aten=True)` (PyTorch's op ranges
too: the aten level and exact GEMM sizes), parsed and analysed. The table
gives, per model: kernels, and the share of GPU time in kernels whose FLOPs are known, whose bytes
are known, whose op is known, whose module path is known (of the time in ops called inside the
model; `outside%` is the time in ops the user called outside any module: the optimizer step,
the loss, casts), the share priced by the op marker and by PyTorch's aten ranges (the fallback),
and the matrix FLOPs (GEMM, convolution, attention) prof counts over FlopCounterMode's total for
the same step, corrected where FlopCounterMode is wrong (`corrected_counts`; `FCM raw/corr` is
its own total over the corrected one). prof counts causal attention as half the score matrix,
FlopCounterMode as all of it: `+causal/FCM` adds the masked half back (prof's causal attention
FLOPs once more) before dividing. RNN FLOPs (cuDNN's LSTM/GRU/RNN: FlopCounterMode has no
formula) are shown apart; `rnn-truth` holds them against Nsight Compute (benchmarks/rnn_truth.sh).
`kernel%` is issue 27's per-kernel measure: the share of GPU time in kernels whose own FLOPs are
known and whose own bytes are known and > 0 (`flops%` and `bytes%` count a kernel's 0 as known).

Two stages, so that the table can be recomputed from the same capture when prof changes:

    # on the GPU machine (benchmarks/pricing_coverage.sh runs all of it):
    nsys profile -t cuda,nvtx -s none -c cudaProfilerApi --capture-range-end=stop -f true \\
        --export sqlite -o coverage python benchmarks/pricing_coverage.py capture --flops flops.json
    python -m pyprof.parse coverage.sqlite | xz > coverage.jsonl.xz
    # anywhere:
    python benchmarks/pricing_coverage.py table coverage.jsonl.xz flops.json

All models live in one process and one capture: each is warmed up, its FlopCounterMode total
taken on a step of its own, then one step of each runs inside the profiled range, in a
`pyprof.annotate(<model>)` range (the `layer` column), with the device synchronised between
models. Without CUDA, `capture` runs every model once on the CPU (a smoke test; models whose
packages are missing are skipped with a message).
"""
from __future__ import annotations

import argparse
import json
import lzma
import math
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional


# ---------------------------------------------------------------------------------------------
# Models (torch only inside these functions: `table` runs without torch)


class Case(NamedTuple):
    """One model and how it trains: `build(device)` returns (model, inputs, loss_fn) where
    `loss_fn(output, inputs)` gives the loss; `dtype`: fp32, tf32, fp16 or bf16 (autocast);
    `optim`: sgd, sgd-loop, adam-loop, adam-foreach, adam-fused, adamw-loop, adamw-foreach,
    adamw-fused or none (eval); `micro`: forward and backward passes per optimizer step (gradient
    accumulation: every pass after the first adds its gradients to the parameters' `.grad`);
    `clip`: the gradients' norm clipped to it before the step (clip_grad_norm_, after GradScaler's
    unscale_), 0: not clipped."""

    build: Callable
    dtype: str
    optim: str
    channels_last: bool = False
    half_weights: bool = False  # the model itself in fp16 (the eval fast path refuses autocast)
    micro: int = 1
    clip: float = 0.0


def _ce(out, inputs):
    import torch.nn.functional as F
    return F.cross_entropy(out.float(), inputs[-1])


def _images(device, batch, size, classes=1000):
    import torch
    return (torch.randn(batch, 3, size, size, device=device), torch.randint(0, classes, (batch,), device=device))


def _tv(name: str, batch: int = 8, size: int = 128, **kw) -> Callable:
    def build(device):
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw), _images(device, batch, size), _ce
    return build


def _segmentation(device):
    import torch
    import torch.nn.functional as F
    import torchvision
    model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=21, aux_loss=False)
    x = torch.randn(2, 3, 128, 128, device=device)
    y = torch.randint(0, 21, (2, 128, 128), device=device)
    return model, (x, y), lambda out, inputs: F.cross_entropy(out["out"].float(), inputs[-1])


def _encoder(layers: int = 4, d: int = 256, batch: int = 8, length: int = 128):
    def build(device):
        import torch
        import torch.nn as nn
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.1, batch_first=True)
        model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        x, target = torch.randn(batch, length, d, device=device), torch.randn(batch, length, d, device=device)
        return model, (x, target), lambda out, inputs: nn.functional.mse_loss(out.float(), inputs[-1])
    return build


def _transformer(device):
    import torch
    import torch.nn as nn
    model = nn.Transformer(256, 8, 2, 2, 1024, dropout=0.1, batch_first=True)
    src, tgt = torch.randn(8, 96, 256, device=device), torch.randn(8, 64, 256, device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(64, device=device)

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = model

        def forward(self, s, t):
            return self.t(s, t, tgt_mask=mask, tgt_is_causal=True)
    return Wrap(), (src, tgt, torch.randn(8, 64, 256, device=device)), \
        lambda out, inputs: nn.functional.smooth_l1_loss(out.float(), inputs[-1])


def _mha(device):
    """nn.MultiheadAttention returning its averaged weights: the bmm + softmax path."""
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(128, 4, dropout=0.1, kdim=96, vdim=96)
            self.norm = nn.LayerNorm(128)

        def forward(self, q, kv):
            out, weights = self.attn(q, kv, kv)
            return self.norm(out).sum() + weights.sum()
    return Net(), (torch.randn(64, 8, 128, device=device), torch.randn(80, 8, 96, device=device), None), \
        lambda out, inputs: out


def _llama(device):
    """A Llama-style decoder written out: RMSNorm, rotary embeddings, grouped-query causal SDPA,
    SwiGLU, tied-free LM head."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    d, heads, kv, hidden, vocab, length = 512, 8, 2, 1376, 4096, 256
    hd = d // heads

    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
            self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, kv * hd, bias=False)
            self.wv, self.wo = nn.Linear(d, kv * hd, bias=False), nn.Linear(d, d, bias=False)
            self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)

        def forward(self, x, cos, sin):
            b, n, _ = x.shape
            h = self.norm1(x)
            q = self.wq(h).view(b, n, heads, hd).transpose(1, 2)
            k = self.wk(h).view(b, n, kv, hd).transpose(1, 2)
            v = self.wv(h).view(b, n, kv, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True,
                                               enable_gqa=True)
            x = x + self.wo(a.transpose(1, 2).reshape(b, n, d))
            h = self.norm2(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.norm = nn.RMSNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.outer(torch.arange(length).float(), inv)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, tokens):
            x = self.emb(tokens)
            for blk in self.blocks:
                x = blk(x, self.cos, self.sin)
            return self.head(self.norm(x))
    tokens = torch.randint(0, vocab, (4, length), device=device)
    targets = torch.randint(0, vocab, (4, length), device=device)
    return Llama(), (tokens, targets), \
        lambda out, inputs: F.cross_entropy(out.float().flatten(0, 1), inputs[-1].flatten())


def _rnn(kind: str, scale: int = 1):
    def build(device):
        import torch
        import torch.nn as nn
        if kind == "lstm":  # 2 layers, bidirectional, projections, batch-first
            rnn = nn.LSTM(128 // scale, 256 // scale, num_layers=2, bidirectional=True, proj_size=64 // scale,
                          batch_first=True, dropout=0.1)
            out_features, x = 128 // scale, torch.randn(16 // scale, 50 // scale, 128 // scale, device=device)
        elif kind == "gru":  # 3 layers, sequence-first
            rnn = nn.GRU(128, 256, num_layers=3)
            out_features, x = 256, torch.randn(50, 16, 128, device=device)
        elif kind == "gru_packed":  # packed sequences through 2 bidirectional layers
            rnn = nn.GRU(64, 128, num_layers=2, bidirectional=True, batch_first=True)
            out_features, x = 256, torch.randn(16, 40, 64, device=device)
        elif kind == "gru3_packed":  # packed sequences through 3 one-directional layers
            rnn = nn.GRU(64, 128, num_layers=3, batch_first=True)
            out_features, x = 128, torch.randn(16, 40, 64, device=device)
        elif kind == "lstm_proj_packed":  # packed sequences through 2 bidirectional layers with projections
            rnn = nn.LSTM(64, 128, num_layers=2, bidirectional=True, proj_size=32, batch_first=True)
            out_features, x = 64, torch.randn(16, 40, 64, device=device)
        elif kind == "lstm2_packed":  # packed sequences through 2 layers with dropout between them
            rnn = nn.LSTM(64, 128, num_layers=2, dropout=0.2, batch_first=True)
            out_features, x = 128, torch.randn(16, 40, 64, device=device)
        else:  # packed sequences of different lengths through an LSTM, then a ReLU RNN
            rnn = nn.ModuleList([nn.LSTM(64, 128, batch_first=True), nn.RNN(128, 96, nonlinearity="relu",
                                                                             batch_first=True)])
            out_features, x = 96, torch.randn(16, 40, 64, device=device)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = rnn
                self.head = nn.Linear(out_features, 10)

            def forward(self, x):
                if kind == "lstm":
                    return self.head(self.rnn(x)[0][:, -1])
                if kind == "gru":
                    return self.head(self.rnn(x)[0][-1])
                lengths = torch.arange(40, 8, -2)[:16].clamp(min=1)
                packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                if kind in ("gru_packed", "gru3_packed", "lstm2_packed", "lstm_proj_packed"):
                    padded, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], batch_first=True)
                    return self.head(padded[:, 0])
                h, _ = self.rnn[0](packed)
                h, _ = self.rnn[1](h)
                padded, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True)
                return self.head(padded[:, 0])
        labels = torch.randint(0, 10, (x.shape[0] if kind != "gru" else x.shape[1],), device=device)
        return Net(), (x, labels), _ce
    return build


def _rnn_truth(mode: str):
    """An fp32 RNN large enough that GEMM tile padding is small beside the work, for Nsight
    Compute: 16 steps of a 64-sequence batch, 256 features; LSTM 2 layers bidirectional, GRU 1."""
    def build(device):
        import torch
        import torch.nn as nn
        layers, dirs = (2, 2) if mode == "lstm" else (1, 1)
        rnn = getattr(nn, mode.upper())(256, 256, num_layers=layers, bidirectional=dirs == 2)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn, self.head = rnn, nn.Linear(256 * dirs, 10)

            def forward(self, x):
                return self.head(self.rnn(x)[0][-1])
        x = torch.randn(16, 64, 256, device=device)
        return Net(), (x, torch.randint(0, 10, (64,), device=device)), _ce
    return build


def _unet(device):
    """A diffusion-style UNet: GroupNorm/SiLU residual blocks with a timestep embedding, an
    attention block, strided-conv downsampling, ConvTranspose and interpolate upsampling,
    InstanceNorm, reflection padding."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Res(nn.Module):
        def __init__(self, cin, cout, temb=128):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(temb, cout)
            self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.drop = nn.Dropout(0.1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
            h = self.c2(self.drop(F.silu(self.n2(h))))
            return h + self.skip(x)

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm, self.qkv, self.proj = nn.GroupNorm(8, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

        def forward(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(b, 3, 4, c // 4, h * w).transpose(-1, -2).unbind(1)
            a = F.scaled_dot_product_attention(q, k, v)
            return x + self.proj(a.transpose(-1, -2).reshape(b, c, h, w))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 128))
            self.inp = nn.Conv2d(3, 64, 3)
            self.inorm = nn.InstanceNorm2d(64, affine=True)
            self.d1, self.down1 = Res(64, 64), nn.Conv2d(64, 64, 3, 2, 1)
            self.d2, self.a2, self.down2 = Res(64, 128), Attn(128), nn.Conv2d(128, 128, 3, 2, 1)
            self.mid, self.amid = Res(128, 128), Attn(128)
            self.up2 = nn.ConvTranspose2d(128, 128, 4, 2, 1)
            self.u2 = Res(256, 128)
            self.u1 = Res(192, 64)
            self.out = nn.Sequential(nn.GroupNorm(8, 64), nn.SiLU(), nn.Conv2d(64, 3, 3, padding=1))

        def forward(self, x, t):
            half = torch.exp(-math.log(10000) * torch.arange(32, device=x.device) / 32)
            t = self.temb(torch.cat([torch.sin(t[:, None] * half), torch.cos(t[:, None] * half)], -1))
            h0 = self.inorm(self.inp(F.pad(x, (1, 1, 1, 1), mode="reflect")))
            h1 = self.d1(h0, t)
            h2 = self.a2(self.d2(self.down1(h1), t))
            h = self.amid(self.mid(self.down2(h2), t))
            h = self.u2(torch.cat([self.up2(h), h2], 1), t)
            h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
            h = self.u1(torch.cat([h, h1], 1), t)
            return self.out(h)
    x, t, noise = (torch.randn(8, 3, 32, 32, device=device), torch.rand(8, device=device) * 1000,
                   torch.randn(8, 3, 32, 32, device=device))
    return UNet(), (x, t, noise), lambda out, inputs: F.mse_loss(out.float(), inputs[-1])


def _recommender(device):
    """DLRM-style: four EmbeddingBag tables (sum over variable-length bags), a dense MLP, a top MLP,
    binary cross-entropy on logits."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    tables, rows, dim, batch = 4, 50000, 64, 256

    class Rec(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables)])
            self.bottom = nn.Sequential(nn.Linear(13, 256), nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
            self.top = nn.Sequential(nn.Linear(dim * (tables + 1), 256), nn.ReLU(), nn.Linear(256, 1))

        def forward(self, dense, idx, offsets):
            feats = [self.bottom(dense)] + [e(idx[i], offsets) for i, e in enumerate(self.emb)]
            return self.top(torch.cat(feats, 1)).squeeze(1)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 8, (batch,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]).to(device)
    idx = torch.randint(0, rows, (tables, int(lengths.sum())), generator=g).to(device)
    dense, labels = torch.randn(batch, 13, device=device), torch.rand(batch, device=device).round()
    return Rec(), (dense, idx, offsets, labels), \
        lambda out, inputs: F.binary_cross_entropy_with_logits(out.float(), inputs[-1])


def _moe(device):
    """A top-2 mixture of experts (8 expert MLPs, GELU) routed as such models route in eager code:
    softmax over a gate, topk, then per expert torch.where(idx == e) for its tokens (a nonzero: its
    size depends on the data), their rows gathered, the expert run on them, the weighted result
    index_add_ed back. 4 x 128 tokens of 256 features."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class MoE(nn.Module):
        def __init__(self, d=256, hidden=512, experts=8, k=2):
            super().__init__()
            self.k = k
            self.gate = nn.Linear(d, experts, bias=False)
            self.up = nn.ModuleList([nn.Linear(d, hidden) for _ in range(experts)])
            self.down = nn.ModuleList([nn.Linear(hidden, d) for _ in range(experts)])
            self.head = nn.Linear(d, 10)

        def forward(self, x):
            b, t, d = x.shape
            x = x.reshape(-1, d)
            weights, idx = torch.topk(F.softmax(self.gate(x), dim=-1), self.k, dim=-1)
            weights = weights / weights.sum(dim=-1, keepdim=True)
            out = torch.zeros_like(x)
            for e, (up, down) in enumerate(zip(self.up, self.down)):
                rows, slot = torch.where(idx == e)
                y = down(F.gelu(up(x[rows]))) * weights[rows, slot].unsqueeze(-1)
                out.index_add_(0, rows, y.to(out.dtype))  # autocast's bf16 back into the fp32 sum
            return self.head(out.reshape(b, t, d).mean(1))
    x = torch.randn(4, 128, 256, device=device)
    return MoE(), (x, torch.randint(0, 10, (4,), device=device)), _ce


def _audio1d(device):
    """A raw-waveform classifier in the style of M5 (Dai et al. 2017): strided 1-D stem, batch
    norm, max pooling, global average pooling."""
    import torch
    import torch.nn as nn

    def block(cin, cout, k, stride=1):
        return [nn.Conv1d(cin, cout, k, stride=stride), nn.BatchNorm1d(cout), nn.ReLU(), nn.MaxPool1d(4)]
    model = nn.Sequential(*block(1, 64, 80, 4), *block(64, 64, 3), *block(64, 128, 3), *block(128, 256, 3),
                          nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(256, 35))
    x = torch.randn(16, 1, 16000, device=device)
    return model, (x, torch.randint(0, 35, (16,), device=device)), _ce


def _tcn1d(device):
    """A speech-style 1-D convnet (QuartzNet-like blocks): depthwise dilated Conv1d, pointwise
    Conv1d, LayerNorm over channels, GELU, dropout, residuals; a label per frame (cross-entropy
    over (N, C, L))."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, c, k, dilation):
            super().__init__()
            self.dw = nn.Conv1d(c, c, k, padding=dilation * (k - 1) // 2, dilation=dilation, groups=c)
            self.pw = nn.Conv1d(c, c, 1)
            self.norm = nn.LayerNorm(c)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            h = self.norm(self.pw(self.dw(x)).transpose(1, 2)).transpose(1, 2)
            return x + self.drop(F.gelu(h))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv1d(80, 256, 11, stride=2, padding=5)
            self.blocks = nn.Sequential(*[Block(256, 13, d) for d in (1, 2, 4, 1)])
            self.head = nn.Conv1d(256, 29, 1)

        def forward(self, x):
            return self.head(self.blocks(self.stem(x)))
    x = torch.randn(8, 80, 400, device=device)
    labels = torch.randint(0, 29, (8, 200), device=device)
    return Net(), (x, labels), _ce


def _video3d(device):
    """torchvision's R3D-18 video classifier: 3-D convolutions, BatchNorm3d, a (3, 7, 7) stem."""
    import torch
    import torchvision
    model = torchvision.models.video.r3d_18(weights=None, num_classes=400)
    x = torch.randn(2, 3, 8, 64, 64, device=device)
    return model, (x, torch.randint(0, 400, (2,), device=device)), _ce


def _unet3d(device):
    """A volumetric segmentation net in the style of 3-D U-Net: Conv3d with InstanceNorm3d and
    LeakyReLU, MaxPool3d down, ConvTranspose3d up, skip concatenation, a voxel-wise
    cross-entropy over (N, C, D, H, W)."""
    import torch
    import torch.nn as nn

    def double(cin, cout):
        return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1), nn.InstanceNorm3d(cout, affine=True),
                             nn.LeakyReLU(0.01), nn.Conv3d(cout, cout, 3, padding=1),
                             nn.InstanceNorm3d(cout, affine=True), nn.LeakyReLU(0.01))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.mid = double(1, 16), double(16, 32), double(32, 64)
            self.pool = nn.MaxPool3d(2)
            self.u2, self.c2 = nn.ConvTranspose3d(64, 32, 2, stride=2), double(64, 32)
            self.u1, self.c1 = nn.ConvTranspose3d(32, 16, 2, stride=2), double(32, 16)
            self.out = nn.Conv3d(16, 3, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(self.pool(a))
            m = self.mid(self.pool(b))
            b = self.c2(torch.cat([self.u2(m), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b), a], 1)))
    x = torch.randn(2, 1, 32, 64, 64, device=device)
    return Net(), (x, torch.randint(0, 3, (2, 32, 64, 64), device=device)), _ce


def _speech1d(device):
    """A wav2vec-style feature encoder: strided Conv1d stack with GroupNorm (one group a channel)
    and GELU, average pooling, a linearly interpolated skip, a transpose to LayerNorm and a Linear
    head, frame labels."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0, self.n0 = nn.Conv1d(1, 64, 10, stride=5, bias=False), nn.GroupNorm(64, 64)
            self.c1, self.c2 = nn.Conv1d(64, 128, 3, stride=2, bias=False), nn.Conv1d(128, 128, 3, padding=1)
            self.pool, self.norm, self.head = nn.AvgPool1d(2), nn.LayerNorm(128), nn.Linear(128, 32)

        def forward(self, x):
            h = F.gelu(self.n0(self.c0(x)))
            h = F.gelu(self.c1(h))
            h = h + F.interpolate(self.pool(F.gelu(self.c2(h))), size=h.shape[-1], mode="linear")
            return self.head(self.norm(h.transpose(1, 2))).transpose(1, 2)
    x = torch.randn(8, 1, 16000, device=device)
    return Net(), (x, torch.randint(0, 32, (8, 1599), device=device)), _ce


def _volume3d(device):
    """A 3-D classifier with the other volumetric layers: BatchNorm3d, AvgPool3d, GroupNorm over
    5-D maps, a trilinear upsample and adaptive average pooling."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv3d(2, 32, 3, padding=1), nn.BatchNorm3d(32)
            self.c2, self.g2 = nn.Conv3d(32, 64, 3, stride=2, padding=1), nn.GroupNorm(8, 64)
            self.c3, self.head = nn.Conv3d(64, 32, 1), nn.Linear(32, 5)

        def forward(self, x):
            h = F.avg_pool3d(F.relu(self.b1(self.c1(x))), 2)
            h = F.silu(self.g2(self.c2(h)))
            h = F.interpolate(self.c3(h), scale_factor=2, mode="trilinear", align_corners=False)
            return self.head(F.adaptive_avg_pool3d(h, 1).flatten(1))
    x = torch.randn(4, 2, 32, 64, 64, device=device)
    return Net(), (x, torch.randint(0, 5, (4,), device=device)), _ce


def _lm_checkpointed(device):
    """A GPT-style decoder trained as LMs are: blocks under activation checkpointing (their
    forward run again in the backward), bias-free LayerNorm, tanh GELU, causal SDPA with
    attention dropout, the head tied to the embedding, label-smoothed cross-entropy (its Case
    clips the gradients' norm)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    d, heads, vocab, length = 384, 6, 8192, 256

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0)
            x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
            return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(length, d)
            self.blocks = nn.ModuleList([Block() for _ in range(3)])
            self.norm = nn.LayerNorm(d, bias=False)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, tokens):
            x = self.emb(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
            for blk in self.blocks:
                x = checkpoint(blk, x, use_reentrant=False)
            return self.head(self.norm(x))
    tokens = torch.randint(0, vocab, (4, length), device=device)
    targets = torch.randint(0, vocab, (4, length), device=device)
    return LM(), (tokens, targets), \
        lambda out, inputs: F.cross_entropy(out.float().flatten(0, 1), inputs[-1].flatten(), label_smoothing=0.1)


def _superres(device):
    """ESPCN super-resolution (x3): tanh convolutions, then a sub-pixel convolution's
    pixel_shuffle; an L1 loss against the high-resolution image."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    scale = 3

    class ESPCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 64, 5, padding=2), nn.Conv2d(64, 32, 3, padding=1)
            self.c3, self.shuffle = nn.Conv2d(32, 3 * scale * scale, 3, padding=1), nn.PixelShuffle(scale)

        def forward(self, x):
            return torch.sigmoid(self.shuffle(self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x)))))))
    low = torch.rand(8, 3, 96, 96, device=device)
    high = torch.rand(8, 3, 96 * scale, 96 * scale, device=device)
    return ESPCN(), (low, high), lambda out, inputs: F.l1_loss(out.float(), inputs[-1])


def _spatial_transformer(device):
    """A spatial transformer network (Jaderberg et al.): a localisation net regresses an affine
    transform, affine_grid and grid_sample resample the input, a small convnet with channel
    dropout classifies it (log_softmax and NLL)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class STN(nn.Module):
        def __init__(self):
            super().__init__()
            self.loc = nn.Sequential(nn.Conv2d(1, 8, 7), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(8, 10, 5),
                                     nn.MaxPool2d(2), nn.ReLU())
            self.theta = nn.Sequential(nn.Linear(10 * 12 * 12, 32), nn.ReLU(), nn.Linear(32, 6))
            self.c1, self.c2, self.drop = nn.Conv2d(1, 16, 5), nn.Conv2d(16, 32, 5), nn.Dropout2d()
            self.fc1, self.fc2 = nn.Linear(32 * 13 * 13, 64), nn.Linear(64, 10)

        def forward(self, x):
            theta = self.theta(self.loc(x).flatten(1)).view(-1, 2, 3)
            x = F.grid_sample(x, F.affine_grid(theta, list(x.size()), align_corners=False), align_corners=False)
            x = F.relu(F.max_pool2d(self.c1(x), 2))
            x = F.relu(F.max_pool2d(self.drop(self.c2(x)), 2))
            x = F.dropout(F.relu(self.fc1(x.flatten(1))), training=self.training)
            return F.log_softmax(self.fc2(x), dim=1)
    x = torch.randn(64, 1, 64, 64, device=device)
    return STN(), (x, torch.randint(0, 10, (64,), device=device)), lambda out, inputs: F.nll_loss(out, inputs[-1])


def _ctc_asr(device):
    """A CTC speech recogniser: a strided Conv1d front end over log-mel frames, BatchNorm1d,
    a 2-layer bidirectional GRU, a linear layer over the characters, log_softmax, ctc_loss with
    per-utterance input and target lengths (its Case clips the gradients' norm)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, mels, frames, chars, label = 8, 80, 400, 29, 60

    class ASR(nn.Module):
        def __init__(self):
            super().__init__()
            self.front, self.bn = nn.Conv1d(mels, 256, 5, stride=2, padding=2), nn.BatchNorm1d(256)
            self.rnn = nn.GRU(256, 256, num_layers=2, bidirectional=True, batch_first=True)
            self.out = nn.Linear(512, chars)

        def forward(self, x):
            h = F.relu(self.bn(self.front(x))).transpose(1, 2)
            return F.log_softmax(self.out(self.rnn(h)[0]), dim=-1).transpose(0, 1)  # (T, B, C)
    x = torch.randn(batch, mels, frames, device=device)
    steps = frames // 2
    input_lengths = torch.tensor([steps - 8 * i for i in range(batch)], device=device)
    target_lengths = torch.tensor([label - 3 * i for i in range(batch)], device=device)
    targets = torch.randint(1, chars, (batch, label), device=device)

    def loss(out, inputs):
        return F.ctc_loss(out.float(), targets, input_lengths, target_lengths, zero_infinity=True)
    return ASR(), (x, targets), loss


def _conformer(device):
    """A Conformer encoder (speech, 2 blocks): macaron half-step SiLU feed-forwards, multi-head
    self-attention with a key padding mask (nn.MultiheadAttention), the convolution module
    (pointwise Conv1d, GLU, depthwise Conv1d, BatchNorm1d, SiLU, pointwise Conv1d), LayerNorms;
    a distillation loss: kl_div of log-probabilities against a teacher's softmax."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, frames, d, heads, classes = 8, 200, 144, 4, 64

    class ConvModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.pw1 = nn.LayerNorm(d), nn.Conv1d(d, 2 * d, 1)
            self.dw, self.bn, self.pw2 = nn.Conv1d(d, d, 15, padding=7, groups=d), nn.BatchNorm1d(d), nn.Conv1d(d, d, 1)

        def forward(self, x):
            h = F.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
            return self.pw2(F.silu(self.bn(self.dw(h)))).transpose(1, 2)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
            self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
            self.norm_att, self.att = nn.LayerNorm(d), nn.MultiheadAttention(d, heads, batch_first=True)
            self.conv, self.out = ConvModule(), nn.LayerNorm(d)

        def forward(self, x, pad):
            x = x + 0.5 * self.ff1(x)
            h = self.norm_att(x)
            x = x + self.att(h, h, h, key_padding_mask=pad, need_weights=False)[0]
            x = x + self.conv(x)
            return self.out(x + 0.5 * self.ff2(x))

    class Conformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks, self.head = nn.ModuleList([Block(), Block()]), nn.Linear(d, classes)

        def forward(self, x, pad):
            for b in self.blocks:
                x = b(x, pad)
            return F.log_softmax(self.head(x).float(), dim=-1)
    x = torch.randn(batch, frames, d, device=device)
    lengths = torch.tensor([frames - 10 * i for i in range(batch)], device=device)
    pad = torch.arange(frames, device=device)[None, :] >= lengths[:, None]
    teacher = torch.softmax(torch.randn(batch, frames, classes, device=device), dim=-1)
    return Conformer(), (x, pad, teacher), lambda out, inputs: F.kl_div(out, inputs[-1], reduction="batchmean")


def _gnn(device):
    """A message-passing graph network (3 layers over a fixed random graph of 20,000 nodes and
    200,000 edges): each edge's message an MLP of its two nodes' features (gathered by
    index_select), attention-like weights by a segment softmax (scatter_reduce amax, exp,
    index_add sums), messages summed into their target nodes (index_add_) and mean-aggregated
    (scatter_reduce mean); node classification by cross-entropy."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    nodes, edges, d, classes = 20000, 200000, 64, 16

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.msg, self.score, self.upd = nn.Linear(2 * d, d), nn.Linear(d, 1), nn.Linear(2 * d, d)

        def forward(self, x, src, dst):
            m = F.relu(self.msg(torch.cat([x.index_select(0, src), x.index_select(0, dst)], dim=1)))
            s = self.score(m).squeeze(1)
            top = torch.full((x.shape[0],), float("-inf"), device=x.device, dtype=s.dtype)
            top = top.scatter_reduce(0, dst, s, reduce="amax", include_self=True)
            w = torch.exp(s - top.index_select(0, dst))
            norm = torch.zeros(x.shape[0], device=x.device, dtype=w.dtype).index_add_(0, dst, w)
            w = w / norm.index_select(0, dst).clamp_min(1e-9)
            agg = torch.zeros_like(x).index_add_(0, dst, m * w.unsqueeze(1).to(m.dtype))
            mean = torch.zeros_like(x).scatter_reduce(0, dst.unsqueeze(1).expand(-1, d), m, reduce="mean",
                                                      include_self=False)
            return F.relu(self.upd(torch.cat([agg, mean], dim=1))) + x

    class GNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers, self.head = nn.ModuleList([Layer() for _ in range(3)]), nn.Linear(d, classes)

        def forward(self, x, src, dst):
            for layer in self.layers:
                x = layer(x, src, dst)
            return self.head(x)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, nodes, (edges,), generator=g).to(device)
    dst = torch.randint(0, nodes, (edges,), generator=g).to(device)
    x = torch.randn(nodes, d, device=device)
    return GNN(), (x, src, dst, torch.randint(0, classes, (nodes,), device=device)), _ce


def _mae(device):
    """A masked autoencoder (ViT-style, 4 encoder and 2 decoder blocks over 16x16 patches of
    128x128 images): patchify by reshape and permute, random masking of 75% by argsort of noise
    and gather of the kept tokens (an index expanded over the features), a mask token appended
    and unshuffled by gather, attention by F.scaled_dot_product_attention, the loss the per-patch
    mean squared error over the masked patches alone ((loss * mask).sum() / mask.sum())."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, size, p, d, dd, heads = 16, 128, 16, 192, 128, 4
    n = (size // p) ** 2

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.n1, self.qkv, self.proj = nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.n2, self.mlp = nn.LayerNorm(width), nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                                                   nn.Linear(4 * width, width))

        def forward(self, x):
            b, t, w = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, heads, w // heads).permute(2, 0, 3, 1, 4)
            x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, w))
            return x + self.mlp(self.n2(x))

    class MAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Linear(3 * p * p, d), nn.Parameter(torch.zeros(1, n, d))
            self.enc, self.norm = nn.ModuleList([Block(d) for _ in range(4)]), nn.LayerNorm(d)
            self.to_dec, self.mask_token = nn.Linear(d, dd), nn.Parameter(torch.zeros(1, 1, dd))
            self.dec_pos = nn.Parameter(torch.zeros(1, n, dd))
            self.dec, self.head = nn.ModuleList([Block(dd) for _ in range(2)]), nn.Linear(dd, 3 * p * p)

        def forward(self, imgs, noise):
            b = imgs.shape[0]
            patches = imgs.reshape(b, 3, size // p, p, size // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, n, -1)
            x = self.embed(patches) + self.pos
            keep = n // 4
            shuffle = torch.argsort(noise, dim=1)
            restore = torch.argsort(shuffle, dim=1)
            kept = shuffle[:, :keep]
            x = torch.gather(x, 1, kept.unsqueeze(-1).expand(-1, -1, d))
            mask = torch.ones(b, n, device=imgs.device)
            mask[:, :keep] = 0
            mask = torch.gather(mask, 1, restore)
            for blk in self.enc:
                x = blk(x)
            x = self.to_dec(self.norm(x))
            x = torch.cat([x, self.mask_token.expand(b, n - keep, -1)], dim=1)
            x = torch.gather(x, 1, restore.unsqueeze(-1).expand(-1, -1, dd)) + self.dec_pos
            for blk in self.dec:
                x = blk(x)
            pred = self.head(x).float()
            loss = ((pred - patches) ** 2).mean(dim=-1)
            return (loss * mask).sum() / mask.sum()
    imgs = torch.randn(batch, 3, size, size, device=device)
    noise = torch.rand(batch, n, device=device)
    return MAE(), (imgs, noise, None), lambda out, inputs: out


def _diffusion(device):
    """A denoising diffusion UNet (two resolutions, 64x64 latents of 4 channels): a sinusoidal
    timestep embedding (arange, exp, sin, cos, cat) through an MLP, residual blocks of GroupNorm,
    SiLU and 3x3 convolutions with the embedding's scale and shift (chunk), self-attention over
    the 16x16 level's pixels (GroupNorm, 1x1 qkv convolution, F.scaled_dot_product_attention),
    strided-conv down- and nearest-neighbour upsampling, a skip by cat; the loss the noise's MSE."""
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, ch, size = 8, 64, 32

    def timestep(t, dim):
        half = dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = t.float()[:, None] * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    class Res(nn.Module):
        def __init__(self, cin, cout, emb):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t, self.n2, self.c2 = nn.Linear(emb, 2 * cout), nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, e):
            h = self.c1(F.silu(self.n1(x)))
            scale, shift = self.t(F.silu(e))[:, :, None, None].chunk(2, dim=1)
            h = self.c2(F.silu(self.n2(h) * (1 + scale) + shift))
            return h + self.skip(x)

    class Attn(nn.Module):
        def __init__(self, c, heads=4):
            super().__init__()
            self.norm, self.qkv, self.out, self.heads = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1), heads

        def forward(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).permute(1, 0, 2, 4, 3)
            y = F.scaled_dot_product_attention(q, k, v).permute(0, 1, 3, 2).reshape(b, c, h, w)
            return x + self.out(y)

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            emb = 4 * ch
            self.temb = nn.Sequential(nn.Linear(ch, emb), nn.SiLU(), nn.Linear(emb, emb))
            self.inp = nn.Conv2d(4, ch, 3, padding=1)
            self.d1, self.down = Res(ch, ch, emb), nn.Conv2d(ch, ch, 3, stride=2, padding=1)
            self.d2, self.attn, self.mid = Res(ch, 2 * ch, emb), Attn(2 * ch), Res(2 * ch, 2 * ch, emb)
            self.u2, self.u1 = Res(4 * ch, ch, emb), Res(2 * ch, ch, emb)
            self.outn, self.outc = nn.GroupNorm(32, ch), nn.Conv2d(ch, 4, 3, padding=1)

        def forward(self, x, t):
            e = self.temb(timestep(t, ch))
            h1 = self.d1(self.inp(x), e)
            h2 = self.d2(self.down(h1), e)
            h = self.mid(self.attn(h2), e)
            h = self.u2(torch.cat([h, h2], dim=1), e)
            h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = self.u1(torch.cat([h, h1], dim=1), e)
            return self.outc(F.silu(self.outn(h)))
    x0 = torch.randn(batch, 4, size, size, device=device)
    noise = torch.randn_like(x0)
    t = torch.randint(0, 1000, (batch,), device=device)
    alpha = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None]
    noisy = alpha * x0 + (1 - alpha ** 2).sqrt() * noise
    return UNet(), (noisy, t, noise), lambda out, inputs: F.mse_loss(out.float(), inputs[-1])


def _vae(device):
    """A convolutional VAE (64x64 RGB, fp16 autocast): a strided-conv encoder with BatchNorm and
    LeakyReLU to the mean and log-variance, the reparameterisation (randn_like, exp, multiply-add),
    a ConvTranspose2d decoder; the loss binary_cross_entropy_with_logits summed plus the KL term
    -0.5 * sum(1 + logvar - mu^2 - exp(logvar)), over the batch."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, z = 32, 128

    def down(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2))

    def up(cin, cout):
        return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.ReLU())

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(down(3, 32), down(32, 64), down(64, 128), down(128, 256))
            self.mu, self.logvar = nn.Linear(256 * 16, z), nn.Linear(256 * 16, z)
            self.dec_in = nn.Linear(z, 256 * 16)
            self.dec = nn.Sequential(up(256, 128), up(128, 64), up(64, 32), nn.ConvTranspose2d(32, 3, 4, 2, 1))

        def forward(self, x):
            h = self.enc(x).flatten(1)
            mu, logvar = self.mu(h), self.logvar(h)
            zs = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
            logits = self.dec(self.dec_in(zs).view(-1, 256, 4, 4))
            recon = F.binary_cross_entropy_with_logits(logits.float(), x, reduction="sum")
            kl = -0.5 * torch.sum(1 + logvar.float() - mu.float().pow(2) - logvar.float().exp())
            return (recon + kl) / x.shape[0]
    x = torch.rand(batch, 3, 64, 64, device=device)
    return VAE(), (x, None), lambda out, inputs: out


def _nerf(device):
    """A NeRF-style field (fp32): rays' sample points positionally encoded (sin and cos at 10
    frequencies, cat), an 8-layer MLP with a skip concatenation, density by softplus and colour by
    sigmoid, volume rendering: the samples' spacing (diff), alpha = 1 - exp(-sigma * delta), the
    transmittance as an exclusive cumprod (cat of ones, cumprod), weights summed over samples;
    the loss the rendered colour's MSE."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    rays, samples, freqs, width = 1024, 64, 10, 256

    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            d = 3 + 3 * 2 * freqs
            self.first = nn.ModuleList([nn.Linear(d, width)] + [nn.Linear(width, width) for _ in range(3)])
            self.second = nn.ModuleList([nn.Linear(width + d, width)] + [nn.Linear(width, width) for _ in range(3)])
            self.sigma, self.rgb = nn.Linear(width, 1), nn.Linear(width, 3)

        def forward(self, origins, dirs, t):
            pts = origins[:, None, :] + dirs[:, None, :] * t[..., None]
            scaled = pts[..., None] * (2.0 ** torch.arange(freqs, device=pts.device))
            enc = torch.cat([pts, torch.sin(scaled).flatten(-2), torch.cos(scaled).flatten(-2)], dim=-1)
            h = enc
            for layer in self.first:
                h = F.relu(layer(h))
            h = torch.cat([h, enc], dim=-1)
            for layer in self.second:
                h = F.relu(layer(h))
            sigma, rgb = F.softplus(self.sigma(h)).squeeze(-1), torch.sigmoid(self.rgb(h))
            delta = torch.cat([t[:, 1:] - t[:, :-1], torch.full_like(t[:, :1], 1e10)], dim=-1)
            alpha = 1 - torch.exp(-sigma * delta)
            trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], dim=-1), dim=-1)[:, :-1]
            return ((alpha * trans)[..., None] * rgb).sum(dim=1)
    g = torch.Generator().manual_seed(0)
    origins, dirs = torch.randn(rays, 3, generator=g).to(device), F.normalize(torch.randn(rays, 3, generator=g), dim=-1).to(device)
    t = torch.sort(torch.rand(rays, samples, generator=g) * 4 + 2, dim=-1).values.to(device)
    target = torch.rand(rays, 3, generator=g).to(device)
    return Field(), (origins, dirs, t, target), lambda out, inputs: F.mse_loss(out, inputs[-1])


def _wgan_gp(device):
    """A WGAN-GP step (Gulrajani et al. 2017) as one loss: a DCGAN-style generator
    (ConvTranspose2d, BatchNorm2d, ReLU, tanh) and a critic without normalisation (strided Conv2d,
    LeakyReLU); the gradient penalty is the critic's input gradient at random interpolates, taken
    with autograd.grad(create_graph=True), so the step's backward runs double backwards
    (convolution's, leaky_relu's, the norm's)."""
    import torch
    import torch.nn as nn
    batch, zdim, ch = 64, 128, 64

    class GAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.gen = nn.Sequential(
                nn.ConvTranspose2d(zdim, 4 * ch, 4, 1, 0, bias=False), nn.BatchNorm2d(4 * ch), nn.ReLU(True),
                nn.ConvTranspose2d(4 * ch, 2 * ch, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * ch), nn.ReLU(True),
                nn.ConvTranspose2d(2 * ch, ch, 4, 2, 1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(True),
                nn.ConvTranspose2d(ch, 3, 4, 2, 1), nn.Tanh())
            self.critic = nn.Sequential(
                nn.Conv2d(3, ch, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(ch, 2 * ch, 4, 2, 1), nn.LeakyReLU(0.2),
                nn.Conv2d(2 * ch, 4 * ch, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(4 * ch, 1, 4, 1, 0))

        def forward(self, real, z, eps):
            fake = self.gen(z)
            d_fake, d_real = self.critic(fake.detach()).mean(), self.critic(real).mean()
            mixed = (eps * real + (1 - eps) * fake.detach()).requires_grad_(True)
            grad, = torch.autograd.grad(self.critic(mixed).sum(), mixed, create_graph=True)
            penalty = ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
            return d_fake - d_real + 10 * penalty - self.critic(fake).mean()
    real = torch.randn(batch, 3, 32, 32, device=device).tanh()
    z = torch.randn(batch, zdim, 1, 1, device=device)
    eps = torch.rand(batch, 1, 1, 1, device=device)
    return GAN(), (real, z, eps, None), lambda out, inputs: out


def _vqvae(device):
    """A VQ-VAE (van den Oord et al. 2017) on 64x64 images: a strided-conv encoder, vector
    quantisation against a 512-entry codebook by squared distances (sums of squares and a matmul),
    argmin and an embedding lookup, the straight-through estimator (z + (zq - z).detach()), the
    codebook and commitment losses, the codes' usage by bincount and its perplexity, a
    transposed-conv decoder; the loss adds the reconstruction's MSE."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, codes, dim = 32, 512, 64

    class VQVAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Conv2d(3, 64, 4, 2, 1), nn.ReLU(), nn.Conv2d(64, 128, 4, 2, 1), nn.ReLU(),
                                     nn.Conv2d(128, dim, 3, 1, 1))
            self.codebook = nn.Embedding(codes, dim)
            self.dec = nn.Sequential(nn.Conv2d(dim, 128, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(128, 64, 4, 2, 1),
                                     nn.ReLU(), nn.ConvTranspose2d(64, 3, 4, 2, 1))

        def forward(self, x):
            z = self.enc(x)
            flat = z.permute(0, 2, 3, 1).reshape(-1, dim)
            dist = (flat ** 2).sum(1, keepdim=True) - 2 * flat @ self.codebook.weight.t() \
                + (self.codebook.weight ** 2).sum(1)
            idx = dist.argmin(1)
            zq = self.codebook(idx).view(z.shape[0], z.shape[2], z.shape[3], dim).permute(0, 3, 1, 2)
            vq_loss = F.mse_loss(zq, z.detach()) + 0.25 * F.mse_loss(z, zq.detach())
            usage = torch.bincount(idx, minlength=codes).float() / idx.numel()
            perplexity = torch.exp(-(usage * torch.log(usage + 1e-10)).sum())
            recon = self.dec(z + (zq - z).detach())
            return F.mse_loss(recon, x) + vq_loss + 0.0 * perplexity
    x = torch.randn(batch, 3, 64, 64, device=device)
    return VQVAE(), (x, None), lambda out, inputs: out


def _clip(device):
    """A CLIP-style contrastive step (Radford et al. 2021): an image tower (a ViT: patch Conv2d,
    class token, pre-norm nn.TransformerEncoder) and a text tower (token and position embeddings,
    the same encoder under a causal mask, the features at each text's end token picked by
    argmax and advanced indexing), projections, F.normalize, a learned temperature's exp, and the
    symmetric cross-entropy over the image-text logits and their transpose."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, size, p, d, heads, vocab, ctx, emb = 64, 64, 8, 256, 4, 4096, 32, 256

    def encoder(layers):
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    class CLIP(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch, self.cls = nn.Conv2d(3, d, p, p), nn.Parameter(torch.zeros(1, 1, d))
            self.img_pos = nn.Parameter(torch.zeros(1, (size // p) ** 2 + 1, d))
            self.img, self.img_norm, self.img_proj = encoder(3), nn.LayerNorm(d), nn.Linear(d, emb, bias=False)
            self.tok, self.txt_pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, ctx, d))
            self.txt, self.txt_norm, self.txt_proj = encoder(3), nn.LayerNorm(d), nn.Linear(d, emb, bias=False)
            self.scale = nn.Parameter(torch.tensor(2.659))

        def forward(self, images, text):
            x = self.patch(images).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.img_pos
            img = self.img_proj(self.img_norm(self.img(x)[:, 0]))
            mask = nn.Transformer.generate_square_subsequent_mask(ctx, device=text.device)
            t = self.txt(self.tok(text) + self.txt_pos, mask=mask, is_causal=True)
            t = self.txt_norm(t)[torch.arange(t.shape[0], device=t.device), text.argmax(-1)]
            txt = self.txt_proj(t)
            logits = self.scale.exp() * F.normalize(img, dim=-1) @ F.normalize(txt, dim=-1).t()
            labels = torch.arange(logits.shape[0], device=logits.device)
            return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    g = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, size, size, generator=g).to(device)
    text = torch.randint(1, vocab, (batch, ctx), generator=g).to(device)
    return CLIP(), (images, text, None), lambda out, inputs: out


def _ssm(device):
    """A Mamba-style selective state-space LM (2 blocks, Gu and Dao 2023) written as its pure
    PyTorch reference is: in_proj split into x and a gate, a depthwise causal Conv1d (padded,
    then cut), SiLU, the input-dependent dt (softplus), B and C, A = -exp(A_log), the scan as a
    loop over time steps (exp(dt A), the state update, an einsum with C), the skip D, RMSNorm,
    tied embedding and head, cross-entropy."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, length, d, state, vocab, k = 8, 48, 256, 16, 2048, 4
    inner, rank = 2 * d, d // 16

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.in_proj = RMSNorm(), nn.Linear(d, 2 * inner, bias=False)
            self.conv = nn.Conv1d(inner, inner, k, groups=inner, padding=k - 1)
            self.x_proj, self.dt_proj = nn.Linear(inner, rank + 2 * state, bias=False), nn.Linear(rank, inner)
            self.A_log = nn.Parameter(torch.log(torch.arange(1, state + 1).float()).repeat(inner, 1))
            self.D, self.out_proj = nn.Parameter(torch.ones(inner)), nn.Linear(inner, d, bias=False)

        def forward(self, h):
            x, gate = self.in_proj(self.norm(h)).chunk(2, dim=-1)
            x = F.silu(self.conv(x.transpose(1, 2))[..., :length]).transpose(1, 2)
            dt, B, C = self.x_proj(x).split([rank, state, state], dim=-1)
            dt = F.softplus(self.dt_proj(dt)).float()
            A = -torch.exp(self.A_log.float())
            dA = torch.exp(dt.unsqueeze(-1) * A)
            dBu = (dt * x.float()).unsqueeze(-1) * B.float().unsqueeze(2)
            s = torch.zeros(x.shape[0], inner, state, device=x.device)
            ys = []
            for i in range(length):
                s = dA[:, i] * s + dBu[:, i]
                ys.append(torch.einsum("bdn,bn->bd", s, C[:, i].float()))
            y = (torch.stack(ys, dim=1) + x.float() * self.D).to(x.dtype)
            return h + self.out_proj(y * F.silu(gate))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.layers, self.norm = nn.Embedding(vocab, d), nn.ModuleList([Mixer(), Mixer()]), RMSNorm()

        def forward(self, tokens):
            h = self.emb(tokens)
            for layer in self.layers:
                h = layer(h)
            return F.linear(self.norm(h), self.emb.weight)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, length + 1), generator=g).to(device)
    return LM(), (tokens[:, :-1], tokens[:, 1:]), \
        lambda out, inputs: F.cross_entropy(out.reshape(-1, vocab), inputs[-1].reshape(-1))


def _detection(device):
    """torchvision's Faster R-CNN (MobileNetV3-Large FPN backbone at 320 px, 10 classes, no
    pretrained weights) in training: anchors, the RPN's proposals and their NMS, box sampling,
    RoIAlign (MultiScaleRoIAlign), the box head and its losses; the loss the sum of the four."""
    import torch
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn
    g = torch.Generator().manual_seed(0)
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=10)
    images = [torch.rand(3, 320, 320, generator=g).to(device) for _ in range(4)]
    targets = []
    for _ in images:
        xy = torch.rand(3, 2, generator=g) * 200
        wh = torch.rand(3, 2, generator=g) * 100 + 20
        targets.append({"boxes": torch.cat([xy, xy + wh], dim=1).to(device),
                        "labels": torch.randint(1, 10, (3,), generator=g).to(device)})
    return model, (images, targets, None), lambda out, inputs: sum(out.values())


def _llm_decode(device):
    """A GPT-style decoder generating 24 tokens after a 64-token prompt (inference, fp16
    weights): a preallocated KV cache written in place by index_copy_, attention over the
    cache's filled part by F.scaled_dot_product_attention, top-k (50) sampling with a
    temperature (topk, softmax, torch.multinomial, gather), the sampled token appended (cat)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, prompt, new, d, heads, vocab, layers = 8, 64, 24, 512, 8, 8192, 2
    total = prompt + new

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n2, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, cache, pos):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            at = torch.arange(pos, pos + t, device=x.device)
            cache[0].index_copy_(2, at, k)
            cache[1].index_copy_(2, at, v)
            keys, values = cache[0][:, :, :pos + t], cache[1][:, :, :pos + t]
            a = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(total, d)
            self.blocks, self.norm = nn.ModuleList([Block() for _ in range(layers)]), nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, tokens):
            caches = [torch.zeros(2, tokens.shape[0], heads, total, d // heads, dtype=self.head.weight.dtype,
                                  device=tokens.device) for _ in self.blocks]
            pos, step = 0, tokens
            gen = torch.Generator(device=tokens.device).manual_seed(0)
            for _ in range(new):
                x = self.tok(step) + self.pos(torch.arange(pos, pos + step.shape[1], device=tokens.device))
                for blk, cache in zip(self.blocks, caches):
                    x = blk(x, cache, pos)
                logits = self.head(self.norm(x[:, -1])).float() / 0.8
                top, idx = torch.topk(logits, 50, dim=-1)
                choice = torch.multinomial(F.softmax(top, dim=-1), 1, generator=gen)
                nxt = torch.gather(idx, 1, choice)
                tokens = torch.cat([tokens, nxt], dim=1)
                pos += step.shape[1]
                step = nxt
            return tokens
    tokens = torch.randint(0, vocab, (batch, prompt), generator=torch.Generator().manual_seed(0)).to(device)
    return Decoder(), (tokens, None), lambda out, inputs: out


def _fno(device):
    """A Fourier neural operator (Li et al. 2021) on a 64x64 grid (fp32): a lifting Linear, four
    spectral layers (torch.fft.rfft2, the lowest 12x12 modes of both frequency corners mixed by
    complex weights through einsum, irfft2 back, plus a 1x1 Conv2d path, GELU), a projection MLP;
    the loss the relative L2 error (torch.linalg.vector_norm)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, size, width, modes = 16, 64, 32, 12

    class Spectral(nn.Module):
        def __init__(self):
            super().__init__()
            scale = 1 / (width * width)
            self.w1 = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))
            self.w2 = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))
            self.skip = nn.Conv2d(width, width, 1)

        def forward(self, x):
            x_ft = torch.fft.rfft2(x)
            out = torch.zeros(x.shape[0], width, size, size // 2 + 1, dtype=torch.cfloat, device=x.device)
            out[:, :, :modes, :modes] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :modes, :modes], self.w1)
            out[:, :, -modes:, :modes] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -modes:, :modes], self.w2)
            return F.gelu(torch.fft.irfft2(out, s=(size, size)) + self.skip(x))

    class FNO(nn.Module):
        def __init__(self):
            super().__init__()
            self.lift, self.layers = nn.Linear(3, width), nn.ModuleList([Spectral() for _ in range(4)])
            self.head = nn.Sequential(nn.Linear(width, 128), nn.GELU(), nn.Linear(128, 1))

        def forward(self, a):
            x = self.lift(a).permute(0, 3, 1, 2)
            for layer in self.layers:
                x = layer(x)
            return self.head(x.permute(0, 2, 3, 1)).squeeze(-1)
    g = torch.Generator().manual_seed(0)
    grid = torch.linspace(0, 1, size)
    gx, gy = torch.meshgrid(grid, grid, indexing="ij")
    field = torch.randn(batch, size, size, generator=g)
    a = torch.stack([field, gx.expand(batch, -1, -1), gy.expand(batch, -1, -1)], dim=-1).to(device)
    u = torch.randn(batch, size, size, generator=g).to(device)

    def loss(out, inputs):
        target = inputs[-1]
        diff = torch.linalg.vector_norm((out - target).flatten(1), dim=1)
        return (diff / torch.linalg.vector_norm(target.flatten(1), dim=1)).mean()
    return FNO(), (a, u), loss


def _flow(device):
    """A Glow-style normalising flow (Kingma and Dhariwal 2018) on 32x32 RGB, fp32: a squeeze to
    12x16x16, four steps of ActNorm, an invertible 1x1 convolution (its log-determinant by
    torch.linalg.slogdet of the 12x12 weight) and an affine coupling (a conv net on one half gives
    the other half's shift and sigmoid scale), then the standard normal prior; the loss the
    negative log-likelihood in bits per dimension."""
    import math
    import torch
    import torch.nn as nn
    batch, c, size, hidden = 64, 12, 16, 256

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.loc, self.logs = nn.Parameter(torch.zeros(1, c, 1, 1)), nn.Parameter(torch.zeros(1, c, 1, 1))
            self.weight = nn.Parameter(torch.linalg.qr(torch.randn(c, c))[0])
            self.net = nn.Sequential(nn.Conv2d(c // 2, hidden, 3, padding=1), nn.ReLU(),
                                     nn.Conv2d(hidden, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, c, 3, padding=1))

        def forward(self, x, logdet):
            x = (x + self.loc) * torch.exp(self.logs)
            logdet = logdet + size * size * self.logs.sum()
            x = nn.functional.conv2d(x, self.weight.view(c, c, 1, 1))
            logdet = logdet + size * size * torch.linalg.slogdet(self.weight)[1]
            xa, xb = x.chunk(2, dim=1)
            h = self.net(xa)
            shift, raw = h[:, 0::2], h[:, 1::2]
            scale = torch.sigmoid(raw + 2.0)
            xb = (xb + shift) * scale
            return torch.cat([xa, xb], dim=1), logdet + torch.log(scale).flatten(1).sum(1)

    class Glow(nn.Module):
        def __init__(self):
            super().__init__()
            self.steps = nn.ModuleList([Step() for _ in range(4)])

        def forward(self, img):
            b = img.shape[0]
            x = img.view(b, 3, size, 2, size, 2).permute(0, 1, 3, 5, 2, 4).reshape(b, c, size, size)
            logdet = torch.zeros(b, device=img.device)
            for step in self.steps:
                x, logdet = step(x, logdet)
            prior = (-0.5 * (x ** 2 + math.log(2 * math.pi))).flatten(1).sum(1)
            dims = c * size * size
            return (-(prior + logdet) / (dims * math.log(2))).mean()
    img = torch.rand(batch, 3, 2 * size, 2 * size, generator=torch.Generator().manual_seed(0)).to(device) - 0.5
    return Glow(), (img, None), lambda out, inputs: out


def _stylegan(device):
    """A StyleGAN2-style step (Karras et al. 2020) as one loss: a mapping MLP (pixel norm,
    LeakyReLU), modulated 3x3 convolutions with weight demodulation run as one grouped Conv2d a
    sample (groups = batch), per-pixel noise injection, bilinear upsampling (F.interpolate),
    toRGB layers; a discriminator whose convolutions carry spectral normalisation
    (torch.nn.utils.parametrizations.spectral_norm: a power iteration of mv and normalize every
    call); the non-saturating logistic loss (softplus) for both."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.utils.parametrizations import spectral_norm
    batch, zdim, ch = 16, 256, 128

    class ModConv(nn.Module):
        def __init__(self, cin, cout, demod=True):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(cout, cin, 3, 3))
            self.affine, self.demod = nn.Linear(zdim, cin), demod
            self.noise = nn.Parameter(torch.zeros(()))

        def forward(self, x, w):
            b, cin, h, wd = x.shape
            s = self.affine(w) + 1
            weight = self.weight[None] * s[:, None, :, None, None] / (cin * 9) ** 0.5
            if self.demod:
                weight = weight * torch.rsqrt(weight.pow(2).sum(dim=(2, 3, 4), keepdim=True) + 1e-8)
            out = F.conv2d(x.reshape(1, b * cin, h, wd), weight.reshape(-1, cin, 3, 3), padding=1, groups=b)
            out = out.view(b, -1, h, wd)
            out = out + self.noise * torch.randn(b, 1, h, wd, device=x.device, dtype=out.dtype)
            return F.leaky_relu(out, 0.2)

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for _ in range(4):
                layers += [nn.Linear(zdim, zdim), nn.LeakyReLU(0.2)]
            self.mapping = nn.Sequential(*layers)
            self.const = nn.Parameter(torch.randn(1, ch, 4, 4))
            self.convs = nn.ModuleList([ModConv(ch, ch) for _ in range(6)])
            self.rgb = nn.ModuleList([nn.Conv2d(ch, 3, 1) for _ in range(3)])

        def forward(self, z):
            w = self.mapping(z * torch.rsqrt(z.pow(2).mean(1, keepdim=True) + 1e-8))
            x, img = self.const.expand(z.shape[0], -1, -1, -1), None
            for i in range(3):
                if i:
                    x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
                    img = F.interpolate(img, scale_factor=2, mode="bilinear", align_corners=False)
                x = self.convs[2 * i + 1](self.convs[2 * i](x, w), w)
                rgb = self.rgb[i](x)
                img = rgb if img is None else img + rgb
            return img

    class GAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.gen = Generator()
            self.disc = nn.Sequential(
                spectral_norm(nn.Conv2d(3, ch, 3, 1, 1)), nn.LeakyReLU(0.2),
                spectral_norm(nn.Conv2d(ch, ch, 4, 2, 1)), nn.LeakyReLU(0.2),
                spectral_norm(nn.Conv2d(ch, 2 * ch, 4, 2, 1)), nn.LeakyReLU(0.2),
                nn.Flatten(), spectral_norm(nn.Linear(2 * ch * 16, 1)))

        def forward(self, real, z):
            fake = self.gen(z)
            d_loss = F.softplus(self.disc(fake.detach())).mean() + F.softplus(-self.disc(real)).mean()
            return d_loss + F.softplus(-self.disc(fake)).mean()
    g = torch.Generator().manual_seed(0)
    real = torch.rand(batch, 3, 16, 16, generator=g).to(device) * 2 - 1
    z = torch.randn(batch, zdim, generator=g).to(device)
    return GAN(), (real, z, None), lambda out, inputs: out


def _ppo(device):
    """A PPO update (Schulman et al. 2017) of a continuous-control actor-critic (fp32): Tanh MLP
    trunks over 8,192 observations, a Normal policy with a learned log-std
    (torch.distributions: log_prob, entropy), the probability ratio's clipped surrogate
    (exp, clamp, minimum), normalised advantages (mean, std), the value loss (MSE)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributions import Normal
    n, obs, act, hidden = 8192, 64, 8, 256

    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.pi = nn.Sequential(nn.Linear(obs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                    nn.Linear(hidden, act))
            self.v = nn.Sequential(nn.Linear(obs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                   nn.Linear(hidden, 1))
            self.log_std = nn.Parameter(torch.full((act,), -0.5))

        def forward(self, states, actions, old_logp, advantages, returns):
            dist = Normal(self.pi(states), self.log_std.exp())
            logp = dist.log_prob(actions).sum(-1)
            adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            ratio = torch.exp(logp - old_logp)
            surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv).mean()
            value = F.mse_loss(self.v(states).squeeze(-1), returns)
            return -surrogate + 0.5 * value - 0.01 * dist.entropy().sum(-1).mean()
    g = torch.Generator().manual_seed(0)
    tensors = (torch.randn(n, obs, generator=g), torch.randn(n, act, generator=g),
               -torch.rand(n, generator=g) * 10, torch.randn(n, generator=g), torch.randn(n, generator=g))
    return ActorCritic(), tuple(t.to(device) for t in tensors) + (None,), lambda out, inputs: out


def _seq2seq(device):
    """An attentional sequence-to-sequence translator (Luong et al. 2015): a bidirectional GRU
    encoder (cuDNN), a decoder unrolled as an nn.LSTMCell loop over 24 target steps (teacher
    forcing), dot-product attention by bmm and softmax each step, the attentional state
    tanh(Linear(cat)), a shared output projection; cross-entropy with label smoothing and a
    padding index."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    batch, src_len, tgt_len, vocab, d = 64, 32, 24, 8000, 256

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_emb, self.tgt_emb = nn.Embedding(vocab, d, padding_idx=0), nn.Embedding(vocab, d, padding_idx=0)
            self.encoder = nn.GRU(d, d // 2, batch_first=True, bidirectional=True)
            self.cell = nn.LSTMCell(2 * d, d)
            self.attn_out, self.out = nn.Linear(2 * d, d, bias=False), nn.Linear(d, vocab)

        def forward(self, src, tgt):
            memory, _ = self.encoder(self.src_emb(src))
            h = c = memory.new_zeros(src.shape[0], d)
            feed, states = memory.new_zeros(src.shape[0], d), []
            emb = self.tgt_emb(tgt)
            for t in range(tgt.shape[1]):
                h, c = self.cell(torch.cat([emb[:, t], feed], dim=-1), (h, c))
                weights = F.softmax(torch.bmm(memory, h.unsqueeze(2)).squeeze(2), dim=-1)
                context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
                feed = torch.tanh(self.attn_out(torch.cat([context, h], dim=-1)))
                states.append(feed)
            return self.out(torch.stack(states, dim=1))
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, vocab, (batch, src_len), generator=g)
    tgt = torch.randint(1, vocab, (batch, tgt_len + 1), generator=g)
    tgt[:, -4:] = 0
    src, tgt = src.to(device), tgt.to(device)
    return Seq2Seq(), (src, tgt[:, :-1], tgt[:, 1:]), \
        lambda out, inputs: F.cross_entropy(out.float().reshape(-1, vocab), inputs[-1].reshape(-1),
                                            ignore_index=0, label_smoothing=0.1)


def _deformable(device):
    """A small detector backbone with deformable convolutions (Dai et al. 2017, torchvision's
    DeformConv2d): each deformable 3x3 takes its offsets and a modulation mask (DCNv2, sigmoid)
    from a plain Conv2d on the same input; BatchNorm, ReLU, max pooling, global average pooling,
    a classifier."""
    import torch
    import torch.nn as nn
    from torchvision.ops import DeformConv2d

    class Block(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.offset = nn.Conv2d(cin, 27, 3, padding=1)
            self.conv, self.bn = DeformConv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout)

        def forward(self, x):
            o = self.offset(x)
            return torch.relu(self.bn(self.conv(x, o[:, :18], torch.sigmoid(o[:, 18:]))))

    model = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU(), Block(64, 64), nn.MaxPool2d(2),
                          Block(64, 128), nn.MaxPool2d(2), Block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(256, 100))
    return model, _images(device, 16, 128, classes=100), _ce


def _pointwise_grads(device):
    """Element-wise ops whose backward PyTorch runs as several kernels (a test fixture): clamp
    with two number bounds and with one, powers with exponents 2, 3 and 0.5, a division by a
    tensor that takes a gradient; the loss their sum."""
    import torch
    import torch.nn as nn

    class Pointwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(256, 1024))

        def forward(self, x):
            y = x.clamp(-1.0, 1.0) + x.clamp_min(0.1) + x ** 2 + x ** 3 + (x.abs() + 1) ** 0.5
            return (y / (self.w.abs() + 1)).sum()
    x = torch.randn(256, 1024, device=device, requires_grad=True)
    return Pointwise(), (x, None), lambda out, inputs: out


CASES: Dict[str, Case] = {
    "resnet50": Case(_tv("resnet50"), "bf16", "sgd", channels_last=True),
    "resnext50_32x4d": Case(_tv("resnext50_32x4d"), "fp16", "sgd-loop", channels_last=True),
    "wide_resnet50_2": Case(_tv("wide_resnet50_2", batch=4), "tf32", "sgd"),
    "mobilenet_v2": Case(_tv("mobilenet_v2"), "fp32", "sgd"),
    "mobilenet_v3_large": Case(_tv("mobilenet_v3_large"), "bf16", "adamw-foreach", channels_last=True),
    "efficientnet_b0": Case(_tv("efficientnet_b0"), "fp16", "adam-fused"),
    "regnet_y_400mf": Case(_tv("regnet_y_400mf"), "tf32", "sgd"),
    "convnext_tiny": Case(_tv("convnext_tiny"), "bf16", "adamw-fused", channels_last=True),
    "densenet121": Case(_tv("densenet121", batch=4), "fp16", "sgd"),
    "shufflenet_v2_x1_0": Case(_tv("shufflenet_v2_x1_0"), "bf16", "sgd"),
    "squeezenet1_1": Case(_tv("squeezenet1_1"), "fp32", "sgd"),
    "mnasnet0_5": Case(_tv("mnasnet0_5"), "fp16", "adam-foreach"),
    "vit_b_16": Case(_tv("vit_b_16", batch=2, size=224), "bf16", "adamw-fused"),
    "swin_t": Case(_tv("swin_t", batch=2, size=224), "bf16", "adamw-foreach"),
    "maxvit_t": Case(_tv("maxvit_t", batch=1, size=224), "bf16", "adamw-foreach"),
    "deeplabv3_mobilenet": Case(_segmentation, "fp16", "sgd"),
    "transformer_encoder": Case(_encoder(), "tf32", "adam-foreach"),
    "transformer_encoder_eval": Case(_encoder(), "fp16", "none", half_weights=True),
    "transformer": Case(_transformer, "bf16", "adam-foreach"),
    "mha_weights": Case(_mha, "fp32", "sgd"),
    "llama_block": Case(_llama, "bf16", "adamw-fused"),
    "lstm": Case(_rnn("lstm"), "fp32", "sgd"),
    "gru": Case(_rnn("gru"), "fp16", "adam-foreach"),
    "rnn_packed": Case(_rnn("packed"), "tf32", "sgd-loop"),
    "gru_packed": Case(_rnn("gru_packed"), "tf32", "sgd-loop"),
    "gru3_packed": Case(_rnn("gru3_packed"), "tf32", "sgd-loop"),
    "lstm2_packed": Case(_rnn("lstm2_packed"), "bf16", "sgd-loop"),
    "lstm_proj_packed": Case(_rnn("lstm_proj_packed"), "tf32", "sgd-loop"),
    "gru_packed_bf16": Case(_rnn("gru_packed"), "bf16", "sgd-loop"),
    "unet": Case(_unet, "bf16", "adamw-foreach"),
    "recommender": Case(_recommender, "fp32", "adam-foreach"),
    "moe": Case(_moe, "bf16", "adamw-foreach"),
    "grad_accum": Case(_tv("resnet18"), "fp16", "sgd", micro=2),
    "audio1d": Case(_audio1d, "fp16", "adam-foreach"),
    "tcn1d": Case(_tcn1d, "bf16", "adamw-fused"),
    "r3d_18": Case(_video3d, "fp16", "sgd"),
    "unet3d": Case(_unet3d, "tf32", "adam-foreach"),
    "speech1d": Case(_speech1d, "bf16", "adamw-fused"),
    "volume3d": Case(_volume3d, "bf16", "adamw-foreach"),
    "lm_checkpointed": Case(_lm_checkpointed, "bf16", "adamw-fused", clip=1.0),
    "superres": Case(_superres, "fp16", "adam-foreach", clip=0.5),
    "stn": Case(_spatial_transformer, "fp32", "sgd"),
    "ctc_asr": Case(_ctc_asr, "fp32", "adam-foreach", clip=5.0),
    "conformer": Case(_conformer, "bf16", "adamw-fused"),
    "gnn": Case(_gnn, "fp32", "adam-foreach"),
    "mae": Case(_mae, "bf16", "adamw-fused"),
    "diffusion": Case(_diffusion, "fp16", "adam-foreach", clip=1.0),
    "vae": Case(_vae, "fp16", "adam-fused"),
    "nerf": Case(_nerf, "fp32", "adam-foreach"),
    "wgan_gp": Case(_wgan_gp, "fp32", "adam-foreach"),
    "vqvae": Case(_vqvae, "bf16", "adamw-fused"),
    "clip": Case(_clip, "fp16", "adamw-foreach", clip=1.0),
    "ssm": Case(_ssm, "bf16", "adamw-fused"),
    "detection": Case(_detection, "fp32", "sgd"),
    "llm_decode": Case(_llm_decode, "fp16", "none", half_weights=True),
    "fno": Case(_fno, "fp32", "adam-foreach"),
    "flow": Case(_flow, "fp32", "adam-foreach", clip=1.0),
    "stylegan": Case(_stylegan, "fp16", "adam-foreach"),
    "swin_v2_t": Case(_tv("swin_v2_t", batch=2, size=256), "bf16", "adamw-fused"),
    "ppo": Case(_ppo, "fp32", "adam-foreach", clip=0.5),
    "seq2seq": Case(_seq2seq, "fp16", "adam-foreach", clip=1.0),
    "deformable": Case(_deformable, "fp32", "sgd"),
    # Small ones for the test fixtures (tests/data/): an LSTM stack and a Transformer encoder
    # layer, training and on the eval fast path.
    "fixture_lstm": Case(_rnn("lstm", scale=4), "fp32", "sgd"),
    "fixture_pointwise_grads": Case(_pointwise_grads, "fp32", "sgd"),
    "fixture_encoder": Case(_encoder(layers=1, d=64, batch=2, length=16), "fp32", "sgd"),
    "fixture_encoder_eval": Case(_encoder(layers=1, d=64, batch=2, length=16), "fp16", "none", half_weights=True),
    # For the RNN formulas against Nsight Compute (benchmarks/rnn_truth.sh).
    "truth_lstm": Case(_rnn_truth("lstm"), "fp32", "sgd"),
    "truth_gru": Case(_rnn_truth("gru"), "fp32", "sgd"),
}
# The models the issue found worst covered first, so that a capture cut short by --budget keeps them.
FIRST = ["transformer_encoder", "transformer_encoder_eval", "mha_weights", "lstm", "gru", "rnn_packed",
         "mobilenet_v2", "unet", "llama_block", "transformer", "recommender", "deeplabv3_mobilenet"]
DEFAULT = FIRST + [n for n in CASES if n not in FIRST and not n.startswith(("fixture_", "truth_"))]


def _optimizer(name: str, params):
    import torch
    if name == "none":
        return None
    kind, _, impl = name.partition("-")
    flags = {"foreach": impl == "foreach", "fused": impl == "fused"} if impl in ("foreach", "fused", "loop") else {}
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, weight_decay=1e-4,
                               foreach=impl != "loop")
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    return cls(params, lr=1e-4, weight_decay=1e-2, **flags)


def make_step(case: Case, device, compile_mode: Optional[str] = None) -> Callable[[], None]:
    """The step function of one case, its model built on `device`; with `compile_mode` the model
    (forward and backward, not the loss or the optimizer) runs under torch.compile in that mode
    (`default`, `reduce-overhead`, `max-autotune`, ...), as users compile a model."""
    import torch
    model, inputs, loss_fn = case.build(device)
    model = model.to(device)
    if case.channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.to(memory_format=torch.channels_last) if x is not None and x.dim() == 4 else x
                       for x in inputs)
    if case.half_weights:
        model = model.half().eval()
        inputs = tuple(x.half() if x is not None and x.is_floating_point() else x for x in inputs)
    opt = _optimizer(case.optim, model.parameters())
    run = model if compile_mode is None else torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
    low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(case.dtype)
    autocast = low is not None and not case.half_weights
    scaler = torch.amp.GradScaler(device.type, enabled=case.dtype == "fp16" and device.type == "cuda" and autocast)
    tf32 = case.dtype == "tf32"

    def step() -> None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        if opt is None:
            with torch.inference_mode():
                run(*inputs[:-1])
            return
        opt.zero_grad(set_to_none=True)
        for _ in range(case.micro):
            with torch.autocast(device.type, dtype=low or torch.bfloat16, enabled=autocast):
                loss = loss_fn(run(*inputs[:-1]), inputs)
            scaler.scale(loss).backward()
        if case.clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), case.clip)
        scaler.step(opt)
        scaler.update()
    return step


def corrected_counts() -> dict:
    """FlopCounterMode formulas replacing two of its own (custom_mapping), so that the reference
    is the algorithmic count: a grouped convolution's weight gradient counted once, not `groups`
    times (conv_backward_flop counts all C input channels per output channel), and attention
    with fewer key/value heads than query heads (GQA; torch 2.11's sdpa formulas assert equal
    heads). The same numbers otherwise."""
    import torch
    from torch.utils import flop_counter as fc
    aten = torch.ops.aten

    def conv_backward(grad_out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                      output_mask, out_shape=None, **kw):
        args = (grad_out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups)
        total = fc.conv_backward_flop(*args, output_mask, out_val=out_shape)
        if groups > 1 and output_mask[1]:
            wgrad = fc.conv_backward_flop(*args, [False, True, False], out_val=out_shape)
            total += wgrad // groups - wgrad
        return total

    def sdpa(q, k, v, *args, out_shape=None, **kw):
        b, h, sq, dq = q
        return 2 * b * h * sq * k[-2] * (dq + v[-1])

    def sdpa_backward(grad_out, q, k, v, *args, out_shape=None, **kw):
        b, h, sq, dq = q
        return b * h * sq * k[-2] * (6 * dq + 4 * v[-1])
    mapping = {aten.convolution_backward: conv_backward}
    for op in ("efficient", "flash", "cudnn"):
        mapping[getattr(aten, f"_scaled_dot_product_{op}_attention")] = sdpa
        mapping[getattr(aten, f"_scaled_dot_product_{op}_attention_backward")] = sdpa_backward
    return mapping


def _count(step: Callable, mapping: Optional[dict]) -> Optional[int]:
    from torch.utils.flop_counter import FlopCounterMode
    try:
        with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
            step()
    except Exception as err:  # FlopCounterMode's own gaps: recorded, the capture goes on
        print(f"coverage: FlopCounterMode failed: {type(err).__name__}: {err}", file=sys.stderr)
        return None
    return counter.get_total_flops()


class _Overtime(BaseException):
    """A model's preparation outlasted --model-timeout (not an Exception, so that no handler
    meant for a model's own errors takes it)."""


def _alarm(signum, frame):
    raise _Overtime()


def capture(names: List[str], flops_path: Optional[str], warmup: int, plain: bool = False,
            model_timeout: int = 0, budget: float = 0, mode: str = "aten", compile_mode: Optional[str] = None) -> int:
    """Build, warm up and count every case, then run one step of each in the profiled range.

    `mode` (MODES): `aten` pyprof.init() and `pyprof.profiled(aten=True)`; `default` pyprof.init()
    and `pyprof.profiled()` (what users get without asking for PyTorch's op ranges); `plain` no
    `pyprof.init()`, so the trace holds only PyTorch's emit_nvtx(record_shapes=True) ranges (and
    each model's annotate range): what traces made without pyprof look like; `bare` neither, the
    profiler range alone, for `nsys profile --pytorch=autograd-shapes-nvtx` to annotate. `plain`
    (the flag) is mode `plain`.
    `model_timeout` (s): a model whose preparation takes longer is skipped (SIGALRM);
    `budget` (s): no further model is prepared once this much time has passed, so that one slow
    model cannot keep the others out of the capture. The FLOP totals are written after each
    model, so a run cut short keeps what it counted. `compile_mode`: each model under torch.compile
    in that mode (make_step); FlopCounterMode then counts nothing (its dispatch mode would trace
    the compiled graphs anew): the eager capture's counts are the reference."""
    import signal

    import torch

    import pyprof
    mode = "plain" if plain else mode
    if mode in ("aten", "default"):
        pyprof.init()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    steps, flops, fixed, failed = {}, {}, {}, {}
    meta = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "plain": mode == "plain", "mode": mode, "compile": compile_mode, "flop_counter": flops, "flop_counter_corrected": fixed, "failed": failed}

    def save() -> None:
        if flops_path:
            with open(flops_path, "w") as f:
                json.dump(meta, f, indent=1)
    mapping = corrected_counts()
    # Imported now: a timeout inside a first, lazy import would leave it half done for every
    # model after.
    import torch._dynamo  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass
    begin = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    for name in names:
        if budget and time.perf_counter() - begin > budget:
            failed[name] = f"not prepared: the {budget:.0f} s budget was spent"
            print(f"coverage: {name}: {failed[name]}", file=sys.stderr)
            continue
        torch.manual_seed(0)
        t0 = time.perf_counter()
        signal.alarm(model_timeout)
        try:
            step = make_step(CASES[name], device, compile_mode)
            for _ in range(warmup):
                step()
            if compile_mode is None:
                flops[name], fixed[name] = _count(step, None), _count(step, mapping)
            if cuda:
                torch.cuda.synchronize()
            steps[name] = step
        except (Exception, _Overtime) as err:
            failed[name] = f"over {model_timeout} s" if isinstance(err, _Overtime) else f"{type(err).__name__}: {err}"
            print(f"coverage: {name}: skipped: {failed[name]}", file=sys.stderr)
        finally:
            signal.alarm(0)
        save()
        print(f"coverage: {name} ready ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    with profiled_range(mode):
        for name, step in steps.items():
            try:
                with _model_range(mode, name):
                    step()
                if cuda:
                    torch.cuda.synchronize()
            except Exception as err:  # its kernels so far stay in the capture, under its name
                failed[name] = f"profiled step: {type(err).__name__}: {err}"
                print(f"coverage: {name}: {failed[name]}", file=sys.stderr)
    save()
    print(f"coverage: captured {len(steps)} models, {len(failed)} failed", file=sys.stderr)
    return 0


def profiled_range(mode: str):
    """The capture range of `mode`: pyprof's (with PyTorch's op ranges but in `default`), or the
    CUDA profiler range alone (`bare`: no ranges of PyTorch's or pyprof's)."""
    import contextlib

    import torch

    import pyprof
    if mode != "bare":
        return pyprof.profiled(aten=mode != "default")

    @contextlib.contextmanager
    def bare():
        if not torch.cuda.is_available():  # the CPU smoke test
            yield
            return
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        try:
            yield
        finally:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
    return bare()


def _model_range(mode: str, name: str):
    """The range naming the model (the `layer` column), an NVTX range of the model's name where
    pyprof.annotate is not wanted (`bare`: nothing of pyprof's in the trace)."""
    import pyprof
    if mode != "bare":
        return pyprof.annotate(name)
    import contextlib

    import torch
    return torch.cuda.nvtx.range(name) if torch.cuda.is_available() else contextlib.nullcontext()


MODES = ("aten", "default", "plain", "bare")


# ---------------------------------------------------------------------------------------------
# Table (no torch)

MATRIX_KINDS = ("gemm", "conv", "attn")


class ModelSums:
    """Per-model sums over its kernels."""

    def __init__(self) -> None:
        self.kernels = 0
        self.time = 0
        self.known = {"flops": 0, "bytes": 0, "op": 0, "module": 0, "marker": 0, "aten": 0, "kernel": 0}
        self.outside = 0  # ns in ops the user called outside any module (optimizer, loss)
        self.matrix_flops = 0
        self.causal_flops = 0  # of matrix_flops: causal attention, counted half (FlopCounterMode: whole)
        self.rnn_flops = 0
        self.missing: Dict[str, int] = {}  # "op | kernel" -> ns of kernels without FLOPs or bytes

    def add(self, rec: dict, f: Any) -> None:
        dur = rec.get("kDuration") or 0
        self.kernels += 1
        self.time += dur
        if f.flops is not None:
            self.known["flops"] += dur
        if f.bytes is not None:
            self.known["bytes"] += dur
        if f.flops is not None and f.bytes:
            self.known["kernel"] += dur  # issue 27's per-kernel measure: FLOPs known, bytes known and > 0
        if rec.get("op") is not None:
            self.known["op"] += dur
        if rec.get("module") is not None:
            self.known["module"] += dur
        elif _outside_modules(rec):
            self.outside += dur
        level = getattr(f, "level", None)
        if level in self.known:
            self.known[level] += dur
        kind = f.cost.kind if f.cost is not None else None
        flops = f.whole_work()[0]  # a model's sums keep what one kernel's own share leaves unknown
        # Only the matrix kernels (tc known) and those given their call's FLOPs for whole-call sums
        # (call_work: cuDNN's FFT path's inverse transform): a GEMM's or convolution's helpers
        # (bias-gradient sums, split-K passes, casts) carry their own FLOPs, which FlopCounterMode
        # does not count.
        if flops is not None and kind in MATRIX_KINDS and (f.tc is not None or f.call_work is not None):
            self.matrix_flops += flops
            if kind == "attn" and "causal=1" in f.cost.params.split(","):
                self.causal_flops += flops
        if flops is not None and kind == "rnn":
            self.rnn_flops += flops
        if f.flops is None or not f.bytes:
            key = f"{rec.get('dir')} {rec.get('mod')}.{rec.get('op')} | {rec.get('kShortName')}"
            self.missing[key] = self.missing.get(key, 0) + dur


def _outside_modules(rec: dict) -> bool:
    """True when the kernel's op was called outside any nn.Module, so there is no module path to
    know: a forward kernel (a module-less one) inside no module range (GradScaler's unscale, an
    optimizer step, the loss), or a backward kernel whose forward op marker has no module."""
    if rec.get("dir") != "bprop":
        return True  # only asked for kernels without a module path
    marker = (rec.get("fwd") or {}).get("marker")
    return isinstance(marker, dict) and "module" not in marker


def sums(records_path: str, models: frozenset = frozenset()) -> Dict[str, ModelSums]:
    """Records analysed in order (prof's one record loop) and summed per model: a kernel belongs
    to the model of its outermost layer range (in a `bare` capture, its plain NVTX range named as
    one of `models`: `ranges` holds CUB's too), or (a kernel without one, such as a backward
    kernel launched by autograd's thread, outside the model's range) to the model of the kernel
    before it; models ran one after the other."""
    from pyprof.prof.io.reader import records
    from pyprof.prof.scan import analysed
    from pyprof.prof.warnings_tally import Tally
    out: Dict[str, ModelSums] = {}
    current = None
    opener = lzma.open if records_path.endswith(".xz") else open
    with opener(records_path, "rb") as stream:
        for rec, facts, _ in analysed(records(stream, Tally()), Tally()):
            if rec.get("kind", "kernel") != "kernel":
                continue
            named = rec.get("layer") or [r for r in rec.get("ranges") or [] if r in models]
            if named:
                current = named[0]
            if current is not None:
                out.setdefault(current, ModelSums()).add(rec, facts)
    return out


def _pct(part: float, whole: float) -> str:
    return "na" if not whole else f"{100 * part / whole:.1f}"


def table(records_paths: List[str], flops_path: str, missing: int, eager: Optional[str] = None) -> str:
    """The coverage table (text), then per model the largest unknowns, over the models of one or
    more captures' records (a model in several: the last one's). `eager`: records of the
    same models' eager capture, for a compiled capture (`capture --compile`): the column `vs
    eager` divides the capture's matrix and RNN FLOPs by the eager step's (issue 27: compiled
    matrix FLOPs equal to eager within 0.5%; an RNN Dynamo unrolls into GEMMs and element-wise
    kernels counts only its GEMMs as matrix work, where the eager cuDNN call's total counts its
    cells' too)."""
    meta = json.load(open(flops_path))
    raw, fixed = meta.get("flop_counter", {}), meta.get("flop_counter_corrected", {})
    tallies: Dict[str, ModelSums] = {}
    for path in records_paths:
        tallies.update(sums(path, frozenset(raw) | frozenset(meta.get("failed", {}))))
    base = sums(eager, frozenset(raw) | frozenset(meta.get("failed", {}))) if eager else {}
    head = (f"{'model':<26}{'kernels':>8}{'GPU ms':>9}{'flops%':>8}{'bytes%':>8}{'op%':>7}{'module%':>9}"
            f"{'outside%':>9}{'marker%':>9}{'aten%':>7}{'matrix/FCM':>12}{'+causal/FCM':>12}{'FCM raw/corr':>13}"
            f"{'rnn GFLOP':>10}{'kernel%':>9}" + (f"{'vs eager':>10}" if eager else ""))
    lines = [f"device: {meta.get('device')}, torch {meta.get('torch')}", head]
    for name, t in tallies.items():
        ref, unfixed = fixed.get(name), raw.get(name)
        ratio = "na" if not ref else f"{t.matrix_flops / ref:.4f}"
        whole = "na" if not ref else f"{(t.matrix_flops + t.causal_flops) / ref:.4f}"
        # Without pyprof.init() there are no module ranges: nothing to know or to be outside of.
        module, outside = ("-", "-") if meta.get("plain") else \
            (_pct(t.known["module"], t.time - t.outside), _pct(t.outside, t.time))
        fcm = "na" if not ref or unfixed is None else f"{unfixed / ref:.3f}"
        lines.append(f"{name:<26}{t.kernels:>8}{t.time / 1e6:>9.2f}{_pct(t.known['flops'], t.time):>8}"
                     f"{_pct(t.known['bytes'], t.time):>8}{_pct(t.known['op'], t.time):>7}"
                     f"{module:>9}{outside:>9}"
                     f"{_pct(t.known['marker'], t.time):>9}{_pct(t.known['aten'], t.time):>7}{ratio:>12}{whole:>12}{fcm:>13}"
                     f"{t.rnn_flops / 1e9:>10.3f}{_pct(t.known['kernel'], t.time):>9}" + _versus(t, base, name))
    for name, why in (meta.get("failed") or {}).items():
        lines.append(f"{name:<26} not captured: {why}")
    time, known = sum(t.time for t in tallies.values()), sum(t.known["kernel"] for t in tallies.values())
    under = [n for n, t in tallies.items() if t.time and t.known["kernel"] < 0.99 * t.time]
    lines.append(f"all {len(tallies)} models: kernel% {_pct(known, time)} of {time / 1e6:.2f} GPU ms; "
                 f"at least 99 on {len(tallies) - len(under)}" + (f" (below: {', '.join(under)})" if under else ""))
    if missing:
        lines.append("")
        lines.append("largest GPU time without FLOPs or without bytes > 0, per model (dir op | kernel: share of the model's time):")
        for name, t in tallies.items():
            top = sorted(t.missing.items(), key=lambda kv: -kv[1])[:missing]
            for key, ns in top:
                lines.append(f"  {name}: {key}: {_pct(ns, t.time)}%")
    return "\n".join(lines)


def _versus(t: ModelSums, base: Dict[str, ModelSums], name: str) -> str:
    """The `vs eager` column: matrix and RNN FLOPs over the eager capture's ('' without one)."""
    if not base:
        return ""
    e = base.get(name)
    ref = e.matrix_flops + e.rnn_flops if e is not None else 0
    return f"{(t.matrix_flops + t.rnn_flops) / ref:>10.4f}" if ref else f"{'na':>10}"


def rnn_truth(records_path: str, ncu_path: str) -> str:
    """The RNN formulas against Nsight Compute: per cuDNN RNN call (the kernels under one
    aten::_cudnn_rnn or aten::_cudnn_rnn_backward range) of a step captured twice, once under
    nsys (parsed records) and once under `ncu --profile-from-start off` (same kernels, same
    order; names checked), the call's FLOPs and bytes as prof's formula counts them beside the
    counted ones: CUDA-core FLOPs (FMA 2) plus Tensor Core ops, and DRAM bytes read and written.
    (Each kernel of the call carries its own part of that work, or na: pricing/rnn_kernels.py.)"""
    from tc_truth import ncu_kernels, summarize

    from pyprof.prof.io.reader import records
    from pyprof.prof.scan import analysed
    from pyprof.prof.warnings_tally import Tally
    opener = lzma.open if records_path.endswith(".xz") else open
    with opener(records_path, "rb") as stream:
        kernels = [(rec, f) for rec, f, _ in analysed(records(stream, Tally()), Tally())
                   if rec.get("kind", "kernel") == "kernel"]
    profiled = ncu_kernels(ncu_path)
    if len(kernels) != len(profiled):
        raise SystemExit(f"coverage: {len(kernels)} kernel records but {len(profiled)} profiled kernels")
    calls: Dict[tuple, List[float]] = {}
    for (rec, f), (ncu_name, counters) in zip(kernels, profiled):
        short = rec.get("kShortName") or ""
        if not (ncu_name.startswith(short) or short in ncu_name):
            raise SystemExit(f"coverage: kernel order differs: {short!r} vs {ncu_name!r}")
        rng = next((r for r in rec.get("torchOps") or [] if r.get("name") in ("aten::_cudnn_rnn",
                                                                             "aten::_cudnn_rnn_backward")), None)
        if rng is None:
            continue
        _, mma, _, core, dram = summarize(counters)
        row = calls.setdefault((rng["name"], rng.get("opId"), rec.get("dir"), rec.get("op")),
                               [0, 0, 0, 0.0, 0.0, ""])
        if not row[0] and f.cost is not None:  # the call's formula: its kernels each carry their own part
            marker_bwd = f.level == "marker" and rec.get("dir") == "bprop"
            row[1] = (f.cost.bwd_flops if marker_bwd else f.cost.flops) or 0
            row[2] = (f.cost.bwd_bytes if marker_bwd else f.cost.bytes) or 0
        row[0] += 1
        row[3] += core + mma
        row[4] += dram
        row[5] = row[5] or (f.cost.params if f.cost is not None else "")
    lines = [f"{'call':<36}{'kernels':>8}{'prof FLOPs':>16}{'ncu FLOPs':>16}{'ncu/prof':>9}"
             f"{'prof bytes':>12}{'DRAM bytes':>12}{'DRAM/prof':>10}  params"]
    for (name, _, direction, op), (n, flops, nbytes, counted, dram, params) in calls.items():
        lines.append(f"{direction + ' ' + op + ' ' + name.split('::')[-1]:<36}{n:>8}{flops:>16,}{int(counted):>16,}"
                     f"{counted / flops if flops else math.nan:>9.3f}{nbytes:>12,}{int(dram):>12,}"
                     f"{dram / nbytes if nbytes else math.nan:>10.3f}  {params}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture", help="run the models (under nsys on the GPU machine)")
    c.add_argument("--models", default=",".join(DEFAULT), help="comma-separated case names (default: all but fixture_* and truth_*)")
    c.add_argument("--flops", help="write FlopCounterMode's totals and the failures to this JSON file")
    c.add_argument("--warmup", type=int, default=2)
    c.add_argument("--plain", action="store_true",
                   help="no pyprof.init(): only PyTorch's emit_nvtx(record_shapes=True) ranges (the aten level); --mode plain")
    c.add_argument("--mode", choices=MODES, default="aten",
                   help="aten: pyprof.init() and PyTorch's op ranges (default); default: pyprof.init() alone; "
                        "plain: PyTorch's op ranges alone; bare: neither (for nsys --pytorch=autograd-shapes-nvtx)")
    c.add_argument("--model-timeout", type=int, default=0, metavar="S",
                   help="skip a model whose build, warm-up and counting take over S seconds (0: no limit)")
    c.add_argument("--budget", type=float, default=0, metavar="S",
                   help="prepare no further model after S seconds; the prepared ones are captured (0: no limit)")
    c.add_argument("--optim", metavar="NAME",
                   help="train every model with this optimizer instead of its own (Case.optim's names: "
                        "sgd, sgd-loop, adam-loop, adam-foreach, adamw-fused, ...)")
    c.add_argument("--compile", metavar="MODE", dest="compile_mode",
                   help="each model under torch.compile(mode=MODE): default, reduce-overhead (CUDA graphs: "
                        "capture with nsys --cuda-graph-trace=node and --warmup 3 or more), max-autotune; "
                        "no FlopCounterMode counts (compare with an eager capture's)")
    t = sub.add_parser("table", help="the coverage table from parsed records (.jsonl or .jsonl.xz)")
    t.add_argument("records", help="one capture's records, or several, comma-separated (a model in several: the last's)")
    t.add_argument("flops")
    t.add_argument("--missing", type=int, default=3, help="list the N largest unknowns per model")
    t.add_argument("--eager", metavar="RECORDS", help="the same models' eager records: a compiled capture's matrix "
                                                       "and RNN FLOPs against them (column `vs eager`)")
    r = sub.add_parser("rnn-truth", help="RNN FLOPs and bytes against Nsight Compute counters of the same step")
    r.add_argument("records", help="parsed records of the step's nsys capture (.jsonl or .jsonl.xz)")
    r.add_argument("ncu", help="`ncu --csv` output of the same step (benchmarks/tc_truth.py reads it)")
    args = p.parse_args(argv)
    if args.cmd == "capture":
        names = [n for n in args.models.split(",") if n]
        unknown = [n for n in names if n not in CASES]
        if unknown:
            p.error(f"unknown models: {', '.join(unknown)} (known: {', '.join(CASES)})")
        if args.optim:
            CASES.update({n: CASES[n]._replace(optim=args.optim) for n in names})
        return capture(names, args.flops, args.warmup, args.plain, args.model_timeout, args.budget, args.mode,
                       args.compile_mode)
    if args.cmd == "rnn-truth":
        print(rnn_truth(args.records, args.ncu))
        return 0
    print(table(args.records.split(","), args.flops, args.missing, args.eager))
    return 0


if __name__ == "__main__":
    sys.exit(main())
