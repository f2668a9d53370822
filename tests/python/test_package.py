"""The installed package (the CTest python.pip_install runs this after
`pip install` of the repository; FLASHJIT_EXPECT_INSTALLED names the
install folder): it loads its own copy of the C library, its version is
the CMake project's, and it computes attention."""

import os
import re

import numpy as np

import flashjit
import reference as ref


def test_installed_package():
    where = os.environ.get("FLASHJIT_EXPECT_INSTALLED")
    from flashjit import _capi
    lib = _capi.default_library()
    if where:
        assert "FLASHJIT_LIBRARY" not in os.environ
        assert os.path.realpath(flashjit.__file__).startswith(
            os.path.realpath(where)), flashjit.__file__
        assert os.path.realpath(lib.path).startswith(os.path.realpath(where))
        from importlib.metadata import version
        assert version("flashjit") == flashjit.__version__
    cmake = open(os.path.join(os.path.dirname(__file__), "..", "..",
                              "CMakeLists.txt")).read()
    want = re.search(r"project\(flashjit VERSION ([0-9.]+)", cmake).group(1)
    assert flashjit.__version__ == want
    rng = ref.rng()
    q = rng.standard_normal((1, 2, 19, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, 23, 16)).astype(np.float32)
    o = flashjit.attention(q, k, k, causal="bottom_right")
    want_o, _ = ref.attention(q, k, k, ref.causal(19, 23, True))
    ref.assert_close(o, want_o, 2e-5, 2e-5, what="installed O")
