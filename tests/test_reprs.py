"""The shared repr of protege's value classes: what attrs' own showed, secrets left out."""

import attrs

from protege.config import BlobSettings, ModelSettings
from protege.reprs import fields_repr


def test_fields_are_shown_by_name_in_order():
    @attrs.frozen(repr=False)
    class Point:
        __repr__ = fields_repr

        x: int
        label: str = "origin"
        hidden: str = attrs.field(default="s3cr3t", repr=False)
        shouted: str = attrs.field(default="hi", repr=lambda value: value.upper())

    assert repr(Point(1)) == "Point(x=1, label='origin', shouted=HI)"


def test_secrets_in_the_configuration_never_show():
    model = ModelSettings(model="gpt-x", api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(model)
    assert repr(model).startswith("ModelSettings(")
    assert "model='gpt-x'" in repr(model)
    blobs = BlobSettings(secret_access_key="AWS-SECRET", access_key_id="AKIA-ID")
    assert "AWS-SECRET" not in repr(blobs)
    assert "AKIA-ID" not in repr(blobs)
