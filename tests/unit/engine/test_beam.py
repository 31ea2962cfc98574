"""BEAM search on the CPU device: kernels it chooses compute what numpy computes, its choice is cached on disk and
reused (no candidate compiled the second time), IGNORE_BEAM_CACHE searches again. Shapes and budgets are tiny."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from tinycore.codegen import lower_to_program, optimize_kernel
from tinycore.codegen.opt import Kernel, Opt, OptOps
from tinycore.device.registry import Device
from tinycore.engine import realize, search
from tinycore.helpers import Context

pytest.importorskip("tiny_cpu", reason="the CPU device plugin (pip install -e plugins/tiny-cpu) runs these tests")
from tinycore import Tensor  # noqa: E402

FAST = {"BEAM_BUDGET": 1.5, "BEAM_UPCAST_MAX": 16}


@pytest.fixture(autouse=True)
def fresh_search(tmp_path, monkeypatch):
    """An empty cache directory, no searched kernels in memory, zeroed counts (as in a new process)."""
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    realize.forget_searched_kernels()
    search.stats.reset()
    yield
    realize.forget_searched_kernels()


def new_process() -> None:
    """Forget what this process searched, as a new process would (the disk cache stays)."""
    realize.forget_searched_kernels()
    search.stats.reset()


def conv2d_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Direct convolution (no padding, stride 1) with float64 sums."""
    batch, _, height, width = x.shape
    out_channels, _, kernel_h, kernel_w = w.shape
    out = np.zeros((batch, out_channels, height - kernel_h + 1, width - kernel_w + 1))
    for i in range(kernel_h):
        for j in range(kernel_w):
            patch = x[:, :, i:i + out.shape[2], j:j + out.shape[3]].astype(np.float64)
            out += np.einsum("bchw,oc->bohw", patch, w[:, :, i, j].astype(np.float64))
    return out


def test_beam_matmul_equals_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 24), dtype=np.float32), rng.standard_normal((24, 16), dtype=np.float32)
    with Context(BEAM=2, **FAST):
        result = (Tensor(a) @ Tensor(b)).numpy()
    np.testing.assert_allclose(result, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert search.stats.searches == 1 and search.stats.compiled > 1


def test_beam_reductions_equal_numpy():
    x = np.random.default_rng(1).standard_normal((16, 64), dtype=np.float32)
    with Context(BEAM=2, **FAST):
        sums = Tensor(x).sum(axis=1).numpy()
        maxima = Tensor(x).max(axis=0).numpy()
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(maxima, x.max(axis=0))
    assert search.stats.searches == 2


def test_beam_conv2d_equals_numpy():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 8, 8), dtype=np.float32), rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    with Context(BEAM=2, **FAST):
        result = Tensor(x).conv2d(Tensor(w)).numpy()
    np.testing.assert_allclose(result, conv2d_reference(x, w), rtol=1e-4, atol=1e-4)
    assert search.stats.searches >= 1


def test_second_run_reads_the_cache_and_compiles_no_candidate():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((16, 32), dtype=np.float32), rng.standard_normal((32, 8), dtype=np.float32)
    expected = a.astype(np.float64) @ b
    with Context(BEAM=2, **FAST):
        first = (Tensor(a) @ Tensor(b)).numpy()
    assert search.stats.searches == 1 and search.stats.compiled > 1
    new_process()
    with Context(BEAM=2, **FAST):
        second = (Tensor(a) @ Tensor(b)).numpy()
    assert (search.stats.searches, search.stats.compiled, search.stats.cache_hits) == (0, 0, 1)
    for result in (first, second):
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_beam_kernels_run_from_launch_plans_kept_beside_the_default_ones(monkeypatch):
    # a structure realized again and again under BEAM runs from a launch plan holding the searched kernels (no
    # schedule items or runner lookups per call), and switching between BEAM and the default keeps each setting's plan
    from tinycore.helpers import BEAM
    runs: list[int] = []
    original = realize._run_plan

    def counting(*arguments):
        runs.append(int(BEAM.value))
        return original(*arguments)
    monkeypatch.setattr(realize, "_run_plan", counting)
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((16, 24), dtype=np.float32), rng.standard_normal((24, 8), dtype=np.float32)
    held_a, held_b = Tensor(a).realize(), Tensor(b).realize()
    expected = a.astype(np.float64) @ b
    for _ in range(4):
        for width in (0, 2):
            with Context(BEAM=width, **FAST):
                np.testing.assert_allclose((held_a @ held_b).numpy(), expected, rtol=1e-5, atol=1e-5)
    # each setting schedules its first realizes (until its plan is made) and runs the last ones from its plan
    assert runs[-4:] == [0, 2, 0, 2]
    assert search.stats.searches == 1
    # kernels BEAM chose are dropped with the plans holding them: the next realize reads the search's disk cache
    planned = len(runs)
    realize.forget_searched_kernels()
    with Context(BEAM=2, **FAST):
        np.testing.assert_allclose((held_a @ held_b).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert (search.stats.searches, search.stats.cache_hits) == (1, 1) and len(runs) == planned


def test_ignore_beam_cache_searches_again():
    x = np.random.default_rng(4).standard_normal((8, 32), dtype=np.float32)
    with Context(BEAM=1, **FAST):
        Tensor(x).sum(axis=1).numpy()
    new_process()
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1, **FAST):
        result = Tensor(x).sum(axis=1).numpy()
    assert search.stats.searches == 1 and search.stats.cache_hits == 0 and search.stats.compiled > 0
    np.testing.assert_allclose(result, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_corrupt_cache_entry_is_searched_again(tmp_path):
    x = np.random.default_rng(5).standard_normal((8, 16), dtype=np.float32)
    with Context(BEAM=1, **FAST):
        Tensor(x).max(axis=1).numpy()
    entries = list((tmp_path / "beam").glob("*.json"))
    assert len(entries) == 1
    entries[0].write_text('{"format": 1, "opts": [["NOT_AN_OPT", 0, 2]]}')
    new_process()
    with Context(BEAM=1, **FAST):
        result = Tensor(x).max(axis=1).numpy()
    assert search.stats.searches == 1 and search.stats.cache_hits == 0
    np.testing.assert_array_equal(result, x.max(axis=1))


def test_cache_key_names_kernel_device_renderer_and_width():
    cpu = Device["CPU"]
    a = Tensor(np.ones((4, 4), np.float32)).sum(axis=0)
    b = Tensor(np.ones((4, 8), np.float32)).sum(axis=0)
    from tinycore.schedule import create_schedule
    ast_a = [item.ast for item in create_schedule([a.uop]).items if item.ast.op.name == "SINK"][0]
    ast_b = [item.ast for item in create_schedule([b.uop]).items if item.ast.op.name == "SINK"][0]
    key = search.cache_key(ast_a, "CPU", cpu.renderer, cpu.compiler, 2)
    assert key == search.cache_key(ast_a, "CPU", cpu.renderer, cpu.compiler, 2)
    assert key != search.cache_key(ast_b, "CPU", cpu.renderer, cpu.compiler, 2)
    assert key != search.cache_key(ast_a, "CPU", cpu.renderer, cpu.compiler, 3)
    assert key != search.cache_key(ast_a, "GPU", cpu.renderer, cpu.compiler, 2)


def test_cache_key_changes_with_the_heuristics_choice(monkeypatch):
    """A search result found beside another heuristic is not read back: it may be slower than today's choice."""
    cpu = Device["CPU"]
    from tinycore.schedule import create_schedule
    total = Tensor(np.ones((64, 64), np.float32)).sum(axis=0)
    ast = [item.ast for item in create_schedule([total.uop]).items if item.ast.op.name == "SINK"][0]
    key = search.cache_key(ast, "CPU", cpu.renderer, cpu.compiler, 2)
    original = search.optimize_kernel

    def other_heuristic(ast_node, renderer, opts=None):
        kernel = original(ast_node, renderer, opts)
        kernel.applied = kernel.applied[:-1]  # as if an older heuristic had left out its last opt
        return kernel

    assert original(ast, cpu.renderer).applied, "the heuristic should choose at least one opt for this sum"
    monkeypatch.setattr(search, "optimize_kernel", other_heuristic)
    assert search.cache_key(ast, "CPU", cpu.renderer, cpu.compiler, 2) != key


def test_debug_2_prints_the_speedup_and_a_plain_progress_bar(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # no tqdm: the plain one-line bar
    x = np.random.default_rng(6).standard_normal((8, 16), dtype=np.float32)
    with Context(BEAM=1, DEBUG=2, **FAST):
        result = Tensor(x).sum(axis=0).numpy()
    captured = capsys.readouterr()
    assert "speedup" in captured.out and "(heuristic)" in captured.out
    assert "candidates, best" in captured.err
    np.testing.assert_allclose(result, x.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


def test_heuristic_opts_replay_to_the_same_program():
    """The heuristic's opts (its loop nesting included, as Opt NEST) give its program when applied as a list."""
    rng = np.random.default_rng(7)
    product = Tensor(rng.standard_normal((64, 32), dtype=np.float32)) @ \
        Tensor(rng.standard_normal((32, 64), dtype=np.float32))
    from tinycore.schedule import create_schedule
    ast = [item.ast for item in create_schedule([product.uop]).items if item.ast.op.name == "SINK"][0]
    renderer = Device["CPU"].renderer
    applied = optimize_kernel(ast, renderer).applied
    assert any(opt.op is OptOps.NEST for opt in applied)
    assert lower_to_program(ast, renderer, list(applied)).src == lower_to_program(ast, renderer).src


def test_nest_refuses_reduce_axes():
    from tinycore.codegen.opt import KernelOptError
    from tinycore.schedule import create_schedule
    total = Tensor(np.ones((4, 8), np.float32)).sum(axis=1)
    ast = [item.ast for item in create_schedule([total.uop]).items if item.ast.op.name == "SINK"][0]
    kernel = Kernel(ast)
    with pytest.raises(KernelOptError, match="NEST applies to output loop axes"):
        kernel.apply_opt(Opt(OptOps.NEST, len(kernel.axes) - 1, 0))


@pytest.mark.parametrize("case", ["matmul", "sum"])
def test_neighbours_the_search_may_pick_equal_numpy(case, monkeypatch):
    """Candidates the search times (a sample of the neighbours of the unoptimized kernel and of the heuristic's)
    each compute what numpy computes: whichever one wins, BEAM never changes a result."""
    from tinycore.schedule import create_schedule
    rng = np.random.default_rng(8)
    if case == "matmul":
        a, b = rng.standard_normal((16, 24), dtype=np.float32), rng.standard_normal((24, 32), dtype=np.float32)
        held = Tensor(a).realize(), Tensor(b).realize()

        def build() -> Tensor:
            return held[0] @ held[1]
        expected = a.astype(np.float64) @ b
    else:
        x = rng.standard_normal((8, 64), dtype=np.float32)
        held = (Tensor(x).realize(),)

        def build() -> Tensor:
            return held[0].sum(axis=1)
        expected = x.astype(np.float64).sum(axis=1)
    ast = [item.ast for item in create_schedule([build().uop]).items if item.ast.op.name == "SINK"][0]
    renderer = Device["CPU"].renderer
    heuristic = tuple(optimize_kernel(ast, renderer).applied)
    candidates = list(dict.fromkeys(search.children(ast, renderer, heuristic) + search.children(ast, renderer, ())))
    assert len(candidates) >= 8
    chosen: list[tuple[Opt, ...]] = []
    monkeypatch.setattr(search, "beam_search", lambda *arguments: list(chosen[-1]))
    for opts in candidates[::max(1, len(candidates) // 12)]:
        chosen.append(opts)
        realize.forget_searched_kernels()
        with Context(BEAM=1):
            result = build().numpy()
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5, err_msg=f"opts {opts}")


def test_a_kernel_split_across_workers_stays_split():
    """Where the heuristic splits a kernel across the CPU workers, every candidate the search may time keeps a split
    (so a choice made while other processes hold a core never caches a single-worker kernel)."""
    from tinycore.schedule import create_schedule
    with Context(NUM_CPU_THREADS=2):
        product = Tensor(np.ones((64, 64), np.float32)) @ Tensor(np.ones((64, 64), np.float32))
        ast = [item.ast for item in create_schedule([product.uop]).items if item.ast.op.name == "SINK"][0]
        renderer = Device["CPU"].renderer
        heuristic_kernel = optimize_kernel(ast, renderer)
        assert heuristic_kernel.workers == 2
        neighbours = search.children(ast, renderer, tuple(heuristic_kernel.applied), min_workers=2)
        assert neighbours
        shares = {optimize_kernel(ast, renderer, list(opts)).workers for opts in neighbours}
        # the split's share count is searched too (shares the two threads claim), never below the two workers
        assert 2 in shares and shares <= {2, 4, 8, 16}, shares
        unrestricted = search.children(ast, renderer, tuple(heuristic_kernel.applied),
                                       max_expansion=search._expansion(heuristic_kernel))
        assert any(optimize_kernel(ast, renderer, list(opts)).workers == 1 for opts in unrestricted)


def test_cachelevel_0_searches_without_the_disk_cache(tmp_path):
    x = np.random.default_rng(9).standard_normal((4, 32), dtype=np.float32)
    for _ in range(2):
        new_process()
        with Context(BEAM=1, CACHELEVEL=0, **FAST):
            result = Tensor(x).sum(axis=1).numpy()
        assert search.stats.searches == 1 and search.stats.cache_hits == 0
        np.testing.assert_allclose(result, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    assert not list((tmp_path / "beam").glob("*.json"))


def test_progress_bar_uses_tqdm_when_installed(capsys):
    pytest.importorskip("tqdm")
    x = np.random.default_rng(10).standard_normal((4, 16), dtype=np.float32)
    with Context(BEAM=1, DEBUG=1, **FAST):
        result = Tensor(x).sum(axis=1).numpy()
    err = capsys.readouterr().err
    assert "BEAM r_" in err and "best" in err and "candidates, best" not in err
    np.testing.assert_allclose(result, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def _confirming_search(seconds: dict[tuple[Opt, ...], float]) -> search._Search:
    """A search whose candidates' programs take the given (hand-set) seconds on every run."""
    confirming = search._Search.__new__(search._Search)
    confirming.handles, confirming.var_vals, confirming.times = [], {}, {}
    by_time: dict[float, object] = {}
    confirming.runners = {}
    for opts, elapsed in seconds.items():
        # candidates with the same time share one program, as opts that render the same source do
        confirming.runners[opts] = by_time.setdefault(elapsed, lambda *args, elapsed=elapsed, **kwargs: elapsed)
    return confirming


def test_a_finalist_replaces_the_heuristic_only_when_clearly_faster():
    """Confirmation keeps the heuristic's opts unless a finalist is BEAM_MIN_GAIN (5%) faster: 3% is noise on a
    shared machine, 10% is kept."""
    heuristic = (Opt(OptOps.UPCAST, 0, 4),)
    close, clear = (Opt(OptOps.UPCAST, 0, 8),), (Opt(OptOps.UNROLL, 0, 2),)
    assert search.BEAM_MIN_GAIN == 0.05
    slightly = _confirming_search({heuristic: 1.0, close: 0.97})
    assert slightly.confirm([close, heuristic], heuristic) == heuristic
    clearly = _confirming_search({heuristic: 1.0, close: 0.97, clear: 0.90})
    assert clearly.confirm([clear, close, heuristic], heuristic) == clear
    assert clearly.times[clear] == 0.90 and clearly.times[heuristic] == 1.0
    # without a heuristic to defend, the fastest finalist wins however small the gain
    assert slightly.confirm([close, heuristic]) == close


def test_the_heuristic_defended_through_opts_that_share_its_program():
    """When the heuristic's program is listed under other opts (the same source), its time still counts."""
    heuristic, same_program = (Opt(OptOps.UPCAST, 0, 4),), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 1))
    faster = (Opt(OptOps.UPCAST, 0, 8),)
    confirming = _confirming_search({same_program: 1.0, heuristic: 1.0, faster: 0.98})
    assert confirming.runners[same_program] is confirming.runners[heuristic]
    assert confirming.confirm([same_program, faster, heuristic], heuristic) == heuristic


def test_neighbours_of_uneven_row_groups_all_lower():
    """A packed matmul grouped for a large private cache in groups that do not divide its row blocks (an uneven
    BLOCK, whose group index sets the inner trip count): every candidate the search proposes within two steps of the
    heuristic's opts lowers to a program, and the heuristic's kernel equals numpy."""
    from cpu_vectors import cpu_vector_bytes

    from tinycore.schedule import create_schedule
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((786, 512), dtype=np.float32), rng.standard_normal((512, 256), dtype=np.float32)
    renderer = Device["CPU"].renderer
    with cpu_vector_bytes(64), Context(NUM_CPU_THREADS=2):
        saved, renderer.core_cache_bytes = renderer.core_cache_bytes, 2 * 1024 * 1024
        try:
            left, right = Tensor(a).realize(), Tensor(b).realize()
            items = create_schedule([(left @ right).uop]).items
            ast = [item.ast for item in items if item.ast.op.name == "SINK" and
                   any(node.op.name == "REDUCE" for node in item.ast.toposort)][0]
            heuristic = tuple(optimize_kernel(ast, renderer).applied)
            # 131 blocks of 6 rows x 4 vectors (1.6 MB) in 2 groups of 66 and 65, over 4 panels of 64 columns
            assert any(opt.op is OptOps.BLOCK and opt.amount == 66 for opt in heuristic), heuristic
            # two steps of the search from there (the NEST of the groups a second step proposed failed to linearize)
            neighbours = dict.fromkeys(opts for near in search.children(ast, renderer, heuristic)
                                       for opts in search.children(ast, renderer, near))
            assert len(neighbours) >= 50
            for opts in neighbours:
                assert lower_to_program(ast, renderer, list(opts)).src
            result = (left @ right).numpy()
        finally:
            renderer.core_cache_bytes = saved
    np.testing.assert_allclose(result, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
