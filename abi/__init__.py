"""Input/output ABI contract: records, validation, diff, frame geometry.

Importers name the module they need (``from abi.records import Abi``): the package itself loads nothing, so
reading a package's ABI (abi.records) pulls in neither onnx (abi.infer) nor yaml (abi.vehicle). The modules:
``records`` (Abi and its records), ``infer`` (ONNX -> Abi), ``load`` (.onnx / .abi.json / .dpk), ``validate``
(runtime checks), ``diff`` (abi-diff), ``check`` (abi-check), ``vehicle`` (vehicles/*.yaml), ``errors``.
"""
