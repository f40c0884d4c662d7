#!/usr/bin/env python3
"""How far a student can follow a random teacher in 200 Adam steps.

An experiment, independent of the compiler (numpy, gradients by hand), on
the task of moe-train: a student learns a fixed random teacher of the same
shape from fresh uniform tokens each step (MSE loss). It separates what the
task asks of the student:

  dense          one SwiGLU FFN (hidden 64, ffn 96): no routing at all
  shared-router  a Mixtral-style MoE (8 experts, top-2, ffn 96) whose router
                 is the teacher's and stays fixed: experts only
  learned        the same MoE with the student's own router (moe-train's
                 task for mixtral-tiny)

  scripts/teacher-student.py [--steps 200] [--tokens 1024] [--lr 1e-2]
                             [--seeds 1 2 3]

Results are in docs/Performance.md.
"""
import argparse

import numpy as np

HIDDEN, FFN, EXPERTS, TOP_K = 64, 96, 8, 2


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def init(rng, experts):
    """Uniform(+-1/sqrt(fan_in)), as moe-train draws students and teachers."""
    b1, b2 = 1 / np.sqrt(HIDDEN), 1 / np.sqrt(FFN)
    return {"router": rng.uniform(-b1, b1, (experts, HIDDEN)),
            "gate": rng.uniform(-b1, b1, (experts, FFN, HIDDEN)),
            "up": rng.uniform(-b1, b1, (experts, FFN, HIDDEN)),
            "down": rng.uniform(-b2, b2, (experts, HIDDEN, FFN))}


def forward(p, x, moe):
    """y and what the backward pass needs. Without `moe`: expert 0 only."""
    tokens = x.shape[0]
    if moe:
        logits = x @ p["router"].T
        probs = np.exp(logits - logits.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        ids = np.argsort(-probs, 1, kind="stable")[:, :TOP_K]
        sel = np.take_along_axis(probs, ids, 1)
        weights = sel / sel.sum(1, keepdims=True)
    else:
        probs = sel = None
        ids = np.zeros((tokens, 1), dtype=np.int64)
        weights = np.ones((tokens, 1))
    y = np.zeros_like(x)
    parts = []
    for e in range(p["gate"].shape[0]):
        t, j = np.nonzero(ids == e)
        xe = x[t]
        g, u = xe @ p["gate"][e].T, xe @ p["up"][e].T
        act = g * sigmoid(g) * u
        out = act @ p["down"][e].T
        y[t] += weights[t, j, None] * out
        parts.append((t, j, xe, g, u, act, out))
    return y, (probs, ids, sel, weights, parts)


def backward(p, x, dy, saved, moe):
    probs, ids, sel, weights, parts = saved
    grads = {k: np.zeros_like(v) for k, v in p.items()}
    dw = np.zeros_like(weights)
    for e, (t, j, xe, g, u, act, out) in enumerate(parts):
        dye = dy[t]
        dw[t, j] = (dye * out).sum(1)
        dout = dye * weights[t, j, None]
        grads["down"][e] = dout.T @ act
        dact = dout @ p["down"][e]
        s = sigmoid(g)
        dg = dact * u * s * (1 + g * (1 - s))
        du = dact * g * s
        grads["gate"][e], grads["up"][e] = dg.T @ xe, du.T @ xe
    if moe:
        z = sel.sum(1, keepdims=True)
        dsel = (dw - (dw * sel).sum(1, keepdims=True) / z) / z
        dprobs = np.zeros_like(probs)
        np.put_along_axis(dprobs, ids, dsel, 1)
        dlogits = probs * (dprobs - (dprobs * probs).sum(1, keepdims=True))
        grads["router"] = dlogits.T @ x
    return grads


def run(mode, seed, steps, tokens, lr):
    rng = np.random.default_rng(seed)
    moe = mode != "dense"
    experts = EXPERTS if moe else 1
    teacher, student = init(rng, experts), init(rng, experts)
    if mode == "shared-router":
        student["router"] = teacher["router"].copy()
    m = {k: np.zeros_like(v) for k, v in student.items()}
    v = {k: np.zeros_like(v) for k, v in student.items()}
    first = loss = None
    for step in range(1, steps + 1):
        x = rng.uniform(-1, 1, (tokens, HIDDEN))
        target = forward(teacher, x, moe)[0]
        y, saved = forward(student, x, moe)
        diff = y - target
        loss = float((diff * diff).mean())
        first = first or loss
        grads = backward(student, x, 2 * diff / diff.size, saved, moe)
        for k in student:
            if k == "router" and mode != "learned":
                continue
            m[k] = 0.9 * m[k] + 0.1 * grads[k]
            v[k] = 0.999 * v[k] + 0.001 * grads[k] ** 2
            m_hat, v_hat = m[k] / (1 - 0.9 ** step), v[k] / (1 - 0.999 ** step)
            student[k] -= lr * m_hat / (np.sqrt(v_hat) + 1e-8)
    return first, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    for mode in ("dense", "shared-router", "learned"):
        ratios = []
        for seed in args.seeds:
            first, last = run(mode, seed, args.steps, args.tokens, args.lr)
            ratios.append(first / last)
        print(f"{mode:14s} loss {min(ratios):.1f}x to {max(ratios):.1f}x lower "
              f"after {args.steps} steps (seeds {args.seeds})")


if __name__ == "__main__":
    main()
