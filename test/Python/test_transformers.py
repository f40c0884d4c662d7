"""replace_moe_blocks on small transformers 5 models: the same logits and
greedy generations, and
loss.backward() gives the same gradients as transformers' own modules, for
the swapped blocks' weights (compared under the checkpoint's names) and for
every other parameter (whose gradients flow through the blocks' dx). A
replaced model deep-copies and pickles, runs batches beyond the bundle's
max_tokens, and gets a layer of its own dtype; restore_moe_blocks puts
transformers' blocks back with the trained weights, so that a fine-tuned
model survives save_pretrained and from_pretrained; so does one saved
without restoring, whose state_dict() is transformers' (load_state_dict()
takes it back). The layer's ops pass
torch.library.opcheck, and torch.compile(fullgraph=True) of a replaced
model equals eager."""
import copy
import pickle
import re

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(scripts/torch-venv.sh makes a venv with it)")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed "
    "(scripts/torch-venv.sh makes a venv with it)")

import moe_compiler.torch as moe_torch  # noqa: E402
from moe_compiler.torch import (MoELayer, replace_moe_blocks,  # noqa: E402
                                restore_moe_blocks)

ATTENTION = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 intermediate_size=64, vocab_size=100, bos_token_id=None,
                 eos_token_id=None, pad_token_id=None)
CASES = {
    # Layer 0 dense (first_k_dense_replace), layer 1 MoE with the
    # group-limited sigmoid router, its selection bias and shared experts.
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(num_hidden_layers=2, hidden_size=64,
                         n_routed_experts=16, num_experts_per_tok=4,
                         n_group=4, topk_group=2, moe_intermediate_size=32,
                         n_shared_experts=1, routed_scaling_factor=2.5,
                         norm_topk_prob=True, first_k_dense_replace=1,
                         q_lora_rank=16, kv_lora_rank=16,
                         qk_rope_head_dim=8, qk_nope_head_dim=8,
                         v_head_dim=16, head_dim=8)),
    # Sparse layers 1 and 3 of 4 (decoder_sparse_step 2).
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(num_hidden_layers=4, decoder_sparse_step=2,
                       hidden_size=64, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32, norm_topk_prob=True)),
    # transformers 5 names the block `mlp`; the checkpoints,
    # `block_sparse_moe`.
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(num_hidden_layers=2, hidden_size=64,
                     num_local_experts=4, num_experts_per_tok=2)),
    # MiniMax: `mlp` too (full attention in both layers: the lightning
    # attention layers are not what is tested here).
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM",
                dict(num_hidden_layers=2, hidden_size=64,
                     num_local_experts=4, num_experts_per_tok=2,
                     layer_types=["full_attention"] * 2)),
    # GraniteMoE keeps `block_sparse_moe` in transformers 5.
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM",
                   dict(num_hidden_layers=2, hidden_size=64,
                        num_local_experts=4, num_experts_per_tok=2)),
    # Llama 4's text model: `feed_forward` blocks returning (y, router
    # logits), top-1 sigmoid routing applied to the experts' input, a
    # shared expert.
    "llama4": ("Llama4TextConfig", "Llama4ForCausalLM",
               dict(num_hidden_layers=2, hidden_size=64,
                    num_local_experts=4, num_experts_per_tok=1,
                    intermediate_size=32, intermediate_size_mlp=64)),
    # A block that returns (y, router scores), biases and the clamp.
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(num_hidden_layers=2, hidden_size=64,
                     num_local_experts=8, num_experts_per_tok=2,
                     intermediate_size=48, swiglu_limit=0.4,
                     layer_types=["full_attention"] * 2)),
}


def build(case):
    config_class, model_class, fields = CASES[case]
    config = getattr(transformers, config_class)(**{**ATTENTION, **fields})
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Larger than the init's 0.02 so that the experts matter, and
            # every bias nonzero.
            p.copy_(torch.randn_like(p) * (0.1 if p.dim() > 1 else 0.3))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.rand_like(b) * 0.1)
    return model


def run(model, tokens):
    model.zero_grad()
    out = model(tokens, labels=tokens)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p
                                 in model.named_parameters()
                                 if p.grad is not None}


def block_grads(model, swapped, path, grads, ref_grads):
    """The gradients of the replaced block at `path` (grads, by the
    swapped model's names) and of transformers' (ref_grads, by the
    original model's), both under the published checkpoint names after
    the block's name."""
    from transformers.core_model_loading import revert_weight_conversion
    moe = swapped.get_submodule(path)
    ref = revert_weight_conversion(
        model, {n: g for n, g in ref_grads.items()
                if n.startswith(path + ".")})
    ours = moe.layer.checkpoint_names(
        {role: grads[path + "." + role] for role in moe._trained})
    # Reverted to the checkpoint's block name (Mixtral's block_sparse_moe
    # for the module mlp): names after it.
    ref = {re.sub(r"^.*?layers\.\d+\.[a-z_]+\.", "", n): g
           for n, g in ref.items()}
    assert set(ours) == set(ref), (sorted(ours), sorted(ref))
    return ours, ref


@pytest.mark.parametrize("case", sorted(CASES))
def test_replace_moe_blocks(case):
    model = build(case)
    tokens = torch.randint(0, 100, (2, 11), generator=torch.Generator()
                           .manual_seed(1))
    ref_logits, ref_grads = run(model, tokens)

    swapped = copy.deepcopy(model)
    paths = replace_moe_blocks(swapped, train=True)
    assert paths and all(isinstance(swapped.get_submodule(p), MoELayer)
                         for p in paths)
    logits, grads = run(swapped, tokens)
    scale = ref_logits.abs().max()
    assert (logits - ref_logits).abs().max() <= 1e-5 * scale

    def close(got, want, name):
        err = (got - want).abs().max() / max(want.abs().max(), 1e-12)
        assert err <= 2e-4, "%s: relative error %.2e" % (name, err)

    # Everything outside the blocks.
    outside = [n for n in ref_grads if not any(n.startswith(p + ".")
                                               for p in paths)]
    assert outside
    for name in outside:
        close(grads[name], ref_grads[name], name)
    # The blocks' own weights, both under the published checkpoint names.
    for path in paths:
        ours, ref = block_grads(model, swapped, path, grads, ref_grads)
        for name, want in ref.items():
            close(torch.from_numpy(ours[name]), want, path + "." + name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_generate(case):
    """Greedy generation through the KV cache (a token at a time after the
    prompt) gives transformers' tokens."""
    model = build(case)
    prompt = torch.randint(0, 100, (2, 6), generator=torch.Generator()
                           .manual_seed(11))
    args = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(prompt, **args)
        replace_moe_blocks(model, train=False)
        got = model.generate(prompt, **args)
    assert torch.equal(got, want), (got, want)


def test_5000_token_batch():
    """A 5000-token prefill through bundles of the default max_tokens
    (4096): two pieces, transformers' logits."""
    model = build("qwen3_moe")
    tokens = torch.randint(0, 100, (1, 5000), generator=torch.Generator()
                           .manual_seed(12))
    with torch.no_grad():
        want = model(tokens).logits
        paths = replace_moe_blocks(model, train=False)
        assert model.get_submodule(paths[0]).layer.max_tokens == 4096
        got = model(tokens).logits
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()


def test_copy_and_pickle():
    """A replaced model copies (copy.deepcopy, pickle): the copy loads its
    bundle again, computes the same logits, and trains apart from the
    original."""
    model = build("qwen3_moe")
    replace_moe_blocks(model, train=True)
    tokens = torch.randint(0, 100, (2, 7), generator=torch.Generator()
                           .manual_seed(2))
    with torch.no_grad():
        want = model(tokens).logits
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        with torch.no_grad():
            assert torch.equal(copied(tokens).logits, want)
        # A step on the copy leaves the original alone.
        moe = next(m for m in copied.modules() if isinstance(m, MoELayer))
        with torch.no_grad():
            getattr(moe, moe._trained[0]).mul_(2)
            assert not torch.equal(copied(tokens).logits, want)
            assert torch.equal(model(tokens).logits, want)


def test_batches_beyond_max_tokens():
    """22 tokens through a bundle compiled for 8: three pieces, the same
    logits and gradients as one pass."""
    model = build("deepseek_v3")
    tokens = torch.randint(0, 100, (2, 11), generator=torch.Generator()
                           .manual_seed(3))
    whole = copy.deepcopy(model)
    replace_moe_blocks(whole, train=True)
    replace_moe_blocks(model, train=True, max_tokens=8)
    assert all(m.layer.max_tokens == 8 for m in model.modules()
               if isinstance(m, MoELayer))
    ref_logits, ref_grads = run(whole, tokens)
    logits, grads = run(model, tokens)
    assert (logits - ref_logits).abs().max() <= 1e-5 * ref_logits.abs().max()
    for name, want in ref_grads.items():
        err = (grads[name] - want).abs().max() / max(want.abs().max(), 1e-12)
        assert err <= 1e-5, "%s: relative error %.2e" % (name, err)


def test_model_dtype():
    """A bf16 model gets a bf16 layer (not f32), whose logits follow
    transformers' bf16 ones; dtype= overrides."""
    model = build("mixtral").to(torch.bfloat16)
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator()
                           .manual_seed(4))
    with torch.no_grad():
        want = model(tokens).logits.float()
    swapped = copy.deepcopy(model)
    paths = replace_moe_blocks(swapped, train=False)
    assert {swapped.get_submodule(p).layer.dtype for p in paths} == {"bf16"}
    # Its tensors in bf16 too, as transformers' blocks hold them.
    assert {b.dtype for p in paths
            for b in swapped.get_submodule(p).buffers()} == {torch.bfloat16}
    with torch.no_grad():
        got = swapped(tokens).logits
    assert got.dtype == torch.bfloat16
    # bf16 rounding differs between the two (summation orders, where each
    # rounds), not the math: 0.4% of the logits' scale here, where an f32
    # layer in the bf16 model is 4% off.
    assert (got.float() - want).abs().max() <= 1.5e-2 * want.abs().max()
    f32 = copy.deepcopy(model)
    paths = replace_moe_blocks(f32, train=False, dtype="f32")
    assert {f32.get_submodule(p).layer.dtype for p in paths} == {"f32"}


@pytest.mark.skipif(not __import__("os").environ.get("MOE_CUDA_DRIVER"),
                    reason="no MOE_CUDA_DRIVER: the lit suite points it at "
                           "the PTX emulator (or a real driver)")
def test_sm90_blocks():
    """replace_moe_blocks(target="sm_90a") on a bf16 model: the layers run
    on the GPU the driver gives (the PTX emulator here; CPU tensors go
    through the host) and the logits follow transformers' bf16 ones;
    trained there, loss.backward() runs the layers' sm_90a backward pass,
    whose gradients are the host target's bf16 ones."""
    model = build("qwen3_moe").to(torch.bfloat16)
    tokens = torch.randint(0, 100, (2, 5), generator=torch.Generator()
                           .manual_seed(13))
    with torch.no_grad():
        want = model(tokens).logits.float()
    grads = []
    for target in ("sm_90a", "host"):
        trained = copy.deepcopy(model)
        layers = replace_moe_blocks(trained, target=target, train=True)
        trained.train()
        trained(tokens).logits.float().square().mean().backward()
        grads.append({"%s.%s" % (p, n): t.grad.float()
                      for p in layers
                      for n, t in trained.get_submodule(p).named_parameters()})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) >= 8
    for name, got in grads[0].items():
        ref = grads[1][name]
        assert (got - ref).norm() <= 3e-2 * ref.norm(), name
    paths = replace_moe_blocks(model, target="sm_90a", train=False)
    assert {model.get_submodule(p).layer.target for p in paths} == \
        {"sm_90a"}
    with torch.no_grad():
        got = model(tokens).logits.float()
    assert (got - want).abs().max() <= 1.5e-2 * want.abs().max()
    # The device path (which CUDA tensors take; none here) up to the
    # device arrays: buffers of the layer's dtypes, then a clear refusal
    # of host memory.
    moe = model.get_submodule(paths[0])
    with pytest.raises(ValueError, match=r"x is on cpu; forward_into takes "
                       r"device arrays \(CUDA tensors\)"):
        moe._forward_device(torch.zeros(3, 64))
    assert restore_moe_blocks(model) == paths


def test_no_block():
    """A model whose modules hold no block where the config says: one
    error naming what was looked for."""
    class NotAModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = build("mixtral").config
            self.proj = torch.nn.Linear(4, 4)

    with pytest.raises(ValueError, match=r"no MoE block of the form "
                       r"'model\.layers\.\{layer\}\.block_sparse_moe\.' "
                       r"\(or with the block named mlp or block_sparse_moe "
                       r"or feed_forward\) found in the model"):
        replace_moe_blocks(NotAModel())


@pytest.mark.parametrize("case", sorted(CASES))
def test_restore_and_save_pretrained(case, tmp_path):
    """Fine-tune with compiled layers, put transformers' blocks back, save
    and load with transformers alone: the same logits as the tuned model."""
    model = build(case)
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator()
                           .manual_seed(5))
    with torch.no_grad():
        before = model(tokens).logits
    classes = {p: type(model.get_submodule(p)) for p, _ in
               model.named_modules()}
    paths = replace_moe_blocks(model, train=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(tokens, labels=tokens).loss.backward()
    optimizer.step()
    with torch.no_grad():
        tuned = model(tokens).logits
    assert (tuned - before).abs().max() > 0.1  # the step changed something
    assert restore_moe_blocks(model) == paths
    assert all(type(model.get_submodule(p)) is classes[p] for p in paths)
    assert not any(isinstance(m, MoELayer) for m in model.modules())
    with torch.no_grad():
        restored = model(tokens).logits
    assert (restored - tuned).abs().max() <= 1e-5 * tuned.abs().max()
    model.save_pretrained(tmp_path)
    loaded = getattr(transformers, CASES[case][1]).from_pretrained(
        tmp_path).float().eval()
    with torch.no_grad():
        assert torch.equal(loaded(tokens).logits, restored)
    assert restore_moe_blocks(model) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_dict_names_and_save_pretrained(case, tmp_path):
    """A replaced model's state_dict() is transformers' (the same names,
    shapes, dtypes and values as before the swap), so save_pretrained of a
    model fine-tuned with compiled layers writes a checkpoint that
    from_pretrained loads bit for bit, with or without the compiler."""
    model = build(case)
    want = model.state_dict()
    paths = replace_moe_blocks(model, train=True)
    got = model.state_dict()
    assert list(got) == list(want) or set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and \
            torch.equal(got[name], value), name
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator()
                           .manual_seed(9))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(tokens, labels=tokens).loss.backward()
    optimizer.step()
    with torch.no_grad():
        tuned = model(tokens).logits
    tuned_state = model.state_dict()
    assert not all(torch.equal(tuned_state[n], want[n]) for n in want
                   if n.startswith(paths[0] + "."))
    model.save_pretrained(tmp_path)
    plain = getattr(transformers, CASES[case][1]).from_pretrained(
        tmp_path).float().eval()
    plain_state = plain.state_dict()
    assert set(plain_state) == set(tuned_state)
    for name, value in tuned_state.items():
        assert torch.equal(plain_state[name], value), name
    # Loaded again with the compiler: the tuned model itself.
    replace_moe_blocks(plain, train=True)
    with torch.no_grad():
        assert torch.equal(plain(tokens).logits, tuned)


def test_load_state_dict():
    """load_state_dict() takes transformers' names (a state dict of the
    model before the swap, or of another replaced model) or the layer's
    roles, and a state dict with only part of a block fails naming what
    is missing."""
    source = build("deepseek_v3")
    tokens = torch.randint(0, 100, (2, 7), generator=torch.Generator()
                           .manual_seed(10))
    with torch.no_grad():
        want = source(tokens).logits
    model = build("deepseek_v3")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-1)  # other weights, so that loading shows
    replace_moe_blocks(model, train=True)
    model.load_state_dict(source.state_dict())
    with torch.no_grad():
        got = model(tokens).logits
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()
    # Into a replaced model from a replaced model: equal, bit for bit.
    other = build("deepseek_v3")
    replace_moe_blocks(other, train=True)
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(other(tokens).logits, got)
    # The layer's roles, as MoELayer.state_dict() names them.
    moe = model.get_submodule("model.layers.1.mlp")
    by_role = {"model.layers.1.mlp." + k: v for k, v in
               MoELayer.state_dict(moe).items()}
    assert "model.layers.1.mlp.gate_weight" in by_role
    rest = {k: v for k, v in source.state_dict().items()
            if not k.startswith("model.layers.1.mlp.")}
    other.load_state_dict({**rest, **by_role})
    with torch.no_grad():
        assert torch.equal(other(tokens).logits, got)
    partial = source.state_dict()
    missing = next(k for k in partial if k.startswith("model.layers.1.mlp."))
    del partial[missing]
    with pytest.raises(RuntimeError, match=r"moe_compiler: the state dict "
                       r"holds only some of the tensors of block "
                       r"'model\.layers\.1\.mlp' \(missing: %s\)"
                       % re.escape(missing)):
        other.load_state_dict(partial)


def test_state_dict_bf16_and_fp8():
    """A bf16 model's state dict stays bf16 (the masters rounded as
    transformers holds them); an FP8 layer's weights come out dequantized
    (within e4m3's error of the block's), and loading them back quantizes
    to the same codes."""
    model = build("qwen3_moe").to(torch.bfloat16)
    want = model.state_dict()
    replace_moe_blocks(model, train=False)
    got = model.state_dict()
    for name, value in want.items():
        assert got[name].dtype == torch.bfloat16 and \
            torch.equal(got[name], value), name
    model = build("qwen3_moe")
    want = model.state_dict()
    paths = replace_moe_blocks(model, train=False, dtype="fp8")
    moe = model.get_submodule(paths[0])
    # bf16 activations, e4m3 expert weights with 128x128 block scales.
    assert any(moe._dtypes[r] == "f8E4M3FN" for r in moe._roles)
    codes = {r: getattr(moe, r).clone() for r in moe._roles}
    got = model.state_dict()
    assert set(got) == set(want)
    for name, value in want.items():
        err = (got[name] - value).abs().max() / value.abs().max()
        # e4m3 keeps 3 mantissa bits: half an ulp is 1/16 of a value.
        assert err <= 1 / 16, "%s: relative error %.3f" % (name, err)
    model.load_state_dict(got)
    for role, value in codes.items():
        assert torch.equal(getattr(moe, role), value), role


def test_fp8_training():
    """replace_moe_blocks(dtype="fp8", train=True): the layers train with
    FP8 experts. Their expert weights are float masters under the block's
    names (what transformers holds); the model's gradients follow
    transformers' f32 ones within what e4m3's 3 mantissa bits allow; an
    optimizer step changes the masters, and the layer's next pass uses
    them (its loss changes)."""
    model = build("qwen3_moe")
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator()
                           .manual_seed(15))
    _, want = run(model, tokens)
    swapped = copy.deepcopy(model)
    paths = replace_moe_blocks(swapped, train=True, dtype="fp8")
    moe = swapped.get_submodule(paths[0])
    assert moe._masters and all(getattr(moe, r).dtype == torch.float32
                                for r in moe._masters)
    _, got = run(swapped, tokens)

    def check(got, want, name):
        if not want.any():  # an expert that saw no token
            assert not got.any(), name
            return
        err = (got - want).norm() / want.norm()
        assert err < 0.15, "%s: relative error %.3f" % (name, err)

    for name in want:
        if not any(name.startswith(p + ".") for p in paths):
            check(got[name], want[name], name)
    # The blocks' weights under the published checkpoint names.
    for path in paths:
        ours, ref = block_grads(model, swapped, path, got, want)
        for name, value in ref.items():
            check(torch.from_numpy(ours[name]), value, path + "." + name)
    assert set(swapped.state_dict()) == set(model.state_dict())
    first = swapped(tokens, labels=tokens).loss.item()
    torch.optim.SGD(swapped.parameters(), lr=0.5).step()
    assert swapped(tokens, labels=tokens).loss.item() < first


def test_bf16_training():
    """A bf16 model trained with compiled layers: their parameters and
    gradients are bf16 (an optimizer sees what transformers' blocks would
    give it), and the gradients follow transformers' bf16 ones."""
    model = build("mixtral").to(torch.bfloat16)
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator()
                           .manual_seed(14))
    _, want = run(model, tokens)
    swapped = copy.deepcopy(model)
    paths = replace_moe_blocks(swapped, train=True)
    _, got = run(swapped, tokens)
    moe = swapped.get_submodule(paths[0])
    assert {p.dtype for p in moe.parameters()} == {torch.bfloat16}
    assert {p.grad.dtype for p in moe.parameters()} == {torch.bfloat16}
    # Outside the blocks, bf16 rounding apart (where each side rounds).
    for name in want:
        if not any(name.startswith(p + ".") for p in paths):
            err = (got[name].float() - want[name].float()).abs().max()
            assert err <= 5e-2 * want[name].float().abs().max(), name


def test_restore_copies_and_dtype():
    """A pickled replaced model restores too, and a bf16 model's blocks
    come back in bf16."""
    model = build("qwen3_moe").to(torch.bfloat16)
    paths = replace_moe_blocks(model, train=False)
    copied = pickle.loads(pickle.dumps(model))
    for m in (model, copied):
        assert restore_moe_blocks(m) == paths
        assert {p.dtype for p in m.get_submodule(paths[0]).parameters()} == \
            {torch.bfloat16}


def test_restore_errors(monkeypatch):
    """transformers' conversion of a block that the layer cannot give
    back: one error saying which tensor or that elements are missing."""
    import transformers.core_model_loading as loading
    real = loading.revert_weight_conversion
    model = build("mixtral")
    replace_moe_blocks(model, train=True)

    def renamed(m, state):
        out = real(m, state)
        gate = next(k for k in sorted(out) if k.endswith(".gate.weight"))
        out[gate.replace("gate.weight", "router.kernel")] = out.pop(gate)
        return out

    monkeypatch.setattr(loading, "revert_weight_conversion", renamed)
    with pytest.raises(ValueError, match=r"restore_moe_blocks: the layer "
                       r"has no tensor 'router\.kernel' that transformers' "
                       r"block 'model\.layers\.0\.mlp' saves as "
                       r"'model\.layers\.0\.block_sparse_moe\.router"
                       r"\.kernel'"):
        restore_moe_blocks(model)

    def dropped(m, state):
        out = real(m, state)
        out.pop(sorted(out)[0])
        return out

    monkeypatch.setattr(loading, "revert_weight_conversion", dropped)
    with pytest.raises(ValueError, match=r"conversion of block "
                       r"'model\.layers\.0\.mlp' is not a rearrangement "
                       r"of its tensors \(elements left unset\)"):
        restore_moe_blocks(model)


def test_phimoe_forward():
    """Phi-3.5-MoE (transformers 5's `mlp`, sparsemixer routing, which has
    no compiled backward pass): the forward pass equals transformers', and
    its blocks come back."""
    config = transformers.PhimoeConfig(**{
        **ATTENTION, "num_hidden_layers": 2, "hidden_size": 64,
        "num_local_experts": 4, "num_experts_per_tok": 2})
    torch.manual_seed(0)
    model = transformers.PhimoeForCausalLM(config).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * (0.1 if p.dim() > 1 else 0.3))
    tokens = torch.randint(0, 100, (2, 11), generator=torch.Generator()
                           .manual_seed(6))
    with torch.no_grad():
        want = model(tokens).logits
        paths = replace_moe_blocks(model, train=False)
        assert paths == ["model.layers.0.mlp", "model.layers.1.mlp"]
        got = model(tokens).logits
        assert (got - want).abs().max() <= 1e-5 * want.abs().max()
        assert restore_moe_blocks(model) == paths
        assert torch.equal(model(tokens).logits, want)


COMPILED = ["deepseek_v3", "gpt_oss", "llama4", "mixtral", "qwen3_moe"]


@pytest.mark.parametrize("case", COMPILED)
def test_opcheck(case):
    """The forward and backward ops, as torch.library.opcheck checks a
    custom op: schema, autograd registration, fake (meta) kernels against
    the real ones, and AOT dispatch with dynamic shapes."""
    model = build(case)
    replace_moe_blocks(model, train=True)
    moe = next(m for m in model.modules() if isinstance(m, MoELayer))
    x = torch.randn(5, moe._hidden, requires_grad=True)
    params = [getattr(moe, role) for role in moe._roles]
    torch.library.opcheck(torch.ops.moe_compiler.layer_forward,
                          (x, params, moe._handle))
    dy = torch.randn(5, moe._hidden)
    torch.library.opcheck(torch.ops.moe_compiler.layer_backward,
                          (x.detach(), dy, [p.detach() for p in params],
                           moe._handle))


@pytest.mark.parametrize("case", COMPILED)
def test_torch_compile_fullgraph(case):
    """torch.compile(fullgraph=True) of a replaced model: no graph break
    (fullgraph fails on one), and its logits and every gradient equal
    eager's (up to the compiler's fusion of the rest of the model)."""
    model = build(case)
    replace_moe_blocks(model, train=True)
    tokens = torch.randint(0, 100, (2, 7), generator=torch.Generator()
                           .manual_seed(7))
    ref_logits, ref_grads = run(model, tokens)
    compiled = torch.compile(model, fullgraph=True)
    logits, grads = run(compiled, tokens)
    assert (logits - ref_logits).abs().max() <= 1e-5 * ref_logits.abs().max()
    moe_grads = 0
    for name, want in ref_grads.items():
        got = grads["_orig_mod." + name]
        err = (got - want).abs().max() / max(want.abs().max(), 1e-12)
        assert err <= 1e-4, "%s: relative error %.2e" % (name, err)
        moe_grads += any(isinstance(m, MoELayer) for n, m in
                         model.named_modules() if name.startswith(n + ".")
                         and n)
    assert moe_grads  # the compiled layers' own weights got gradients


def test_functional_moe():
    """moe_compiler.torch.moe(x, weights, config) for serving code: the
    block's output from its checkpoint-named weights, compiled once per
    token bucket and bound once per weights, bound again when they
    change."""
    model = build("deepseek_v3")
    path = "model.layers.1.mlp"
    block = model.get_submodule(path)
    # Copies: the serving code's own tensors.
    weights = {n: w.clone() for n, w in
               moe_torch._checkpoint_state(model, path, block).items()}
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want = block(x)
    moe_torch._BUNDLES.clear()
    moe_torch._BOUND.clear()
    y = moe_torch.moe(x, weights, model.config, prefix=path + ".")
    assert y.shape == x.shape and y.dtype == x.dtype
    assert (y - want).abs().max() <= 1e-5 * want.abs().max()
    # Same bucket (<= 64 tokens): nothing compiled or bound again.
    bound = dict(moe_torch._BOUND)
    assert torch.equal(moe_torch.moe(x, weights, model.config,
                                     prefix=path + "."), y)
    assert len(moe_torch._BUNDLES) == 1 and moe_torch._BOUND == bound
    # 70 tokens: the 128 bucket.
    moe_torch.moe(torch.randn(70, 64), weights, model.config,
                  prefix=path + ".")
    assert sorted(k[3] for k in moe_torch._BUNDLES) == [64, 128]
    # Weights changed in place are bound again.
    name = next(n for n in weights if n.endswith("gate.weight"))
    with torch.no_grad():
        weights[name].mul_(-1)
        block.gate.weight.mul_(-1)
        want = block(x)
    y = moe_torch.moe(x, weights, model.config, prefix=path + ".")
    assert (y - want).abs().max() <= 1e-5 * want.abs().max()
    (first,) = bound
    assert moe_torch._BOUND[first][1] is not bound[first][1]  # bound again
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        moe_torch.moe([1.0], weights, model.config)
    with pytest.raises(TypeError, match=r"weights must be a state dict "
                       r"\(name -> tensor\), got str"):
        moe_torch.moe(x, "weights.safetensors", model.config)
