"""CSV per turn: a streaming writer subscribed as a fleet callback, and a reader.

:class:`TurnCSVWriter` writes one row per ``TurnEndEvent`` as it happens, so a run of any
length costs the writer a file buffer, not memory per turn. Floats are written with
``repr`` (shortest round-tripping form), ``None`` as an empty cell, booleans as
``true``/``false``: :func:`read_turn_csv` gives back rows equal to the ones written —
but for an empty text in a column that may be ``None`` (a server's ``""`` model, response
id or finish reason), which CSV cannot tell from ``None`` and which reads back as ``None``.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, ClassVar

from agentflow._errors import ConfigError
from agentflow._events import Event, TurnEndEvent
from agentflow.stats._rows import TurnRow, turn_row
from agentflow.stats._slo import SLO, check_slos

__all__ = ["TurnCSVWriter", "read_turn_csv", "write_turn_csv"]

_COLUMNS = TurnRow.columns()
_TYPES = {f.name: str(f.type) for f in dataclasses.fields(TurnRow)}


class TurnCSVWriter:
    """A fleet callback that appends one CSV row per finished turn.

    Args:
        target: a path (opened for writing, truncated — once the arguments are checked)
            or an open text file.
        slos: one extra ``slo:<label>`` column per SLO: whether the turn met it.
        flush_every: flush the file every this many rows (0: leave it to the buffer).

    Use as a context manager, or call :meth:`close`, to flush and close a file it opened.
    """

    #: The event types this callback reads (see :attr:`FleetStats.event_types`).
    event_types: ClassVar[frozenset[str]] = frozenset({"turn_end"})

    def __init__(
        self, target: str | Path | IO[str], *, slos: Iterable[SLO] = (), flush_every: int = 0
    ) -> None:
        # validate before opening: opening truncates, and a ConfigError after it left an
        # earlier CSV empty (and the file open)
        self.slos = check_slos(slos)
        if isinstance(target, str | Path):
            self._file: IO[str] = open(target, "w", newline="", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file, self._owned = target, False
        self.flush_every = flush_every
        #: Rows written so far.
        self.rows = 0
        self._writer = csv.writer(self._file, lineterminator="\n")
        self._writer.writerow([*_COLUMNS, *(f"slo:{s.label}" for s in self.slos)])

    def __call__(self, event: Event) -> None:
        """Write a row for a ``TurnEndEvent``; ignore every other event."""
        if not isinstance(event, TurnEndEvent):
            return
        row = turn_row(
            event.agent,
            event.session_id,
            event.turn,
            event.metrics,
            event.trace,
            getattr(event, "prompt", None),  # TurnEndEvent gains ``prompt`` with #4
        )
        cells = _cells(row)
        for slo in self.slos:
            cells.append("true" if slo.met_by(event.metrics) else "false")
        self._writer.writerow(cells)
        self.rows += 1
        if self.flush_every and self.rows % self.flush_every == 0:
            self._file.flush()

    def write(self, row: TurnRow) -> None:
        """Write an already-built row (SLO columns, if any, are left empty)."""
        self._writer.writerow([*_cells(row), *("" for _ in self.slos)])
        self.rows += 1

    def close(self) -> None:
        """Flush, and close the file if this writer opened it."""
        self._file.flush()
        if self._owned:
            self._file.close()

    def __enter__(self) -> TurnCSVWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_turn_csv(rows: Iterable[TurnRow], target: str | Path | IO[str]) -> int:
    """Write ``rows`` (e.g. ``FleetStats(keep_samples=True).samples``) as CSV; returns
    how many were written."""
    with TurnCSVWriter(target) as writer:
        for row in rows:
            writer.write(row)
        return writer.rows


def read_turn_csv(source: str | Path | IO[str]) -> list[TurnRow]:
    """Read a per-turn CSV back into :class:`TurnRow`\\ s (extra columns are ignored).

    Raises:
        ConfigError: the file cannot be read (missing, a directory, not UTF-8), a column
            of :class:`TurnRow` is missing, or a cell is not its column's type; the
            message names the file (and the line and column).
    """
    if isinstance(source, str | Path):
        where = f"turn CSV file {str(source)!r}"
        try:
            with open(source, newline="", encoding="utf-8") as f:
                return _read(f, where)
        except OSError as exc:
            raise ConfigError(f"{where}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where}: not UTF-8 text: {exc}") from None
    name = getattr(source, "name", None)
    return _read(source, f"turn CSV {name!r}" if isinstance(name, str) else "turn CSV")


def _read(f: IO[str], where: str) -> list[TurnRow]:
    reader = csv.DictReader(f)
    try:
        header = reader.fieldnames
        if header is None:  # an empty file: no rows
            return []
        missing = [name for name in _COLUMNS if name not in header]
        if missing:
            raise ConfigError(
                f"{where}: not a turn CSV (write one with TurnCSVWriter): no column "
                f"{missing[0]!r}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        rows = []
        for record in reader:
            cells = {}
            for name in _COLUMNS:
                cell = record[name]
                try:
                    cells[name] = _parse(cell, _TYPES[name])
                except (TypeError, ValueError):
                    shown = "no cell" if cell is None else repr(cell)
                    raise ConfigError(
                        f"{where}:{reader.line_num}: column {name!r}: {shown} is not {_TYPES[name]}"
                    ) from None
            rows.append(TurnRow(**cells))
        return rows
    except csv.Error as exc:  # a NUL byte, a field past csv's size limit
        raise ConfigError(f"{where}:{reader.line_num}: {exc}") from None


def _cells(row: TurnRow) -> list[str]:
    out = []
    for name in _COLUMNS:
        v = getattr(row, name)
        if v is None:
            out.append("")
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        else:
            out.append(repr(v) if isinstance(v, float) else str(v))
    return out


def _parse(cell: str, type_: str) -> Any:
    if cell == "" and "None" in type_:
        return None
    base = type_.replace(" | None", "")
    if base == "bool":
        return cell == "true"
    if base == "int":
        return int(cell)
    if base == "float":
        return float(cell)
    return cell
