"""Secrets kept out of everything written: files, events, MLflow, Prefect, logs and command lines.

A URL keeps its user but not its password (`s3://key:***@bucket/run`); a
variable whose name says secret (PASSWORD, TOKEN, SECRET, ...) or whose value
is a URL with a password never goes on a command line: the train stage hands
those to the ranks in a file only the user can read (tasks/train/run.py).
"""
from __future__ import annotations

import re
from typing import Iterable

SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE_KEY|AUTH", re.I)
URL_PASSWORD = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<user>[^/:@\s]*):(?P<password>[^@/]+)@", re.I)
MASK = "***"


def redact_url(text: str) -> str:
    """Every URL in text with its password replaced by ***."""
    return URL_PASSWORD.sub(rf"\g<scheme>\g<user>:{MASK}@", text)


def redact(obj):
    """A copy of a JSON-like object (dicts, lists, strings) with the passwords of URLs in it replaced."""
    if isinstance(obj, str):
        return redact_url(obj)
    if isinstance(obj, dict):
        return {k: redact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v) for v in obj)
    return obj


def url_passwords(text: str) -> list[str]:
    return [m.group("password") for m in URL_PASSWORD.finditer(text)]


def is_secret(name: str, value: str) -> bool:
    return bool(SECRET_NAME.search(name) or URL_PASSWORD.search(value))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """text with URL passwords and every given secret value (4 characters or more) replaced by ***."""
    text = redact_url(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
