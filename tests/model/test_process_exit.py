"""A process that ends without the interpreter's teardown still does what a normal exit does before it."""
import subprocess
import sys

from tests.conftest import ROOT

PROGRAM = """
import atexit, sys, threading, time
from model.process_exit import exit_without_teardown

out = sys.argv[1]
atexit.register(lambda: open(out, "a").write("exit handler\\n"))
def late_writer():
    time.sleep(0.3)
    open(out, "a").write("thread\\n")
threading.Thread(target=late_writer).start()                 # not a daemon: a normal exit waits for it
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a daemon: a normal exit does not
sys.stdout.write("last words without a newline")             # still in the buffer
exit_without_teardown(3)
"""


def test_threads_are_joined_handlers_run_and_output_flushed_before_the_exit_code(tmp_path):
    out = tmp_path / "order.txt"
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 3 and done.stdout == "last words without a newline", done.stderr
    assert out.read_text() == "thread\nexit handler\n"
