"""nn layers and load_state_dict as tinygrad programs use them: state dicts loaded into models sharded over several
devices, one-element counters saved as () or (1,), shape mismatches, Embedding's kernels. Oracles: the state dict's
own values (numpy) and hand-counted kernels."""
import numpy as np
import pytest

from tinycore import Device, GlobalCounters, Tensor, dtypes
from tinycore.nn import BatchNorm, Conv2d, Embedding, Linear
from tinycore.nn.state import get_state_dict, load_state_dict


def _devices(count: int) -> tuple[str, ...]:
    return tuple(f"{Device.DEFAULT}:{index}" for index in range(1, count + 1))


def _conv_state() -> dict[str, Tensor]:
    rng = np.random.default_rng(0)
    return {"weight": Tensor(rng.normal(size=(5, 3, 3, 3)).astype(np.float32)),
            "bias": Tensor(rng.normal(size=(5,)).astype(np.float32))}


def test_a_sharded_model_shards_a_single_device_state_dict_on_its_own_axes() -> None:
    layer = Conv2d(3, 5, kernel_size=3)
    layer.weight.shard_(_devices(3), 3)
    layer.bias.shard_(_devices(3), None)
    state = _conv_state()
    expected = {key: value.numpy() for key, value in state.items()}
    load_state_dict(layer, state)
    assert layer.weight.device == _devices(3) and layer.weight.uop.axis == 3
    assert layer.bias.device == _devices(3) and layer.bias.uop.axis is None
    np.testing.assert_equal(layer.weight.numpy(), expected["weight"])
    np.testing.assert_equal(layer.bias.numpy(), expected["bias"])


def test_a_single_device_model_gathers_a_sharded_state_dict() -> None:
    layer = Conv2d(3, 5, kernel_size=3)
    state = _conv_state()
    expected = {key: value.numpy() for key, value in state.items()}
    load_state_dict(layer, {"weight": state["weight"].shard(_devices(3), 3),
                            "bias": state["bias"].shard(_devices(3), None)})
    assert layer.weight.device == Device.DEFAULT and layer.bias.device == Device.DEFAULT
    np.testing.assert_equal(layer.weight.numpy(), expected["weight"])
    np.testing.assert_equal(layer.bias.numpy(), expected["bias"])


def test_a_sharded_state_dict_keeps_its_own_sharding_in_a_sharded_model() -> None:
    layer = Conv2d(3, 5, kernel_size=3)
    layer.weight.shard_(_devices(3), 3)
    layer.bias.shard_(_devices(3), None)
    state = _conv_state()
    expected = {key: value.numpy() for key, value in state.items()}
    load_state_dict(layer, {"weight": state["weight"].shard(_devices(3), None),
                            "bias": state["bias"].shard(_devices(5), 0)})
    assert layer.weight.device == _devices(3) and layer.weight.uop.axis is None
    assert layer.bias.device == _devices(5) and layer.bias.uop.axis == 0
    np.testing.assert_equal(layer.weight.numpy(), expected["weight"])
    np.testing.assert_equal(layer.bias.numpy(), expected["bias"])


@pytest.mark.parametrize("saved_shape", [(), (1,)])
def test_num_batches_tracked_loads_whether_saved_as_a_scalar_or_one_element(saved_shape: tuple[int, ...]) -> None:
    norm = BatchNorm(4)
    state = {key: value.numpy() for key, value in get_state_dict(norm).items()}
    counter = np.array(7, dtype=state["num_batches_tracked"].dtype).reshape(saved_shape)
    loaded = {key: Tensor(value) for key, value in state.items()}
    loaded["num_batches_tracked"] = Tensor(counter)
    load_state_dict(norm, loaded)
    assert norm.num_batches_tracked.shape == state["num_batches_tracked"].shape
    np.testing.assert_equal(norm.num_batches_tracked.numpy().reshape(-1), [7])


def test_a_shape_mismatch_is_a_value_error_naming_the_key_and_both_shapes() -> None:
    layer = Linear(2, 2, bias=False)
    with pytest.raises(ValueError, match=r"`weight`.*\(2, 2\).*\(4, 4\)"):
        load_state_dict(layer, {"weight": Tensor.ones(4, 4)})


def test_embedding_of_a_realized_table_is_one_kernel() -> None:
    layer = Embedding(20, 30)
    layer.weight = Tensor.zeros_like(layer.weight).contiguous().realize()
    indices = Tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]).realize()
    GlobalCounters.reset()
    result = layer(indices).realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_equal(result.numpy(), np.zeros((3, 3, 30), np.float32))


def test_load_state_dict_casts_to_the_model_dtype_as_torch() -> None:
    import torch as torch_module

    saved = {"weight": np.arange(6, dtype=np.float16).reshape(2, 3) / 4, "bias": np.array([0.5, -1.5], np.float16)}
    reference = torch_module.nn.Linear(3, 2)
    reference.load_state_dict({key: torch_module.tensor(value) for key, value in saved.items()})
    layer = Linear(3, 2)
    load_state_dict(layer, {key: Tensor(value) for key, value in saved.items()}, verbose=False)
    assert layer.weight.dtype == dtypes.float32
    np.testing.assert_equal(layer.weight.numpy(), reference.weight.detach().numpy())
    np.testing.assert_equal(layer.bias.numpy(), reference.bias.detach().numpy())


def test_load_state_dict_float_num_batches_tracked_into_batchnorm() -> None:
    import torch as torch_module

    reference = torch_module.nn.BatchNorm2d(2)
    reference.load_state_dict({"weight": torch_module.ones(2), "bias": torch_module.zeros(2),
                               "running_mean": torch_module.zeros(2), "running_var": torch_module.ones(2),
                               "num_batches_tracked": torch_module.tensor(3.0)})
    norm = BatchNorm(2)
    load_state_dict(norm, {"weight": Tensor.ones(2), "bias": Tensor.zeros(2), "running_mean": Tensor.zeros(2),
                           "running_var": Tensor.ones(2), "num_batches_tracked": Tensor(3.0)}, verbose=False)
    assert norm.num_batches_tracked.dtype == dtypes.int64
    np.testing.assert_equal(norm.num_batches_tracked.numpy(), reference.num_batches_tracked.numpy())


def test_load_state_dict_shape_mismatch_message_as_tinygrad() -> None:
    with pytest.raises(ValueError, match=r"Shape mismatch in layer `weight`: Expected shape \(2, 2\), but found "
                                         r"\(4, 4\) in state dict\."):
        load_state_dict(Linear(2, 2, bias=False), {"weight": Tensor.ones(4, 4)})
