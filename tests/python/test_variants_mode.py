# Portable-only mode as a Context option (variants=): shown in the profile; a bad value is an
# error naming the option.
import pytest

import clattn


def test_context_variants_option(ctx):
    dev = ctx.device_index
    assert clattn.Context(dev, variants="portable").profile["portable_only"] is True
    assert clattn.Context(dev, variants="all").profile["portable_only"] is False
    with pytest.raises(clattn.Error) as ei:
        clattn.Context(dev, variants="fastest")
    assert "variants" in str(ei.value)
