"""DeepSpeed's per-node launcher (`deepspeed.launcher.launch`), started directly for a job on this node alone.

For a single node, the `deepspeed` command only works out the world info and starts this
launcher as a child: one more process that imports DeepSpeed (about 5 s at every launch and
relaunch) and that does not pass SIGTERM on. Multi-node jobs still go through `deepspeed`.
"""
from __future__ import annotations

from model.ds_import import import_deepspeed


def main() -> None:
    import_deepspeed()
    from deepspeed.launcher.launch import main as launch

    launch()  # reads sys.argv: --world_info, --master_addr, --master_port, --module PROGRAM and its arguments


if __name__ == "__main__":
    main()
