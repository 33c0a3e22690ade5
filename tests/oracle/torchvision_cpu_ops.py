"""Lets the PyPI torchvision wheel import next to the CPU build of torch.

torchvision's wheels on PyPI link the CUDA libraries of torch; next to the CPU build its ops
library fails to load, and the import then dies registering fake kernels for the two ops it
declares unconditionally (``torchvision::nms`` and ``torchvision::qnms``). SGLang imports
torchvision at module level, so the oracle declares those two schemas (the same ones
torchvision's C++ library declares) just before torchvision is first imported. Nothing in
SGLang's argument parser calls them.
"""
import importlib.abc
import sys

_SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


class _DeclareOpsBeforeTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            import torch

            for name, schema in _SCHEMAS.items():
                torch.library.define("torchvision::" + name, schema)
        return None  # the regular finders import the real torchvision


def install():
    """Called from a .pth file, which site may process more than once."""
    if not any(isinstance(finder, _DeclareOpsBeforeTorchvision) for finder in sys.meta_path):
        sys.meta_path.insert(0, _DeclareOpsBeforeTorchvision())
