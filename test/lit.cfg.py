# lit configuration of the moe-compiler lit tests.
import os
import shutil
import subprocess

import lit.formats

config.name = "moe-compiler"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test", ".ptx"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moe_obj_root, "test")
config.excludes = ["unittests", "Inputs", "CMakeLists.txt", "lit.cfg.py",
                   "lit.site.cfg.py", "run-lit.py", "reference.py",
                   "check-layer.sh", "capi-forward.c", "capi-backward.c"]

path = [config.moe_tools_dir, config.llvm_tools_dir]
if config.cuda_bin_dir:
    path.append(config.cuda_bin_dir)
config.environment["PATH"] = os.pathsep.join(
    path + [config.environment.get("PATH", os.environ.get("PATH", ""))])

config.substitutions.append(("%moe_src_root", config.moe_src_root))
config.substitutions.append(("%moe_obj_root", config.moe_obj_root))
llvm_lib_dir = os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")
config.substitutions.append(
    ("%mlir_runner_utils", os.path.join(llvm_lib_dir, "libmlir_runner_utils.so")))
config.substitutions.append(
    ("%mlir_c_runner_utils",
     os.path.join(llvm_lib_dir, "libmlir_c_runner_utils.so")))
config.substitutions.append(("%python", config.python_executable))
config.environment["PYTHON"] = config.python_executable
# Compiles in tests are cached in the build tree, never in the user's home.
config.environment["MOE_CACHE_DIR"] = os.path.join(config.test_exec_root,
                                                   "moe-cache")
config.substitutions.append(
    ("%check-layer",
     os.path.join(config.test_source_root, "Integration", "check-layer.sh")))

# Sanitizer builds: pass their options through, and skip what cannot run
# there (building an outside project against instrumented libraries).
# MOE_EMU_STREAMS=sync runs the emulated GPU's streams one call at a time.
for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "MOE_EMU_STREAMS"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
if config.moe_sanitizers:
    config.available_features.add("sanitizers")

# Features for gated tests. Making device nodes (mknod) needs root.
if hasattr(os, "geteuid") and os.geteuid() == 0:
    config.available_features.add("root")
if shutil.which("ptxas", path=config.environment["PATH"]):
    config.available_features.add("ptxas")
# Several ranks: mpirun and the MPI plugin the runtime opens. Open MPI
# refuses to run as root unless told, and CI machines have fewer cores
# than ranks. Not under sanitizers (MPI's own allocations are reported).
mpi_plugin = os.path.join(config.moe_obj_root, "lib", "libmoe_comm_mpi.so")
if (shutil.which("mpirun", path=config.environment["PATH"])
        and os.path.exists(mpi_plugin) and not config.moe_sanitizers):
    config.available_features.add("mpi")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    config.substitutions.append(
        ("%mpirun", "mpirun --oversubscribe --bind-to none"))
# A GPU is present when the driver is: its device nodes exist.
if os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0"):
    config.available_features.add("cuda")
    # Two GPUs: sharded layers over NCCL, one rank per GPU.
    if os.path.exists("/dev/nvidia1"):
        config.available_features.add("cuda-2")
# The PTX emulator behind a drop-in CUDA driver (emu/). %cuda_emu names it
# for the emulator's own tests; without a GPU, every test that needs one
# runs on it (feature cuda-emu), the runtime directed there by
# MOE_CUDA_DRIVER.
cuda_emu = os.path.join(config.moe_obj_root, "lib", "libcuda-emu.so")
if os.path.exists(cuda_emu):
    config.available_features.add("emu")
    config.substitutions.append(("%cuda_emu", cuda_emu))
    config.substitutions.append(
        ("%nccl_emu",
         os.path.join(config.moe_obj_root, "lib", "libnccl-emu.so")))
    if "cuda" not in config.available_features:
        config.available_features.add("cuda")
        config.available_features.add("cuda-emu")
        config.environment["MOE_CUDA_DRIVER"] = cuda_emu
        # Several emulated GPUs, and NCCL between the ranks' processes.
        nccl_emu = os.path.join(config.moe_obj_root, "lib", "libnccl-emu.so")
        if os.path.exists(nccl_emu):
            config.available_features.add("cuda-2")
            config.environment["MOE_NCCL"] = nccl_emu

# The host CPU's vector extensions, for tests of the host code built for
# them (moe-compile --mcpu).
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo
                      if line.startswith("flags")), [])
except OSError:
    flags = []
if "avx2" in flags and "fma" in flags:
    config.available_features.add("host-avx2")
if "avx512f" in flags:
    config.available_features.add("host-avx512")

# PyTorch, for the GPU check's references (tools/gpu-check): the Python
# that has it, $MOE_TORCH_PYTHON, else the tests' own.
torch_python = os.environ.get("MOE_TORCH_PYTHON") or config.python_executable
if subprocess.run([torch_python, "-c", "import torch"],
                  capture_output=True).returncode == 0:
    config.available_features.add("torch")
    config.substitutions.append(("%torch_python", torch_python))
    # transformers 5, whose MoE modules define each model family.
    if subprocess.run([torch_python, "-c",
                       "import transformers, safetensors, sys; "
                       "sys.exit(int(transformers.__version__.split('.')[0]) < 5)"],
                      capture_output=True).returncode == 0:
        config.available_features.add("transformers")
    else:
        lit_config.note("transformers 5 not found in %s: the model-family "
                        "tests against transformers are skipped "
                        "(scripts/torch-venv.sh makes a venv that has it)"
                        % torch_python)
else:
    lit_config.note("PyTorch not found in %s (set MOE_TORCH_PYTHON): the "
                    "tests against PyTorch and transformers are skipped "
                    "(scripts/torch-venv.sh makes a venv that has them)"
                    % torch_python)

# The Python package (python/, built when nanobind was found): its pytest
# suites in test/Python run with the Python it was built for.
if config.package_python:
    if subprocess.run([config.package_python, "-c", "import pytest"],
                      capture_output=True).returncode == 0:
        config.available_features.add("python-package")
        # What test_torch.py and test_transformers.py need there.
        for feature, check in (
                ("package-torch", "import torch"),
                ("package-transformers",
                 "import torch, transformers, sys; "
                 "sys.exit(int(transformers.__version__.split('.')[0]) < 5)")):
            if subprocess.run([config.package_python, "-c", check],
                              capture_output=True).returncode == 0:
                config.available_features.add(feature)
        config.substitutions.append(
            ("%pytest",
             "env PYTHONPATH=%s PYTHONDONTWRITEBYTECODE=1 %s -m pytest -q -rs "
             "-p no:cacheprovider"
             % (os.path.join(config.moe_obj_root, "python_packages"),
                config.package_python)))
    else:
        lit_config.note("pytest not found in %s: the Python package's tests "
                        "are skipped" % config.package_python)
else:
    lit_config.note("the Python package is not in this build (no nanobind, "
                    "which scripts/torch-venv.sh puts in its venv, or a "
                    "sanitizer or fuzzer build): its tests are skipped")
