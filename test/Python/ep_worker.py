"""One rank of test_torchrun.py's job (torchrun --nproc-per-node 2): a
MoELayer sharded over the gloo process group against the same layer on one
rank, holding every expert, in the same process. Forward, backward and a
few SGD steps on uneven token counts per rank (one rank empty in one
pass, and more tokens than the sharded bundle's max_tokens on the other):
each rank's outputs and dx are its rows of the one-rank layer's, its
experts' gradients its slice, the replicated weights' gradients the whole
(summed over the ranks by the compiled code), and the losses of the steps
equal one rank's. With the argument `transformers`: a transformers model
after replace_moe_blocks(process_group=...) instead. Exits non-zero on the
first mismatch."""
import sys

import torch
import torch.distributed as dist

from moe_compiler.torch import MoELayer


def close(got, want, what, tol=2e-5):
    err = (got - want).abs().max() / max(float(want.abs().max()), 1e-12) \
        if want.numel() else 0.0
    if got.shape != want.shape or err > tol:
        print("rank %d: %s: shape %s vs %s, relative error %s"
              % (dist.get_rank(), what, list(got.shape), list(want.shape),
                 err), flush=True)
        sys.exit(1)


def main():
    config = sys.argv[1]
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    one = MoELayer.from_config(config, seed=0, max_tokens=64)
    # max_tokens 8: 13 tokens on a rank run as two pieces, and the other
    # rank runs as many.
    ep = MoELayer.from_config(config, seed=0, max_tokens=8,
                              process_group=dist.group.WORLD)
    experts = one.layer.num_experts
    hidden = one.layer.hidden_size
    gen = torch.Generator().manual_seed(1)
    tokens = 17
    x = torch.randn(tokens, hidden, generator=gen)
    g = torch.randn(tokens, hidden, generator=gen)
    for cut in (13, tokens):  # rank 0 takes `cut` tokens, rank 1 the rest
        mine = slice(0, cut) if rank == 0 else slice(cut, tokens)
        for m in (one, ep):
            m.zero_grad()
        xo = x.clone().requires_grad_()
        (one(xo) * g).sum().backward()
        xe = x[mine].clone().requires_grad_()
        ye = ep(xe)
        close(ye, one(x)[mine].detach(), "y (cut %d)" % cut)
        (ye * g[mine]).sum().backward()
        close(xe.grad, xo.grad[mine], "dx (cut %d)" % cut)
        for name, p in ep.named_parameters():
            want = getattr(one, name).grad
            if p.shape[0] * size == experts and want.shape[0] == experts:
                share = experts // size
                want = want[rank * share:(rank + 1) * share]
            close(p.grad, want, "d%s (cut %d)" % (name, cut))
    # Training: the losses of SGD steps equal one rank's.
    target = torch.randn(tokens, hidden, generator=gen) * 0.1
    opt_one = torch.optim.SGD(one.parameters(), lr=0.5)
    opt_ep = torch.optim.SGD(ep.parameters(), lr=0.5)
    mine = slice(0, 13) if rank == 0 else slice(13, tokens)
    scale = 1.0 / (tokens * hidden)
    for step in range(4):
        for opt in (opt_one, opt_ep):
            opt.zero_grad()
        loss_one = ((one(x) - target) ** 2).sum() * scale
        loss_one.backward()
        opt_one.step()
        local = ((ep(x[mine]) - target[mine]) ** 2).sum() * scale
        local.backward()
        opt_ep.step()
        total = local.detach().clone()
        dist.all_reduce(total)
        close(total, loss_one.detach(), "loss of step %d" % step, tol=1e-5)
        if rank == 0:
            print("step %d loss %.6f one rank %.6f"
                  % (step, float(total), float(loss_one.detach())),
                  flush=True)
    print("rank %d ok" % rank, flush=True)
    dist.destroy_process_group()


def transformers_model():
    """replace_moe_blocks(model, process_group=...) on a 2-layer Qwen3-MoE
    model, each rank its own batch: the logits equal the unsharded
    replaced model's on that batch; the gradients of everything outside
    the blocks too (they see this rank's tokens only); the blocks'
    replicated weights get the gradient summed over the ranks, and each
    rank's experts their slice of that sum."""
    import transformers
    from moe_compiler.torch import replace_moe_blocks
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    config = transformers.Qwen3MoeConfig(
        num_hidden_layers=2, hidden_size=64, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=64, vocab_size=100, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)
    models = []
    for group in (None, dist.group.WORLD):
        torch.manual_seed(0)
        model = transformers.Qwen3MoeForCausalLM(config).float()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * (0.1 if p.dim() > 1 else 0.3))
        paths = replace_moe_blocks(model, train=True, process_group=group)
        models.append(model)
    one, sharded = models
    tokens = torch.randint(0, 100, (1, 5 + 4 * rank),
                           generator=torch.Generator().manual_seed(rank))
    grads = []
    for model in models:
        out = model(tokens, labels=tokens)
        out.loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        if model is one:
            want = out.logits.detach()
        else:
            close(out.logits.detach(), want, "logits")
    for name, got in grads[1].items():
        want = grads[0][name]
        if any(name.startswith(p + ".") for p in paths):
            dist.all_reduce(want)
            if want.shape[0] == got.shape[0] * size:
                share = got.shape[0]
                want = want[rank * share:(rank + 1) * share]
        close(got, want, "d" + name, tol=1e-4)
    print("rank %d ok" % rank, flush=True)
    dist.destroy_process_group()


def sm90(config):
    """An sm_90a layer (the PTX emulator and the emulated NCCL, or GPUs)
    sharded over the process group: the runtime's NCCL communicator is
    bootstrapped through the group (its unique id broadcast over gloo), the
    rows move between the ranks' GPUs, and each rank's outputs are its rows
    of the one-rank sm_90a layer's, forward and backward."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    args = dict(seed=0, target="sm_90a", dtype="bf16", train=False,
                max_tokens=64)
    one = MoELayer.from_config(config, **args)
    ep = MoELayer.from_config(config, process_group=dist.group.WORLD, **args)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(11, one.layer.hidden_size, generator=gen)
    mine = slice(0, 7) if rank == 0 else slice(7, 11)
    with torch.no_grad():
        want = one(x)[mine]
        got = ep(x[mine])
    # bf16 outputs of the same kernels, combined in another order.
    close(got, want, "y", tol=1e-2)
    transport = ep.layer._core.exchange_transport
    print("rank %d: exchanges %s, y max error %.2e" % (
        rank, transport, float((got - want).abs().max())), flush=True)
    if not transport:
        sys.exit("rank %d: the sharded layer exchanges nothing" % rank)
    # The backward pass on the GPUs (train=True: the bundle's backward
    # schedule, the rows' dy out and their gradients back as the forward
    # pass's rows went): dx is this rank's rows of the one-rank layer's,
    # the experts' gradients this rank's slice, the replicated weights'
    # the sum over the ranks.
    size = dist.get_world_size()
    trained = dict(args, train=True)
    one_t = MoELayer.from_config(config, **trained)
    ep_t = MoELayer.from_config(config, process_group=dist.group.WORLD,
                                **trained)
    g = torch.randn(x.shape, generator=gen)
    xo = x.clone().requires_grad_()
    (one_t(xo) * g).sum().backward()
    xe = x[mine].clone().requires_grad_()
    (ep_t(xe) * g[mine]).sum().backward()
    close(xe.grad, xo.grad[mine], "dx", tol=3e-2)
    experts = one_t.layer.num_experts
    for name, p in ep_t.named_parameters():
        want = getattr(one_t, name).grad
        if p.shape[0] * size == experts and want.shape[0] == experts:
            share = experts // size
            want = want[rank * share:(rank + 1) * share]
        close(p.grad, want, "d" + name, tol=3e-2)
    print("rank %d: backward ok" % rank, flush=True)
    # On device memory (the emulated driver's): the rows still move
    # between the GPUs; x and y never touch the host (the status words,
    # 8 bytes, come back with the pass), and the host does not wait.
    import ctypes
    import os

    import numpy as np
    from device_memory import DeviceArray
    driver = ctypes.CDLL(os.environ["MOE_CUDA_DRIVER"])
    layer = ep.layer
    hidden, k = layer.hidden_size, layer.top_k
    xs = x[mine].to(torch.bfloat16).contiguous()
    want_y, want_ids, _ = (t[mine] for t in one.layer(x.to(torch.bfloat16)))

    # bf16 has no __cuda_array_interface__ typestr: a torch-like stand-in
    # names it, as a CUDA tensor would.
    class Bf16:
        def __init__(self, ptr, shape):
            self.ptr, self.shape = ptr, shape
            self.is_cuda, self.dtype = True, torch.bfloat16

        def data_ptr(self):
            return self.ptr

        def is_contiguous(self):
            return True

    tokens = xs.shape[0]
    xd = DeviceArray(driver, (tokens, hidden), np.uint16,
                     xs.view(torch.int16).numpy().view(np.uint16))
    yd = DeviceArray(driver, (tokens, hidden), np.uint16)
    ids = DeviceArray(driver, (tokens, k), np.int32)
    w = DeviceArray(driver, (tokens, k), np.float32)
    xp, yp = Bf16(xd.ptr, (tokens, hidden)), Bf16(yd.ptr, (tokens, hidden))
    if transport.startswith("nccl"):
        # The host-driven NCCL exchange cannot run behind the caller's
        # stream: refused, naming what it needs.
        try:
            layer.forward_into(xp, yp, ids, w)
        except RuntimeError as e:
            if "needs the device-initiated exchange" not in str(e):
                raise
            print("rank %d: refused: %s" % (rank, e), flush=True)
            print("rank %d ok" % rank, flush=True)
            return
        sys.exit("rank %d: device pointers with the NCCL exchange ran"
                 % rank)
    before = layer.activity()
    layer.forward_into(xp, yp, ids, w)
    delta = {n: v - before[n] for n, v in layer.activity().items()}
    if delta["bytes_to_device"] or delta["bytes_to_host"] > 8 or \
            delta["host_waits"] or delta["allocations"]:
        sys.exit("rank %d: the device pass went through the host: %s"
                 % (rank, delta))
    assert driver.cuCtxSynchronize() == 0
    got_ids = torch.from_numpy(ids.read())
    got_y = torch.from_numpy(yd.read().view(np.int16)).view(torch.bfloat16)
    close(got_ids.float(), want_ids.float(), "topk_ids on device memory",
          tol=0)
    close(got_y.float(), want_y.float(), "y on device memory", tol=1e-2)
    print("rank %d: device memory %s" % (rank, delta), flush=True)
    # The sharded backward pass on device memory: the gradients of the
    # staged one, nothing through the host but the status words.
    layer = ep_t.layer
    dy = g[mine].contiguous()
    want = layer.backward(xs, dy)
    dyd = DeviceArray(driver, (tokens, hidden), np.float32, dy.numpy())
    grads = {r: DeviceArray(driver, tuple(want[r].shape), np.float32)
             for r in want}
    before = layer.activity()
    layer.backward_into(xp, dyd, grads)
    delta = {n: v - before[n] for n, v in layer.activity().items()}
    if delta["bytes_to_device"] or delta["bytes_to_host"] > 8 or \
            delta["host_waits"] or delta["allocations"]:
        sys.exit("rank %d: the device backward went through the host: %s"
                 % (rank, delta))
    assert driver.cuCtxSynchronize() == 0
    for role, value in want.items():
        close(torch.from_numpy(grads[role].read()), value,
              "d%s on device memory" % role, tol=1e-5)
    print("rank %d: device backward %s" % (rank, delta), flush=True)
    print("rank %d ok" % rank, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "transformers":
        transformers_model()
    elif sys.argv[1] == "sm90":
        sm90(sys.argv[2])
    else:
        main()
