"""Write the official ONNX node test cases (shipped as Python in the onnx wheel) to a folder, offline.

Layout is the one onnx's BackendTest reads: OUT/node/<case>/model.onnx and test_data_set_N/{input,output}_M.pb.
Cases whose data are not plain tensors (sequences, maps, optionals) are left out.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from onnx import numpy_helper


def _proto(value: object, name: str) -> object:
    # some cases ship their data as TensorProto already (fp8, int4, ...), others as numpy arrays
    return value if hasattr(value, "SerializeToString") else numpy_helper.from_array(value, name)


def generate(out: Path) -> int:
    warnings.simplefilter("ignore")
    import onnx.backend.test.case.node as node_cases
    written = 0
    for case in node_cases.collect_testcases():
        graph = case.model.graph
        try:
            blobs = {}
            for i, (inputs, outputs) in enumerate(case.data_sets):
                for j, x in enumerate(inputs):
                    blobs[f"test_data_set_{i}/input_{j}.pb"] = _proto(x, graph.input[j].name)
                for j, y in enumerate(outputs):
                    blobs[f"test_data_set_{i}/output_{j}.pb"] = _proto(y, graph.output[j].name)
        except Exception:  # noqa: BLE001, S112 - non-tensor data: not a tensor case
            continue
        folder = out / case.kind / case.name
        for rel, proto in blobs.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(proto.SerializeToString())  # type: ignore[attr-defined]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(case.model.SerializeToString())
        written += 1
    return written


if __name__ == "__main__":
    print(f"wrote {generate(Path(sys.argv[1]))} cases")
