"""Tests per op: tests/ops/test_<op>.py crosses a shape table with every device against ONNX Runtime, litert or
the reference, and asserts where each node ran. A package so that pytest's default import mode puts tests/ (agree.py,
ort_oracle.py, cases.py) on sys.path and the module names do not clash with tests/test_*.py."""
