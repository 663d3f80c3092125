"""The playground's Qt widgets.

Importing this package guards the process against a shiboken6 6.12 bug on
Python < 3.12: every wrapped C++ call that returns nothing hands Python a
None without taking a reference, so None's reference count drops by one per
call (label.setText, signal.emit, a pyqtgraph repaint ...) and the
interpreter aborts with "none_dealloc: deallocating None" after some tens of
thousands of calls, i.e. minutes into a live run or midway through the test
suite. Python 3.12 made None immortal; on older versions None gets an
immortal-sized count here, which is harmless because None is never freed.
"""

from __future__ import annotations

import sys


def _make_none_immortal() -> None:
    if sys.version_info >= (3, 12) or hasattr(sys, "gettotalrefcount"):  # immortal already / debug build layout
        return
    import ctypes

    ctypes.c_ssize_t.from_address(id(None)).value += 1 << 48  # ob_refcnt is the first field of a PyObject


_make_none_immortal()
