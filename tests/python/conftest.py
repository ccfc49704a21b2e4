import os
import zlib

import numpy as np
import pytest

import clattn


@pytest.fixture(scope="session")
def ctx():
    return clattn.Context(os.environ.get("CLATTN_TEST_DEVICE") or None)


@pytest.fixture
def rng(request):
    # Deterministic per test (crc32 of its name), or CLATTN_TEST_SEED; printed on failure.
    env = os.environ.get("CLATTN_TEST_SEED")
    seed = int(env) if env else zlib.crc32(request.node.name.encode())
    print(f"seed={seed} (replay: CLATTN_TEST_SEED={seed})")
    return np.random.default_rng(seed)
