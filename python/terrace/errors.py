"""Terrace's errors, one class per error code; each is a terrace.TerraceError (a RuntimeError)
with .code, and where one fits also a standard class: InvalidArgument a ValueError,
NotImplemented a NotImplementedError, OutOfMemory a MemoryError, IoError an OSError."""
from ._terrace import (  # noqa: F401
    Cancelled,
    CompileFailed,
    Internal,
    InvalidArgument,
    InvalidModel,
    IoError,
    NotImplemented,
    OutOfMemory,
    RuntimeError,
    TerraceError,
)
