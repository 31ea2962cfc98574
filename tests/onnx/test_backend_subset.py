"""A representative part of onnx's backend test suite, in the default tests: a few cases of each operator family
(elementwise, convolution and pooling, shapes, reductions, normalization, Resize, recurrent, control flow,
quantized, detection, attention, strings). The whole suite is `nox -s onnx_backend`."""
from __future__ import annotations

import pytest

pytest.importorskip("onnx")
from backend_suite import build_suite, cpu_cases  # noqa: E402

REPRESENTATIVE = [
    "abs", "add_bcast", "relu", "erf", "celu", "gelu_tanh_2", "where_example", "mod_mixed_sign_int32",
    "cast_FLOAT_to_FLOAT16", "conv_with_strides_padding", "convtranspose_pads", "gemm_all_attributes", "matmul_3d",
    "einsum_batch_matmul", "maxpool_2d_pads", "averagepool_2d_pads_count_include_pad", "lrn",
    "softmax_axis_1", "hardmax_example", "reduce_mean_keepdims_random", "argmax_keepdims_random_select_last_index",
    "top_k", "cumsum_1d_exclusive", "reshape_negative_dim", "slice_neg_steps", "gather_2d_indices",
    "gathernd_example_int32_batch_dim1", "scatternd", "concat_2d_axis_0", "split_variable_parts_2d_opset18",
    "expand_dim_changed", "tile", "reflect_pad", "wrap_pad", "unsqueeze_negative_axes", "onehot_with_negative_axis",
    "depthtospace_crd_mode_example", "range_float_type_positive_delta", "batchnorm_epsilon", "instancenorm_example",
    "layer_normalization_4d_axis1", "resize_upsample_scales_linear", "resize_downsample_scales_cubic",
    "lstm_with_peepholes", "gru_seq_length", "rnn_seq_length", "if", "loop11", "scan9_sum",
    "sequence_insert_at_back", "quantizelinear_axis", "dequantizelinear_blocked", "qlinearmatmul_2D_uint8_float32",
    "qlinearconv", "matmulinteger", "convinteger_with_padding", "dynamicquantizelinear",
    "nonmaxsuppression_suppress_by_IOU", "roialign_aligned_false", "attention_4d_gqa", "sce_mean_weight",
    "string_split_maxsplit", "equal_string_broadcast", "strnormalizer_export_monday_insensintive_upper_twodim",
    "ai_onnx_ml_label_encoder_tensor_mapping", "regex_full_match_email_domain", "string_concat_broadcasting",
    "ai_onnx_ml_tree_ensemble_set_membership", "attention_4d_fp16", "attention_4d_causal_fp16_expanded",
    "causal_conv_with_state_silu_fp16",
]
"""Node cases (test_NAME) that tinycore passes and that together touch every operator file."""

globals().update(cpu_cases(build_suite(__name__, REPRESENTATIVE)))
