"""Shared paths of the Python package's tests (run by the lit tests beside
this file, or by hand: PYTHONPATH=build/python_packages python -m pytest
test/Python with moe-train on PATH)."""
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INPUTS = os.path.join(ROOT, "test", "Integration", "Inputs")
# reference.py: the float64 numpy reference written from the families'
# definitions, sharing no code with the compiler or the runtime.
sys.path.insert(0, os.path.join(ROOT, "test", "Integration"))


def tool(name):
    """The path of a tool on PATH; the test is skipped without it."""
    path = shutil.which(name)
    if not path:
        pytest.skip(name + " is not on PATH")
    return path


@pytest.fixture
def moe_train():
    return tool("moe-train")


@pytest.fixture
def moe_compile():
    return tool("moe-compile")
