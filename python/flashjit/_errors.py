"""flashjit's exceptions, mirroring the C++ ones (flashjit/frontend/Error.h)
and the C API's flashjit_status codes."""


class Error(RuntimeError):
    """A flashjit call failed. ``status`` is the C API's status name
    (``"FLASHJIT_USER_ERROR"``, ...), ``message`` flashjit's message."""

    status = "FLASHJIT_ERROR"

    def __init__(self, message, status=None):
        if status is not None:
            self.status = status
        self.message = message
        super().__init__(f"{self.status}: {message}")


class UserError(Error, ValueError):
    """Bad input: a spec, option, tensor (dtype, shape, stride, device),
    parameter or buffer. The message names the field and the value."""

    status = "FLASHJIT_USER_ERROR"


class CompileError(Error):
    """A compiler pass failed (a bug or an unsupported construct)."""

    status = "FLASHJIT_COMPILE_ERROR"


class DriverError(Error):
    """The CUDA driver, NVRTC or nvJitLink failed, or no GPU is present."""

    status = "FLASHJIT_DRIVER_ERROR"


class InternalError(Error):
    """A bug in flashjit."""

    status = "FLASHJIT_INTERNAL_ERROR"


#: flashjit_status code -> exception class.
BY_STATUS = {1: UserError, 2: CompileError, 3: DriverError, 4: InternalError}
