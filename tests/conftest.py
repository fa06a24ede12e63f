import os

# Hypothesis and the SPIR-V cache write under the test run's own folders, never the user's home.
os.environ.setdefault("VKINFER_CACHE", os.path.join(os.path.dirname(__file__), "..", "build", "cache"))
