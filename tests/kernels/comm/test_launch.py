"""``launch``'s key: a cached launcher is reused only for arguments Triton would compile alike."""

import pytest
import torch
import triton.language as tl
from triton.runtime.jit import JITFunction

from kernels.comm.launch import _key


def _body(x_ptr, n, epoch, BLOCK: tl.constexpr):
    pass


def _constexpr_first(BLOCK: tl.constexpr, x_ptr, n):
    pass


# Built as a compiled-mode JITFunction whatever the test session's interpreter setting: only its
# parameter description is used, nothing is compiled or run.
KERNEL = JITFunction(_body, do_not_specialize=["epoch"])


def test_same_types_and_alignment_share_a_key_whatever_the_per_call_value():
    x, y = torch.zeros(64, dtype=torch.bfloat16), torch.ones(64, dtype=torch.bfloat16)
    assert _key(KERNEL, (x, 64, 5), {"BLOCK": 32}) == _key(KERNEL, (y, 64, 123456), {"BLOCK": 32})


@pytest.mark.parametrize(
    "args, meta",
    [
        ((torch.zeros(65, dtype=torch.bfloat16)[1:], 64, 5), {"BLOCK": 32}),  # 2-byte offset: not 16-aligned
        ((torch.zeros(64, dtype=torch.float32), 64, 5), {"BLOCK": 32}),  # another dtype
        ((torch.zeros(64, dtype=torch.bfloat16), 1, 5), {"BLOCK": 32}),  # a specialised scalar (1 is special)
        ((torch.zeros(64, dtype=torch.bfloat16), 48, 5), {"BLOCK": 32}),  # another value, same divisibility
        ((torch.zeros(64, dtype=torch.bfloat16), 64, 5), {"BLOCK": 64}),  # a constexpr
        ((torch.zeros(64, dtype=torch.bfloat16), 64, 5), {"BLOCK": 32, "num_warps": 8}),  # a launch option
    ],
)
def test_anything_triton_specialises_on_gives_another_key(args, meta):
    base = _key(KERNEL, (torch.zeros(64, dtype=torch.bfloat16), 64, 5), {"BLOCK": 32})
    assert _key(KERNEL, args, meta) != base


@pytest.mark.parametrize("epoch", [1 << 31, -(1 << 31) - 1, 2.5])
def test_a_per_call_number_outside_int32_takes_the_ordinary_path(epoch):
    assert _key(KERNEL, (torch.zeros(64), 64, epoch), {"BLOCK": 32}) is None


def test_constexprs_before_other_parameters_are_refused():
    with pytest.raises(ValueError, match="constexpr"):
        _key(JITFunction(_constexpr_first), (torch.zeros(4), 4), {"BLOCK": 4})


def test_a_launch_hook_sends_every_call_the_ordinary_way():
    from triton import knobs

    from kernels.comm.launch import _hooks_installed

    def hook(*args):
        pass

    assert not _hooks_installed()
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert _hooks_installed()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert not _hooks_installed()
