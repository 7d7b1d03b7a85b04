"""What each rank runs in the comm kernels' GPU tests (a module of its own: spawned ranks import it
by name). Every check runs each tuned configuration on real symmetric memory for several calls,
fresh random inputs on every rank every call, against torch + NCCL and torch's own fused
symmetric-memory ops, with flag waits that give up (and are counted) instead of hanging."""

from __future__ import annotations

import os
import traceback

import torch
import torch.distributed as dist

from kernels.comm import ag_gemm, allreduce_norm, gemm_ar, gemm_rs
from kernels.comm.peers import symmetric_peers

SPINS = 1 << 26  # far beyond any honest wait here, far short of hanging the test
CALLS = 3
BF16 = dict(atol=3e-2, rtol=1.6e-2)
_NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _gen(rank: int, call: int, salt: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(salt * 1000 + call * 10 + rank)


def _close(got, want, what):
    torch.testing.assert_close(got.float(), want.float(), **BF16, msg=lambda m: f"{what}: {m}")


def _same_on_every_rank(t: torch.Tensor, what: str) -> None:
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t.contiguous())
    assert all(torch.equal(g, gathered[0]) for g in gathered), f"{what}: ranks disagree"


def check_ag_gemm(rank: int, world: int) -> None:
    ms, k, n = 1024, 2048, 1536
    group = dist.group.WORLD.group_name
    flags = max(ag_gemm.flags_needed(world, c) for c in ag_gemm.TUNING.values())
    peers = symmetric_peers(ag_gemm.buffer_numel(world, ms, k), torch.bfloat16, flags)
    for name, config in ag_gemm.TUNING.items():
        for call in range(CALLS):
            g = _gen(rank, call, 1)
            shard = torch.randn(ms, k, device="cuda", dtype=torch.bfloat16, generator=g)
            b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=_gen(0, call, 2)) / k**0.5).t()
            gathered = torch.empty(world * ms, k, device="cuda", dtype=torch.bfloat16)
            dist.all_gather_into_tensor(gathered, shard)
            kept = torch.empty_like(gathered)
            got = ag_gemm.all_gather_matmul(shard, b, peers, config, gathered_out=kept, max_spins=SPINS)
            _close(got, gathered @ b, f"ag_gemm {name} call {call} vs NCCL + cuBLAS")
            assert torch.equal(kept, gathered), f"ag_gemm {name}: the gathered rows"
            fused = torch.ops.symm_mem.fused_all_gather_matmul(shard, [b], 0, group)[1][0]
            _close(got, fused, f"ag_gemm {name} call {call} vs torch's fused op")
        peers.check()


def check_gemm_rs_ar(rank: int, world: int) -> None:
    m, k, n = 1024 * world, 1024, 1536
    group = dist.group.WORLD.group_name
    rs_flags = max(gemm_rs.flags_needed(world, m // world, n, c) for c in gemm_rs.TUNING.values())
    ar_flags = max(gemm_ar.flags_needed(world, m // world, n, c) for c in gemm_rs.TUNING.values())
    rs_peers = symmetric_peers(gemm_rs.buffer_numel(world, m // world, n), torch.bfloat16, rs_flags)
    ar_peers = symmetric_peers(gemm_ar.buffer_numel(world, m // world, n), torch.bfloat16, ar_flags)
    for name, config in gemm_rs.TUNING.items():
        for call in range(CALLS):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=_gen(rank, call, 3))
            b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=_gen(rank, call, 4)) / (k * world) ** 0.5).t()
            full = a @ b
            scattered = torch.empty(m // world, n, device="cuda", dtype=torch.bfloat16)
            dist.reduce_scatter_tensor(scattered, full.clone())
            got = gemm_rs.matmul_reduce_scatter(a, b, rs_peers, config, max_spins=SPINS)
            _close(got, scattered, f"gemm_rs {name} call {call} vs cuBLAS + NCCL")
            _close(got, torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, group), f"gemm_rs {name} call {call} vs torch's fused op")
            reduced = full.clone()
            dist.all_reduce(reduced)
            got = gemm_ar.matmul_all_reduce(a, b, ar_peers, config, max_spins=SPINS)
            _close(got, reduced, f"gemm_ar {name} call {call} vs cuBLAS + NCCL")
            _same_on_every_rank(got, f"gemm_ar {name}")
        rs_peers.check()
        ar_peers.check()


def check_allreduce_norm(rank: int, world: int) -> None:
    group = dist.group.WORLD.group_name
    flags = max(allreduce_norm.flags_needed(world, c) for c in allreduce_norm.TUNING.values())
    for rows, hidden in ((4, 8192), (512, 4096)):
        peers = symmetric_peers(allreduce_norm.buffer_numel(world, rows * hidden), torch.bfloat16, flags)
        staged = symmetric_peers(rows * hidden, torch.bfloat16, 1).data[0].view(rows, hidden)
        weight = 1 + 0.1 * torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=_gen(0, 0, 5))
        for name, config in allreduce_norm.TUNING.items():
            for call in range(CALLS):
                x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=_gen(rank, call, 6)) / world**0.5
                # The residual stream is replicated over tensor-parallel ranks: every rank ends with the same bits.
                residual = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=_gen(0, call, 7))
                h = x.clone()
                dist.all_reduce(h)
                plain = h.clone()
                h += residual
                hf = h.float()
                y = weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(h.dtype)
                got_y, got_h = allreduce_norm.all_reduce_add_rmsnorm(x, residual, weight, 1e-6, peers, config, max_spins=SPINS)
                _close(got_h, h, f"{name} {rows}x{hidden} h call {call} vs NCCL")
                _close(got_y, y, f"{name} {rows}x{hidden} y call {call} vs NCCL + eager")
                _same_on_every_rank(got_y, f"{name} y")
                _same_on_every_rank(got_h, f"{name} h")
                flat = allreduce_norm.all_reduce(x, peers, config, max_spins=SPINS)
                _close(flat, plain, f"{name} all_reduce call {call} vs NCCL")
                staged.copy_(x)
                _close(flat, torch.ops.symm_mem.one_shot_all_reduce(staged, "sum", group), f"{name} all_reduce call {call} vs torch's one-shot")
                if rows % world == 0:
                    shard = residual[: rows // world]
                    part = torch.empty(rows // world, hidden, device="cuda", dtype=torch.bfloat16)
                    dist.reduce_scatter_tensor(part, x.clone())
                    part += shard
                    pf = part.float()
                    mine = weight * (pf * torch.rsqrt(pf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(part.dtype)
                    everyone = torch.empty(rows, hidden, device="cuda", dtype=torch.bfloat16)
                    dist.all_gather_into_tensor(everyone, mine)
                    if config.algo == "two_shot":
                        got_y, got_h = allreduce_norm.reduce_scatter_add_rmsnorm_all_gather(x, shard, weight, 1e-6, peers, config, max_spins=SPINS)
                        _close(got_h, part, f"{name} sharded h call {call}")
                        _close(got_y, everyone, f"{name} sharded gathered y call {call}")
        peers.check()


def check_slow_rank(rank: int, world: int) -> None:
    """A rank that arrives late only makes its peers wait: results stay right, nothing times out."""
    ms, k, n = 512, 1024, 1024
    config = ag_gemm.TUNING["triton_ce"]
    peers = symmetric_peers(ag_gemm.buffer_numel(world, ms, k), torch.bfloat16, ag_gemm.flags_needed(world, config))
    for call in range(CALLS):
        shard = torch.randn(ms, k, device="cuda", dtype=torch.bfloat16, generator=_gen(rank, call, 8))
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=_gen(0, call, 9)) / k**0.5
        gathered = torch.empty(world * ms, k, device="cuda", dtype=torch.bfloat16)
        dist.all_gather_into_tensor(gathered, shard)
        torch.cuda.synchronize()
        if rank == call % world:
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before this rank's call
        got = ag_gemm.all_gather_matmul(shard, b, peers, config, max_spins=SPINS)
        _close(got, gathered @ b, f"slow rank {call % world}, call {call}")
    peers.check()


def check_moe(rank: int, world: int) -> None:
    """Dispatch (+ expert GEMM) and combine against the all-to-all-v dispatcher over NCCL."""
    from kernels.comm import moe
    from kernels.comm.moe_bench import _reference_combine, _reference_dispatch

    tokens, hidden, ffn, experts, topk = 256, 512, 384, 16, 4
    local = experts // world
    for call in range(CALLS):
        g = _gen(rank, call, 10)
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        popularity = torch.rand(experts, device="cuda", generator=g) ** 2 + 0.05
        topk_idx = torch.multinomial(popularity.expand(tokens, experts).contiguous(), topk, replacement=False, generator=g)
        topk_w = torch.softmax(torch.randn(tokens, topk, device="cuda", generator=g), -1)
        weight = torch.randn(local, hidden, ffn, device="cuda", dtype=torch.bfloat16, generator=g) / hidden**0.5
        counts = torch.bincount(topk_idx.reshape(-1), minlength=experts)
        counts_all = torch.empty(world, experts, dtype=counts.dtype, device="cuda")
        dist.all_gather_into_tensor(counts_all, counts)
        routing = moe.route(topk_idx, counts_all, rank, world, experts)
        if call == 0:
            most = world * tokens * topk
            peers = symmetric_peers(most * hidden, torch.bfloat16, world * max(c.comm_programs for c in moe.TUNING.values()))
            peers_w = symmetric_peers(most, torch.float32, 1)
        for name, config in moe.TUNING.items():
            want_x, want_w, want_tpe = _reference_dispatch(x, topk_idx, topk_w, None, world, local)
            got_x, got_w, got_tpe = moe.dispatch(x, topk_w, routing, peers, peers_w, config, max_spins=SPINS)
            assert torch.equal(got_x, want_x) and torch.equal(got_w, want_w) and torch.equal(got_tpe, want_tpe), f"moe dispatch {name} call {call}"
            got, _ = moe.dispatch(x, topk_w, routing, peers, peers_w, config, expert_weight=weight, max_spins=SPINS)
            _close(got, _reference_dispatch(x, topk_idx, topk_w, weight, world, local)[0], f"moe dispatch + GEMM {name} call {call}")
            expert_out = torch.randn(routing.received, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
            got = moe.combine(expert_out, topk_w, routing, moe.return_map(routing, counts_all), peers, config, max_spins=SPINS)
            _close(got, _reference_combine(expert_out, topk_idx, topk_w, world, local), f"moe combine {name} call {call}")
    peers.check()


def check_ring_kv(rank: int, world: int) -> None:
    """Ring attention over pushed KV blocks against the suite's NCCL ring, causal and not."""
    from kernels.comm import ring_kv
    from kernels.comm.ring_kv_bench import _attend, _ring

    b, h, s_local, d = 1, 4, 512, 64
    shape = (b, h, s_local, d)
    proto = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
    peers = symmetric_peers(ring_kv.buffer_numel(world, proto, proto), torch.bfloat16, world)
    for causal in (False, True):
        dests, sources = ring_kv.ring_order(rank, world, causal)
        for call in range(CALLS):
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=_gen(rank, call, 11 + i)) for i in range(3))
            got = ring_kv.ring_attention(q, ring_kv.exchange((k, v), peers, dests, max_spins=SPINS), sources, _attend, causal)
            torch.testing.assert_close(got.float(), _ring(q, k, v, causal, False).float(), atol=1e-3, rtol=1.6e-2)
    peers.check()


CHECKS = [check_ag_gemm, check_gemm_rs_ar, check_allreduce_norm, check_slow_rank, check_moe, check_ring_kv]


def rank_main(rank: int, world: int, store: str, results) -> None:
    os.environ.update(_NO_MULTICAST)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    failures = []
    for check in CHECKS:
        try:
            check(rank, world)
        except Exception:  # reported to the test, which fails with it
            failures.append(f"{check.__name__}: {traceback.format_exc(limit=3)}")
    results.put((rank, failures))
    dist.destroy_process_group()
