"""Ops, AxisType and OptOps behave as the Enums they are after fast_member_access swaps their metaclass."""
from __future__ import annotations

import copy
import enum
import pickle
import sys

import pytest

from tinycore.codegen.opt import OptOps
from tinycore.uop.axis import AxisType
from tinycore.uop.opcodes import fast_member_access
from tinycore.uop.ops import GroupOp, Ops


@pytest.mark.parametrize("enum_class", [Ops, AxisType, OptOps])
def test_the_enum_protocol_is_kept(enum_class: type[enum.Enum]) -> None:
    members = list(enum_class)
    assert len(members) == len(enum_class) == len(enum_class.__members__) > 1
    first = members[0]
    assert isinstance(first, enum.Enum) and isinstance(first, enum_class)
    assert enum_class[first.name] is first and enum_class(first.value) is first
    assert first in enum_class and list(reversed(enum_class))[-1] is first
    assert pickle.loads(pickle.dumps(first)) is first and copy.deepcopy(first) is first
    assert repr(first) == f"<{enum_class.__name__}.{first.name}: {first.value!r}>"
    assert getattr(enum_class, first.name) is first


def test_errors_stay_the_enum_errors() -> None:
    with pytest.raises(AttributeError, match="cannot reassign member"):
        Ops.ADD = Ops.MUL  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _ = Ops.NOT_AN_OP  # type: ignore[attr-defined]
    with pytest.raises(KeyError):
        _ = Ops["NOT_AN_OP"]
    with pytest.raises(ValueError, match="is not a valid Ops"):
        Ops(10_000)


def test_members_hash_by_identity_in_sets() -> None:
    assert Ops.ADD in GroupOp.Binary and Ops.CONST not in GroupOp.ALU
    assert {Ops.ADD: 1}[Ops.ADD] == 1


def test_the_swap_drops_only_the_member_map_fallback() -> None:
    class Plain(enum.Enum):
        FIRST = 1
        SECOND = 2

    assert fast_member_access(Plain) is Plain
    assert list(Plain) == [Plain.FIRST, Plain.SECOND] and Plain(2) is Plain.SECOND and Plain["FIRST"] is Plain.FIRST
    if "__getattr__" in enum.EnumType.__dict__:
        # no metaclass in the chain defines __getattr__, so a member read is a plain class attribute read
        assert not any("__getattr__" in vars(klass) for klass in type(Plain).__mro__)
    else:
        assert type(Plain) is enum.EnumType, f"no swap needed on Python {sys.version_info[:2]}"
