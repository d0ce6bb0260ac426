"""records.replace: a record with some fields changed, whether it is a msgspec Struct or one of
the records that stay dataclasses (docs/design.md, "Records are msgspec Structs")."""
import pytest

from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.probing.driver import DriverFacts
from cudnn_setup.records import replace


def test_a_struct_and_a_dataclass_are_changed_alike():
    facts = DriverFacts(status="pass", reason="NVML answered")
    changed = replace(facts, driver_version="580.65.06", driver_version_from="NVML")
    assert type(changed) is DriverFacts and changed.status == "pass"
    assert (changed.driver_version, changed.driver_version_from) == ("580.65.06", "NVML")
    assert facts.driver_version is None  # the record given is left as it was
    env = Environment(ld_library_path="/a", cwd="/w")
    moved = replace(env, ld_library_path="/b")
    assert type(moved) is Environment and (moved.ld_library_path, moved.cwd) == ("/b", "/w")
    assert env.ld_library_path == "/a"


@pytest.mark.parametrize("record", [DriverFacts(), Environment()])
def test_a_field_neither_kind_has_is_refused(record):
    with pytest.raises(TypeError):
        replace(record, no_such_field=1)
