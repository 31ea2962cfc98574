"""Detection ONNX operators: NonMaxSuppression and RoiAlign.

Both have outputs whose size or sampling depends on the box values, so they run on the host (numpy) on the
realized inputs; the results are copied back to the inputs' device.
"""
from __future__ import annotations

import numpy as np

from tinycore.nn.onnx.common import host_tensor, scalar_of
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2."""
    if center_point_box:
        x, y, width, height = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        return np.stack([y - height / 2, x - width / 2, y + height / 2, x + width / 2], -1)
    y1, x1, y2, x2 = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], -1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    top, left = np.maximum(box[0], others[:, 0]), np.maximum(box[1], others[:, 1])
    bottom, right = np.minimum(box[2], others[:, 2]), np.minimum(box[3], others[:, 3])
    inter = np.clip(bottom - top, 0, None) * np.clip(right - left, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


@onnx_op("NonMaxSuppression", 10)
def non_max_suppression(boxes: Tensor, scores: Tensor, max_output_boxes_per_class: Tensor | None = None,
                        iou_threshold: Tensor | None = None, score_threshold: Tensor | None = None,
                        center_point_box: int = 0) -> Tensor:
    """Greedy per-class suppression: (batch, class, box) int64 rows of the kept boxes, best score first."""
    limit = int(scalar_of(max_output_boxes_per_class)) if max_output_boxes_per_class is not None else 0
    overlap = float(scalar_of(iou_threshold)) if iou_threshold is not None else 0.0
    floor = float(scalar_of(score_threshold)) if score_threshold is not None else None
    all_boxes = _corners(boxes.numpy().astype(np.float64), center_point_box)
    all_scores = scores.numpy().astype(np.float64)
    selected: list[tuple[int, int, int]] = []
    for batch in range(all_scores.shape[0]):
        for klass in range(all_scores.shape[1]):
            if limit <= 0:
                continue
            class_scores = all_scores[batch, klass]
            order = np.argsort(-class_scores, kind="stable")
            if floor is not None:
                order = order[class_scores[order] > floor]
            kept: list[int] = []
            for index in order:
                if len(kept) >= limit:
                    break
                if kept and np.any(_iou(all_boxes[batch, index], all_boxes[batch, kept]) > overlap):
                    continue
                kept.append(int(index))
            selected += [(batch, klass, index) for index in kept]
    return host_tensor(np.array(selected, dtype=np.int64).reshape(-1, 3), boxes.device)


def _bilinear(plane: np.ndarray, y: float, x: float) -> float:
    height, width = plane.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    low_y, low_x = int(y), int(x)
    if low_y >= height - 1:
        low_y = high_y = height - 1
        y = float(low_y)
    else:
        high_y = low_y + 1
    if low_x >= width - 1:
        low_x = high_x = width - 1
        x = float(low_x)
    else:
        high_x = low_x + 1
    ly, lx = y - low_y, x - low_x
    hy, hx = 1 - ly, 1 - lx
    return (hy * hx * plane[low_y, low_x] + hy * lx * plane[low_y, high_x] + ly * hx * plane[high_y, low_x]
            + ly * lx * plane[high_y, high_x])


def _roi_align(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, mode: str, output_height: int,
               output_width: int, sampling_ratio: int, spatial_scale: float, half_pixel: bool) -> np.ndarray:
    result = np.zeros((rois.shape[0], x.shape[1], output_height, output_width), dtype=x.dtype)
    offset = 0.5 if half_pixel else 0.0
    for roi_index, roi in enumerate(rois):
        start_x, start_y, end_x, end_y = roi * spatial_scale - offset
        width, height = end_x - start_x, end_y - start_y
        if not half_pixel:
            width, height = max(width, 1.0), max(height, 1.0)
        bin_h, bin_w = height / output_height, width / output_width
        grid_h = sampling_ratio if sampling_ratio > 0 else int(np.ceil(height / output_height))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(np.ceil(width / output_width))
        count = max(grid_h * grid_w, 1)
        image = x[int(batch_indices[roi_index])]
        for channel in range(x.shape[1]):
            plane = image[channel]
            for row in range(output_height):
                for column in range(output_width):
                    samples = [_bilinear(plane, start_y + row * bin_h + (iy + 0.5) * bin_h / grid_h,
                                         start_x + column * bin_w + (ix + 0.5) * bin_w / grid_w)
                               for iy in range(grid_h) for ix in range(grid_w)]
                    result[roi_index, channel, row, column] = (max(samples) if mode == "max" and samples else
                                                               sum(samples) / count)
    return result


@onnx_op("RoiAlign", 10)
def roi_align_10(x: Tensor, rois: Tensor, batch_indices: Tensor, mode: str = "avg", output_height: int = 1,
                 output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> Tensor:
    """RoiAlign with the output_half_pixel coordinates of opset 10."""
    return roi_align(x, rois, batch_indices, "output_half_pixel", mode, output_height, output_width,
                     sampling_ratio, spatial_scale)


@onnx_op("RoiAlign", 16)
def roi_align(x: Tensor, rois: Tensor, batch_indices: Tensor, coordinate_transformation_mode: str = "half_pixel",
              mode: str = "avg", output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
              spatial_scale: float = 1.0) -> Tensor:
    """Average (or max) of bilinear samples over each bin of each region of interest."""
    values = _roi_align(x.numpy(), rois.numpy().astype(np.float64), batch_indices.numpy(), mode, output_height,
                        output_width, sampling_ratio, spatial_scale, coordinate_transformation_mode == "half_pixel")
    return Tensor(values, device=x.device)
