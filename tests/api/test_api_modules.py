"""tinygrad's module paths and small API details that ported programs rely on (issue: the rest of the surface)."""
from __future__ import annotations

import ctypes
import gc
import importlib
import pathlib
import tempfile

import numpy as np
import pytest

from tinycore import Context, Tensor, dtypes

# (module, names) pairs as tinygrad 0.14 programs import them
TINYGRAD_PATHS = [
    ("tinycore.uop.ops", ["UOp", "Ops", "GroupOp", "sym_infer", "UPat", "PatternMatcher", "graph_rewrite",
                          "Variable", "resolve", "smax", "smin", "ssimplify", "exec_alu"]),
    ("tinycore.helpers", ["getenv", "Context", "DEBUG", "GlobalCounters", "prod", "temp", "mv_address", "dedup",
                          "flatten", "all_int", "all_same", "round_up", "ceildiv", "colored", "unwrap",
                          "DEFAULT_FLOAT", "BEAM", "JIT", "Timing", "partition",
                          "merge_dicts", "flat_mv", "to_mv", "from_mv", "round_down"]),
    ("tinycore.engine.jit", ["TinyJit"]),
    ("tinycore.nn.state", ["safe_load", "safe_save", "get_state_dict", "get_parameters", "load_state_dict",
                           "torch_load", "gguf_load"]),
    ("tinycore.device", ["Device", "canonicalize_device", "Buffer", "BufferSpec", "Allocator", "LRUAllocator",
                         "Compiled", "Compiler",
                         "CompileError"]),
]


@pytest.mark.parametrize(("module_name", "names"), TINYGRAD_PATHS)
def test_tinygrad_module_paths_expose_the_names(module_name: str, names: list[str]) -> None:
    module = importlib.import_module(module_name)
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{module_name} lacks {missing}"


def test_reexported_names_are_the_same_objects() -> None:
    from tinycore.counters import GlobalCounters as CountersClass
    from tinycore.device.buffer import Buffer as BufferClass
    from tinycore.helpers import GlobalCounters
    from tinycore.uop.ops import UOp, sym_infer
    from tinycore.uop.symbolic import sym_infer as symbolic_sym_infer
    from tinycore.uop.uop import UOp as UOpClass
    assert UOp is UOpClass and sym_infer is symbolic_sym_infer and GlobalCounters is CountersClass
    from tinycore.device import Buffer
    assert Buffer is BufferClass
    with pytest.raises(AttributeError):
        importlib.import_module("tinycore.uop.ops").NotAName  # noqa: B018


def test_uop_variable_and_const_as_tinygrad_spells_them() -> None:
    from tinycore.uop.ops import Ops, UOp, sym_infer
    variable = UOp.variable("i", 1, 10)
    assert variable.op is Ops.DEFINE_VAR and variable.arg == ("i", 1, 10)
    assert sym_infer(variable * 3 + 4, {"i": 5}) == 19  # 5 * 3 + 4
    bound = variable.bind(7)
    assert bound.unbind() == (variable, 7)
    with pytest.raises(ValueError):
        variable.bind(11)
    five = UOp.const(5, dtypes.int32)  # tinygrad's order: value, then dtype
    assert five.op is Ops.CONST and five.dtype == dtypes.int32 and five.arg == 5
    assert UOp.const(2.5).dtype == dtypes.default_float and UOp.const(True).dtype == dtypes.bool
    assert UOp.const(7, dtype=dtypes.int64).dtype == dtypes.int64
    assert UOp.const(dtypes.float32, 2) is UOp.const(2.0, dtypes.float32)  # both orders build the same node
    with pytest.raises(TypeError):
        UOp.const(1, "not a dtype")


def test_helpers_temp_and_mv_address() -> None:
    import getpass

    from tinycore.helpers import mv_address, temp
    assert temp("cache.db") == str(pathlib.Path(tempfile.gettempdir()) / "cache.db")
    assert temp("cache.db", append_user=True).endswith(f"cache.db.{getpass.getuser()}")
    data = bytearray(b"\x01\x02\x03\x04")
    address = mv_address(memoryview(data))
    assert ctypes.string_at(address, 4) == b"\x01\x02\x03\x04"
    assert mv_address(memoryview(data)[2:]) == address + 2
    with pytest.raises(ValueError):
        mv_address(memoryview(b"read only"))


def test_global_counters_count_kernels_and_bytes() -> None:
    from tinycore.helpers import GlobalCounters
    source = Tensor(np.arange(1000, dtype=np.float32)).realize()
    GlobalCounters.reset()
    assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == (0, 0, 0)
    assert GlobalCounters.time_sum_s == 0.0
    total = (source * 2 + 1).sum().realize()
    assert total.item() == pytest.approx(2 * 499500 + 1000)
    assert GlobalCounters.kernel_count == 1  # one fused kernel, as tinygrad
    assert GlobalCounters.global_mem == 1000 * 4 + 4  # reads 1000 floats, writes one (tinygrad: 4004)
    assert GlobalCounters.global_ops >= 2 * 1000  # a multiply and an add per element, then the sum
    with Context(DEBUG=2):
        (source + 3).realize()
    assert GlobalCounters.kernel_count == 2 and GlobalCounters.time_sum_s > 0.0


def test_global_counters_mem_used_follows_allocations() -> None:
    from tinycore.helpers import GlobalCounters
    gc.collect()
    before = GlobalCounters.mem_used
    held = Tensor.empty(4096, dtype=dtypes.float32).realize()
    from tinycore.engine.memory import buffer_of
    from tinycore.schedule.fusion import view_base
    buffer = buffer_of(view_base(held.uop)).ensure_allocated()
    assert GlobalCounters.mem_used - before == 4096 * 4
    GlobalCounters.reset()  # mem_used is not reset (tinygrad's rule)
    assert GlobalCounters.mem_used - before == 4096 * 4
    device = buffer.device
    per_device = GlobalCounters.mem_used_per_device[device]
    buffer.deallocate()
    assert GlobalCounters.mem_used == before
    assert GlobalCounters.mem_used_per_device[device] == per_device - 4096 * 4


def test_context_default_float_and_int() -> None:
    with Context(DEFAULT_FLOAT="HALF"):
        assert dtypes.default_float == dtypes.float16
        assert Tensor([1.5]).dtype == dtypes.float16
        assert Tensor.rand(3).dtype == dtypes.float16
    assert dtypes.default_float == dtypes.float32
    with Context(DEFAULT_INT="int64"):
        assert Tensor([1, 2]).dtype == dtypes.int64
    assert Tensor([1, 2]).dtype == dtypes.int32
    with pytest.raises(ValueError, match="DEFAULT_FLOAT"), Context(DEFAULT_FLOAT="int32"):
        pass
    assert dtypes.default_float == dtypes.float32


def test_negative_learning_rate_is_a_value_error() -> None:
    from tinycore import nn
    weight = Tensor([1.0, 2.0], requires_grad=True)
    for optimizer in (nn.optim.SGD, nn.optim.Adam, nn.optim.AdamW, nn.optim.LAMB, nn.optim.LARS):
        with pytest.raises(ValueError, match="Invalid learning rate"):
            optimizer([weight], lr=-0.1)
    nn.optim.SGD([weight], lr=0.0)  # zero is allowed, as in tinygrad and torch


def test_load_state_dict_accepts_a_one_element_counter_of_either_shape() -> None:
    from tinycore import nn
    from tinycore.nn.state import load_state_dict
    norm = nn.BatchNorm(3)
    assert norm.num_batches_tracked.shape == ()
    state = {"weight": Tensor([1.0, 2.0, 3.0]), "bias": Tensor([0.5, 0.5, 0.5]),
             "running_mean": Tensor([0.0, 1.0, 2.0]), "running_var": Tensor([1.0, 1.0, 4.0]),
             "num_batches_tracked": Tensor([12], dtype=dtypes.int64)}  # shape (1,), as older writers save it
    load_state_dict(norm, state, verbose=False)
    assert norm.num_batches_tracked.shape == () and norm.num_batches_tracked.item() == 12
    state["num_batches_tracked"] = Tensor([12, 13], dtype=dtypes.int64)
    with pytest.raises(ValueError, match="num_batches_tracked"):
        load_state_dict(norm, state, verbose=False)


def test_small_helpers_tinygrad_programs_use(capsys: pytest.CaptureFixture[str]) -> None:
    from tinycore.helpers import Timing, flat_mv, from_mv, merge_dicts, partition, round_down, to_mv
    assert round_down(17, 8) == 16 and round_down(16, 8) == 16
    assert partition([1, 2, 3, 4, 5], lambda value: value % 2 == 1) == ([1, 3, 5], [2, 4])
    assert merge_dicts([{"a": 1}, {"b": 2}, {"a": 1}]) == {"a": 1, "b": 2}
    with pytest.raises(RuntimeError, match="'a'"):
        merge_dicts([{"a": 1}, {"a": 2}])
    grid = memoryview(bytearray(range(12))).cast("B", shape=(3, 4))
    assert flat_mv(grid).shape == (12,) and flat_mv(grid).tolist() == list(range(12))
    data = bytearray(b"abcdef")
    view = to_mv(ctypes.addressof(ctypes.c_char.from_buffer(data)), 6)
    view[0] = ord("z")  # the same memory, not a copy
    assert data == bytearray(b"zbcdef")
    array = from_mv(memoryview(data))
    assert len(array) == 6 and array.raw == b"zbcdef"
    with Timing("step: ", on_exit=lambda nanoseconds: f" ({nanoseconds >= 0})") as timer:
        sum(range(1000))
    printed = capsys.readouterr().out
    assert printed.startswith("step: ") and printed.rstrip().endswith("ms (True)") and timer.et >= 0


def test_canonicalize_device_as_tinygrad() -> None:
    from tinycore.device import Device, canonicalize_device
    assert canonicalize_device("cpu") == "CPU" and canonicalize_device("CPU:0") == "CPU"
    assert canonicalize_device("cpu:1") == "CPU:1" and canonicalize_device(None) == Device.DEFAULT
    assert canonicalize_device(("cpu", "CPU:1")) == ("CPU", "CPU:1") and canonicalize_device(["cpu"]) == "CPU"
