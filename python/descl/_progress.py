"""Progress displays for ``Extractor.extract_many(progress=True)``.

An object here answers the calls of descl's ``Progress`` trait (``start``, ``set_length``,
``message``, ``inc``, ``note``, ``finish``; src/progress.rs): the library reports the same
steps to these as to the command line's bars.
"""

import sys


class TqdmProgress:
    """A tqdm bar per stage."""

    def __init__(self, tqdm):
        self._tqdm = tqdm
        self._bar = None

    def start(self, stage, total):
        self.finish()
        self._bar = self._tqdm(total=total or None, desc=stage, unit="image")

    def set_length(self, total):
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def message(self, text):
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def inc(self, n):
        if self._bar is not None:
            self._bar.update(n)

    def note(self, line):
        self._tqdm.write(line, file=sys.stderr)

    def finish(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class StderrProgress:
    """``stage done/total`` on stderr: rewritten in place on a terminal, every 10 % (and at
    the end) otherwise, so logs stay short."""

    def __init__(self, stream=None):
        self._stream = stream if stream is not None else sys.stderr
        self._stage, self._done, self._total, self._shown = "", 0, 0, -1

    def start(self, stage, total):
        self._stage, self._done, self._total, self._shown = stage, 0, total, -1

    def set_length(self, total):
        self._total = total

    def inc(self, n):
        self._done += n
        tty = getattr(self._stream, "isatty", lambda: False)()
        tenth = (10 * self._done) // max(self._total, 1)
        if tty:
            self._stream.write(f"\r{self._stage} {self._done}/{self._total}")
        elif tenth != self._shown or self._done == self._total:
            self._shown = tenth
            self._stream.write(f"{self._stage} {self._done}/{self._total}\n")
        self._stream.flush()

    def note(self, line):
        tty = getattr(self._stream, "isatty", lambda: False)()
        self._stream.write(f"\n{line}\n" if tty else f"{line}\n")

    def finish(self):
        if getattr(self._stream, "isatty", lambda: False)():
            self._stream.write("\n")
            self._stream.flush()


def default_progress():
    """A tqdm bar if tqdm is installed, else a counter on stderr."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return StderrProgress()
    return TqdmProgress(tqdm)
