"""protege's integer conversions for dkimpy give exactly what dkimpy's own give."""

from __future__ import annotations

import importlib.util
import random
import sys

import pytest

from protege.authentication.signatures import bytes_to_int, int_to_bytes


@pytest.fixture(scope="module")
def original():
    """dkimpy's crypto module as shipped, loaded apart from the one protege speeds up."""
    import dkim.crypto

    spec = importlib.util.spec_from_file_location("dkim_crypto_as_shipped", dkim.crypto.__file__)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dkim_crypto_as_shipped", module)
    spec.loader.exec_module(module)
    return module


def test_int_to_bytes_matches_dkimpy(original):
    chance = random.Random(8301)
    numbers = [0, 1, 255, 256, 2**2048 - 1] + [
        chance.getrandbits(chance.randint(1, 4096)) for _ in range(500)
    ]
    for number in numbers:
        for length in (-1, 0, 1, 2, 128, 256, 513):
            assert int_to_bytes(number, length) == original.int2str(number, length), (
                number,
                length,
            )


def test_bytes_to_int_matches_dkimpy(original):
    chance = random.Random(6376)
    for size in [0, 1, 2, 3, 255, 256, 512]:
        data = bytes(chance.getrandbits(8) for _ in range(size))
        assert bytes_to_int(data) == original.str2int(data)
        assert bytes_to_int(bytearray(data)) == original.str2int(bytearray(data))
