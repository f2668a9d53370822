# lit configuration of flashjit's IR tests.
import os
import lit.formats

config.name = "flashjit"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
if hasattr(config, "flashjit_tools_dir"):
    config.test_exec_root = os.path.join(config.flashjit_tools_dir, "..", "..",
                                         "tests", "lit")
    path = os.pathsep.join([config.flashjit_tools_dir, config.llvm_tools_dir,
                            config.environment.get("PATH", os.environ["PATH"])])
    config.environment["PATH"] = path
# Captured variables do not leak across CHECK-LABELs.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
