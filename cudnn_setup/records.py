"""A record with some fields changed: `replace`, for the msgspec Structs and the few records
that stay dataclasses alike (docs/design.md, "Records are msgspec Structs").

mypy reads it as `dataclasses.replace`, which it checks field by field (a Struct is a dataclass
to mypy, PEP 681): a misspelt field, or a value of another type, is an error before anything
runs. msgspec's own `replace` is typed to take any keyword, so mypy passes what would only
fail, with a TypeError, once the line runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataclasses import replace as replace
else:
    from msgspec import Struct
    from msgspec.structs import replace as _replace_struct

    def replace(record, /, **changes):
        if isinstance(record, Struct):
            return _replace_struct(record, **changes)
        import dataclasses

        return dataclasses.replace(record, **changes)
