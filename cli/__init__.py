"""The top floor: the `pretrain` command (cli/main.py), its `plan` command (cli/plan.py) and the one Prefect server
a local run starts for itself (cli/local_server.py). Nothing below imports from here."""
