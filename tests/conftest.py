import logging
import os

import pytest

# Hypothesis and the SPIR-V cache write under the test run's own folders, never the user's home.
os.environ.setdefault("VKINFER_CACHE", os.path.join(os.path.dirname(__file__), "..", "build", "cache"))


@pytest.fixture(scope="module")
def quiet_quantizer():
    """onnxruntime.quantization.quantize_static suggests pre-processing on every call: silence it for a module
    (use with `pytestmark = pytest.mark.usefixtures("quiet_quantizer")`)."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)
