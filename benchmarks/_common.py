"""What the benchmarks share: the machine line and the writer of ``docs/benchmarks.md`` sections.

Each benchmark owns one section of the document, between ``<!-- NAME:start -->`` and
``<!-- NAME:end -->``; :func:`write_section` replaces only that block (appending it, with
its markers, when it is missing, and creating the document when there is none).
"""

from __future__ import annotations

import os
import platform
import select
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

__all__ = ["DOC", "DOC_INTRO", "ROOT", "machine", "markers", "sse_child", "write_section"]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"

DOC_INTRO = """\
# Benchmarks

Each script in `benchmarks/` measures one thing and owns one section of this file,
between its own `<!-- NAME:start -->` and `<!-- NAME:end -->` markers; a full run
rewrites only its own section, with the machine, the date and the numbers it measured.
Run them all with `scripts/bench` (arguments are passed to every benchmark), or one
with `python benchmarks/NAME.py`; `--quick` is a short smoke run that writes nothing (on this
2-core machine 1–75 s each, about 5 minutes in all; more when it is busy).
`benchmarks/faults.py` writes its section into `docs/reliability.md` instead.
"""


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of benchmark ``name``'s section."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def machine(libs: Sequence[str] = ("agentflow",)) -> str:
    """One line: CPUs this process may use, the CPU model, OS, Python and library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        ncpu = os.cpu_count() or 0
    versions = ", ".join(f"{d} {metadata.version(d)}" for d in libs)
    py = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{ncpu} CPUs ({cpu}), {platform.system()} {platform.release()}, {py}; {versions}"


def write_section(name: str, text: str, doc: Path = DOC) -> None:
    """Put ``text`` (which starts and ends with ``name``'s markers) into ``doc``
    (``docs/benchmarks.md`` unless a benchmark documents itself elsewhere)."""
    start, end = markers(name)
    old = doc.read_text() if doc.exists() else DOC_INTRO
    i, j = old.find(start), old.find(end)
    if i >= 0 and j > i:
        new = old[:i] + text + old[j + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(new)


@contextmanager
def sse_child(cmd: Sequence[str]) -> Iterator[tuple[str, int]]:
    """Run ``cmd`` (``_sse_server.py`` and its options, with ``--watch-stdin``) as a child;
    yield its base URL and pid once it printed ``PORT <n>``; stop it on the way out."""
    proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30.0)
        line = proc.stdout.readline() if ready else b""
        if not line.startswith(b"PORT "):
            raise RuntimeError(f"SSE server did not start (exit code {proc.poll()}): {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
