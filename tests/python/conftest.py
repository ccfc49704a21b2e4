import os
import zlib

import numpy as np
import pytest

import clattn


def pytest_addoption(parser):
    parser.addoption("--clattn-device", default=None,
                     help="device for the suite: an index of clattn.devices(), a vendor or a name part "
                          "(default: $CLATTN_TEST_DEVICE, else clattn's default: $CLATTN_DEVICE, first GPU, first CPU)")


@pytest.fixture(scope="session")
def ctx(request):
    dev = request.config.getoption("--clattn-device") or os.environ.get("CLATTN_TEST_DEVICE") or None
    c = clattn.Context(dev)
    # Functions without a tensor argument run on the default context: the same device.
    clattn.set_default_context(c)
    print(f"clattn device: {c.device_name}")
    return c


@pytest.fixture
def rng(request):
    # Deterministic per test (crc32 of its name), or CLATTN_TEST_SEED; printed on failure.
    env = os.environ.get("CLATTN_TEST_SEED")
    seed = int(env) if env else zlib.crc32(request.node.name.encode())
    print(f"seed={seed} (replay: CLATTN_TEST_SEED={seed})")
    return np.random.default_rng(seed)
