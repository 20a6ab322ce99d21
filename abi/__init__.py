"""Input/output ABI contract: records, validation, diff, frame geometry.

The public names are re-exported here: ``Abi`` and its records, ``infer_abi`` (ONNX -> Abi), ``load_abi``
(.onnx / .abi.json / .dpk hook), ``validate`` / ``validate_packed`` (runtime checks), ``diff`` (abi-diff),
``check_role`` (abi-check), ``load_vehicle`` (vehicles/*.yaml) and ``AbiError``.
"""

from abi.check import check_role, match_role
from abi.diff import Change, diff
from abi.errors import AbiError, AbiFileError, AbiIssue, ProfileError
from abi.infer import infer_abi
from abi.layout import pack_inputs
from abi.load import load_abi, save_abi
from abi.records import Abi, CameraSemantics, HistorySemantics, OutputSpec, TensorSpec
from abi.validate import validate, validate_packed
from abi.vehicle import VehicleProfile, load_vehicle

__all__ = ["Abi", "AbiError", "AbiFileError", "AbiIssue", "CameraSemantics", "Change", "HistorySemantics",
           "OutputSpec", "ProfileError", "TensorSpec", "VehicleProfile", "check_role", "diff", "infer_abi",
           "load_abi", "load_vehicle", "match_role", "pack_inputs", "save_abi", "validate", "validate_packed"]
