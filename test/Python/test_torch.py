"""moe_compiler.torch: MoELayer's forward equals the runtime's, and
loss.backward() gives moe-train's gradients (checked against finite
differences in Integration/train.test)."""
import copy
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(scripts/torch-venv.sh makes a venv with it)")

import moe_compiler  # noqa: E402
import reference  # noqa: E402
from conftest import INPUTS  # noqa: E402
from moe_compiler.torch import MoELayer  # noqa: E402
from test_package import generate, reference_args  # noqa: E402


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


FP8_MASTERS = ("gate_weight", "up_weight", "down_weight", "shared_gate_weight",
               "shared_up_weight", "shared_down_weight")


def test_fp8_module_trains(tmp_path):
    """An fp8 layer as a module: its trained expert weights are float
    masters (the published codes times their block scales to begin with),
    which the layer quantizes again whenever they change. After an
    optimizer step moved them, loss.backward()'s gradients are DeepSeek-V3's
    recipe at the new masters: within 3e-2 of fp8_train_check.py's float64
    model given the module's masters (bf16 rounding that flips an e4m3
    code, and with it a tile's scale, makes up the difference), and more
    than 0.1 from the same model at the masters before the step and from
    the model without quantization."""
    import fp8_train_check
    config = os.path.join(INPUTS, "deepseek-v3-fp8.json")
    weights, inputs = tmp_path / "w.safetensors", tmp_path / "x.safetensors"
    args = reference_args(config, 48, 7, weights, inputs)
    args.dtype, args.fp8 = "bf16", True
    reference.generate(args)
    module = MoELayer.from_config(config, weights=str(weights), dtype="fp8",
                                  max_tokens=64)
    for role in FP8_MASTERS:
        assert getattr(module, role).dtype == torch.float32, role
        assert role in dict(module.named_parameters()), role
    assert not any(n.endswith("_scale") for n, _ in module.named_buffers())

    def by_name():
        """The module's tensors under the checkpoint's names, float64."""
        roles = {n: t.detach().numpy().copy()
                 for n, t in module.named_parameters()}
        roles.update({n: t.numpy() for n, t in module.named_buffers()})
        return {n: v.astype(np.float64) for n, v in
                module.layer.checkpoint_names(roles).items()}

    x = reference.read_safetensors(str(inputs))["x"].copy()
    target = np.random.default_rng(1).uniform(-0.1, 0.1, x.shape)
    xt = torch.from_numpy(x).requires_grad_()
    tt = torch.from_numpy(target.astype(np.float32))
    before = by_name()
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    ((module(xt) - tt) ** 2).mean().backward()
    opt.step()
    opt.zero_grad()
    xt.grad = None
    ((module(xt) - tt) ** 2).mean().backward()
    got = {n: t.grad.numpy().astype(np.float64)
           for n, t in module.named_parameters()}
    got["x"] = xt.grad.numpy().astype(np.float64)

    cfg = reference.Config(config)
    after = by_name()
    for masters, plain, close in ((after, False, True), (after, True, False),
                                  (before, False, False)):
        want = fp8_train_check.step(cfg, masters, x.astype(np.float64), target,
                                    fp8_train_check.Recipe("block", plain))
        for name, value in fp8_train_check.by_role(cfg, want).items():
            err = np.linalg.norm(got[name] - value) / np.linalg.norm(value)
            assert (err < 3e-2) if close else (err > 0.1), \
                (name, plain, masters is before, err)
    # A copy (the bundle reloaded, the masters quantized again) computes
    # the same.
    clone = copy.deepcopy(module)
    with torch.no_grad():
        assert torch.equal(clone(xt), module(xt))


def test_fp8_module_tensor_recipe_scales():
    """fp8_recipe="tensor": a master bound to the layer gets one scale per
    expert's matrix (its largest magnitude over 448, in every block)."""
    module = MoELayer.from_config(INPUTS + "/deepseek-v3-fp8.json", seed=1,
                                  dtype="fp8", fp8_recipe="tensor",
                                  max_tokens=16)
    with torch.no_grad():
        module.gate_weight.mul_(1.5)
        module.gate_weight[0, 0, 0] = 3.0
    module(torch.zeros(2, module.layer.hidden_size))
    scales = module.layer._core.parameter("gate_scale")
    master = module.gate_weight.detach().numpy()
    for e in range(master.shape[0]):
        want = np.float32(np.abs(master[e]).max()) / np.float32(448)
        assert np.all(scales[e] == want), (e, scales[e], want)
    assert scales[0].flat[0] == np.float32(3.0) / np.float32(448)
