"""One run at a time on a plan, robust to Ctrl-C.

A plan refuses a second run while one is in flight (another thread's, or a run started from inside a run).  A
``threading.Lock`` taken before the run's ``try`` stays taken for good when a KeyboardInterrupt lands between the
acquire and the ``try`` (the interpreter checks for signals as the acquire call returns): the plan then refuses
every later run.  ``RunGuard`` records the claiming thread instead.  A claim that an interrupt cut off before its
run began is its own thread's to take again; another thread is refused until then.

A run is written as::

    if not guard.claim():
        raise GraphError(...)
    try:
        guard.running = True
        ...
    finally:
        guard.running = False
        guard.owner = None

with the two stores inline (a function call there could itself be interrupted on entry, before them).
"""

from __future__ import annotations

import threading


class RunGuard:
    """Which thread holds a plan's run (``owner``) and whether its run has begun (``running``)."""

    __slots__ = ("_lock", "owner", "running")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None
        self.running = False

    def claim(self) -> bool:
        """Take the plan for this thread: False while another thread holds it or this thread's run is in flight;
        a claim of this thread whose run never began (interrupted) is taken again."""
        me = threading.get_ident()
        with self._lock:
            if self.owner is not None and (self.owner != me or self.running):
                return False
            self.owner, self.running = me, False
            return True

    def locked(self) -> bool:
        """Whether some thread holds the plan."""
        return self.owner is not None

    def release(self) -> None:
        """Give the plan back (where no run's ``finally`` does: tests standing in for another thread)."""
        self.running = False
        self.owner = None
