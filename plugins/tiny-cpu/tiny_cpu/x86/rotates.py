"""Rotates: `(x << c) | (x >> (bits - c))` of an unsigned integer as one `rol`.

The core's threefry (the random numbers of every weight initialization) rotates each word eight times per block,
written as two shifts and an OR: six instructions here (each two-operand op copies its left operand first), and the
random-number kernels of the digits demo held thousands of them. Selected as `mov` + `rol`, the two shifts are left
out when the OR is their only reader: a third of those kernels' instructions, and of their render time.
"""

from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore.uop.uop import UOp

_ROTATED = {dtypes.uint32: 32, dtypes.uint64: 64}  # the unsigned dtypes whose register is exactly their width


def _shift_count(shift: UOp) -> int | None:
    count = shift.src[1]
    return int(count.arg) if count.op is Ops.CONST else None


def rotate_of(uop: UOp) -> tuple[UOp, int, UOp, UOp] | None:
    """(x, the left rotate count, the SHL, the SHR) when `uop` is OR(SHL(x, c), SHR(x, bits - c)) in either order,
    with 0 < c < bits, of uint32 or uint64; None otherwise."""
    bits = _ROTATED.get(uop.dtype)
    if uop.op is not Ops.OR or bits is None:
        return None
    left, right = uop.src
    if left.op is Ops.SHR and right.op is Ops.SHL:
        left, right = right, left
    if left.op is not Ops.SHL or right.op is not Ops.SHR or left.src[0] is not right.src[0]:
        return None
    up, down = _shift_count(left), _shift_count(right)
    if up is None or down is None or not 0 < up < bits or up + down != bits:
        return None
    return left.src[0], up, left, right


def rotates(uops: list[UOp], consumers: dict[UOp, list[UOp]], skipped: set[UOp]) -> tuple[dict[UOp, tuple[UOp, int]],
                                                                                          set[UOp]]:
    """(each OR selected as a rotate -> (the rotated value, the count), the shifts nothing else reads, left out).
    ORs in `skipped` (lanes computed as vectors) are left to their own selection."""
    found: dict[UOp, tuple[UOp, int]] = {}
    unread: set[UOp] = set()
    for uop in uops:
        if uop in skipped:
            continue
        rotate = rotate_of(uop)
        if rotate is None:
            continue
        value, count, shift_left, shift_right = rotate
        found[uop] = (value, count)
        unread.update(shift for shift in (shift_left, shift_right) if consumers.get(shift) == [uop])
    return found, unread
