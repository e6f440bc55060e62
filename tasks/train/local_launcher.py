"""DeepSpeed's per-node launcher (`deepspeed.launcher.launch`), started directly for a job on this node alone.

For a single node, the `deepspeed` command only works out the world info and starts this
launcher as a child: one more process that imports DeepSpeed (about 5 s at every launch and
relaunch) and that does not pass SIGTERM on. Multi-node jobs still go through `deepspeed`.
"""
from __future__ import annotations

import time

from model.ds_import import import_deepspeed
from model.process_exit import exit_without_teardown

POLL_S = 0.1


class _PollingClock:
    """The launcher's `time`, whose sleep between looks at its ranks is POLL_S: DeepSpeed's launcher looks once a
    second and sleeps once more after the last rank ended, up to 2 s of every launch, relaunch and rollback."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, POLL_S))


def main() -> None:
    import_deepspeed()
    import deepspeed.launcher.launch as launcher

    launcher.time = _PollingClock()
    launcher.main()  # reads sys.argv: --world_info, --master_addr, --master_port, --module PROGRAM and its arguments
    exit_without_teardown(0)  # every rank ended well (a failure leaves through sys.exit inside main)


if __name__ == "__main__":
    main()
