"""Passes by name: the native ones from the core, plus any registered from Python."""

from __future__ import annotations

from pyonnxopt import _core
from pyonnxopt.fusion.rules import BUILTIN_RULES
from pyonnxopt.fusion.rules.cancel_reshapes_around_matmul import CancelReshapesAroundMatmul
from pyonnxopt.fusion.rules.cancel_reshapes_around_transpose import CancelReshapesAroundTranspose
from pyonnxopt.fusion.rules.collapse_symbolic_reshapes import CollapseSymbolicReshapes
from pyonnxopt.fusion.rules.eliminate_same_shape_expands import EliminateSameShapeExpands
from pyonnxopt.fusion.rules.eliminate_same_shape_reshapes import EliminateSameShapeReshapes
from pyonnxopt.fusion.rules.eliminate_same_shape_slices import EliminateSameShapeSlices
from pyonnxopt.fusion.rules.eliminate_true_and import EliminateTrueAnd
from pyonnxopt.fusion.rules.gather_own_positions import GatherOwnPositions
from pyonnxopt.fusion.rules.select_concat_entries import SelectConcatEntries
from pyonnxopt.fusion.rules.squeeze_into_reshape import SqueezeIntoReshape
from pyonnxopt.fusion.rules.transpose_before_unsqueeze import TransposeBeforeUnsqueeze
from pyonnxopt.fusion.rules.unsqueeze_into_gather import UnsqueezeIntoGather
from pyonnxopt.passes.base import NativePass, Pass
from pyonnxopt.passes.eliminate_zero_rnn_states import EliminateZeroRnnStates
from pyonnxopt.passes.flatten_linear_rows import FlattenLinearRows
from pyonnxopt.passes.fold_constants_onnxruntime import FoldConstantsOnnxruntime
from pyonnxopt.passes.infer_shapes import InferShapes
from pyonnxopt.passes.merge_equal_dims import MergeEqualDims
from pyonnxopt.passes.resolve_dynamic_reshapes import ResolveDynamicReshapes
from pyonnxopt.passes.share_branch_constants import ShareBranchConstants
from pyonnxopt.passes.slices_to_split import SlicesToSplit

_PASSES: dict = {name: NativePass(name, description) for name, description in _core.native_passes()}
# Its forms hide the head split fuse_attention reads: it waits for the fusions.
_PASSES["regroup_transposes"].after_cleanup = _PASSES["regroup_transposes"].after_fusions = True
for _p in (InferShapes(), EliminateZeroRnnStates(), FoldConstantsOnnxruntime(), ResolveDynamicReshapes(),
           SlicesToSplit(), MergeEqualDims(), ShareBranchConstants(), EliminateSameShapeReshapes(),
           EliminateSameShapeExpands(), EliminateSameShapeSlices(), SelectConcatEntries(), GatherOwnPositions(),
           CollapseSymbolicReshapes(), EliminateTrueAnd(),
           CancelReshapesAroundTranspose(),
           TransposeBeforeUnsqueeze(), CancelReshapesAroundMatmul(), SqueezeIntoReshape(),
           *BUILTIN_RULES, FlattenLinearRows(), UnsqueezeIntoGather()):
    _PASSES[_p.name] = _p

# The default pipeline's order; passes registered later run after these.
DEFAULT_ORDER = [
    "infer_shapes", "eliminate_identity", "eliminate_dropout", "eliminate_nop", "eliminate_zero_rnn_states",
    "simplify_algebra", "fold_constants", "fold_constants_onnxruntime", "resolve_dynamic_reshapes", "slices_to_split",
    "optimize_transposes",
    "collapse_reshapes", "eliminate_same_shape_reshapes", "select_concat_entries", "eliminate_same_shape_expands",
    "eliminate_same_shape_slices", "gather_own_positions", "collapse_symbolic_reshapes", "eliminate_true_and",
    "cancel_reshapes_around_transpose", "transpose_before_unsqueeze", "cancel_reshapes_around_matmul",
    "squeeze_into_reshape",
    *(r.name for r in BUILTIN_RULES), "regroup_transposes", "flatten_linear_rows", "unsqueeze_into_gather", "merge_equal_dims",
    "eliminate_common_subexpressions", "share_branch_constants", "eliminate_dead_code",
]


def register(p: Pass) -> Pass:
    """Adds a pass under `p.name`; a name may be registered once."""
    if not p.name or p.name in _PASSES:
        raise ValueError(f"pass name {p.name!r} is empty or taken")
    _PASSES[p.name] = p
    return p


def unregister(name: str) -> None:
    """Removes a pass registered from Python (native passes stay)."""
    if isinstance(_PASSES.get(name), NativePass):
        raise ValueError(f"{name!r} is a native pass")
    _PASSES.pop(name, None)


def get(name: str) -> Pass:
    try:
        return _PASSES[name]
    except KeyError:
        raise KeyError(f"unknown pass {name!r}; known: {', '.join(sorted(_PASSES))}") from None


def all_passes() -> list:
    """Every pass, in the default pipeline's order."""
    rank = {name: i for i, name in enumerate(DEFAULT_ORDER)}
    return sorted(_PASSES.values(), key=lambda p: rank.get(p.name, len(rank)))
