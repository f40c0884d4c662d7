"""moe_compiler.torch: MoELayer's forward equals the runtime's, and
loss.backward() gives moe-train's gradients (checked against finite
differences in Integration/train.test)."""
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(scripts/torch-venv.sh makes a venv with it)")

import moe_compiler  # noqa: E402
import reference  # noqa: E402
from conftest import INPUTS  # noqa: E402
from moe_compiler.torch import MoELayer  # noqa: E402
from test_package import generate  # noqa: E402


@pytest.mark.parametrize("name", ["deepseek-v3-tiny", "gpt-oss-tiny",
                                  "llama4-tiny"])
def test_grads_match_moe_train(tmp_path, moe_compile, moe_train, name):
    config, weights, x = generate(tmp_path, name, tokens=6)
    rng = np.random.default_rng(7)
    target = rng.uniform(-0.1, 0.1, size=x.shape).astype(np.float32)
    # moe-train: one step of its fused MSE training step, gradients dumped.
    bundle = moe_compiler.compile(config, max_tokens=64, train=True)
    step = tmp_path / "step.moeb"
    subprocess.run([moe_compile, "--hf-config", config, "--train",
                    "--max-tokens", "64", "-o", str(step)], check=True)
    batch, dumped = tmp_path / "batch.safetensors", tmp_path / "g.safetensors"
    reference.write_safetensors(str(batch), {"x": x, "target": target})
    subprocess.run([moe_train, str(step), "--steps", "1", "--lr", "0",
                    "--inputs", str(batch), "--weights", weights,
                    "--dump-grads", str(dumped)], check=True,
                   capture_output=True)
    expected = reference.read_safetensors(str(dumped))
    # torch: the same loss through MoELayer's autograd.
    moe = MoELayer(bundle.load(weights=weights))
    xt = torch.from_numpy(x).requires_grad_()
    loss = ((moe(xt) - torch.from_numpy(target)) ** 2).mean()
    loss.backward()
    grads = moe.layer.checkpoint_names(
        {role: getattr(moe, role).grad for role in moe._trained})
    grads["x"] = xt.grad.numpy()
    assert set(grads) == set(expected)
    for name_, want in expected.items():
        scale = max(np.abs(want).max(), 1e-12)
        err = np.abs(grads[name_] - want).max() / scale
        assert err < 1e-5, "%s: relative error %.2e" % (name_, err)


def test_module_forward_and_optimizer(tmp_path):
    config, weights, x = generate(tmp_path, "qwen3-moe-tiny", tokens=12)
    moe = MoELayer.from_config(config, weights=weights, output="routing")
    layer = moe_compiler.compile(config).load(weights=weights)
    xt = torch.from_numpy(x).reshape(3, 4, -1)
    y, ids, w = moe(xt)
    ry, rids, rw = layer(x)
    assert y.shape == xt.shape and ids.shape == (3, 4, layer.top_k)
    assert torch.equal(y.reshape(12, -1), torch.from_numpy(ry))
    assert torch.equal(ids.reshape(12, -1), torch.from_numpy(rids))
    # An optimizer step changes the parameters; the next forward pass uses
    # them (the layer gets the changed tensors).
    opt = torch.optim.SGD(moe.parameters(), lr=0.5)
    (moe(xt)[0] ** 2).sum().backward()
    opt.step()
    for role in moe._trained:
        layer.set_parameter(role, getattr(moe, role).detach())
    assert torch.equal(moe(xt)[0].reshape(12, -1),
                       torch.from_numpy(layer(x)[0]))
    assert not torch.equal(moe(xt)[0].reshape(12, -1), torch.from_numpy(ry))
    # bf16 input: y comes back in x's dtype.
    yb = moe(xt.to(torch.bfloat16))[0]
    assert yb.dtype == torch.bfloat16


def test_errors(tmp_path):
    config, weights, x = generate(tmp_path, "qwen3-moe-tiny")
    frozen = MoELayer.from_config(config, weights=weights, train=False)
    assert len(list(frozen.parameters())) == 0
    xt = torch.from_numpy(x).requires_grad_()
    with pytest.raises(RuntimeError, match="no backward pass: compile it "
                                           "with train=True"):
        frozen(xt).sum().backward()
    with pytest.raises(ValueError, match=r"expected \[\.\.\., %d\]"
                       % frozen.layer.hidden_size):
        frozen(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="output must be"):
        MoELayer(frozen.layer, output="logits")
    with pytest.raises(ValueError, match="x has dtype float64"):
        frozen(torch.from_numpy(x).double())
    # The device path (CUDA tensors) of a host layer: refused before any
    # device is touched.
    with pytest.raises(ValueError, match=r"x is on cpu, but the layer's "
                       r"bundle is for the host target \(compile it with "
                       r"target='sm_90a'"):
        frozen._forward_device(torch.from_numpy(x))
    # An fp8 layer trains through Layer.backward, not yet as a module.
    fp8 = moe_compiler.compile(INPUTS + "/deepseek-v3-fp8.json", dtype="fp8",
                               train=True, max_tokens=16).load(seed=1)
    with pytest.raises(ValueError, match="MoELayer does not train fp8 layers "
                       "yet .down_weight, gate_weight, shared_down_weight"):
        MoELayer(fp8)
