"""Copy the token shards to node-local disk or /dev/shm before training.

Many processes memory-mapping the same files over NFS have crashed trainings;
a local copy per node avoids it. The copy is keyed by the dataset version, so a
restarted training on the same node reuses it, and it is verified by size
against the manifest. One process per node copies (local rank 0); the others
wait at a barrier and then read the copy.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from model.data import MANIFEST, read_manifest

MARKER = "_STAGED"
MARGIN = 1.05  # leave room beyond the shards themselves


class StagingError(RuntimeError):
    pass


def staged_path(stage_root: Path, manifest: dict) -> Path:
    return Path(stage_root) / f"tokens-{manifest['version']}"


def is_staged(dest: Path, manifest: dict) -> bool:
    marker = dest / MARKER
    if not marker.is_file() or json.loads(marker.read_text()).get("version") != manifest["version"]:
        return False
    return all((dest / s["file"]).is_file() and (dest / s["file"]).stat().st_size == s["bytes"]
               for s in manifest["shards"])


def stage_tokens(tokens_dir: Path, stage_root: Path) -> Path:
    """The staged copy of tokens_dir under stage_root (copied now unless a complete copy is there)."""
    manifest = read_manifest(tokens_dir)
    dest = staged_path(stage_root, manifest)
    if is_staged(dest, manifest):
        return dest
    need = sum(s["bytes"] for s in manifest["shards"])
    Path(stage_root).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(stage_root).free + _bytes_under(dest)
    if free < need * MARGIN:
        raise StagingError(f"staging needs {need * MARGIN / 1e9:.2f} GB under {stage_root}, which has "
                           f"{free / 1e9:.2f} GB free; free space there, point train.data.stage_data_dir at a larger "
                           f"local disk, or set it to null to read {tokens_dir} in place")
    _remove_other_versions(Path(stage_root), dest)
    dest.mkdir(parents=True, exist_ok=True)
    for shard in manifest["shards"]:
        _copy_checked(Path(tokens_dir) / shard["file"], dest / shard["file"], shard["bytes"])
    shutil.copyfile(Path(tokens_dir) / MANIFEST, dest / MANIFEST)
    (dest / MARKER).write_text(json.dumps({"version": manifest["version"], "source": str(tokens_dir)}))
    return dest


def _copy_checked(src: Path, dst: Path, size: int) -> None:
    if dst.is_file() and dst.stat().st_size == size:
        return  # copied by an earlier, interrupted staging
    tmp = dst.with_name(dst.name + f".tmp-{os.getpid()}")
    shutil.copyfile(src, tmp)
    if tmp.stat().st_size != size:
        tmp.unlink()
        raise StagingError(f"{src} is {src.stat().st_size} bytes, the manifest says {size}: the shard changed "
                           f"after tokenization; re-run `pretrain tokenize --config ...`")
    os.replace(tmp, dst)


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*") if p.is_file()) if folder.is_dir() else 0


def _remove_other_versions(stage_root: Path, keep: Path) -> None:
    """Other dataset versions staged here (one training per stage root): in /dev/shm they hold memory."""
    for old in stage_root.glob("tokens-*"):
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def remove_staged(tokens_dir: Path, stage_root: Path) -> None:
    shutil.rmtree(staged_path(stage_root, read_manifest(tokens_dir)), ignore_errors=True)
