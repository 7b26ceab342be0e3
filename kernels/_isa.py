"""The host's vector ISA and the micro-kernel block shape chosen for it, without importing numba.

The block (rows x lanes of float32 outputs held in registers, kernels/_tile.py) is sized for the
register file: AVX2 has 16 256-bit registers, so 6 x 16 is twelve 8-float accumulators plus the
B row and the broadcast; AVX-512 has 32 512-bit registers, where 6 x 16 is only six accumulators,
too few independent FMAs to cover two FMA pipes' latency, and 8 x 32 is sixteen (12 x 32 and
14 x 32, 24 and 28, measured no faster: the seed models' channel counts and row widths are
multiples of 8, not of 12 or 14). Products whose axis along the lanes is whole blocks of 64
run a wide block on AVX-512, 6 x 64 (WIDE_BLOCKS); products with each image's pixels along the
lanes a pixel block, AVX-512's 6 x 64 and AVX2's 4 x 24 (PIXEL_BLOCKS). PROFILER_KERNEL_BLOCK=RxL
(e.g. 6x16, 8x32) overrides the choice, wide and pixel blocks included; any shape computes the
right answer on any ISA, only the speed differs. The ISA follows what numba compiles for:
NUMBA_CPU_NAME / NUMBA_CPU_FEATURES when the user set them (e.g. NUMBA_CPU_NAME=haswell with an
AVX2 feature list builds the AVX2 code on an AVX-512 host), else the host CPU as LLVM sees it.
"""

import os
from pathlib import Path

ENV = "PROFILER_KERNEL_BLOCK"
# what LLVM enables for a Haswell: with NUMBA_CPU_NAME=haswell numba still takes the host's feature
# list unless NUMBA_CPU_FEATURES gives this one, so an AVX-512 host builds the AVX2 code only with both
HASWELL_FEATURES = ("+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fsgsbase,+lzcnt,+mmx,+movbe,+pclmul,"
                    "+popcnt,+rdrnd,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,+xsaveopt,-avx512f,-avx512vl,"
                    "-avx512bw,-avx512dq")
# rows x lanes per ISA; AVX-512's from measurements on an Emerald Rapids Xeon (docs/performance.md)
DEFAULT_BLOCKS = {"avx512": (8, 32), "avx2": (6, 16), "other": (6, 16)}
# the block of products whose axis along the lanes is whole blocks of it (kernels/_tile.lanes_block):
# four zmm per row, so one broadcast feeds four FMAs rather than two. On the Zen 4, 6 x 64 against
# 8 x 32 at 1 and 2 threads (docs/performance.md, sessions 15-16 and 18): the 64-channel conv
# forwards 0.90-0.97 of the time, dense forwards 0.79-0.99, NHWC weight grads of 64 channels
# 0.85-0.96 (session 18); 32 columns (half the lanes idle) 1.8, so those keep the default, and so
# does dense's backward (0.94-1.25, sessions 15-16). AVX2 has no wide block: 16 registers hold no
# second one.
WIDE_BLOCKS = {"avx512": (6, 64)}
# the block of products with each image's pixels along the lanes and output channels along the
# rows (NCHW's first layers' forwards: kernels/_tile.rows_block fits its rows to the channels):
# fewer rows of more lanes than the default block, so each broadcast feeds more FMAs and a block
# stores fewer output planes. 32 channels as 4 x 64 took 0.91-0.95 of 8 x 32's time on AVX-512,
# as 4 x 24 0.91-0.92 of 4 x 16's on mnist conv1 and 0.97-1.01 on cifar conv1 (emulated AVX2;
# docs/performance.md, session 27). kernels/_tile.rows_block takes it where it pads each image's
# pixels at most a 64th more than the default block (an image under its lanes: only less).
PIXEL_BLOCKS = {"avx512": (6, 64), "avx2": (4, 24)}
# the block of products whose axis along the lanes pads to at least a tenth fewer floats in blocks
# of half the default's lanes (kernels/_tile.lanes_block): AVX-512's 8 x 16, one zmm a row, e.g.
# for 48, 80 and 112 channels (8 x 32 padded them to 64, 96 and 128, with the last block of each
# row stored element by element): torch/ours 0.72-0.91 with 8 x 32, 0.94-1.09 with 8 x 16, 1
# thread (docs/performance.md, session 28). AVX2's 6 x 8 took 1.00-1.22x 6 x 16's time on 24 and 40.
HALF_BLOCKS = {"avx512": (8, 16)}
MAX_ROWS, MAX_LANES = 32, 128


def parse_block(text, source=ENV):
    """(rows, lanes) from 'RxL', or a ValueError naming `source`."""
    rows, sep, lanes = str(text).strip().lower().partition("x")
    if sep and rows.isascii() and lanes.isascii() and rows.isdigit() and lanes.isdigit():   # not '८' or '²'
        r, lanes_ = int(rows), int(lanes)
        if 1 <= r <= MAX_ROWS and 8 <= lanes_ <= MAX_LANES and lanes_ % 8 == 0:
            return r, lanes_
    raise ValueError(f"{source} must be ROWSxLANES with 1 <= ROWS <= {MAX_ROWS} and LANES a multiple of 8 "
                     f"up to {MAX_LANES} (e.g. 6x16 for AVX2, 8x32 for AVX-512), got {text!r}")


def _target():
    """(cpu name, {feature: enabled}) as numba compiles: NUMBA_CPU_NAME and NUMBA_CPU_FEATURES
    when set (numba takes the host's feature list even with a CPU name given, so emulating an
    AVX2 machine needs both), else the host's."""
    name, features = os.environ.get("NUMBA_CPU_NAME"), os.environ.get("NUMBA_CPU_FEATURES")
    if name in (None, "host") or features is None:
        import llvmlite.binding as llvm
        name = llvm.get_host_cpu_name() if name in (None, "host") else name
        features = host_features() if features is None else features
    return name, {f[1:]: f[0] == "+" for f in features.split(",") if len(f) > 1 and f[0] in "+-"}


def _isa(flags):
    if flags.get("avx512f"):
        return "avx512"
    if flags.get("avx2") and flags.get("fma"):
        return "avx2"
    return "other"


def _detect():
    cpu, flags = _target()
    isa = _isa(flags)
    override = os.environ.get(ENV)
    block = parse_block(override) if override else DEFAULT_BLOCKS[isa]
    # an override is the one shape for every kernel
    wide, pixels, half = (None, None, None) if override else (WIDE_BLOCKS.get(isa), PIXEL_BLOCKS.get(isa),
                                                              HALF_BLOCKS.get(isa))
    return {"isa": isa, "cpu": cpu, "block": _name(block), "wide": _name(wide), "pixels": _name(pixels),
            "half": _name(half), "block_source": "env" if override else "isa", "l1d": l1_data_bytes()}


def l1_data_bytes(cache="/sys/devices/system/cpu/cpu0/cache"):
    """The host's level-1 data cache per core in bytes, as Linux reports it (sysfs; cpu0's), or
    None. It is the host's also where NUMBA_CPU_NAME has numba compile for another CPU."""
    for index in sorted(Path(cache).glob("index*")):
        try:
            if (index / "level").read_text().strip() == "1" and (index / "type").read_text().strip() == "Data":
                size = (index / "size").read_text().strip().upper()
                return int(size[:-1]) << 10 if size.endswith("K") else int(size)
        except (OSError, ValueError):   # an entry unreadable or malformed: the next may be L1's
            continue
    return None


def _name(shape):
    """'RxL' for a (rows, lanes) shape, None for None."""
    return f"{shape[0]}x{shape[1]}" if shape else None


_INFO = None


def host_features():
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_features().flatten()


def narrow():
    """The kernels compile for 256-bit vectors on this AVX-512 host (kernels/_jit.py): the
    default block is AVX2's."""
    info = isa_info()
    if info["block_source"] == "isa" and info["isa"] == "avx512":
        _INFO.update(block=_name(DEFAULT_BLOCKS["avx2"]), wide=None, pixels=_name(PIXEL_BLOCKS["avx2"]),
                     half=None, block_source="isa (256-bit vectors)")


def isa_info():
    """{"isa": "avx512" | "avx2" | "other", "cpu": LLVM's CPU name, "block": "RxL" (the default
    micro-kernel block), "wide": "RxL" or None (the block of products whose axis along the
    lanes is whole blocks of it), "pixels": "RxL" or None (the block of products with each
    image's pixels along the lanes), "half": "RxL" or None (the block of products whose axis along
    the lanes pads to at least a tenth fewer lanes in it), "block_source": "isa" | "env" | "isa
    (256-bit vectors)", "l1d": the L1 data cache's bytes a core, or None}. Reads llvmlite only (no
    numba import); computed once per process."""
    global _INFO
    if _INFO is None:
        _INFO = _detect()
    return dict(_INFO)
