"""Expert parallelism from PyTorch: `torchrun --nproc-per-node 2` runs
ep_worker.py, whose MoELayer(process_group=...) shards the experts over a
gloo process group (no mpirun), against one rank's layer: outputs,
gradients and training losses equal; a transformers model's blocks; an
sm_90a layer whose NCCL communicator the group bootstraps."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(scripts/torch-venv.sh makes a venv with it)")
dist = pytest.importorskip("torch.distributed")

from conftest import HERE, INPUTS  # noqa: E402


def torchrun(*args, timeout=300, env=None):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this PyTorch has no gloo backend")
    env = dict(os.environ, OMP_NUM_THREADS="1", MOE_NUM_THREADS="1",
               **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", "2", *args], env=env, capture_output=True,
        text=True, timeout=timeout)


@pytest.mark.parametrize("name", ["deepseek-v3-tiny", "mixtral-tiny"])
def test_torchrun_two_ranks(name):
    result = torchrun(os.path.join(HERE, "ep_worker.py"),
                      os.path.join(INPUTS, name + ".json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, \
        result.stdout + result.stderr


@pytest.mark.skipif(not (os.environ.get("MOE_CUDA_DRIVER") and
                         os.environ.get("MOE_NCCL")),
                    reason="no MOE_CUDA_DRIVER and MOE_NCCL: the lit suite "
                           "points them at the PTX emulator and the "
                           "emulated NCCL (or a real driver and NCCL)")
@pytest.mark.parametrize("transport", ["lsa", "nccl"])
def test_torchrun_sm90(transport):
    """An sm_90a layer sharded over the gloo group: the NCCL communicator
    bootstrapped through torch.distributed, the exchanges on the GPUs,
    device-initiated (then on device memory too) or NCCL's (whose
    host-driven steps refuse device pointers); the backward pass too."""
    result = torchrun(os.path.join(HERE, "ep_worker.py"), "sm90",
                      os.path.join(INPUTS, "qwen3-moe-tiny.json"),
                      env={"MOE_EP_TRANSPORT": transport})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, \
        result.stdout + result.stderr
    assert "exchanges %s" % transport in result.stdout, result.stdout
    assert "rank 1: backward ok" in result.stdout, result.stdout
    if transport == "nccl":
        assert "needs the device-initiated exchange" in result.stdout
    else:
        assert "'host_waits': 0" in result.stdout, result.stdout
        assert "rank 1: device backward" in result.stdout, result.stdout


def test_torchrun_transformers():
    pytest.importorskip("transformers", reason="transformers is not "
                        "installed (scripts/torch-venv.sh makes a venv with "
                        "it)")
    result = torchrun(os.path.join(HERE, "ep_worker.py"), "transformers")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 ok" in result.stdout and "rank 1 ok" in result.stdout, \
        result.stdout + result.stderr


def test_process_group_errors(monkeypatch):
    """A process group before torch.distributed is initialized, one whose
    size does not divide the experts, and a sharded layer pickled: one
    clear exception each. A group of one rank runs as the unsharded
    layer."""
    import pickle
    from moe_compiler.torch import MoELayer
    config = os.path.join(INPUTS, "deepseek-v3-tiny.json")
    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    with pytest.raises(RuntimeError, match=r"process_group given, but "
                       r"torch\.distributed is not initialized"):
        MoELayer.from_config(config, seed=0, process_group=object())
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                            world_size=1)
    try:
        group = dist.group.WORLD
        one = MoELayer.from_config(config, seed=0, max_tokens=16)
        alone = MoELayer.from_config(config, seed=0, max_tokens=16,
                                     process_group=group)
        x = torch.randn(20, one.layer.hidden_size)
        assert torch.equal(alone(x), one(x))
        with pytest.raises(TypeError, match=r"a MoELayer sharded over a "
                           r"process group does not pickle or copy"):
            pickle.dumps(alone)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)
        with pytest.raises(ValueError, match=r"the process group has 3 "
                           r"ranks, which does not divide the layer's 16 "
                           r"experts"):
            MoELayer.from_config(config, seed=0, process_group=group)
    finally:
        monkeypatch.undo()
        dist.destroy_process_group()
