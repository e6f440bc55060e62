"""The preflight section: the cluster checks that gate training."""
from __future__ import annotations

from pydantic import Field

from pretrain.config.base import Strict


class PreflightConfig(Strict):
    profile: str = Field("cpu-ci", description="hardware profile whose expected values grade the checks "
                         "(tasks/preflight/baselines/profiles.yaml: cpu-ci, h100-sxm-8x-nvlink, a100-sxm-8x-nvlink, "
                         "pcie-gen4-no-nvlink, ib-hdr-200g, ib-ndr-400g, roce-100g, h200-1x)")
    baselines_file: str | None = Field(None, description="your own profiles file (same format); None: the shipped one")
    nics_per_node: int = Field(1, ge=1, description="network cards per node: per-NIC expectations are multiplied by it")
    min_free_gb: float = Field(5.0, ge=0, description="fail when the run root has less free disk")
    storage_test_mb: float = Field(64.0, gt=0, description="size of the shared-storage write/read check")
    allreduce_ranks: int = Field(2, ge=1, description="ranks of the all-reduce probe (gloo on CPU, nccl on GPU)")
    allreduce_mb: float = Field(8.0, gt=0, description="all-reduce probe message size in MiB")
    nccl_tests_dir: str | None = Field(None, description="directory of nccl-tests binaries; None: search PATH")
    nccl_tests_launcher: list[str] = Field(default_factory=list, description="prefix for nccl-tests across nodes, "
                                           "e.g. [mpirun, -np, '16', --hostfile, hosts]; empty: one process, all local GPUs")
    nvbandwidth_path: str | None = Field(None, description="nvbandwidth binary; None: search PATH")
    tool_json: bool = Field(False, description="read nccl-tests (-J, v2.16+) and nvbandwidth (-j) JSON output "
                            "instead of their text (older builds reject the flag)")
    drop_failing_nodes: bool = Field(False, description="train on the nodes that passed: a node failing its checks "
                                     "is left out of the hostfile the train stage uses (recorded in the report)")
    comm_profile_steps: int = Field(3, ge=0, description="profile this many training steps on the configured ranks "
                                    "and report the communication share (0: skip)")
    ignore_failures: bool = Field(False, description="train even when a check fails (recorded in the report)")
    report_only: list[str] = Field(default_factory=list, description="checks measured and reported but never "
                                   "failing the gate (a fail is reported as a warning), e.g. [shared_storage] on a "
                                   "VM's local disk that is not the cluster's storage")

