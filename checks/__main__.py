import signal
import sys

from shared.state import move_old

move_old()  # an old checkout's .lab/ becomes .state/ before anything reads the state folder's place

from checks.cli import main  # noqa: E402 - after the move above

# Ctrl-C is KeyboardInterrupt even when the shell that started us ignored SIGINT (a command started with
# `&` in a script): `make watch` and every run must stop on it.  Stopped with TERM (a CI timeout, `kill`,
# a flake hunt ending): unwind the same way, so every box and process this run started is stopped by the
# finally blocks on the way out.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
# Each line as it is printed, into a pipe too (`make check | tee log`, CI logs): a lesson's result shows when it
# is known, not all at the end.
sys.stdout.reconfigure(line_buffering=True)
sys.exit(main())
