"""Tests per op: tests/ops/test_<op>.py crosses a shape table with every device against ONNX Runtime, litert or
the reference, and asserts where each node ran."""
