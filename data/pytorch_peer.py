#!/usr/bin/env python3
"""PyTorch peer of the CUDA C chapters: golden data, dump checking, baseline timings.

  golden [--out DIR]   small cases computed in float64, stored float32, under
                       DIR/chNN/<shape>/ (NxCxDxHxW; chapter 4's NxCxHxW) with the file
                       names of the C program's --dump;
                       every chapter unless --chapter names one
  check DIR            compare a dump's out_v*.npy, conv_out.npy and grad_*.npy with the
                       model run in float64 on exactly the dumped tensors; one line each,
                       then "N passed, N failed"; exit 1 on any FAIL
  bench                time PyTorch eager and torch.compile on CUDA in two precisions, fp32
                       (TF32 off) and PyTorch's default (cudnn.allow_tf32 on), with the C
                       programs' timer (Timer), and write rows to data/<gpu>/pytorch-chNN.csv,
                       replacing the rows of the same GPU, chapter, version, precision, scope
                       and shape (as the C programs do); data/<gpu>-mine/ where data/<gpu>/
                       holds the recorded runs (it has a README.md) and RECORD is not set, as
                       common/datadir.sh decides. --dry-run lists the rows it would time.
  ops                  the chapter's conv alone at the KernelBench shape, each op (forward,
                       dx, dw, dbias, all three) in both precisions: pytorch-chNN-ops.csv
  error                the conv's forward, dx and dw and the whole model's forward (eager and
                       torch.compile) in both precisions against float64 from the same float32
                       inputs, at the KernelBench shape: pytorch-chNN-error.csv
All take --chapter (1 = ch01, KB L2 #58, the default of check, bench, ops and error; 2 = ch02,
KB L2 #43; 3 = ch03, KB L2 #79; 4 = ch04, KB L2 #92; 5 = ch05, KB L2 #38).
Exit 2: usage error, bad dump, no PyTorch (or no CUDA for bench, ops and error).
"""
import argparse
import csv
import datetime
import os
import re
import statistics
import sys
import time

try:  # any import failure means "not usable"; reported once the mode is known
    import numpy as np
except Exception:  # noqa: BLE001
    np = None
try:
    import torch
    import torch.nn.functional as F
except Exception:  # noqa: BLE001
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))  # the repository's data/ folder


def die(msg, code=2):
    print("pytorch_peer: " + msg, file=sys.stderr)
    sys.exit(code)


# ---- Chapter 01: ConvTranspose3d -> logsumexp -> z*sigmoid(z+3)/6 -> -bias -> clamp ----
C01_IN, C01_OUT, C01_K = 3, 16, 3  # channels in/out, kernel size (stride 2, padding 1)


def c01_pre(x, conv_weight, conv_bias):
    """The part before the epilogue: the transposed convolution."""
    return F.conv_transpose3d(x, conv_weight, conv_bias, stride=2, padding=1)


def c01_epilogue(c, bias):
    """Everything after the conv; c is N x 16 x OD x OH x OW, bias is (1,1,1,1)."""
    z = torch.logsumexp(c, dim=1, keepdim=True)
    a = z * torch.sigmoid(z + 3) / 6
    return torch.clamp(a - bias, min=-1, max=1)


def c01_forward(x, conv_weight, conv_bias, bias):
    return c01_epilogue(c01_pre(x, conv_weight, conv_bias), bias)


def c01_shapes(xshape):
    """Expected shape of every dump tensor for an input of shape xshape."""
    n, _, d, h, w = xshape
    o = (2 * d - 1, 2 * h - 1, 2 * w - 1)  # (D-1)*stride - 2*padding + kernel, per dim
    return {"x": (n, C01_IN, d, h, w), "conv_weight": (C01_IN, C01_OUT, 3, 3, 3),
            "conv_bias": (C01_OUT,), "bias": (1, 1, 1, 1),
            "conv_out": (n, C01_OUT) + o, "out": (n, 1) + o}


def c01_make_params(seed, shape):
    """Seeded float32 inputs with PyTorch's default initialisation:
    ConvTranspose3d weight/bias ~ U(+-1/sqrt(fan_in)), fan_in = weight.size(1)*27;
    the subtracted bias ~ N(0,1); x ~ U[0,1)."""
    rng, s, f32 = np.random.default_rng(seed), c01_shapes(shape), np.float32
    bound = 1.0 / np.sqrt(C01_OUT * C01_K ** 3)
    return {"x": rng.random(s["x"], dtype=f32),
            "conv_weight": rng.uniform(-bound, bound, s["conv_weight"]).astype(f32),
            "conv_bias": rng.uniform(-bound, bound, s["conv_bias"]).astype(f32),
            "bias": rng.standard_normal(s["bias"]).astype(f32)}


def c01_bytes(scope, shape):
    """Minimum bytes each timed scope must move (float32)."""
    n, _, d, h, w = shape
    s = (2 * d - 1) * (2 * h - 1) * (2 * w - 1)
    x, y = n * C01_IN * d * h * w, n * s  # input, outputs
    p = C01_IN * C01_OUT * 27 + C01_OUT + 1  # weight, conv bias, the subtracted bias
    return {"epilogue_fwd": 4 * (n * C01_OUT * s + n * s + 1),
            "model_fwd": 4 * (x + p + y),
            # read c twice and the bias b, read y and g once, write dc (model.h)
            "epilogue_fwdbwd": 4 * (2 * n * C01_OUT * s + n * s + n * s + n * C01_OUT * s + 1),
            # model.h's train_step_bytes: if c is never stored, read x (forward and dw),
            # write dx, write y, read g; read the parameters, write their gradients
            "train_step": 4 * (3 * x + 2 * y + 2 * p)}[scope]


# ---- Chapter 02: Conv3d -> max_pool3d(2) -> logsumexp over channels -> relu ----
C02_IN, C02_OUT, C02_K = 32, 64, 3  # channels in/out, kernel size (stride 1, padding 1)
C02_POOL = 2  # max-pool window and stride (floor: an odd size drops its last row)


def c02_pre(x, conv_weight, conv_bias):
    """The part before the epilogue: the same-size 3x3x3 convolution."""
    return F.conv3d(x, conv_weight, conv_bias, stride=1, padding=1)


def c02_epilogue(c):
    """Everything after the conv; c is N x 64 x D x H x W, no parameters."""
    p = F.max_pool3d(c, kernel_size=C02_POOL, stride=C02_POOL)
    return torch.relu(torch.logsumexp(p, dim=1, keepdim=True))


def c02_forward(x, conv_weight, conv_bias):
    return c02_epilogue(c02_pre(x, conv_weight, conv_bias))


def c02_shapes(xshape):
    """Expected shape of every dump tensor for an input of shape xshape."""
    n, _, d, h, w = xshape
    pooled = (d // C02_POOL, h // C02_POOL, w // C02_POOL)
    return {"x": (n, C02_IN, d, h, w), "conv_weight": (C02_OUT, C02_IN) + (C02_K,) * 3,
            "conv_bias": (C02_OUT,), "conv_out": (n, C02_OUT, d, h, w), "out": (n, 1) + pooled}


def c02_make_params(seed, shape):
    """Seeded float32 inputs with PyTorch's default initialisation:
    Conv3d weight/bias ~ U(+-1/sqrt(fan_in)), fan_in = in_channels*27; x ~ U[0,1)."""
    rng, s, f32 = np.random.default_rng(seed), c02_shapes(shape), np.float32
    bound = 1.0 / np.sqrt(C02_IN * C02_K ** 3)
    return {"x": rng.random(s["x"], dtype=f32),
            "conv_weight": rng.uniform(-bound, bound, s["conv_weight"]).astype(f32),
            "conv_bias": rng.uniform(-bound, bound, s["conv_bias"]).astype(f32)}


def c02_bytes(scope, shape):
    """Minimum bytes each timed scope must move (float32)."""
    n, _, d, h, w = shape
    s = (d // C02_POOL) * (h // C02_POOL) * (w // C02_POOL)  # pooled positions per sample
    c = n * C02_OUT * d * h * w  # conv_out elements
    x, y = n * C02_IN * d * h * w, n * s  # input, outputs
    p = C02_OUT * C02_IN * C02_K ** 3 + C02_OUT  # weight, conv bias
    return {"epilogue_fwd": 4 * (c + n * s),
            "model_fwd": 4 * (x + p + y),
            # read c twice, read y and g once, write dc
            "epilogue_fwdbwd": 4 * (2 * c + 2 * n * s + c),
            # model.h's train_step_bytes: if c is never stored, read x (forward and dw),
            # write dx, write y, read g; read the parameters, write their gradients
            "train_step": 4 * (3 * x + 2 * y + 2 * p)}[scope]


# ---- Chapter 03: Conv3d -> x*m -> InstanceNorm3d -> clamp -> x*m -> max over channels ----
C03_IN, C03_OUT, C03_K = 3, 16, 3  # channels in/out, kernel size (stride 1, no padding)
C03_EPS = 1e-5  # InstanceNorm3d's default eps (no affine, no running stats)


def c03_pre(x, conv_weight, conv_bias):
    """The part before the epilogue: the 'valid' 3x3x3 convolution (each size shrinks by 2)."""
    return F.conv3d(x, conv_weight, conv_bias, stride=1, padding=0)


def c03_normalized(c, m):
    """The epilogue up to the normalisation: instance_norm(c * m), biased variance.
    PyTorch raises for a single spatial element (S = 1) here; the C program rejects it too."""
    return F.instance_norm(c * m, eps=C03_EPS)


def c03_epilogue(c, m):
    """Everything after the conv; c is N x 16 x OD x OH x OW, m is (16,1,1,1)."""
    u = torch.clamp(c03_normalized(c, m), min=-1, max=1) * m
    # max(dim), not amax: its gradient goes to the single index it returns (the first
    # maximum on ties), where amax would share it evenly among tied channels
    return torch.max(u, dim=1).values


def c03_forward(x, conv_weight, conv_bias, m):
    return c03_epilogue(c03_pre(x, conv_weight, conv_bias), m)


def c03_shapes(xshape):
    """Expected shape of every dump tensor for an input of shape xshape."""
    n, _, d, h, w = xshape
    o = (d - C03_K + 1, h - C03_K + 1, w - C03_K + 1)  # no padding: 'valid' convolution
    return {"x": (n, C03_IN, d, h, w), "conv_weight": (C03_OUT, C03_IN) + (C03_K,) * 3,
            "conv_bias": (C03_OUT,), "m": (C03_OUT, 1, 1, 1),
            "conv_out": (n, C03_OUT) + o, "out": (n,) + o}  # channel max without keepdim


def c03_make_params(seed, shape):
    """Seeded float32 inputs with PyTorch's default initialisation:
    Conv3d weight/bias ~ U(+-1/sqrt(fan_in)), fan_in = in_channels*27 = 81;
    the multiplier m ~ N(0,1); x ~ U[0,1)."""
    rng, s, f32 = np.random.default_rng(seed), c03_shapes(shape), np.float32
    bound = 1.0 / np.sqrt(C03_IN * C03_K ** 3)
    return {"x": rng.random(s["x"], dtype=f32),
            "conv_weight": rng.uniform(-bound, bound, s["conv_weight"]).astype(f32),
            "conv_bias": rng.uniform(-bound, bound, s["conv_bias"]).astype(f32),
            "m": rng.standard_normal(s["m"]).astype(f32)}


def c03_golden_ok(y, arrays):
    """At least a quarter of the outputs must come from a channel whose normalised value
    is strictly inside (-1, 1): where the winner is clamped, the gradient stops at the
    clamp and only m's gradient (through the second product) is non-zero."""
    t = lambda k: torch.from_numpy(np.array(arrays[k])).to(y.device).double()  # noqa: E731
    n = c03_normalized(c03_pre(t("x"), t("conv_weight"), t("conv_bias")), t("m"))
    idx = torch.max(torch.clamp(n, -1, 1) * t("m"), dim=1).indices  # the channel max picks
    inside = n.gather(1, idx.unsqueeze(1)).abs() < 1
    return float(inside.double().mean()) >= 0.25


def c03_bytes(scope, shape):
    """Minimum bytes each timed scope must move (float32)."""
    n, _, d, h, w = shape
    s = (d - C03_K + 1) * (h - C03_K + 1) * (w - C03_K + 1)  # output positions per sample
    c, y = n * C03_OUT * s, n * s  # conv_out elements, outputs
    x = n * C03_IN * d * h * w
    p = C03_OUT * C03_IN * C03_K ** 3 + C03_OUT + C03_OUT  # weight, bias, m
    return {"epilogue_fwd": 4 * (c + y),  # m (64 bytes) left out
            "model_fwd": 4 * (x + p + y),
            # read c in the forward and again in the backward, write dc, write y, read g
            "epilogue_fwdbwd": 4 * (3 * c + 2 * y),
            # read x (forward and backward), write dx, write y, read g; read params, write grads
            "train_step": 4 * (3 * x + 2 * y + 2 * p)}[scope]


# ---- Chapter 04: Conv2d -> GroupNorm -> tanh -> HardSwish -> + c -> logsumexp over channels ----
C04_IN, C04_OUT, C04_K = 8, 64, 3  # channels in/out, kernel size (stride 1, no padding)
C04_GROUPS, C04_EPS = 16, 1e-5  # GroupNorm(16, 64), its default eps, affine gamma and beta
C04_PARAMS = C04_OUT * C04_IN * C04_K ** 2 + 3 * C04_OUT  # weight, conv bias, gamma, beta


def c04_pre(x, conv_weight, conv_bias):
    """The part before the epilogue: the 'valid' 3x3 convolution (each size shrinks by 2)."""
    return F.conv2d(x, conv_weight, conv_bias, stride=1, padding=0)


def c04_epilogue(c, gamma, beta):
    """Everything after the conv; c is N x 64 x OH x OW, gamma and beta are (64,).
    The residual adds the conv output itself, not the normalised value (KB L2 #92)."""
    t = torch.tanh(F.group_norm(c, C04_GROUPS, gamma, beta, eps=C04_EPS))
    return torch.logsumexp(c + F.hardswish(t), dim=1, keepdim=True)


def c04_forward(x, conv_weight, conv_bias, gamma, beta):
    return c04_epilogue(c04_pre(x, conv_weight, conv_bias), gamma, beta)


def c04_shapes(xshape):
    """Expected shape of every dump tensor for an input of shape xshape (N x 8 x H x W)."""
    n, _, h, w = xshape
    o = (h - C04_K + 1, w - C04_K + 1)  # no padding: 'valid' convolution
    return {"x": (n, C04_IN, h, w), "conv_weight": (C04_OUT, C04_IN, C04_K, C04_K),
            "conv_bias": (C04_OUT,), "gamma": (C04_OUT,), "beta": (C04_OUT,),
            "conv_out": (n, C04_OUT) + o, "out": (n, 1) + o}


def c04_make_params(seed, shape):
    """Seeded float32 inputs: Conv2d weight/bias with PyTorch's default U(+-1/sqrt(fan_in)),
    fan_in = in_channels*9 = 72; x ~ U[0,1). GroupNorm starts at gamma = 1, beta = 0, but both
    are learned: gamma ~ 1.5 U(-1,1), beta ~ U(-1,1), the C program's distributions, so that
    an error in the affine part (a gamma per group instead of per channel, say) shows."""
    rng, s, f32 = np.random.default_rng(seed), c04_shapes(shape), np.float32
    bound = 1.0 / np.sqrt(C04_IN * C04_K ** 2)
    return {"x": rng.random(s["x"], dtype=f32),
            "conv_weight": rng.uniform(-bound, bound, s["conv_weight"]).astype(f32),
            "conv_bias": rng.uniform(-bound, bound, s["conv_bias"]).astype(f32),
            "gamma": (1.5 * rng.uniform(-1, 1, s["gamma"])).astype(f32),
            "beta": rng.uniform(-1, 1, s["beta"]).astype(f32)}


def c04_bytes(scope, shape):
    """Minimum bytes each timed scope must move (float32): model.h's counts. Its fifth scope,
    the GroupNorm statistics alone, has no PyTorch counterpart."""
    n, _, h, w = shape
    s = (h - C04_K + 1) * (w - C04_K + 1)  # output positions per (n, channel)
    c, y, x = n * C04_OUT * s, n * s, n * C04_IN * h * w  # conv_out, outputs, input
    return {"epilogue_fwd": 4 * (c + y + 2 * C04_OUT),  # gamma, beta read
            "model_fwd": 4 * (x + C04_PARAMS + y),
            # read c in the forward and again in the backward, write dc, write y, read g;
            # read gamma and beta, write their gradients
            "epilogue_fwdbwd": 4 * (3 * c + 2 * y + 4 * C04_OUT),
            # if c is never stored: read x (forward and backward), write dx, write y, read g;
            # read the parameters, write their gradients
            "train_step": 4 * (3 * x + 2 * y + 2 * C04_PARAMS)}[scope]


# ---- Chapter 05: AvgPool3d -> ConvTranspose3d -> clamp -> softmax over space -> x*scale ----
C05_IN, C05_OUT, C05_K = 32, 64, 3  # channels in/out, kernel (stride 2, padding 1, out_pad 1)
C05_POOL = 2  # avg-pool window and stride (floor: an odd size drops its last slice)
C05_PARAMS = C05_IN * C05_OUT * C05_K ** 3 + 2 * C05_OUT  # weight, conv bias, scale: 55424


def c05_pre(x, conv_weight, conv_bias):
    """The part before the epilogue: the average pool, then the transposed convolution
    (each pooled size doubles: (P-1)*2 - 2*1 + 3 + 1 = 2P)."""
    xp = F.avg_pool3d(x, C05_POOL)
    return F.conv_transpose3d(xp, conv_weight, conv_bias, stride=2, padding=1,
                              output_padding=1)


def c05_epilogue(c, scale):
    """Everything after the conv; c is N x 64 x OD x OH x OW, scale is (1,64,1,1,1).
    The softmax runs over each (n, channel)'s OD*OH*OW positions, not over channels."""
    z = torch.clamp(c, 0.0, 1.0)
    b, ch, d, h, w = z.shape
    return torch.softmax(z.view(b, ch, -1), dim=2).view(b, ch, d, h, w) * scale


def c05_forward(x, conv_weight, conv_bias, scale):
    return c05_epilogue(c05_pre(x, conv_weight, conv_bias), scale)


def c05_shapes(xshape):
    """Expected shape of every dump tensor for an input of shape xshape."""
    n, _, d, h, w = xshape
    o = (d // C05_POOL * 2, h // C05_POOL * 2, w // C05_POOL * 2)
    return {"x": (n, C05_IN, d, h, w), "conv_weight": (C05_IN, C05_OUT) + (C05_K,) * 3,
            "conv_bias": (C05_OUT,), "scale": (1, C05_OUT, 1, 1, 1),
            "conv_out": (n, C05_OUT) + o, "out": (n, C05_OUT) + o}  # y has c's shape


def c05_make_params(seed, shape):
    """Seeded float32 inputs: ConvTranspose3d weight/bias with PyTorch's default
    U(+-1/sqrt(fan_in)), fan_in = weight.size(1)*27 = 64*27; x ~ U[0,1). scale starts at
    ones in KernelBench, but it is learned: scale ~ 1.5 U(-1,1) per channel (chapter 4's
    gamma), so that an error in the scaling (a wrong channel's scale, a sign) shows."""
    rng, s, f32 = np.random.default_rng(seed), c05_shapes(shape), np.float32
    bound = 1.0 / np.sqrt(C05_OUT * C05_K ** 3)
    return {"x": rng.random(s["x"], dtype=f32),
            "conv_weight": rng.uniform(-bound, bound, s["conv_weight"]).astype(f32),
            "conv_bias": rng.uniform(-bound, bound, s["conv_bias"]).astype(f32),
            "scale": (1.5 * rng.uniform(-1, 1, s["scale"])).astype(f32)}


def c05_golden_ok(y, arrays):
    """The clamp is what can make a case weak. A row clamped throughout (all 0 or all 1) has
    a uniform softmax and a zero dc: still a valid test of that row. But were (nearly) every
    c clamped, dc, and with it the conv's gradients and dx, would be (nearly) all zeros,
    and a kernel that forgot the softmax's own derivative would pass. The default init puts
    about half of c below 0 (c ~ bias + a few hundred small products), none above 1: accept
    a seed when at least 10% of c lie strictly inside (0, 1), where the gradient flows, and
    at least 1% are clamped, so that the clamp's mask is tested too."""
    c = c05_pre(*[torch.from_numpy(np.array(arrays[k])).to(y.device).double()
                  for k in ("x", "conv_weight", "conv_bias")])
    inside = float(((c > 0) & (c < 1)).double().mean())
    return inside >= 0.1 and 1 - inside >= 0.01


def c05_bytes(scope, shape):
    """Minimum bytes each timed scope must move (float32): model.h's counts."""
    n, _, d, h, w = shape
    s = 8 * (d // C05_POOL) * (h // C05_POOL) * (w // C05_POOL)  # a softmax row's length
    c = y = n * C05_OUT * s  # conv_out and the output (the same shape)
    x, rows = n * C05_IN * d * h * w, n * C05_OUT  # input; softmax rows, one lse each
    return {"epilogue_fwd": 4 * (c + y + C05_OUT + rows),  # scale read, lse written
            "model_fwd": 4 * (x + C05_PARAMS + y),
            # read c in the forward and again in the backward, write dc, write y, read g;
            # read scale and write its gradient; write lse and read it again
            "epilogue_fwdbwd": 4 * (3 * c + 2 * y + 2 * C05_OUT + 2 * rows),
            # if c is never stored: read x (forward and backward), write dx, write y, read g;
            # read the parameters, write their gradients
            "train_step": 4 * (3 * x + 2 * y + 2 * C05_PARAMS)}[scope]


# A chapter spec names the dump files and the functions that make up the model.
#   inputs:       forward() arguments in order == dump file stems
#   batched:      inputs whose first dim is the batch (checked chunk by chunk)
#   pre_args:     inputs consumed by pre(); epi_in = dump stem of pre()'s output
#   epi_args:     further epilogue() arguments after epi_in (may be empty)
#   golden_ok:    golden_ok(y, arrays) with y the float64 output, arrays the inputs (numpy;
#                 computed on y's device): False rejects the seed as degenerate (golden and
#                 error try seed + 100)
#   seed:         default base seed of golden/bench; bench_batches: default --batches
#   conv:         the model's convolution as torch.nn.functional runs it (fn, stride, padding,
#                 output_padding; pool: the average pool before it): what `ops` times alone
#   sum_grads:    {summed: terms}: grad_<summed>[c] is the sum of grad_<terms>[n, c, ...]
#                 over every dim but 1 (a conv bias: sum of grad_conv_out over batch and
#                 space). check judges grad_<summed> element by element against
#                 rtol x sum|terms| of the float64 reference (Higham's bound on a float
#                 sum's rounding error), not by rel-L2/atol: where the sum cancels (ch03's
#                 bias gradient, 0 in exact arithmetic) no relative test can pass
CHAPTERS = {
    "01": dict(title="ConvTranspose3d + LogSumExp + x*sigmoid(x+3)/6 - bias + clamp (KB L2 #58)",
               default_shape=(128, 3, 16, 32, 32),
               golden_shapes=[(1, 3, 2, 3, 5), (2, 3, 3, 4, 7), (1, 3, 5, 6, 5)],
               conv=dict(fn="conv_transpose3d", stride=2, padding=1, output_padding=0),
               inputs=("x", "conv_weight", "conv_bias", "bias"), batched=("x",),
               pre_args=("x", "conv_weight", "conv_bias"), epi_in="conv_out",
               epi_args=("bias",), make_params=c01_make_params, shapes=c01_shapes,
               pre=c01_pre, epilogue=c01_epilogue, forward=c01_forward, bytes=c01_bytes,
               # bias ~ N(0,1) often clamps every output to +-1 (all gradients zero):
               # golden cases need at least half of the outputs inside (-1, 1)
               golden_ok=lambda y, _: float((y.abs() < 1).double().mean()) >= 0.5,
               seed=58, bench_batches="1,2,4,8,16,32,64,128",
               sum_grads={"conv_bias": "conv_out"}),
    "02": dict(title="Conv3d + MaxPool3d + LogSumExp + ReLU (KB L2 #43)",
               default_shape=(4, C02_IN, 32, 128, 128),
               # odd sizes, so that pooling drops the last row; the weight and its
               # gradient are 216 KiB each per case: two cases keep the set under 1 MiB
               golden_shapes=[(1, C02_IN, 3, 5, 4), (2, C02_IN, 4, 3, 5)],
               conv=dict(fn="conv3d", stride=1, padding=1),
               inputs=("x", "conv_weight", "conv_bias"), batched=("x",),
               pre_args=("x", "conv_weight", "conv_bias"), epi_in="conv_out",
               epi_args=(), make_params=c02_make_params, shapes=c02_shapes,
               pre=c02_pre, epilogue=c02_epilogue, forward=c02_forward, bytes=c02_bytes,
               # relu of a logsumexp over 64 channels is rarely 0; still, golden cases
               # need at least half of the outputs > 0 (else most gradients vanish)
               golden_ok=lambda y, _: float((y > 0).double().mean()) >= 0.5,
               seed=43, bench_batches="1,2,4", sum_grads={"conv_bias": "conv_out"}),
    "03": dict(title="Conv3d + x*m + InstanceNorm3d + clamp + x*m + max over channels "
                     "(KB L2 #79)",
               default_shape=(128, 3, 16, 32, 32),
               # small: output positions S = 24, 15, 4 and 2 (the fewest allowed); none with
               # S = 1, where instance_norm has no variance to take (PyTorch and the C program
               # refuse it)
               golden_shapes=[(2, 3, 4, 5, 6), (1, 3, 5, 3, 7), (1, 3, 3, 4, 4), (1, 3, 3, 4, 3)],
               conv=dict(fn="conv3d", stride=1, padding=0),
               inputs=("x", "conv_weight", "conv_bias", "m"), batched=("x",),
               pre_args=("x", "conv_weight", "conv_bias"), epi_in="conv_out",
               epi_args=("m",), make_params=c03_make_params, shapes=c03_shapes,
               pre=c03_pre, epilogue=c03_epilogue, forward=c03_forward, bytes=c03_bytes,
               # the channel max favours clamped channels (at the upper clamp u = |m|,
               # the most a channel can give): see c03_golden_ok
               golden_ok=c03_golden_ok,
               # instance norm removes each channel's mean and with it the conv bias:
               # grad_conv_bias is 0 in exact arithmetic, pure rounding in float32
               seed=79, bench_batches="1,2,4,8,16,32,64,128",
               sum_grads={"conv_bias": "conv_out"}),
    "04": dict(title="Conv2d + GroupNorm + tanh + HardSwish + residual + LogSumExp (KB L2 #92)",
               default_shape=(128, C04_IN, 128, 128),
               # small: S = 15 (odd), 1 (a group of 4 values, one a channel: the least
               # GroupNorm has here), 8; two of them with N > 1, so that dgamma, dbeta and
               # dbias sum over samples
               golden_shapes=[(2, C04_IN, 5, 7), (1, C04_IN, 3, 3), (3, C04_IN, 4, 6)],
               conv=dict(fn="conv2d", stride=1, padding=0),
               inputs=("x", "conv_weight", "conv_bias", "gamma", "beta"), batched=("x",),
               pre_args=("x", "conv_weight", "conv_bias"), epi_in="conv_out",
               epi_args=("gamma", "beta"), make_params=c04_make_params, shapes=c04_shapes,
               pre=c04_pre, epilogue=c04_epilogue, forward=c04_forward, bytes=c04_bytes,
               # nothing clips (no clamp, max or relu; HardSwish's relu6 never clips on tanh's
               # range): every output and gradient depends on every value of its sample, so
               # no seed is degenerate
               golden_ok=lambda y, _: True,
               # dbias is not zero here (the residual carries c, bias included, to the output);
               # dgamma and dbeta are sums over n and positions, but of terms no dump holds:
               # they are judged by rel-L2 and atol, as chapter 3's dm is
               seed=92, bench_batches="1,2,4,8,16,32,64,128",
               sum_grads={"conv_bias": "conv_out"}),
    "05": dict(title="AvgPool3d + ConvTranspose3d + clamp + softmax over space + x*scale "
                     "(KB L2 #38)",
               default_shape=(32, C05_IN, 32, 64, 64),
               # the first with odd extents, so that the pool drops the last slice; rows of
               # S = 8*PD*PH*PW = 32, 8 (one pooled position), 48; two cases with N > 1, so
               # that dscale and dbias sum over samples
               golden_shapes=[(2, C05_IN, 3, 4, 5), (1, C05_IN, 2, 2, 2), (2, C05_IN, 4, 2, 6)],
               conv=dict(fn="conv_transpose3d", stride=2, padding=1, output_padding=1,
                         pool=C05_POOL),
               inputs=("x", "conv_weight", "conv_bias", "scale"), batched=("x",),
               pre_args=("x", "conv_weight", "conv_bias"), epi_in="conv_out",
               epi_args=("scale",), make_params=c05_make_params, shapes=c05_shapes,
               pre=c05_pre, epilogue=c05_epilogue, forward=c05_forward, bytes=c05_bytes,
               golden_ok=c05_golden_ok,
               # every output is at most scale*e/S (2e-5 at S = 131072), dc as small: --atol
               # alone would pass all zeros; rel-L2 (--rtol, required as well) judges them
               # (at S = 131072 even PyTorch's float32 CPU softmax is 4e-5 off: its row sum
               # runs sequentially; dumps are taken at small shapes).
               # dbias is a sum of dc (0 in exact arithmetic for a row that nothing clamps);
               # dscale sums g*p, terms no dump holds: rel-L2 and atol, as chapter 4's dgamma
               seed=38, bench_batches="1,2,4,8,16,32",
               sum_grads={"conv_bias": "conv_out"}),
}


def get_chapter(text):
    key = "%02d" % int(text) if text.isdigit() else text
    if key not in CHAPTERS:
        die("unknown chapter %r (known: %s)" % (text, ", ".join(sorted(CHAPTERS))))
    return key, CHAPTERS[key]


# ---- Reference evaluation, chunked over the batch so that large dumps fit in memory ----
class Reference:
    """Runs pre/epilogue/forward (+ autograd) in one dtype on one device.

    run() returns the per-sample tensors of one batch chunk; gradients of the
    shared parameters accumulate in .grad over chunks and are read by param_grads().
    Keys: conv, model, epilogue, grad_<input>, grad_<epi_in> (whole-model backward)
    and grad_<name>@epilogue (backward of the epilogue run on the dumped conv output).
    """

    def __init__(self, spec, arrays, dtype, device, with_grad):
        self.spec, self.dtype, self.device, self.grad = spec, dtype, device, with_grad
        shared = [k for k in spec["inputs"] if k not in spec["batched"]]
        self.params = {k: self.tensor(arrays[k]).requires_grad_(with_grad) for k in shared}
        self.epi_params = {k: self.tensor(arrays[k]).requires_grad_(with_grad)
                           for k in spec["epi_args"]}  # separate leaves: own gradients

    def tensor(self, a):
        return torch.from_numpy(np.array(a)).to(self.device, self.dtype)  # copy: dumps are mmapped

    def run(self, batched, conv_file=None, g=None):
        spec, out = self.spec, {}
        with torch.set_grad_enabled(self.grad):
            xs = {k: self.tensor(v).requires_grad_(self.grad) for k, v in batched.items()}
            args = dict(self.params, **xs)
            c = spec["pre"](*[args[k] for k in spec["pre_args"]])
            if self.grad:
                c.retain_grad()
            y = spec["epilogue"](c, *[args[k] for k in spec["epi_args"]])
            out["conv"], out["model"] = c.detach(), y.detach()
            if self.grad:  # whole-model backward with g as the upstream gradient
                y.backward(self.tensor(g))
                out["grad_" + spec["epi_in"]] = c.grad
                out.update({"grad_" + k: t.grad for k, t in xs.items()})
            if conv_file is not None:
                cf = self.tensor(conv_file).requires_grad_(self.grad)
                ye = spec["epilogue"](cf, *[self.epi_params[k] for k in spec["epi_args"]])
                out["epilogue"] = ye.detach()
                if self.grad:
                    ye.backward(self.tensor(g))
                    out["grad_%s@epilogue" % spec["epi_in"]] = cf.grad
        return out

    def param_grads(self):
        res = {"grad_" + k: t.grad for k, t in self.params.items()}
        res.update({"grad_%s@epilogue" % k: t.grad for k, t in self.epi_params.items()})
        return res if self.grad else {}


class Comparison:
    """Accumulates ||a-b||^2, ||b||^2 and max|a-b| over chunks.

    keep (a sum_grads gradient) also keeps |a-b| element by element; with .terms then
    set (after the last add()), result() judges each element i by
    |a_i - b_i| <= rtol * terms[i], terms[i] being the sum of the magnitudes of the float64
    reference's terms of b_i, and ignores rel_l2 and atol.
    """

    def __init__(self, name, ref, counted, arr=None, per_sample=True, keep=False):
        self.name, self.ref, self.counted, self.arr = name, ref, counted, arr
        self.per_sample, self.err, self.finite = per_sample, None, True
        self.d2 = self.b2 = self.maxabs = 0.0
        self.keep, self.absdiff, self.terms, self.note = keep, [], None, ""

    def add(self, a, b):
        a = a.detach().double().cpu() if torch.is_tensor(a) else \
            torch.from_numpy(np.array(a, np.float64))
        b = b.detach().double().cpu()
        self.finite &= bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())
        d = a - b
        self.d2, self.b2 = self.d2 + float((d * d).sum()), self.b2 + float((b * b).sum())
        if d.numel():
            self.maxabs = max(self.maxabs, float(d.abs().max()))
        if self.keep:  # small: a summed gradient has one element per channel
            self.absdiff.append(d.abs().reshape(-1))

    def result(self, rtol, atol):
        if self.err:
            return float("nan"), float("nan"), False
        rel = (self.d2 ** 0.5) / (self.b2 ** 0.5 if self.b2 > 0 else 1.0)  # absolute if ||b||=0
        mx = self.maxabs if self.finite else float("nan")
        if self.terms is None:
            return rel, mx, self.finite and rel <= rtol and mx <= atol
        if not self.absdiff:  # no add(): nothing to judge
            return rel, mx, False
        d, bound = torch.cat(self.absdiff), rtol * self.terms.reshape(-1)
        if d.shape != bound.shape:
            self.note = " (no sum|terms| bound: %d elements, %d sums)" % (
                d.numel(), bound.numel())
            return rel, mx, False
        # the tightest element: the largest |diff| / bound (a non-zero diff over a zero bound
        # is infinitely over; 0 over 0 is fine: a sum of exact zeros is exact)
        ratio = torch.where(bound > 0, d / bound.clamp_min(1e-300),
                            torch.where(d > 0, float("inf"), 0.0))
        ratio = torch.nan_to_num(ratio, nan=float("inf"))
        i = int(ratio.argmax() if ratio.max() > 0 else bound.argmax())  # all exact: widest
        ok = self.finite and bool((d <= bound).all())
        self.note = " (bound: %g x sum|terms| = %.3e at [%d], |diff| there %.3e)" % (
            rtol, float(bound[i]), i, float(d[i]))
        return rel, mx, ok


def cmd_check(args):
    key, spec = get_chapter(args.chapter)
    d = args.dir
    if not os.path.isdir(d):
        die("no such dump directory: %s" % d)
    path = lambda stem: os.path.join(d, stem + ".npy")  # noqa: E731

    def load(stem):  # memory-mapped: large dumps are read chunk by chunk
        try:
            return np.load(path(stem), mmap_mode="r")
        except (OSError, ValueError) as e:
            die("cannot read %s: %s" % (path(stem), e))
    for k in spec["inputs"]:
        if not os.path.isfile(path(k)):
            die("%s lacks %s.npy" % (d, k))
    arrays = {k: np.array(load(k), dtype=np.float32) for k in spec["inputs"]}
    xshape = arrays[spec["batched"][0]].shape
    shapes = spec["shapes"](xshape) if len(xshape) == len(spec["default_shape"]) else {}
    for k in spec["inputs"]:
        if arrays[k].shape != tuple(shapes.get(k, ())):
            die("%s.npy has shape %s, expected %s" % (k, arrays[k].shape, shapes.get(k)))
    if args.device == "cuda" and not torch.cuda.is_available():
        die("--device cuda but CUDA is not available")
    set_precision("fp32")
    names = sorted(os.listdir(d), key=lambda s: [int(t) if t.isdigit() else t
                                                 for t in re.split(r"(\d+)", s)])
    conv_name = spec["epi_in"]
    has_conv = os.path.isfile(path(conv_name))
    has_g = os.path.isfile(path("grad_output"))
    grad_keys = list(spec["inputs"]) + [conv_name]
    epi_side = [conv_name] + list(spec["epi_args"])
    # reference gradient key -> key of its terms, for both scopes; termsum accumulates
    # sum|terms| per element of the summed gradient over the batch chunks
    sum_of = {}
    for k, t in spec.get("sum_grads", {}).items():
        sum_of["grad_" + k] = "grad_" + t
        sum_of["grad_%s@epilogue" % k] = "grad_%s@epilogue" % t  # only if k were epi-side
    termsum = {}
    checks = []
    if has_conv:
        checks.append(Comparison(conv_name, "conv", True, load(conv_name)))
    for fn in names:  # outputs: out.npy (golden), out_vK.npy (epilogue), out_vK_model.npy
        if not re.fullmatch(r"out(_.+)?\.npy", fn):
            continue
        stem, arr = fn[:-4], load(fn[:-4])
        model_scope = stem == "out" or stem.endswith("_model") or not has_conv
        checks.append(Comparison(stem, "model" if model_scope else "epilogue", True, arr))
        if has_conv:
            checks.append(Comparison(stem, "epilogue" if model_scope else "model", False, arr))
    for fn in names:  # gradients: grad_<name>.npy, optionally grad_<name>_<suffix>.npy
        m = re.fullmatch(r"grad_(.+)\.npy", fn)
        if not m or fn == "grad_output.npy":
            continue
        hits = [k for k in grad_keys if m.group(1) == k or m.group(1).startswith(k + "_")]
        if not hits:
            print("%-26s skipped: not a gradient of a known tensor" % fn[:-4])
            continue
        if not has_g:
            die("%s present but grad_output.npy missing" % fn)
        k, stem = max(hits, key=len), fn[:-4]
        per = k in spec["batched"] or k == conv_name
        ref_key = "grad_" + k
        checks.append(Comparison(stem, ref_key, True, load(stem), per, ref_key in sum_of))
        if has_conv and k in epi_side:
            ref_key = "grad_%s@epilogue" % k
            checks.append(Comparison(stem, ref_key, False, load(stem), per, ref_key in sum_of))
    for c in checks:  # shape check before any arithmetic
        want = {"conv": conv_name, "model": "out", "epilogue": "out"}.get(
            c.ref, c.ref.split("@")[0][len("grad_"):])
        if c.arr.shape != tuple(shapes[want]):
            c.err = "shape %s, expected %s" % (c.arr.shape, tuple(shapes[want]))
    want_grad = any(c.ref.startswith("grad_") for c in checks)
    g_arr = load("grad_output") if has_g else None
    if has_g and g_arr.shape != tuple(shapes["out"]):
        die("grad_output.npy has shape %s, expected %s" % (g_arr.shape, tuple(shapes["out"])))

    print("chapter %s (%s): %s, float64 reference on %s" % (key, spec["title"], d, args.device))
    ref = Reference(spec, arrays, torch.float64, torch.device(args.device), want_grad)
    r32, info32 = None, {}
    fp32 = lambda k: info32.setdefault(  # noqa: E731
        k, Comparison("torch-fp32-cuda", k, False, keep=k in sum_of))
    if torch.cuda.is_available():  # informational: what a float32 PyTorch run gets
        r32 = Reference(spec, arrays, torch.float32, torch.device("cuda"), want_grad)
    n, conv_arr = xshape[0], (load(conv_name) if has_conv else None)
    chunk = max(1, 2 ** 25 // max(1, int(np.prod(shapes[conv_name][1:]))))  # ~32M elements
    for lo in range(0, n, chunk):
        sl = slice(lo, min(n, lo + chunk))
        batched = {k: arrays[k][sl] for k in spec["batched"]}
        cf = conv_arr[sl] if has_conv else None
        g = g_arr[sl] if want_grad else None
        out = ref.run(batched, cf, g)
        for sk, tk in sum_of.items():
            if tk in out:
                a = out[tk].detach().abs().double().cpu()
                a = a.sum(dim=[i for i in range(a.dim()) if i != 1])  # all but the channel
                termsum[sk] = termsum[sk] + a if sk in termsum else a
        for c in checks:
            if c.per_sample and not c.err:
                c.add(c.arr[sl], out[c.ref])
        if r32 is not None:
            o32 = r32.run(batched, cf, g)
            for key, t in o32.items():
                fp32(key).add(t, out[key])
        del out
    pg = ref.param_grads()
    for c in checks:
        if not c.per_sample and not c.err:
            c.add(c.arr, pg[c.ref])
    if r32 is not None:
        for key, t in r32.param_grads().items():
            fp32(key).add(t, pg[key])
    for c in checks + list(info32.values()):
        if c.ref in sum_of:
            if c.ref in termsum:
                c.terms = termsum[c.ref]
            elif not c.err:  # cannot happen: a grad check runs the backward with its terms
                c.err = "no %s to bound the sum" % sum_of[c.ref]
    passed = failed = 0
    for c in checks + list(info32.values()):
        rel, mx, ok = c.result(args.rtol, args.atol)
        if c.counted:
            passed, failed = passed + ok, failed + (not ok)
            status = "PASS" if ok else "FAIL"
        else:
            status = "info (within tol)" if ok else "info (over tol)"
        extra = ("  " + c.err) if c.err else ("" if c.finite else "  non-finite values")
        print("%-26s vs %-24s rel_l2=%.3e max_abs=%.3e%s %s%s"
              % (c.name, c.ref, rel, mx, c.note, status, extra))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


# ---- Golden data ----
def cmd_golden(args):
    total = 0
    # no --chapter: every chapter, so that one `make golden` rebuilds the whole set
    for key in sorted(CHAPTERS) if args.chapter is None else [get_chapter(args.chapter)[0]]:
        total += golden_chapter(key, CHAPTERS[key], args)
    print("golden total: %.1f KiB" % (total / 1024))
    return 0


def golden_chapter(key, spec, args):
    """Writes one chapter's golden cases; returns the bytes written."""
    total, base = 0, spec["seed"] if args.seed is None else args.seed
    for i, shape in enumerate(spec["golden_shapes"]):
        seed = base + i
        while True:  # skip seeds whose case is degenerate (e.g. output fully clamped)
            arrays = spec["make_params"](seed, shape)
            g = np.random.default_rng(seed + 1000).standard_normal(
                spec["shapes"](shape)["out"]).astype(np.float32)
            ref = Reference(spec, arrays, torch.float64, torch.device("cpu"), True)
            out = ref.run({k: arrays[k] for k in spec["batched"]}, None, g)
            if spec["golden_ok"](out["model"], arrays):
                break
            seed += 100
        out.update(ref.param_grads())
        files = dict(arrays, grad_output=g, out=out["model"], **{spec["epi_in"]: out["conv"]})
        files.update({"grad_" + k: out["grad_" + k] for k in spec["inputs"] + (spec["epi_in"],)})
        folder = os.path.join(args.out, "ch" + key, "x".join(map(str, shape)))
        os.makedirs(folder, exist_ok=True)
        for name, a in files.items():
            a = a.detach().cpu().numpy() if torch.is_tensor(a) else a
            np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(a, np.float32))
            total += os.path.getsize(os.path.join(folder, name + ".npy"))
        print("wrote %s (%d files, seed %d)" % (folder, len(files), seed))
    return total


# ---- Precision ----
# Every PyTorch timing and error is taken in two precisions, named in the CSVs' precision column:
#   fp32     cudnn.allow_tf32 = False and cuda.matmul.allow_tf32 = False: every conv in fp32, the
#            precision of our fp32 versions (the C programs keep cuDNN's engines without tensor
#            cores, as PyTorch does with TF32 off: common/conv.cu)
#   default  the flags as PyTorch ships them (cudnn.allow_tf32 True, cuda.matmul.allow_tf32
#            False), read at start-up before anything sets them: cuDNN may run a conv in TF32 (a
#            10-bit mantissa). KernelBench times its baselines so.
# The flags reach a conv when it runs (aten.convolution reads them), in eager and in the extern
# conv call of a torch.compile graph alike; see compiled() for what compilation needs.
PRECISIONS = ("fp32", "default")
DEFAULT_FLAGS = None  # (cudnn.allow_tf32, cuda.matmul.allow_tf32) as PyTorch started


def set_precision(name):
    if name == "fp32":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    else:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = DEFAULT_FLAGS


def precision_list(text):
    """--precisions: a comma-separated subset of PRECISIONS, in their order."""
    want = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in want if p not in PRECISIONS]
    if bad or not want:
        die("--precisions wants a comma-separated list of %s (got %r)" % (", ".join(PRECISIONS),
                                                                          text))
    if "default" in want and os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
        die("NVIDIA_TF32_OVERRIDE=0 is set: it turns TF32 off in every library, so the 'default' "
            "precision would be fp32; unset it")
    return [p for p in PRECISIONS if p in want]


def compiled(fn):
    """torch.compile(fn) specialised to the precision flags set now. Dynamo's guards on global
    state cover the matmul TF32 flag but not cuDNN's (checked on PyTorch 2.15: after
    cudnn.allow_tf32 flips, GlobalStateGuard.check() still passes; after matmul's, it fails),
    and Inductor's FX-graph cache key leaves cudnn.allow_tf32 out too: a graph compiled under
    one setting would be served under the other. Inductor (without max-autotune) calls the conv
    as an extern aten.convolution, which reads the flag when it runs, but its Triton conv
    templates (max-autotune) bake ALLOW_TF32 in at compile time. So every compile starts
    afresh: torch._dynamo.reset() drops the compiled frames, and the FX-graph and AOTAutograd
    caches are off (compile_caches_off, in bench and error), so that each (precision, scope,
    shape) is traced and compiled under its own flags; a compile then costs its full time,
    which bench prints as the first call's. error's torch.compile rows show the result: the
    compiled model's error follows eager's in each precision."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def compile_caches_off():
    """Inductor's FX-graph cache and the AOTAutograd cache off: see compiled()."""
    import torch._functorch.config
    import torch._inductor.config
    torch._inductor.config.fx_graph_cache = False
    if hasattr(torch._functorch.config, "enable_autograd_cache"):  # not in older PyTorch
        torch._functorch.config.enable_autograd_cache = False


# ---- Timing: common/gpu.cu's gpu_time, in PyTorch ----
class Timer:
    """Times a function as our harness does (common/gpu.cu gpu_time, common/common.c
    stats_from_samples): 3 warm-up calls, then reps repetitions of [flush L2; event; the
    function; event; wait for it], and the min, median and max of the repetitions' event times.

    The flush reads a buffer of twice the L2 size, allocated once, with a reduction whose only
    writes are its output and a few bytes of partial sums: a flush that writes (a zero fill)
    leaves L2 full of dirty lines, whose write-back to DRAM then lands inside the next timed
    region (3 to 11 us on our DRAM-bound scopes, H100); a read-only sweep leaves only clean
    lines, which are dropped for free. Waiting for each repetition's end event before the next
    flush is also ours: the host's launch time counts where it exceeds the flush's."""

    def __init__(self):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = getattr(props, "L2_cache_size", 0) or (1 << 20)  # gpu.cu's fallback: 1 MiB
        n = ((2 * l2) // 4 + 3) & ~3  # floats, a multiple of 4 as ours
        self.buf = torch.zeros(n, dtype=torch.float32, device="cuda")
        self.sink = torch.empty((), dtype=torch.float32, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.l2 = l2
        torch.cuda.synchronize()

    def flush(self):
        torch.sum(self.buf, dim=0, out=self.sink)

    def time(self, run, reset, reps):
        """(median, min, max) ms of run(); reset() (outside the timed region, before the flush)
        clears what a repetition leaves behind, e.g. the gradients a backward accumulates."""
        for _ in range(3):
            reset()
            run()
        torch.cuda.synchronize()
        ms = []
        for _ in range(reps):
            reset()
            self.flush()
            self.start.record()
            run()
            self.end.record()
            self.end.synchronize()
            ms.append(self.start.elapsed_time(self.end))
        return statistics.median(ms), min(ms), max(ms)


def copy_ceiling_gbps():
    """Device-to-device copy bandwidth of 1 GiB, bytes read + written: gpu.cu's
    measure_copy_gbps (2 unrecorded copies, the median of 7, no flush)."""
    src = torch.full((1 << 28,), 1.0, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for i in range(-2, 7):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 0:
            ms.append(start.elapsed_time(end))
    del src, dst
    return 2 * (1 << 30) / (statistics.median(ms) * 1e-3) / 1e9


# ---- CSV files ----
SCOPES = ("model_fwd", "epilogue_fwd", "epilogue_fwdbwd", "train_step")
VERSIONS = (("eager", "PyTorch eager"), ("compile", "torch.compile"))
# the C programs' header (common/common.c); flops, tflops and peak_tflops stay empty here: the
# FLOPs are counted by the C programs, whose rows give them
COLUMNS = ("gpu,chapter,version,name,precision,scope,shape,median_ms,min_ms,max_ms,bytes,gbps,"
           "ceiling_gbps,pct_ceiling,flops,tflops,peak_tflops,floor_ms,pct_floor,reps,"
           "date").split(",")
# pytorch-chNN-error.csv: PyTorch's outputs against float64 from the same float32 inputs.
# rel_l2 = ||out - ref|| / ||ref||, max_abs_err = max |out - ref|, max_abs_ref = max |ref|
ERROR_COLUMNS = ("gpu,chapter,version,name,precision,scope,shape,seed,rel_l2,max_abs_err,"
                 "max_abs_ref,torch,cudnn,date").split(",")
TAG_NOISE = {"nvidia", "geforce", "tesla", "quadro", "gpu", "pcie", "sxm", "sxm2", "sxm4",
             "sxm5", "nvl", "hbm2", "hbm2e", "hbm3", "hbm3e", "mig", "generation"}


def gpu_tag(name):
    """The data/ folder of a GPU, by the rule of gpu_tag_from_name (common/common.c), so that
    PyTorch's rows land beside ours: 'NVIDIA H100 80GB HBM3' -> 'h100',
    'NVIDIA GeForce RTX 4090' -> 'rtx-4090', 'NVIDIA A100-SXM4-80GB' -> 'a100' (in a
    hyphenated name the first word is the chip)."""
    words = []
    for m in re.finditer(r"[^ _-]+", name):
        w = m.group().lower()
        size = len(w) > 2 and w[0].isdigit() and w.endswith("gb")  # "80gb"
        if w in TAG_NOISE or size or (words and name[m.start() - 1] == "-"):
            continue
        words.append(w)
    return "-".join(words) or "gpu"


def data_dir(tag):
    """data/<tag>/, or data/<tag>-mine/ where data/<tag>/ holds the recorded runs (it has a
    README.md) and RECORD is not set: the rule of common/datadir.sh."""
    d = os.path.join(HERE, tag)
    if os.path.isfile(os.path.join(d, "README.md")) and not os.environ.get("RECORD"):
        d += "-mine"
    return d


class CsvFile:
    """A CSV in one layout (columns), its rows replaced by key: gpu, chapter, version,
    precision, scope, shape, as the C programs do. A file in another layout is started afresh
    (its rows could not be compared with the new ones)."""

    KEY = ("gpu", "chapter", "version", "precision", "scope", "shape")

    def __init__(self, path, columns):
        self.path, self.columns = path, list(columns)
        self.key = [self.columns.index(k) for k in self.KEY]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            with open(path, newline="") as fh:
                rows = list(csv.reader(fh))
        except FileNotFoundError:
            rows = []
        if rows and rows[0] != self.columns:
            print("note: %s has another header; its rows are replaced" % path)
            rows = []
        self.rows = rows[1:]

    def put(self, values):
        """values: {column: value}; the row takes the place of the one with its key, else goes
        at the end, and the file is rewritten (through a temporary file, after every row, so an
        interrupted run keeps what it measured)."""
        missing = set(self.columns) - set(values)
        if missing:
            raise ValueError("row lacks %s" % ", ".join(sorted(missing)))
        row = [str(values[c]) for c in self.columns]
        k = [row[i] for i in self.key]
        self.rows = [r for r in self.rows if [r[i] for i in self.key] != k] + [row]
        with open(self.path + ".tmp", "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(self.columns)
            w.writerows(self.rows)
        os.replace(self.path + ".tmp", self.path)


def csv_path(args, gpu, key, suffix):
    return args.csv or os.path.join(data_dir(gpu), "pytorch-ch%s%s.csv" % (key, suffix))


def cuda_setup(mode):
    """Dies without CUDA; cuDNN autotunes every conv (cudnn.benchmark), as the C programs do with
    cudnnFind, so that each peer runs at its best."""
    if not torch.cuda.is_available():
        die("CUDA is not available; %s needs a GPU" % mode)
    torch.backends.cudnn.benchmark = True
    gpu = gpu_tag(torch.cuda.get_device_name())
    return gpu


# ---- Benchmark ----
def make_step(spec, scope, p, c, g, compile_it):
    """Returns (run, reset) for one scope; compile_it wraps the model function in compiled()."""
    fwd_fn = spec["forward"] if scope in ("model_fwd", "train_step") else spec["epilogue"]
    fn = compiled(fwd_fn) if compile_it else fwd_fn
    if scope == "model_fwd":
        args = [p[k] for k in spec["inputs"]]
    elif scope == "epilogue_fwd":
        args = [c] + [p[k] for k in spec["epi_args"]]
    elif scope == "epilogue_fwdbwd":
        args = [c.detach().clone().requires_grad_()] + \
               [p[k].detach().clone().requires_grad_() for k in spec["epi_args"]]
    else:  # train_step: gradients w.r.t. every model input
        args = [p[k].detach().clone().requires_grad_() for k in spec["inputs"]]
    if scope.endswith("_fwd"):
        return (lambda: fn(*args)), (lambda: None)
    return (lambda: fn(*args).backward(g)), (lambda: [setattr(a, "grad", None) for a in args])


def bench_plan(spec, args):
    """The batches, scopes and precisions bench runs (from the options), checked."""
    kb, sweep = spec["default_shape"][0], [int(b) for b in spec["bench_batches"].split(",")]
    text = args.batches or "all"
    try:
        batches = {"all": sweep, "kb": [kb], "sweep": [b for b in sweep if b != kb]}.get(text) \
            or [int(b) for b in text.split(",")]
        assert batches and min(batches) > 0
    except (ValueError, AssertionError):
        die("--batches wants positive integers like 1,2,4, or kb, sweep or all")
    scopes = [s.strip() for s in (args.scopes or ",".join(SCOPES)).split(",") if s.strip()]
    if not scopes or any(s not in SCOPES for s in scopes):
        die("--scopes wants a comma-separated list of %s" % ", ".join(SCOPES))
    if args.reps < 20:
        die("--reps: at least 20, as the C programs time (their rows are compared with these)")
    return batches, [s for s in SCOPES if s in scopes], precision_list(args.precisions)


def cmd_bench(args):
    key, spec = get_chapter(args.chapter)
    seed = spec["seed"] if args.seed is None else args.seed
    batches, scopes, precisions = bench_plan(spec, args)
    n_compiles = len(batches) * len(scopes) * len(precisions)
    if args.dry_run:
        for n in batches:
            for scope in scopes:
                for version, _ in VERSIONS:
                    for prec in precisions:
                        print("n=%-4d %-16s %-8s %s" % (n, scope, version, prec))
        print("chapter %s: %d timed rows, %d of them torch.compile (one compile each)"
              % (key, 2 * n_compiles, n_compiles))
        return 0
    gpu = cuda_setup("bench")
    compile_caches_off()
    out = CsvFile(csv_path(args, gpu, key, ""), COLUMNS)
    timer, ceiling = Timer(), copy_ceiling_gbps()
    print("chapter %s (%s)\n%s (%s), torch %s, cuDNN %s: copy ceiling %.1f GB/s, L2 %.1f MB "
          "(flushed by reading %.1f MB); default flags: cudnn.allow_tf32 %s, "
          "cuda.matmul.allow_tf32 %s; rows -> %s"
          % (key, spec["title"], torch.cuda.get_device_name(), gpu, torch.__version__,
             torch.backends.cudnn.version(), ceiling, timer.l2 / 1e6, 2 * timer.l2 / 1e6,
             DEFAULT_FLAGS[0], DEFAULT_FLAGS[1], out.path))
    date = datetime.date.today().isoformat()
    for n in batches:
        shape = (n,) + tuple(spec["default_shape"][1:])
        p = {k: torch.from_numpy(v).cuda()
             for k, v in spec["make_params"](seed, shape).items()}
        set_precision("fp32")  # the epilogue's input, the same for both precisions
        with torch.no_grad():
            c = spec["pre"](*[p[k] for k in spec["pre_args"]])
        g = torch.randn(spec["shapes"](shape)["out"], device="cuda")
        for scope in scopes:
            nbytes = spec["bytes"](scope, shape)
            for version, label in VERSIONS:
                for prec in precisions:
                    set_precision(prec)
                    try:
                        t0 = time.perf_counter()
                        run, reset = make_step(spec, scope, p, c, g, version == "compile")
                        reset()
                        run()  # the first call: compiles, and cuDNN's search for this precision
                        torch.cuda.synchronize()
                        first_s = time.perf_counter() - t0
                        med, lo, hi = timer.time(run, reset, args.reps)
                    except Exception as e:  # noqa: BLE001 - report and go on
                        print("n=%-4d %-16s %-8s %-8s failed: %s"
                              % (n, scope, version, prec, str(e)[:200]))
                        continue
                    gbps = nbytes / (med * 1e-3) / 1e9
                    floor = nbytes / (ceiling * 1e9) * 1e3
                    # floor: bytes at the copy ceiling alone (the FLOPs are the C programs' count)
                    out.put(dict(gpu=gpu, chapter=key, version=version, name=label,
                                 precision=prec, scope=scope, shape="x".join(map(str, shape)),
                                 median_ms="%.6g" % med, min_ms="%.6g" % lo, max_ms="%.6g" % hi,
                                 bytes=nbytes, gbps="%.6g" % gbps, ceiling_gbps="%.6g" % ceiling,
                                 pct_ceiling="%.4g" % (100 * gbps / ceiling), flops="", tflops="",
                                 peak_tflops="", floor_ms="%.6g" % floor,
                                 pct_floor="%.4g" % (100 * floor / med), reps=args.reps,
                                 date=date))
                    print("n=%-4d %-16s %-8s %-8s median %9.4f ms (min %.4f, max %.4f) "
                          "%7.1f GB/s = %5.1f%% of copy; first call %.1f s"
                          % (n, scope, version, prec, med, lo, hi, gbps, 100 * gbps / ceiling,
                             first_s))
                    del run, reset
        del p, c, g
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return 0


# ---- The conv alone: ops (timings) and error (against float64) ----
OPS = (  # name, what convolution_backward's output_mask asks for (None: the forward)
    ("conv_fwd", None), ("conv_dx", (True, False, False)), ("conv_dw", (False, True, False)),
    ("conv_dbias", (False, False, True)), ("conv_bwd", (True, True, True)))


class ConvOp:
    """The chapter's convolution at the KernelBench shape, as PyTorch runs it in a training
    step: F.conv* forward, aten.convolution_backward for the gradients (on the pooled input
    in chapter 5), in the dtype of the tensors it is given."""

    def __init__(self, spec, p):
        cv = spec["conv"]
        self.x, self.w, self.b = p["x"], p["conv_weight"], p["conv_bias"]
        if "pool" in cv:
            self.x = F.avg_pool3d(self.x, cv["pool"])
        self.transposed = cv["fn"].startswith("conv_transpose")
        self.nd = 2 if cv["fn"] == "conv2d" else 3
        self.kw = dict(stride=cv["stride"], padding=cv["padding"])
        if self.transposed:
            self.kw["output_padding"] = cv["output_padding"]
        self.fn, self.cv = getattr(F, cv["fn"]), cv

    def double(self):
        o = ConvOp.__new__(ConvOp)
        o.__dict__.update(self.__dict__)
        o.x, o.w, o.b = self.x.double(), self.w.double(), self.b.double()
        return o

    def forward(self):
        return self.fn(self.x, self.w, self.b, **self.kw)

    def backward(self, g, mask):
        nd, cv = self.nd, self.cv
        return torch.ops.aten.convolution_backward(
            g, self.x, self.w, [self.b.numel()], [cv["stride"]] * nd, [cv["padding"]] * nd,
            [1] * nd, self.transposed, [cv.get("output_padding", 0)] * nd, 1, list(mask))

    def op(self, g, mask):
        if mask is None:
            return self.forward
        return lambda: self.backward(g, mask)


def kb_problem(spec, args):
    shape = tuple(spec["default_shape"])
    p = {k: torch.from_numpy(v).cuda() for k, v in spec["make_params"](
        spec["seed"] if args.seed is None else args.seed, shape).items()}
    return shape, p


def cmd_ops(args):
    """Times the chapter's convolution alone, op by op, as PyTorch runs it in a training step
    (F.conv* forward; aten.convolution_backward for each gradient alone and for all three,
    as autograd calls it), at the KernelBench shape, in each precision: the peer of the C
    program's per-op table (common/conv.h's library calls, hx_conv_ops). --kernels lists the
    CUDA kernels each op launched (torch.profiler), to see which cuDNN engine PyTorch chose."""
    key, spec = get_chapter(args.chapter)
    precisions = precision_list(args.precisions)
    if args.reps < 20:
        die("--reps: at least 20, as the C programs time")
    gpu = cuda_setup("ops")
    out = CsvFile(csv_path(args, gpu, key, "-ops"), COLUMNS)
    timer = Timer()
    shape, p = kb_problem(spec, args)
    conv = ConvOp(spec, p)
    set_precision("fp32")
    y = conv.forward()
    g = torch.randn_like(y)
    print("chapter %s: %s%s, x %s -> y %s, %s, torch %s, cuDNN %s (benchmark on)"
          % (key, spec["conv"]["fn"], conv.kw, tuple(conv.x.shape), tuple(y.shape),
             torch.cuda.get_device_name(), torch.__version__, torch.backends.cudnn.version()))
    del y
    date = datetime.date.today().isoformat()
    for prec in precisions:
        set_precision(prec)
        for name, mask in OPS:
            run = conv.op(g, mask)
            run()  # the first call: cudnn.benchmark's search for this precision happens here
            torch.cuda.synchronize()
            med, lo, hi = timer.time(run, lambda: None, args.reps)
            out.put(dict(gpu=gpu, chapter=key, version="eager", name="PyTorch eager",
                         precision=prec, scope=name, shape="x".join(map(str, shape)),
                         median_ms="%.6g" % med, min_ms="%.6g" % lo, max_ms="%.6g" % hi,
                         bytes="", gbps="", ceiling_gbps="", pct_ceiling="", flops="",
                         tflops="", peak_tflops="", floor_ms="", pct_floor="", reps=args.reps,
                         date=date))
            print("%-8s %-10s median %9.4f ms (min %.4f, max %.4f)"
                  % (prec, name, med, lo, hi))
            if args.kernels:
                with torch.profiler.profile(
                        activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    run()
                    torch.cuda.synchronize()
                for e in prof.key_averages():
                    if e.device_type == torch.autograd.DeviceType.CUDA:
                        print("    %8.3f ms  %s" % (e.device_time_total / 1e3, e.key[:150]))
    return 0


def error_of(out, ref):
    """(rel_l2, max_abs_err, max_abs_ref) of out against ref, in float64"""
    d = out.double() - ref
    r = float(torch.linalg.vector_norm(ref))
    return (float(torch.linalg.vector_norm(d)) / (r if r > 0 else 1.0), float(d.abs().max()),
            float(ref.abs().max()))


def cmd_error(args):
    """Measures, at the KernelBench shape and in each precision, how far PyTorch's float32
    results are from float64 ones computed on the GPU from the same float32 inputs: the conv
    alone (forward, and its dx and dw for a seeded output gradient) and the whole model's
    forward, eager and torch.compile (the latter compiled afresh for each precision: its error
    shows whether the compiled conv followed the flags)."""
    key, spec = get_chapter(args.chapter)
    precisions = precision_list(args.precisions)
    gpu = cuda_setup("error")
    compile_caches_off()
    out = CsvFile(csv_path(args, gpu, key, "-error"), ERROR_COLUMNS)
    shape, base = tuple(spec["default_shape"]), spec["seed"] if args.seed is None else args.seed
    set_precision("fp32")
    ref = {}
    # the first seed (base, base + 100, ...) whose case is not degenerate by golden's rule: at
    # chapter 1's seed 58 the bias (-1.17) clamps every output, whose error is then 0 in any
    # precision
    for seed in range(base, base + 2000, 100):
        arrays = spec["make_params"](seed, shape)
        p = {k: torch.from_numpy(v).cuda() for k, v in arrays.items()}
        with torch.no_grad():
            ref["model_fwd"] = spec["forward"](*[p[k].double() for k in spec["inputs"]])
            if spec["golden_ok"](ref["model_fwd"], arrays):
                break
    else:
        die("no seed from %d to %d gives a case that is not degenerate" % (base, seed))
    del arrays
    conv = ConvOp(spec, p)
    gen = torch.Generator(device="cuda").manual_seed(seed + 2000)
    with torch.no_grad():
        g = torch.randn(conv.forward().shape, device="cuda", generator=gen)
        c64 = conv.double()  # float64 never runs in TF32, whatever the flags
        ref["conv_fwd"] = c64.forward()
        ref["conv_dx"], ref["conv_dw"], _ = c64.backward(g.double(), (True, True, False))
        del c64
    date, shape_s = datetime.date.today().isoformat(), "x".join(map(str, shape))
    versions = dict(VERSIONS)

    def put(version, prec, scope, result):
        rel, mx, rmax = error_of(result, ref[scope])
        out.put(dict(gpu=gpu, chapter=key, version=version, name=versions[version],
                     precision=prec, scope=scope, shape=shape_s, seed=seed, rel_l2="%.3e" % rel,
                     max_abs_err="%.3e" % mx, max_abs_ref="%.3e" % rmax,
                     torch=torch.__version__, cudnn=torch.backends.cudnn.version(), date=date))
        print("%-8s %-8s %-10s rel_l2 %.3e  max_abs_err %.3e  (max |ref| %.3e)"
              % (prec, version, scope, rel, mx, rmax))

    print("chapter %s: %s at %s (seed %d) against float64, %s, torch %s, cuDNN %s; rows -> %s"
          % (key, spec["conv"]["fn"], shape_s, seed, torch.cuda.get_device_name(),
             torch.__version__, torch.backends.cudnn.version(), out.path))
    model_args = [p[k] for k in spec["inputs"]]
    for prec in precisions:
        set_precision(prec)
        with torch.no_grad():
            put("eager", prec, "conv_fwd", conv.forward())
            dx, dw, _ = conv.backward(g, (True, True, False))
            put("eager", prec, "conv_dx", dx)
            put("eager", prec, "conv_dw", dw)
            del dx, dw
            put("eager", prec, "model_fwd", spec["forward"](*model_args))
            put("compile", prec, "model_fwd", compiled(spec["forward"])(*model_args))
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return 0


def main(argv=None):
    global DEFAULT_FLAGS
    ap = argparse.ArgumentParser(prog="pytorch_peer", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    pg = sub.add_parser("golden", help="write small float64-computed reference cases")
    pg.add_argument("--out", default=os.path.join(HERE, "golden"))
    pc = sub.add_parser("check", help="check a C program --dump directory")
    pc.add_argument("dir")
    pc.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="device of the float64 reference (default cpu)")
    pc.add_argument("--rtol", type=float, default=1e-5, help="max rel-L2 error (1e-5)")
    pc.add_argument("--atol", type=float, default=1e-4, help="max abs error (1e-4)")
    pb = sub.add_parser("bench", help="time PyTorch eager and torch.compile on CUDA")
    pb.add_argument("--csv", help="replaces rows of the same GPU, chapter, version, precision, "
                    "scope and shape, keeps the others (default: data/<gpu>/pytorch-chNN.csv, "
                    "or data/<gpu>-mine/ where data/<gpu>/ has a README.md and RECORD is unset)")
    pb.add_argument("--batches", help="batch sizes, comma-separated, or kb (the KernelBench "
                    "shape's alone), sweep (the others), all (the default: 1,2,4,...,128 for "
                    "chapters 1, 3 and 4, 1,2,4 for chapter 2, 1,2,4,...,32 for chapter 5)")
    pb.add_argument("--scopes", help="scopes, comma-separated (default: all four, %s)"
                    % ", ".join(SCOPES))
    pb.add_argument("--reps", type=int, default=20, help="timed repetitions (at least 20; 20)")
    pb.add_argument("--dry-run", action="store_true",
                    help="print what would be timed and how many compiles; needs no GPU")
    po = sub.add_parser("ops", help="time the chapter's convolution alone, op by op, on CUDA")
    po.add_argument("--csv", help="as bench's (default: data/<gpu>/pytorch-chNN-ops.csv)")
    po.add_argument("--reps", type=int, default=20, help="timed repetitions (at least 20; 20)")
    po.add_argument("--kernels", action="store_true", help="list each op's CUDA kernels")
    pe = sub.add_parser("error", help="the conv's and the model's error against float64 on CUDA")
    pe.add_argument("--csv", help="as bench's (default: data/<gpu>/pytorch-chNN-error.csv)")
    pg.add_argument("--chapter", default=None,
                    help="chapter number, 1 to 5 (also 01 .. 05; default: every chapter)")
    for p in (pc, pb, po, pe):
        p.add_argument("--chapter", default="1",
                       help="chapter number, 1 to 5 (also 01 .. 05; default 1)")
    for p in (pg, pb, po, pe):
        p.add_argument("--seed", type=int,
                       help="base seed (default: the chapter's own, 58, 43, 79, 92 and 38 "
                       "for chapters 1 to 5)")
    for p in (pb, po, pe):
        p.add_argument("--precisions", default=",".join(PRECISIONS),
                       help="comma-separated: fp32 (TF32 off), default (PyTorch's flags as "
                       "shipped: cudnn.allow_tf32 on); default: both")
    args = ap.parse_args(argv)
    if args.mode == "bench" and args.dry_run:  # the plan alone: no PyTorch needed
        return cmd_bench(args)
    if torch is None:
        die("PyTorch is not installed (python3 -c 'import torch' failed)")
    if np is None:
        die("NumPy is not installed (python3 -c 'import numpy' failed)")
    DEFAULT_FLAGS = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    return {"golden": cmd_golden, "check": cmd_check, "bench": cmd_bench,
            "ops": cmd_ops, "error": cmd_error}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
