"""The settings' sections: every setting names a known one, a section's settings are declared together in
SECTIONS order (so streams/settings.py reads section by section), and code still reads each setting flat."""

import dataclasses

import pytest

from streams import settings as settings_mod
from streams.settings import SECTIONS, Settings, describe


def test_every_setting_is_in_a_known_section_declared_together_in_sections_order():
    declared = [f.metadata["section"] for f in dataclasses.fields(Settings)]
    assert set(declared) == set(SECTIONS), "a section with no setting, or a setting in no known section"
    runs = [section for i, section in enumerate(declared) if i == 0 or declared[i - 1] != section]
    assert runs == list(SECTIONS), "a section's settings are split up, or sections are out of SECTIONS order"


def test_describe_groups_by_section_and_code_reads_settings_flat():
    settings = settings_mod.load({"JEV_CACHE_MAX_ENTRIES": "7", "JEV_GATEWAY_TIMEOUT_S": "2.5"})
    assert (settings.cache_max_entries, settings.gateway_timeout_s) == (7, 2.5)
    rows = describe(settings)
    assert len(rows) == len(dataclasses.fields(Settings))
    assert ("cache", "JEV_CACHE_MAX_ENTRIES", "7") in [row[:3] for row in rows]
    assert ("gateway", "JEV_GATEWAY_TIMEOUT_S", "2.5") in [row[:3] for row in rows]


def test_a_setting_in_an_unknown_section_names_the_known_ones():
    with pytest.raises(ValueError, match="none of kafka, admission"):
        settings_mod._doc("caches", 1, "a typo'd section")
