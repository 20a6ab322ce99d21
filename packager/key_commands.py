"""The ``keygen`` command and the signing options other commands share (``--sign``, ``--trust``,
``--allow-unsigned``); keys and the trust rules are packager/signing.py's."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXIT_OK = 0
KEYGEN_CODES = {EXIT_OK: "key written", 2: "usage or input error (a path that cannot be written, a key that exists)"}


def add_trust_args(p: argparse.ArgumentParser, allow_unsigned: bool = True) -> None:
    p.add_argument("--trust", action="append", default=[], metavar="PUB",
                   help="also trust packages signed by this public key file or 64-hex fingerprint (repeatable; "
                        "besides your own key and DRIVEPACK_TRUST)")
    if allow_unsigned:
        p.add_argument("--allow-unsigned", action="store_true",
                       help="accept a package that is unsigned or signed by a key not trusted here")


def add_keygen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write the private key here (mode 0600) and the public key to PATH.pub (default: your own "
                        "signing key in the config directory, DRIVEPACK_CONFIG_DIR or $XDG_CONFIG_HOME/drivepack)")
    p.add_argument("--json", action="store_true", help="print the key paths and fingerprint as JSON")


def run_keygen(args: argparse.Namespace) -> int:
    from packager.signing import generate_key, public_path, user_key_path

    path = Path(args.output) if args.output else user_key_path()
    if not args.output:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = generate_key(path)
    if args.json:
        print(json.dumps({"private_key": str(key.path), "public_key": str(public_path(key.path)),
                          "fingerprint": key.fingerprint}))
        return EXIT_OK
    print(f"private key {key.path} (mode 0600, keep it secret), public key {public_path(key.path)}")
    print(f"fingerprint {key.fingerprint}")
    return EXIT_OK
