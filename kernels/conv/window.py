"""What the kernels that slide a window over a plane share (``kernels/conv/depthwise.py``,
``kernels/pool/kernel.py``; the sizes, every convolution): which output positions a program computes and where each of the
window's taps reads them, and a window's sizes given per dimension. Imports only Triton.

A program computes ``BLOCK`` output positions of one plane (a sample's channel): consecutive
ones, or a tile of output rows by columns; a plane's blocks are consecutive programs of a
one-dimensional grid (room for any count). Inputs
are 5-D views ``(N, C, D, H, W)`` with their own strides; outputs are indexed as contiguous."""

import triton
import triton.language as tl


def window_sizes(value, nd: int) -> tuple[int, ...]:
    """A size, stride, padding or dilation argument as ``nd`` ints (one int, or one in a list,
    for every dimension), as PyTorch's convolutions and pools read it."""
    if isinstance(value, int):
        return (value,) * nd
    value = tuple(int(v) for v in value)
    return value * nd if len(value) == 1 else value


def window_programs(planes: int, out_sizes: tuple, meta: dict) -> int:
    """How many programs ``window_positions`` covers ``planes`` planes of ``out_sizes`` (``(OD,
    OH, OW)``) with, for the configuration ``meta`` (``BLOCK``, ``BLOCK_W``)."""
    od, oh, ow = out_sizes
    if meta["BLOCK_W"]:
        return planes * triton.cdiv(od * oh, meta["BLOCK"] // meta["BLOCK_W"]) * triton.cdiv(ow, meta["BLOCK_W"])
    return planes * triton.cdiv(od * oh * ow, meta["BLOCK"])


def window_configs(configs: list[tuple[int, int, int]], ow: int) -> list[triton.Config]:
    """``(BLOCK, BLOCK_W, num_warps)`` as configurations, leaving out row tiles wider than twice
    an output row (``BLOCK_W`` 0, the flat blocks, always kept)."""
    return [triton.Config({"BLOCK": b, "BLOCK_W": w}, num_warps=n) for b, w, n in configs if w <= max(32, 2 * ow)]


@triton.jit
def window_positions(C, OD, OH, OW, sd, sh, sw, pd, ph, pw, BLOCK: tl.constexpr, BLOCK_W: tl.constexpr):
    """Program ``program_id(0)``'s plane (``n``, ``c`` of ``C`` channels), its positions ``q``
    (clamped to 0 past the end), which of them are ``valid``, and each position's window origin
    ``(id0, ih0, iw0)`` in the input (negative in the padding). A position's output element is
    ``plane * OD * OH * OW + q`` of the contiguous output.

    ``BLOCK_W`` 0: ``BLOCK`` consecutive positions, each decoded into ``(od, oh, ow)`` (two
    divisions a position). Else a tile of ``BLOCK // BLOCK_W`` output rows (a row: one ``(od,
    oh)``) by ``BLOCK_W`` columns: a row is decoded once and a column not at all, and the window
    origins come back as a column of rows and a row of columns that broadcast."""
    if BLOCK_W == 0:
        blocks = tl.cdiv(OD * OH * OW, BLOCK)
        plane = tl.program_id(0) // blocks
        p = (tl.program_id(0) % blocks) * BLOCK + tl.arange(0, BLOCK)
        valid = p < OD * OH * OW
        q = tl.where(valid, p, 0)
        ow = q % OW
        oh = (q // OW) % OH
        od = q // (OW * OH)
    else:
        BLOCK_R: tl.constexpr = BLOCK // BLOCK_W
        tiles_w = tl.cdiv(OW, BLOCK_W)
        tiles = tl.cdiv(OD * OH, BLOCK_R) * tiles_w
        plane = tl.program_id(0) // tiles
        tile = tl.program_id(0) % tiles
        r = (tile // tiles_w) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        w = (tile % tiles_w) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
        valid = (r < OD * OH) & (w < OW)
        r = tl.where(r < OD * OH, r, 0)
        ow = tl.where(w < OW, w, 0)
        q = r * OW + ow
        oh = r % OH
        od = r // OH
    n = (plane // C).to(tl.int64)
    c = plane % C
    return plane, n, c, q, valid, od * sd - pd, oh * sh - ph, ow * sw - pw


@triton.jit
def window_tap(t: tl.constexpr, id0, ih0, iw0, valid, ID, IH, IW, sx_d, sx_h, sx_w,
               KH: tl.constexpr, KW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, PADDED: tl.constexpr):  # fmt: skip
    """Tap ``t`` of a ``(KD, KH, KW)`` window (dilated by ``(DD, DH, DW)``): the offset of its
    input element from each position's window origin, and which positions read inside the input
    (all valid ones unless ``PADDED``: a window may reach outside it)."""
    kd = t // (KW * KH) * DD
    kh = (t // KW) % KH * DH
    kw = t % KW * DW
    ok = valid
    if PADDED:
        ok = ok & (id0 + kd >= 0) & (id0 + kd < ID) & (ih0 + kh >= 0) & (ih0 + kh < IH) & (iw0 + kw >= 0) & (iw0 + kw < IW)
    return kd * sx_d + kh * sx_h + kw * sx_w, ok
