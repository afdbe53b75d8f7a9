"""A thread that counts while the test calls into Terrace: the count advances during a call only if
the call lets the GIL go (the python_* tests import it from beside them)."""
import contextlib
import threading


@contextlib.contextmanager
def counting():
    """Yields a one-element list whose [0] a background thread increments until the block ends."""
    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=counter)
    t.start()
    try:
        yield count
    finally:
        stop.set()
        t.join()


def ticks_during(call, times=3):
    """The counter's advance during each of `times` calls of `call` (tens of ms each, for a margin)."""
    ticks = []
    with counting() as count:
        for _ in range(times):
            before = count[0]
            call()
            ticks.append(count[0] - before)
    return ticks
