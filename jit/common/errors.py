"""Typed errors: every message names the field, the expected and the actual value."""


class DrivepackError(Exception):
    """Base of every error drivepack raises on purpose."""


class DeviceError(DrivepackError, ValueError):
    """An unknown or unavailable device name."""


class DTypeError(DrivepackError, TypeError):
    """A dtype that is unknown, unsupported by a target, or invalid for an op."""


class ShapeError(DrivepackError, ValueError):
    """Shapes that cannot broadcast, reshape or concatenate."""


class AxisError(DrivepackError, IndexError):
    """An axis out of range for a tensor's rank."""


class CompileError(DrivepackError, RuntimeError):
    """A kernel that failed to render or compile; carries the compiler's log."""


class UnsupportedOp(DrivepackError, NotImplementedError):  # noqa: N818 - name used in user-facing messages
    """An op or attribute that drivepack cannot lower."""
