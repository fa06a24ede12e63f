"""Differential fuzzing of vkinfer (issue 26): the ONNX importer, the TFLite importer and `InferenceSession.run`,
seeded from the zoos, every input compared across the reference, cpu and vulkan devices.

- `seeds`: the small seed models; `mutate`: structure-aware ONNX (protobuf) and TFLite (flatbuffer) edits;
- `check`: the differential check and the findings (a non-clean exception, a disagreement, a hang, a crash, a
  runaway allocation) written as inputs with what happened;
- `targets`: the three targets; `engine`: the plain seeded loop and atheris, each in a watched child process;
- `python -m vkinfer.testing.fuzz` (`make fuzz`): a campaign, or `check` of kept inputs (docs/development.md).
"""

from __future__ import annotations

from .check import DEVICES, Finding, check_input, check_model, read_input

__all__ = ["DEVICES", "Finding", "check_input", "check_model", "read_input"]
