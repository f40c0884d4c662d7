"""Triton kernels whose sm_90a PTX the emulator must run: softmax, layernorm,
argmax, top-k, cumsum and flash attention (further down); a tiled matmul
(pointer loads, B read N-major by wgmma), a weight-gradient matmul A^T.B
(both operands stored with the reduction as rows: A read M-major and B
N-major by wgmma), a persistent matmul on TMA
tensor descriptors, an e4m3 matmul, and a fused-MoE grouped GEMM (rows
gathered through a sorted token list, one expert per M block, routing
weights applied in the epilogue). Written for these tests; compiled by
generate.py."""
import triton
import triton.language as tl


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :],
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * stride_bk + cols[None, :],
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_tn(a_ptr, b_ptr, c_ptr, M, N, K, stride_ak, stride_bk, stride_cm,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # C[M, N] = A^T . B with A [K, M] and B [K, N], as dW = dY^T . X.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + (k0 + ks)[:, None] * stride_ak + rows[None, :],
                    mask=((k0 + ks)[:, None] < K) & (rows[None, :] < M), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * stride_bk + cols[None, :],
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(tl.trans(a), b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_tma(a_desc, b_desc, c_desc, M, N, K,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               NUM_SMS: tl.constexpr):
    # Persistent: each program walks tiles NUM_SMS apart; B is [N, K].
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for tile in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True):
        m0 = (tile // tiles_n) * BLOCK_M
        n0 = (tile % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = a_desc.load([m0, k0])
            b = b_desc.load([n0, k0])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([m0, n0], acc.to(tl.bfloat16))


@triton.jit
def fused_moe(x_ptr, w_ptr, y_ptr, topk_w_ptr, sorted_ids_ptr, expert_ids_ptr,
              num_valid, N, K, TOP_K: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Rows of block pid_m are entries of sorted_ids (token * TOP_K + slot,
    # padded with num_valid); all belong to expert expert_ids[pid_m].
    # y[entry] = topk_w[entry] * (x[entry // TOP_K] @ w[e].T), w[e] is [N, K].
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    entries = tl.load(sorted_ids_ptr + offs)
    valid = entries < num_valid
    expert = tl.load(expert_ids_ptr + pid_m)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + (entries // TOP_K)[:, None] * K + (k0 + ks)[None, :],
                    mask=valid[:, None] & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(w_ptr + expert * N * K + cols[None, :] * K + (k0 + ks)[:, None],
                    mask=(cols[None, :] < N) & ((k0 + ks)[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc)
    weight = tl.load(topk_w_ptr + entries, mask=valid, other=0.0)
    acc = acc * weight[:, None]
    tl.store(y_ptr + entries[:, None] * N + cols[None, :], acc.to(tl.bfloat16),
             mask=valid[:, None] & (cols[None, :] < N))


# Kernels beyond GEMMs, as Triton users write them: each has one program
# per row (or per block of query rows), reductions across warps through
# shared memory and shuffles, and (the matmuls below) the mma.sync and
# integer wgmma paths.


@triton.jit
def softmax(x_ptr, y_ptr, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < N)


@triton.jit
def layernorm(x_ptr, w_ptr, b_ptr, y_ptr, N, stride, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / N
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, d / tl.sqrt(var + eps) * w + b, mask=mask)


@triton.jit
def argmax(x_ptr, out_ptr, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    tl.store(out_ptr + row, tl.argmax(x, axis=0))


@triton.jit
def topk(x_ptr, out_ptr, N, stride, BLOCK_N: tl.constexpr, K: tl.constexpr):
    # The K largest of each row, largest first (a bitonic sort of the row).
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    s = tl.sort(x, descending=True)
    keep = tl.arange(0, BLOCK_N) < K
    tl.store(out_ptr + row * K + tl.arange(0, BLOCK_N), s, mask=keep)


@triton.jit
def cumsum(x_ptr, y_ptr, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.store(y_ptr + row * stride + cols, tl.cumsum(x, axis=0), mask=cols < N)


@triton.jit
def flash_attention(q_ptr, k_ptr, v_ptr, o_ptr, S, scale,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    # One head, [S, D] bf16 q, k, v; o = softmax(q k^T * scale) v, f32,
    # with the online softmax of FlashAttention-2.
    start = tl.program_id(0) * BLOCK_M
    rows = start + tl.arange(0, BLOCK_M)
    ds = tl.arange(0, D)
    q = tl.load(q_ptr + rows[:, None] * D + ds[None, :], mask=rows[:, None] < S, other=0.0)
    m = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for n0 in range(0, S, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + cols[:, None] * D + ds[None, :], mask=cols[:, None] < S, other=0.0)
        v = tl.load(v_ptr + cols[:, None] * D + ds[None, :], mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(cols[None, :] < S, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
        m = m_new
    tl.store(o_ptr + rows[:, None] * D + ds[None, :], acc / l[:, None], mask=rows[:, None] < S)


@triton.jit
def matmul_int8(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # int8 x int8 -> int32, as quantized inference runs it.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :],
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * stride_bk + cols[None, :],
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))
