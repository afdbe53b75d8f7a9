"""Threads for the python_* tests (imported from beside them): a counter that advances during a call
only if the call lets the GIL go, and callers on many threads at once."""
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


def errors_from_threads(target, args):
    """Runs target(a) in a thread per a of `args` at once; returns the exceptions they raised."""
    errors = []

    def run(a):
        try:
            target(a)
        except Exception as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
