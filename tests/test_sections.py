"""The prompt-section contract: the values plugins return and the resolvers hosts declare."""

import pytest

from protege import PromptSection, Resolver, Trust
from protege.sections import section_name_for


def test_a_section_is_trusted_unless_marked_and_takes_trust_by_its_name():
    assert PromptSection("hours", "Nine to five.").trust is Trust.TRUSTED
    assert PromptSection("notes", "x", "untrusted").trust is Trust.UNTRUSTED


@pytest.mark.parametrize("name", ["", "Hours", "two words", "9lives", "x" * 65, None])
def test_a_section_name_the_model_could_not_read_as_a_heading_is_refused(name):
    with pytest.raises(ValueError, match="must match"):
        PromptSection(name, "text")


def test_a_section_text_must_be_text():
    with pytest.raises(TypeError):
        PromptSection("hours", 42)


def test_a_resolver_is_named_after_its_class():
    assert section_name_for("OpenOrdersResolver") == "open_orders"
    assert section_name_for("HTTPStatusResolver") == "http_status"

    class ShopHoursResolver(Resolver):
        def resolve(self, context):
            return "Nine to five."

    assert ShopHoursResolver.name == "shop_hours"
    assert not ShopHoursResolver.abstract
    assert Resolver.abstract
