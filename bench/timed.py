#!/usr/bin/env python3
"""timed.py OUT CMD...: runs CMD (its stdin, stdout and stderr are this
script's), then writes "wall_s cpu_s peak_kb user_s" for it to OUT, to the
millisecond: wall from a monotonic clock, CPU (user + system), peak RSS and
user CPU alone from wait4's rusage. Exits with CMD's exit code."""
import os
import sys
import time

out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.monotonic() - t0
with open(out, "w") as f:
    f.write("%.4f %.4f %d %.4f\n" % (wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, ru.ru_utime))
sys.exit(os.waitstatus_to_exitcode(status))
