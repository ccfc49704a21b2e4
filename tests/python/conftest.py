import os

import numpy as np
import pytest

import clattn


@pytest.fixture(scope="session")
def ctx():
    return clattn.Context(os.environ.get("CLATTN_TEST_DEVICE") or None)


@pytest.fixture
def rng(request):
    # Seeded per test (name-derived) so a failure replays; the seed is in the test id.
    seed = abs(hash(request.node.name)) % (2**31)
    print(f"seed={seed}")
    return np.random.default_rng(seed)
