"""The portal's own keys, made once: ``python -m portal.keys DIR`` writes them to DIR unless they are there.

Two files, one per setting, each read through its ``*_FILE`` variable (``portal/settings.py``):

- ``django-secret-key``: ``DJANGO_SECRET_KEY_FILE``, Django's signing key (sessions, CSRF, password resets);
- ``quotas-secrets-keys``: ``QUOTAS_SECRETS_KEYS_FILE``, the Fernet key that seals the secrets the portal keeps.

A file that exists is never rewritten: the sealed secrets in the database stay readable, and every process of a
deployment (replicas, workers, beat) reads the same keys. Files are created readable by their owner only.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from cryptography.fernet import Fernet

#: file name -> the setting whose ``*_FILE`` names it
FILES = {"django-secret-key": "DJANGO_SECRET_KEY", "quotas-secrets-keys": "QUOTAS_SECRETS_KEYS"}


def make_keys() -> dict[str, str]:
    """New random keys, by setting name: a 67-character secret key (400 bits) and one Fernet key."""
    return {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "QUOTAS_SECRETS_KEYS": Fernet.generate_key().decode()}


def ensure_keys(directory: Path) -> dict[str, bool]:
    """Write each key file of ``FILES`` that ``directory`` lacks (mode 600); returns file name -> made now."""
    directory.mkdir(parents=True, exist_ok=True)
    fresh = make_keys()
    made = {}
    for name, setting in FILES.items():
        path = directory / name
        try:
            # O_EXCL: two processes starting at once cannot both write one (the second keeps the first's key)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            made[name] = False
            continue
        with os.fdopen(fd, "w") as file:
            file.write(fresh[setting] + "\n")
        made[name] = True
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.keys", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where the key files are kept (a volume, .run/keys, ...)")
    args = parser.parse_args(argv)
    try:
        made = ensure_keys(args.directory)
    except OSError as e:
        print(f"portal.keys: cannot write the keys to {args.directory}: {e.strerror}", file=sys.stderr)
        return 1
    for name, setting in FILES.items():
        state = "made" if made[name] else "kept"
        print(f"{setting}_FILE={args.directory / name} ({state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
