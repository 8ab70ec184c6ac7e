"""Text from a server made safe to show on a terminal.

An error message can carry whatever a server put in its answer — a 400's body, a
reason phrase, a tool's output — and such text, printed as it is, drives the terminal
that shows it: ``ESC ] 0 ; … BEL`` retitles the window, ``ESC [ 2 J`` clears the screen,
``ESC ] 8`` plants a link, a carriage return overwrites the line before it. rich's
``Text`` strips only BEL, BS, VT, FF and CR; ``ESC`` and the C1 controls pass.

:func:`printable` shows each control character as an escape (``\\x1b``) instead, the
way ``repr`` would, so the message still says what the server sent. Newlines and tabs
are kept, and a CRLF line end reads as a newline (an HTML error page quoted whole); a
lone carriage return is escaped. It is applied where agentflow prints server-derived
text: the live view's last error, the ``agentflow`` command's error lines, ``chat``'s
retry lines, and ``demo``'s and ``bench``'s failure lines.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 controls but "\t" and "\n", DEL, and the C1 controls (U+0080–U+009F: "\x9b" is a
# one-character CSI to a terminal that reads 8-bit controls).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m[0]):02x}"


def printable(text: str) -> str:
    """``text`` with every C0 and C1 control character but newline and tab (and DEL)
    written as a ``\\xNN`` escape: ``"bad\\x1b[2J"`` → ``"bad\\\\x1b[2J"``; a ``"\\r\\n"``
    is a newline."""
    if text.isascii() and text.isprintable():  # the common case: nothing to look for
        return text
    return _CONTROL.sub(_escape, text.replace("\r\n", "\n"))
