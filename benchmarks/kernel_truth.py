"""Per-kernel FLOPs and bytes against the hardware (issue 27): pyprof's numbers kernel by kernel
beside what Nsight Compute counted for the same kernels.

Captures come from benchmarks/kernel_truth.sh on the GPU machine: the same training steps of a
few benchmarks/pricing_coverage.py models captured under nsys in each pricing mode (`default`:
pyprof.init(); `aten`: with PyTorch's op ranges; `plain`: emit_nvtx alone; `nsyspt`: Nsight
Systems' own `--pytorch=autograd-shapes-nvtx`) and once under ncu. Every run executes the same
kernels in the same order, so a model's n-th kernel record is its n-th profiled kernel (names
are checked). What a kernel moved, as algorithmic bytes count it (inputs read once, outputs
written once): `dram__bytes_read.sum` (ncu flushes the caches before each kernel) plus 32 x
`lts__t_sectors_srcunit_tex_op_write.sum` (bytes written: they stay in L2). Matrix work: the
Tensor Core ops-path counters (tc_truth.summarize).

Per mode and model it prints:
- known%: share of GPU time in kernels whose FLOPs are known and whose bytes are known and > 0
  (goal >= 99%);
- bytes vs ncu over kernels that moved >= 1 MB (zeros and unknowns counted as misses): the
  median of pyprof/ncu and the share within 0.5-2x (goals: median 0.9-1.1, >= 95% within);
- kernels above their compute peak (`>peak`, goal 0; every kernel, with or without ncu) and the
  kernels whose FLOPs prof withheld for being above it (`held`: pyprof/prof/pricing/beyond_peak.py; their
  op calls keep the FLOPs);
- matrix FLOPs above what ncu executed (kernels, goal 0).

    python benchmarks/kernel_truth.py --records default=kt_default.sqlite.xz ... \\
        --ncu kt_ncu_a.csv.xz=llama_block,unet,gru --ncu kt_ncu_b.csv.xz=gru,recommender
    python benchmarks/kernel_truth.py --shipped      # the capture sets in tests/data/kernel_truth/
"""
from __future__ import annotations

import argparse
import lzma
import os
import shutil
import statistics
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tc_truth import ncu_kernels, summarize  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(HERE, os.pardir, "tests", "data", "kernel_truth")
MB = 1 << 20
# The models of the shipped captures, in capture order, and which ncu file covers which.
SHIPPED_MODELS = ("llama_block", "efficientnet_b0", "unet", "gru", "recommender")
SHIPPED_NCU = (("kt_ncu_a.csv.xz", ("llama_block", "unet", "gru")), ("kt_ncu_b.csv.xz", ("gru", "recommender")))
SHIPPED_MODES = ("default", "aten", "plain", "nsyspt")
# Every shipped set: (the captures' prefix, their models, the ncu files). The H100 set above, and
# three H200 ones: the bf16 encoder-decoder (its ncu run, cut short by the device's time limit,
# covers the transformer whole and some of the next model, which no capture holds); an fp32 CNN
# with max pooling and nn.MultiheadAttention returning its averaged weights; a grouped fp16
# channels_last ResNeXt with a for-loop SGD step and an fp32 MobileNetV2.
# And a compiled step (kernel_truth_compiled.sh: examples/compiled.py's GPT, no model ranges, so
# its one "model" is every kernel: ALL), in the one mode it was captured in.
ALL = "*"
# And benchmarks/data_sized.py --scale 512 (its cases are its "models"): ops whose output size
# the data decide, big enough for Nsight Compute's counters to mean something.
DATA_SIZED = ("nonzero", "where", "argwhere", "bool_index", "masked_select", "unique", "unique_consecutive",
              "repeat_interleave", "bincount", "one_hot", "repeat_heads")
PACKED = ("gru_packed", "rnn_packed")
AUTOCAST_PACKED = ("lstm2_packed", "gru_packed_bf16")
# 1-D and 3-D convnets: a raw-audio M5, a QuartzNet-style depthwise TCN, R3D-18, a 3-D U-Net.
VOLUMES = ("audio1d", "tcn1d", "r3d_18", "unet3d")
# And a wav2vec-style 1-D encoder and a 3-D classifier with the other volumetric layers.
VOLUMES_B = ("speech1d", "volume3d")
# Training-loop features: activation checkpointing, label smoothing and gradient clipping (an LM),
# pixel_shuffle (ESPCN), affine_grid and grid_sample (a spatial transformer), ctc_loss after a
# bidirectional GRU. Nsight Compute in three runs: lm_checkpointed whole (the run failed on a kernel
# of superres), superres and stn whole, ctc_asr's first 1266 of 3291 kernels (its time limit).
TRAINING = ("lm_checkpointed", "superres", "stn", "ctc_asr")
# A Conformer (nn.MultiheadAttention with a key padding mask under bf16 autocast: the math path;
# GLU, depthwise Conv1d, kl_div) and a message-passing GNN (index_select, scatter_reduce amax and
# mean, index_add_). Nsight Compute: conformer whole, gnn's first 271 of 306 kernels.
UNSEEN = ("conformer", "gnn")
# A masked autoencoder (argsort masking, gathers through expanded indices, a masked MSE) and a
# diffusion UNet (timestep embedding, GroupNorm scale and shift, attention over pixels), captured
# at stop 50 before any change for them. Nsight Compute: the first 550 kernels (its time limit).
UNSEEN_B = ("mae", "diffusion")
# A convolutional VAE (ConvTranspose2d, the reparameterisation, BCE-with-logits and KL) and a
# NeRF-style field (positional encoding, exclusive cumprod volume rendering), captured at stop 50
# before any change for them.
UNSEEN_C = ("vae", "nerf")
# Captured at stop 51 before any change for them: a WGAN-GP step (its gradient penalty's double
# backward) and a VQ-VAE (codebook distances, argmin, bincount); a CLIP-style contrastive step (a
# causal text encoder, end-token indexing, the symmetric loss) and a Mamba-style selective scan
# written as a loop over time steps. Nsight Compute: wgan_gp and vqvae whole, then clip whole and
# ssm's first kernels (its time limit).
UNSEEN_D = ("wgan_gp", "vqvae")
UNSEEN_E = ("clip", "ssm")
# Captured at stop 52 before any change for them: a Fourier neural operator (rfft2, complex einsum,
# irfft2), a Glow-style flow (slogdet of the 1x1 convolutions' weights), a StyleGAN2-style step
# (modulated convolutions as grouped Conv2d, groups = batch; spectral norm's power iteration) and an
# attentional seq2seq (a bidirectional GRU, an LSTMCell loop). Nsight Compute: fno and flow whole,
# then stylegan's first 805 of 2120 kernels (its time limit; none of seq2seq's).
UNSEEN_F = ("fno", "flow", "stylegan", "seq2seq")
# Captured at stop 52 after their pricing (deform_conv2d's stages, torch.distributions' checks) to
# check it against Nsight Compute: a backbone of torchvision's deformable convolutions (DCNv2) and
# a PPO update. Nsight Compute: both whole.
UNSEEN_G = ("deformable", "ppo")
SHIPPED_SETS = (("kt", SHIPPED_MODELS, SHIPPED_NCU, SHIPPED_MODES),
                ("kt_h200", ("transformer",), (("kt_h200_ncu.csv.xz", ("transformer",)),), SHIPPED_MODES),
                ("kt_h200s", ("squeezenet1_1", "mha_weights"), (("kt_h200s_ncu.csv.xz", ("squeezenet1_1", "mha_weights")),),
                 SHIPPED_MODES),
                ("kt_h200c", ("resnext50_32x4d", "mobilenet_v2"),
                 (("kt_h200c_ncu.csv.xz", ("resnext50_32x4d", "mobilenet_v2")),), SHIPPED_MODES),
                ("ktc_h200", (ALL,), (("ktc_h200_ncu.csv.xz", (ALL,)),), ("compiled",)),
                ("ktd_h200", DATA_SIZED, (("ktd_h200_ncu.csv.xz", DATA_SIZED),), ("default", "plain", "nsyspt")),
                # Packed sequences through cuDNN RNNs (Nsight Compute stopped 231 kernels into rnn_packed:
                # its kernels of >= 1 MB are all after).
                ("ktp_h200", PACKED, (("ktp_h200_ncu.csv.xz", PACKED),), ("default", "plain", "nsyspt")),
                ("ktq_h200", ("gru3_packed",), (("ktq_h200_ncu.csv.xz", ("gru3_packed",)),), ("default", "plain", "nsyspt")),
                # Under bfloat16 autocast (ncu stopped inside gru_packed_bf16: lstm2_packed whole)
                ("ktr_h200", AUTOCAST_PACKED, (("ktr_h200_ncu.csv.xz", AUTOCAST_PACKED),), ("default", "plain")),
                ("ktv_h200", VOLUMES, (("ktv_h200_ncu.csv.xz", VOLUMES),), ("default", "plain", "nsyspt")),
                ("ktw_h200", VOLUMES_B, (("ktw_h200_ncu.csv.xz", VOLUMES_B),), ("default", "plain", "nsyspt")),
                ("ktx_h200", TRAINING, (("ktx_h200_ncu.csv.xz", ("lm_checkpointed",)),
                                        ("ktx_h200_ncu_b.csv.xz", ("superres", "stn")),
                                        ("ktx_h200_ncu_c.csv.xz", ("ctc_asr",))), ("default", "plain", "nsyspt")),
                ("kty_h200", UNSEEN, (("kty_h200_ncu.csv.xz", UNSEEN),), ("default", "plain", "nsyspt")),
                ("ktz_h200", UNSEEN_B, (("ktz_h200_ncu.csv.xz", UNSEEN_B),), ("default", "plain", "nsyspt")),
                ("ktu_h200", UNSEEN_C, (("ktu_h200_ncu.csv.xz", UNSEEN_C),), ("default", "plain", "nsyspt")),
                ("ktg_h200", UNSEEN_D, (("ktg_h200_ncu.csv.xz", UNSEEN_D),), ("default", "plain", "nsyspt")),
                ("kts_h200", UNSEEN_E, (("kts_h200_ncu.csv.xz", UNSEEN_E),), ("default", "plain", "nsyspt")),
                ("ktn_h200", UNSEEN_F, (("ktn_h200_ncu.csv.xz", ("fno", "flow")), ("ktn_h200_ncu_b.csv.xz", ("stylegan",))),
                 ("default", "plain", "nsyspt")),
                ("ktv2_h200", UNSEEN_G, (("ktv2_h200_ncu.csv.xz", UNSEEN_G),), ("default", "plain", "nsyspt")),
                # Element-wise backwards of several kernels (clamp, powers, a division), a fixture.
                ("ktp2_h200", ("fixture_pointwise_grads",), (("ktp2_h200_ncu.csv.xz", ("fixture_pointwise_grads",)),),
                 ("default", "plain")))


def _unpacked(path: str, tmp: str) -> str:
    """`path`, or its xz-decompressed copy in `tmp` (parse reads plain SQLite files)."""
    if not path.endswith(".xz"):
        return path
    out = os.path.join(tmp, os.path.basename(path)[:-3])
    with lzma.open(path) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


HELD: set = set()  # id() of the Facts whose FLOPs beyond_peak withheld (it warns once for each)


def analysed_kernels(path: str, models: Tuple[str, ...]) -> Dict[str, list]:
    """{model: [(record, Facts), ...]} of an export, kernels in launch order. A kernel belongs to
    the model whose range (`layer`, `ranges`) is the innermost of `models` around it; kernels outside every
    model range (backward ones run on the autograd thread) belong to the model before them. With
    `models` (ALL,), every kernel belongs to ALL (a capture of one model without model ranges)."""
    from pyprof.prof.io.reader import numbered
    from pyprof.prof.scan import analysed
    from pyprof.prof.warnings_tally import Tally

    from pyprof.prof.pricing.beyond_peak import REASON

    out: Dict[str, list] = {}
    model: Optional[str] = None
    tally = Tally()
    withheld = 0
    for rec, facts, _ in analysed(numbered(path, tally, False, False), tally):
        if rec.get("kind", "kernel") != "kernel":
            continue
        before, withheld = withheld, sum(tally.warnings.get(REASON, {}).values())
        if withheld > before:  # the guard warned for this kernel
            HELD.add(id(facts))
        # pyprof.annotate's range (`layer`), or a plain NVTX range where pyprof did not run.
        named = [x for x in (rec.get("layer") or []) + (rec.get("ranges") or []) if x in models]
        model = ALL if models == (ALL,) else named[-1] if named else model
        if model is not None:
            out.setdefault(model, []).append((rec, facts))
    return out


def truth(ncu_specs: List[Tuple[str, Tuple[str, ...]]], counts: Dict[str, int]) -> Dict[str, list]:
    """{model: [(ncu kernel name, counters), ...]} from ncu CSVs, each covering `models` in
    order; a model whose profiled kernels are fewer than its records (a run cut short) is taken
    from a later file that has them all, else its first kernels are compared (report says how
    many)."""
    out: Dict[str, list] = {}
    cut: Dict[str, list] = {}
    for path, models in ncu_specs:
        profiled = ncu_kernels(path)
        at = 0
        for m in models:
            chunk = profiled[at:at + counts[m]]
            at += counts[m]
            if len(chunk) == counts[m]:
                out[m] = chunk
            elif chunk:
                cut.setdefault(m, chunk)
    return {**{m: c for m, c in cut.items() if m not in out}, **out}


def _same_kernel(rec: dict, ncu_name: str) -> bool:
    short = rec.get("kShortName") or ""
    return ncu_name.startswith(short) or short in ncu_name


def _rows(kernels: list, profiled: list) -> Iterator[tuple]:
    """(record, facts, ncu bytes, ncu matrix ops) per kernel pair; SystemExit where orders differ."""
    for i, ((rec, f), (name, counters)) in enumerate(zip(kernels, profiled)):
        if not _same_kernel(rec, name):
            raise SystemExit(f"kernel_truth: kernel {i} differs: {rec.get('kShortName')!r} vs ncu {name[:80]!r}")
        moved = counters.get("dram__bytes_read.sum", 0.0) + 32 * counters.get("lts__t_sectors_srcunit_tex_op_write.sum", 0.0)
        yield rec, f, moved, summarize(counters)[1]


def known_share(kernels: list) -> Tuple[float, int]:
    """(% of GPU time in kernels with FLOPs known and bytes known and > 0, total ns)."""
    total = good = 0
    for rec, f in kernels:
        dur = rec.get("kDuration") or 0
        total += dur
        if f.flops is not None and f.bytes:
            good += dur
    return (100.0 * good / total if total else float("nan")), total


def above_peak(kernels: list) -> Tuple[List[str], int]:
    """(the kernels whose FLOPs in their time exceed their math path's peak, described; how many
    kernels had their FLOPs withheld by prof's guard for that)."""
    over: List[str] = []
    held = 0
    for rec, f in kernels:
        peak = f.peak_tflops
        dur = rec.get("kDuration")
        if f.flops and peak and dur and f.flops / dur / 1e3 > peak:
            over.append(f"{rec.get('op')}:{rec.get('kShortName')} {f.flops / dur / 1e3:.0f} > {peak:.0f} TFLOP/s")
        held += id(f) in HELD
    return over, held


def compare(kernels: list, profiled: list) -> dict:
    """Bytes and matrix FLOPs of one model's kernels against ncu's counters."""
    ratios: List[float] = []
    over_mma: List[str] = []
    for rec, f, moved, mma in _rows(kernels, profiled):
        if moved >= MB:
            ratios.append(f.bytes / moved if f.bytes else 0.0)
        # Matrix FLOPs pyprof gives a Tensor Core kernel beyond those it executed (2% slack:
        # tile padding makes the counter the larger one, never the smaller).
        if f.tc and f.flops and mma and f.flops > 1.02 * mma:
            over_mma.append(f"{rec.get('op')}:{rec.get('kShortName')} {f.flops:,} > {int(mma):,}")
    within = sum(1 for r in ratios if 0.5 <= r <= 2.0)
    return {"n": len(ratios), "median": statistics.median(ratios) if ratios else float("nan"),
            "within": 100.0 * within / len(ratios) if ratios else float("nan"),
            "over_mma": over_mma}


def report(modes: Dict[str, str], ncu_specs: List[Tuple[str, Tuple[str, ...]]], models: Tuple[str, ...],
           worst: int = 5) -> str:
    """The table (text) for every mode's export against the ncu files."""
    lines = [f"{'mode':<9}{'model':<17}{'kernels':>8}{'known%':>8}{'>peak':>7}{'held':>6}{'>=1MB':>7}"
             f"{'bytes med':>10}{'0.5-2x%':>9}{'>mma':>6}"]
    notes: List[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, path in modes.items():
            per_model = analysed_kernels(_unpacked(path, tmp), models)
            profiled = truth(ncu_specs, {m: len(k) for m, k in per_model.items()}) if ncu_specs else {}
            everything = [k for m in models for k in per_model.get(m, [])]
            for model in list(models) + ["all"]:
                kernels = everything if model == "all" else per_model.get(model, [])
                share, _ = known_share(kernels)
                over, held = above_peak(kernels)
                row = f"{mode:<9}{model:<17}{len(kernels):>8}{share:>8.1f}{len(over):>7}{held:>6}"
                if model != "all":
                    notes += [f"  {mode} {model} above peak: {x}" for x in over[:worst]]
                if model == "all":
                    pairs = [(per_model[m][:len(profiled[m])], profiled[m]) for m in models if m in profiled and m in per_model]
                    kernels, truths = [k for p in pairs for k in p[0]], [t for p in pairs for t in p[1]]
                else:
                    truths = profiled.get(model)
                if truths:
                    c = compare(kernels, truths)
                    row += f"{c['n']:>7}{c['median']:>10.3f}{c['within']:>9.1f}{len(c['over_mma']):>6}"
                    if model != "all":
                        notes += [f"  {mode} {model} above ncu's MMA ops: {x}" for x in c["over_mma"][:worst]]
                        if len(truths) < len(kernels):
                            notes.append(f"  {mode} {model}: ncu profiled its first {len(truths)} of "
                                         f"{len(kernels)} kernels")
                lines.append(row)
    return "\n".join(lines + ([""] + notes if notes else []))


def _spec(text: str) -> Tuple[str, Tuple[str, ...]]:
    path, _, models = text.partition("=")
    return path, tuple(m for m in models.split(",") if m)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--shipped", action="store_true", help="the captures in tests/data/kernel_truth/")
    p.add_argument("--records", action="append", default=[], metavar="MODE=EXPORT")
    p.add_argument("--ncu", action="append", default=[], metavar="CSV=MODEL,MODEL",
                   help="an ncu --csv output (.xz too) and the models it covers, in order")
    p.add_argument("--models", default=",".join(SHIPPED_MODELS),
                   help=f"the models of the captures, in order ({ALL}: every kernel, for a capture without model ranges)")
    args = p.parse_args(argv)
    if args.shipped:
        for prefix, models, specs, set_modes in SHIPPED_SETS:
            modes = {m: os.path.join(SHIPPED, f"{prefix}_{m}.sqlite.xz") for m in set_modes}
            print(f"# {prefix}_*\n" + report(modes, [(os.path.join(SHIPPED, f), ms) for f, ms in specs], models))
        return 0
    modes = dict(r.split("=", 1) for r in args.records)
    print(report(modes, [_spec(s) for s in args.ncu], tuple(args.models.split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
