"""Tables to pandas: a CSV, TSV or Parquet file is a ``DataFrame`` (its
``attrs`` say its source and kind); a workbook or a SQLite file is a
:class:`Tables`, its sheets or tables by name."""

from __future__ import annotations

import io
import os
import sqlite3
import tempfile
from typing import Any

from ..errors import ContextError
from .document import Tables


def _tagged(frame: Any, source: str, kind: str) -> Any:
    frame.attrs["source"], frame.attrs["kind"] = source, kind
    return frame


def convert_table(data: Any, source: str, kind: str, encoding: str = "utf-8") -> Any:
    import pandas as pd

    try:
        if kind == "parquet":
            frame = pd.read_parquet(io.BytesIO(data) if isinstance(data, bytes) else data)
        else:
            frame = pd.read_csv(io.BytesIO(data) if isinstance(data, bytes) else data, sep="\t" if kind == "tsv" else ",",
                                encoding=encoding, engine="python" if kind == "tsv" else "c", on_bad_lines="warn")
    except UnicodeDecodeError:
        raise ContextError(f"{source!r} is not valid {encoding}; pass --encoding with the file's encoding.") from None
    except Exception as error:  # noqa: BLE001 - pandas and pyarrow raise many kinds; one sentence says it
        raise ContextError(f"{source!r} is not a readable {kind.upper()} table ({type(error).__name__}: "
                           f"{str(error).splitlines()[0][:160] if str(error) else 'no detail'}).") from None
    return _tagged(frame, source, kind)


def convert_xlsx(data: Any, source: str) -> Tables:
    import pandas as pd

    try:
        sheets = pd.read_excel(io.BytesIO(data) if isinstance(data, bytes) else data, sheet_name=None,
                               engine="openpyxl")
    except Exception as error:  # noqa: BLE001 - openpyxl raises many kinds for a bad file
        raise ContextError(f"{source!r} is not a readable Excel workbook (corrupt or truncated: "
                           f"{type(error).__name__}).") from None
    return Tables({name: _tagged(frame, f"{source}#{name}", "sheet") for name, frame in sheets.items()},
                  source, "xlsx", {"sheets": list(sheets)})


def convert_sqlite(data: Any, source: str) -> Tables:
    import pandas as pd

    scratch = None
    if isinstance(data, bytes):  # an archive's member: sqlite reads files
        handle, scratch = tempfile.mkstemp(suffix=".sqlite")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        data = scratch
    try:
        connection = sqlite3.connect(f"file:{data}?mode=ro", uri=True)
        try:
            names = [row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name")]
            tables = {name: _tagged(pd.read_sql_query(f'SELECT * FROM "{name}"', connection),
                                    f"{source}#{name}", "sqlite-table") for name in names}
        finally:
            connection.close()
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as error:
        raise ContextError(f"{source!r} is not a readable SQLite database ({error}).") from None
    finally:
        if scratch:
            os.unlink(scratch)
    if not tables:
        raise ContextError(f"{source!r} is a SQLite database with no tables.")
    return Tables(tables, source, "sqlite", {"tables": list(tables)})


__all__ = ["convert_sqlite", "convert_table", "convert_xlsx"]
