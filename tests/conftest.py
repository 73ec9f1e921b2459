"""Shared fixtures. The catalog database is built into a temporary folder per test run."""

import os
import tempfile
from pathlib import Path

import pytest

# Build the DuckDB catalog outside the working tree for the whole run (before any import).
os.environ.setdefault("LLM_PLANNER_BUILD_DIR", tempfile.mkdtemp(prefix="llm-planner-test-"))
os.environ["LLM_PLANNER_USER_CATALOG"] = os.path.join(tempfile.mkdtemp(prefix="llm-planner-user-"), "user_catalog.yaml")  # never ~/.llm-planner

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def cat():
    from catalog import default_catalog
    return default_catalog()


@pytest.fixture(scope="session")
def models(cat):
    return cat.models()


@pytest.fixture(scope="session")
def gpus(cat):
    return cat.gpus()
