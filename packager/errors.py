"""The packager's typed errors: every message names the field, the expected and the actual value."""

from __future__ import annotations

from jit.common.errors import DrivepackError


class PackageError(DrivepackError, ValueError):
    """A package file that cannot be trusted (bad magic, other version, truncated, checksum mismatch, manifest
    field missing or out of range, a binding outside its buffer) or a package that cannot be built. Nothing from
    the file has been executed when this is raised."""


class VerifyError(DrivepackError, ValueError):
    """A replayed output that differs from the package's golden output (names the set, output and the numbers)."""


class SignatureError(PackageError):
    """A package not signed by a key trusted here (names the signer's fingerprint), a signature that does not
    verify, or a key file that cannot be read or written. Raised before anything of the package is used."""


class AbiMismatchError(VerifyError):
    """A model whose ABI does not match the vehicle role it was matched to (or matches none), refused by
    ``package`` unless ``--allow-abi-mismatch``; ``details`` holds the abi-check table that shows where."""

    def __init__(self, message: str, details: list[str]) -> None:
        super().__init__(message)
        self.details = details
