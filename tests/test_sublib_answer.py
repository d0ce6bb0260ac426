"""The sub-library probe's answer read into types: whatever the child sends becomes fields of
the type they claim, or nothing; the coherence check reads only those fields."""
import json

import pytest
from msgspec.structs import asdict

from cudnn_setup.checks.coherence import judge
from cudnn_setup.probing.sublib_answer import SublibsAnswer, SubLibraryAnswer, VersionCheck
from cudnn_setup.facts.ldresolve.search import Resolution

HONEST = {"library": "/x/libcudnn.so.9", "loaded": True, "path": "/x/libcudnn.so.9",
          "mapped": "/x/libcudnn.so.9.1.0", "version": 90100,
          "cudnn_mapped": ["/x/libcudnn_ops.so.9.1.0", "relative/no", 7],
          "sublibraries": [
              {"soname": "libcudnn_ops.so.9", "loaded": True, "path": "/x/libcudnn_ops.so.9",
               "mapped": "/x/libcudnn_ops.so.9.1.0", "version": "9.1.0",
               "version_from": "cudnn_ops_infer_version",
               "version_check": {"function": "cudnnOpsVersionCheck", "status": 0,
                                 "mapped": ["/x/libcudnn_ops.so.9.1.0"]}},
              {"soname": "libcudnn_cnn.so.9", "error": "the process died of SIGABRT",
               "signal": "SIGABRT"},
              {}]}


def test_an_honest_answer_reads_into_its_fields():
    got = SublibsAnswer.read(HONEST)
    assert (got.loaded, got.mapped, got.version) == (True, "/x/libcudnn.so.9.1.0", 90100)
    assert got.cudnn_mapped == ["/x/libcudnn_ops.so.9.1.0"]  # absolute paths only
    ops, cnn, empty = got.sublibraries
    assert ops.reported and ops.loaded is True and ops.version == "9.1.0"
    assert ops.version_check == VersionCheck("cudnnOpsVersionCheck", 0, ["/x/libcudnn_ops.so.9.1.0"])
    assert ops.version_check.passed and ops.version_check.to_dict() == \
        HONEST["sublibraries"][0]["version_check"]
    assert cnn.error == "the process died of SIGABRT" and cnn.loaded is None
    assert empty == SubLibraryAnswer() and not empty.reported
    with pytest.raises(AttributeError):
        ops.verison  # a misspelt field is an error, not a silent None


@pytest.mark.parametrize("value", [None, [], "x", 5, {"loaded": "yes"}, {"sublibraries": "no"},
                                   {"loaded": 1, "version": True, "mapped": ["/a"],
                                    "sublibraries": [5, None, {"version_check": [1]},
                                                     {"loaded": 0, "version": [9],
                                                      "version_check": {"status": True,
                                                                        "function": {"a": 1},
                                                                        "mapped": "/x"}}]}])
def test_whatever_the_child_sends_is_read_without_raising(value):
    got = SublibsAnswer.read(value)
    assert got.loaded is False  # only JSON's true is a library that loaded
    assert got.version is None and got.mapped is None
    for sub in got.sublibraries:
        assert sub.loaded in (True, False, None)
        if sub.version_check is not None:
            check = sub.version_check
            assert check.status is None and check.function is None and check.mapped == []
            assert not check.passed
    json.dumps([asdict(s) | {"version_check": s.version_check and s.version_check.to_dict()}
                for s in got.sublibraries])


def test_judge_reads_a_json_entry_as_it_reads_the_typed_one():
    res = Resolution("libcudnn_ops.so.9", "/x/libcudnn_ops.so.9", "RUNPATH")
    entry = HONEST["sublibraries"][0]
    args = ("/x", "9.1.0", "libcudnn.so.9")
    assert judge("libcudnn_ops.so.9", res, entry, *args) == \
        judge("libcudnn_ops.so.9", res, SubLibraryAnswer.read(entry), *args)
    crashed = judge("libcudnn_cnn.so.9", res, HONEST["sublibraries"][1], *args)
    assert crashed["problems"] == [
        "loading libcudnn_cnn.so.9 (/x/libcudnn_ops.so.9) the process died of SIGABRT"]
    assert judge("libcudnn_ops.so.9", res, {}, *args)["problems"] == [
        "libcudnn_ops.so.9: the probe did not report on it"]
