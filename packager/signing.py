"""Package signatures: Ed25519 keys (``cryptography``), the user's own key, the trusted-key list, and the check
``load_package`` makes before anything of a package is used.

A signed package (format version 2, header flag ``FLAG_SIGNED``) ends with a signature trailer
(packager/container.py) holding the signer's raw 32-byte public key and an Ed25519 signature over
``SIGNED_DOMAIN + the 64-byte header``; the header carries the manifest's sha256 and the manifest every
section's sha256, so the signature covers every byte before the trailer. A key's fingerprint is the sha256 of
its raw public key (64 hex digits; the first 16 are shown where space is short).

Trusted keys: the user's own (``signing-key.pem`` in the config directory: ``$DRIVEPACK_CONFIG_DIR``, else
``$XDG_CONFIG_HOME/drivepack``, else ``~/.config/drivepack``), each ``trust`` entry a caller names (``--trust``)
and each entry of ``$DRIVEPACK_TRUST`` (``os.pathsep``-separated). An entry is a public key file or a full
64-hex fingerprint. Key files: a private key is PKCS8 PEM (unencrypted) or 32 raw bytes; a public key is
SubjectPublicKeyInfo PEM or 32 raw bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from packager.container import HEADER_SIZE, Container
from packager.errors import SignatureError

SIGNED_DOMAIN = b"drivepack package signature v1\0"  # keeps a package signature from meaning anything else
USER_KEY_NAME = "signing-key.pem"
TRUST_ENV, CONFIG_ENV = "DRIVEPACK_TRUST", "DRIVEPACK_CONFIG_DIR"
RAW_KEY_BYTES = 32
MAX_KEY_FILE_BYTES = 16384  # a PEM Ed25519 key is about 120 bytes: anything far larger is not a key file
SHORT = 16
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")


def key_fingerprint(public_raw: bytes) -> str:
    """sha256 of the raw 32-byte public key, 64 lowercase hex digits."""
    return hashlib.sha256(public_raw).hexdigest()


def short_fingerprint(fingerprint: str) -> str:
    return fingerprint[:SHORT]


def config_dir() -> Path:
    """Where the user's own key lives (see the module docstring); not created here."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "drivepack"


def user_key_path() -> Path:
    return config_dir() / USER_KEY_NAME


def public_path(private: Path) -> Path:
    return private.with_name(private.name + ".pub")


@dataclass(frozen=True)
class SigningKey:
    """A private key read from ``path``: signs headers, knows its public key and fingerprint."""

    path: Path
    private: Ed25519PrivateKey
    public_raw: bytes

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.public_raw)

    def sign(self, header: bytes) -> tuple[bytes, bytes]:
        """(raw public key, signature) for a package header (what packager.container.write_container takes)."""
        return self.public_raw, self.private.sign(SIGNED_DOMAIN + header)


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as e:
        raise SignatureError(f"{what} {path}: expected a readable key file, got {e.strerror or e}") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise SignatureError(f"{what} {path}: size expected at most {MAX_KEY_FILE_BYTES} bytes, got more")
    return data


def _public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _load_key(path: Path, what: str, pem: Callable[[bytes], Any], raw: Callable[[bytes], Any], kind: type,
              form: str, noun: str) -> Any:
    """The Ed25519 key of class ``kind`` in ``path``: PEM read by ``pem``, or 32 raw bytes read by ``raw``."""
    data = _read_key_file(path, what)
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = pem(data)
        elif len(data) == RAW_KEY_BYTES:
            key = raw(data)
        else:
            raise ValueError(f"{len(data)} bytes that are neither PEM nor a raw 32-byte key")
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise SignatureError(f"{what} {path}: expected {form} or raw 32-byte {noun}, got {' '.join(str(e).split())}") \
            from None
    if not isinstance(key, kind):
        raise SignatureError(f"{what} {path}: expected an Ed25519 key, got {type(key).__name__}")
    return key


def load_signing_key(path: str | Path) -> SigningKey:
    """The Ed25519 private key in ``path`` (PKCS8 PEM, unencrypted, or 32 raw bytes)."""
    p = Path(path)
    key = _load_key(p, "signing key", lambda d: serialization.load_pem_private_key(d, password=None),
                    Ed25519PrivateKey.from_private_bytes, Ed25519PrivateKey,
                    "an unencrypted Ed25519 PKCS8 PEM", "private key")
    return SigningKey(p, key, _public_raw(key.public_key()))


def load_public_key(path: str | Path) -> bytes:
    """The raw 32 bytes of the Ed25519 public key in ``path`` (SubjectPublicKeyInfo PEM or 32 raw bytes)."""
    key = _load_key(Path(path), "trusted key", serialization.load_pem_public_key, Ed25519PublicKey.from_public_bytes,
                    Ed25519PublicKey, "an Ed25519 SubjectPublicKeyInfo PEM", "public key")
    return _public_raw(key)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode``, refusing to replace a file there (another process creating the
    same key at once loses cleanly: FileExistsError)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.link(tmp, path)  # atomic and never overwrites, unlike rename
    finally:
        os.unlink(tmp)


def generate_key(path: str | Path) -> SigningKey:
    """A new key: the private key at ``path`` (PKCS8 PEM, mode 0600) and the public one at ``path.pub``
    (SubjectPublicKeyInfo PEM, mode 0644); SignatureError when either file exists."""
    p = Path(path)
    for f in (p, public_path(p)):
        if f.exists():
            raise SignatureError(f"keygen: expected no file at {f} (a key is never overwritten), got one")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write_new(p, pem, 0o600)
        _write_new(public_path(p), pub, 0o644)
    except FileExistsError as e:
        raise SignatureError(f"keygen: expected no file at {e.filename or p} (a key is never overwritten), got "
                             "one") from None
    except OSError as e:
        raise SignatureError(f"keygen: expected a writable {p}, got {e.strerror or e}") from None
    return SigningKey(p, key, _public_raw(key.public_key()))


def user_signing_key() -> SigningKey:
    """The user's own key, created on first use (its location printed once, on stderr)."""
    path = user_key_path()
    if not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            made = generate_key(path)
        except (SignatureError, OSError):
            if not path.exists():
                raise
        else:
            print(f"drivepack: created your signing key {path} (public key {public_path(path)}, fingerprint "
                  f"{made.fingerprint}); packages you build are signed with it", file=sys.stderr)
            return made
    return load_signing_key(path)  # another process may have made it just now: theirs is as good


def _entry_fingerprint(entry: str | Path) -> str:
    text = str(entry).strip()
    return text.lower() if _FINGERPRINT.match(text.lower()) else key_fingerprint(load_public_key(text))


def trusted_keys(trust: Iterable[str | Path] = ()) -> dict[str, str]:
    """Fingerprint -> why it is trusted: the user's own key (when it exists), each ``trust`` entry, then each
    ``$DRIVEPACK_TRUST`` entry. A trusted key file that cannot be read is an error, never silently skipped."""
    out: dict[str, str] = {}
    own = user_key_path()
    if own.exists():
        out[load_signing_key(own).fingerprint] = f"your own key {own}"
    for entry in trust:
        out.setdefault(_entry_fingerprint(entry), f"--trust {entry}")
    for entry in os.environ.get(TRUST_ENV, "").split(os.pathsep):
        if entry.strip():
            out.setdefault(_entry_fingerprint(entry), f"{TRUST_ENV} {entry.strip()}")
    return out


@dataclass(frozen=True)
class SignatureInfo:
    """Who signed a loaded package (None: unsigned) and why it was accepted (None: not trusted here)."""

    fingerprint: str | None
    trusted_by: str | None

    @property
    def trusted(self) -> bool:
        return self.trusted_by is not None

    def describe(self) -> str:
        if self.fingerprint is None:
            return "none (unsigned: verify and replay refuse it without --allow-unsigned)"
        how = f"trusted here ({self.trusted_by})" if self.trusted else \
            "NOT trusted here (verify and replay refuse it without --trust or --allow-unsigned)"
        return f"Ed25519 by {short_fingerprint(self.fingerprint)} (fingerprint {self.fingerprint}), {how}"


def check_signature(c: Container, trust: Iterable[str | Path] = (), allow_unsigned: bool = False) -> SignatureInfo:
    """The signer of ``c`` if its signature verifies and the key is trusted; SignatureError naming the signer's
    fingerprint otherwise. ``allow_unsigned`` accepts an unsigned package or one by a key not trusted here; a
    signature that does not verify is refused always (the file was changed after signing)."""
    where = f"{c.path}: signature"
    if c.signature is None:
        if allow_unsigned:
            return SignatureInfo(None, None)
        raise SignatureError(f"{where}: expected a package signed by a trusted key, got an unsigned package "
                             "(pass --allow-unsigned / allow_unsigned=True to accept it)")
    fp = key_fingerprint(c.signature.public_key)
    try:
        Ed25519PublicKey.from_public_bytes(c.signature.public_key).verify(
            c.signature.signature, SIGNED_DOMAIN + bytes(c.buffer[:HEADER_SIZE]))
    except (InvalidSignature, ValueError):
        raise SignatureError(f"{where}: expected a valid Ed25519 signature by key {fp}, got one that does not "
                             "verify (the package changed after it was signed)") from None
    trusted = trusted_keys(trust)
    if fp in trusted:
        return SignatureInfo(fp, trusted[fp])
    if allow_unsigned:
        return SignatureInfo(fp, None)
    raise SignatureError(f"{where}: expected a key trusted here (your own, --trust PUB, {TRUST_ENV}), got a package "
                         f"signed by key {fp} (trust its public key or pass --allow-unsigned)")
