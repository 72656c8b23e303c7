import signal
import sys

from checks.cli import main

# Stopped with TERM (a CI timeout, `kill`, a flake hunt ending): unwind like Ctrl-C, so every box and
# process this run started is stopped by the finally blocks on the way out.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
sys.exit(main())
