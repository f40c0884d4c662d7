# lit configuration that runs the GoogleTest binaries of moe-compiler.
import lit.formats

config.name = "moe-compiler-unit"
config.test_source_root = config.unittests_dir
config.test_exec_root = config.unittests_dir
config.test_format = lit.formats.GoogleTest(".", "Tests")
