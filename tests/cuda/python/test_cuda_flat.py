"""CUDA registrations of the ragged (flat) operators: pcops.flat, the torch_cluster stand-in and
torch.ops.pyg (pcops.pyg.register()) with torch_geometric 2.8, each compared with the CPU backend.

Edges, indices and cluster ids must be identical (bitwise); model outputs and gradients of the
PyG networks go through cuBLAS on the GPU, so those are compared with a tolerance, while the
neighbourhoods they are built on are compared exactly. Scenarios that register ``pyg::``
operators run in a fresh interpreter (this file run as a script), as in tests/python/test_pyg.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import pcops.flat as flat
from conftest import isolated_modules, make_cloud, same_bits  # this directory's conftest

CUDA = torch.device("cuda:0")


def _rand(gen, n, d=3, lo=0.0, hi=1.0):
    return torch.rand(n, d, generator=gen) * (hi - lo) + lo


def _batch(sizes):
    return torch.cat([torch.full((s,), b, dtype=torch.int64) for b, s in enumerate(sizes)])


def _on_both(fn, *args, **kw):
    """fn on CPU tensors and on their CUDA copies; the CUDA result must stay on the GPU."""
    cpu = fn(*args, **kw)
    gpu = fn(*[a.to(CUDA) if isinstance(a, torch.Tensor) else a for a in args], **kw)
    assert gpu.device.type == "cuda", f"result left the GPU: {gpu.device}"
    return cpu, gpu


def _assert_same(cpu, gpu):
    if same_bits(gpu, cpu):
        return
    detail = f"shapes {tuple(gpu.shape)} / {tuple(cpu.shape)}"
    if gpu.shape == cpu.shape:
        diff = (gpu.cpu() != cpu).nonzero()
        detail += f", {diff.shape[0]} differing entries, first at {diff[:4].tolist()}: "
        if gpu.dim() == 2 and diff.shape[0]:
            e = int(diff[0, -1])
            detail += f"CUDA {gpu[:, max(e - 2, 0):e + 3].tolist()} CPU {cpu[:, max(e - 2, 0):e + 3].tolist()}"
    raise AssertionError(f"CUDA != CPU: {detail}")


# --------------------------------------------------------------------------------------------
# pcops.flat


@pytest.mark.parametrize("n", [500, 5000, 50000])
def test_knn_and_knn_graph(gen, n):
    x, y = _rand(gen, n), _rand(gen, 300, lo=-0.1, hi=1.1)
    for k in (1, 16, 33):
        _assert_same(*_on_both(flat.knn, x, y, k))
        _assert_same(*_on_both(flat.knn_graph, x, k, None, False))
        _assert_same(*_on_both(flat.knn_graph, x, k, None, True, "target_to_source"))


def test_knn_batched_cosine_and_empty_clouds(gen):
    sizes_x, sizes_y = [3000, 0, 7, 1200, 0], [200, 30, 40, 0, 0]
    x, y = _rand(gen, sum(sizes_x), 4, -1.0, 1.0), _rand(gen, sum(sizes_y), 4, -1.0, 1.0)
    x[5] = 0.0  # zero vector: cosine NaN, sorted last
    bx, by = _batch(sizes_x), _batch(sizes_y)
    for k in (1, 5, 50):
        for cosine in (False, True):
            _assert_same(*_on_both(flat.knn, x, y, k, bx, by, cosine))


@pytest.mark.parametrize("kind", ["uniform", "sorted", "duplicates", "grid", "varying"])
def test_radius_and_radius_graph(kind):
    x = make_cloud(kind, 20000, 11)
    span = float((x.max(0).values - x.min(0).values).max())
    for r in (0.02 * span, 0.06 * span, 1.0 if kind == "grid" else 0.1 * span):
        for cap in (1, 32, 2000):
            _assert_same(*_on_both(flat.radius, x, x[:3000], r, None, None, cap))
            _assert_same(*_on_both(flat.radius_graph, x, r, None, False, cap))


def test_radius_batched_and_boundary(gen):
    sizes = [64] * 32 + [0, 5000]
    x = _rand(gen, sum(sizes))
    b = _batch(sizes)
    _assert_same(*_on_both(flat.radius_graph, x, 0.2, b, False, 32))
    lattice = torch.stack(torch.meshgrid(*[torch.arange(12.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    for r in (1.0, float(torch.nextafter(torch.tensor(1.0, dtype=torch.float64),
                                         torch.tensor(2.0, dtype=torch.float64)))):
        _assert_same(*_on_both(flat.radius, lattice, lattice, r, None, None, 32, 1, None, True))


def test_nearest_and_grid_cluster(gen):
    sizes_x, sizes_y = [400, 0, 900], [5000, 20, 300]
    x, y = _rand(gen, sum(sizes_x)), _rand(gen, sum(sizes_y))
    _assert_same(*_on_both(flat.nearest, x, y, _batch(sizes_x), _batch(sizes_y)))
    pos = _rand(gen, 100000, 3, -2.0, 3.0)
    for dtype in (torch.float32, torch.float64):
        p = pos.to(dtype)
        size = torch.tensor([0.1, 0.25, 0.5], dtype=dtype)
        _assert_same(*_on_both(flat.grid_cluster, p, size))
        _assert_same(*_on_both(flat.grid_cluster, p, size, torch.zeros(3, dtype=dtype),
                               torch.ones(3, dtype=dtype)))


def test_real_cloud_graphs(gen):
    from conftest import load_real_cloud

    x = load_real_cloud("b9_training.ply").reshape(-1, 3).float()
    span = float((x.max(0).values - x.min(0).values).max())
    _assert_same(*_on_both(flat.knn_graph, x, 16))
    _assert_same(*_on_both(flat.radius_graph, x, 0.01 * span, None, False, 32))


def test_one_million_points(gen):
    x = _rand(gen, 1_000_000)
    r = (16 * 3 / (4 * torch.pi * 1_000_000)) ** (1 / 3)
    _assert_same(*_on_both(flat.radius_graph, x, r, None, False, 32))
    _assert_same(*_on_both(flat.knn_graph, x, 16))


@pytest.mark.parametrize("r,cap,ignore", [(0.003, 16, False), (0.003, 31, True), (0.003, 32, True),
                                          (0.01, 32, False), (0.06, 24, True), (0.003, 40, False)])
def test_radius_index_route(gen, monkeypatch, r, cap, ignore):
    # A clustered cloud of 150k points (20 gaussian clusters of sigma 0.002: its queries saturate
    # the cap; the index route by default) beside a uniform one of 6000 points (unsaturated; grid)
    # and one of 20 (ordered scan) in one flat batch. The route (cap <= 32 only: cap 40 keeps
    # the old paths even with "always") changes no bit: default, never, always (every cloud).
    sizes = [150_000, 6000, 20]
    centres = torch.rand(20, 3, generator=gen)
    big = centres[torch.randint(0, 20, (sizes[0],), generator=gen)]
    big = big + 0.002 * torch.randn(sizes[0], 3, generator=gen)
    x = torch.cat([big, _rand(gen, sizes[1]), _rand(gen, sizes[2])])
    b = _batch(sizes)
    # Queries: every other row, so query row i and reference row i (the pair ignore_same_index
    # skips) are different points, in different clouds past the first.
    y, by = x[1::2], b[1::2]
    want = flat.radius(x, y, r, b, by, max_num_neighbors=cap, ignore_same_index=ignore)
    want_graph = flat.radius_graph(x, r, b, loop=not ignore, max_num_neighbors=cap)
    deg = torch.bincount(want[0], minlength=y.shape[0])
    assert (deg[:75_000] == cap).float().mean() > 0.9 and (deg[75_000:78_000] < cap).all()
    xc, yc, bc, byc = x.to(CUDA), y.to(CUDA), b.to(CUDA), by.to(CUDA)
    for mode in (None, "never", "always"):
        if mode is None:
            monkeypatch.delenv("PCOPS_CUDA_RADIUS_INDEX", raising=False)
        else:
            monkeypatch.setenv("PCOPS_CUDA_RADIUS_INDEX", mode)
        got = flat.radius(xc, yc, r, bc, byc, max_num_neighbors=cap, ignore_same_index=ignore)
        got_graph = flat.radius_graph(xc, r, bc, loop=not ignore, max_num_neighbors=cap)
        assert got.device.type == "cuda" and got_graph.device.type == "cuda"
        try:
            _assert_same(want, got)
            _assert_same(want_graph, got_graph)
        except AssertionError as e:
            raise AssertionError(f"PCOPS_CUDA_RADIUS_INDEX={mode}: {e}") from None


# --------------------------------------------------------------------------------------------
# torch_cluster stand-in


def test_torch_cluster_stand_in_on_cuda(gen):
    import pcops.compat as compat

    with isolated_modules("torch_cluster"):
        only_tc = {n: False for n, s in compat.REGISTRY.items() if n != "torch_cluster" and s.default}
        compat.install(**only_tc)
        import torch_cluster as tc

        x = _rand(gen, 4000)
        b = _batch([1500, 2500])
        _assert_same(*_on_both(tc.knn, x, x[:500], 8, b, b[:500]))
        _assert_same(*_on_both(tc.knn_graph, x, 8, b))
        _assert_same(*_on_both(tc.radius, x, x[::3], 0.1, b, b[::3], 16))
        _assert_same(*_on_both(tc.radius_graph, x, 0.1, b, False, 16))
        _assert_same(*_on_both(tc.nearest, x[::40], x[::3], b[::40], b[::3]))  # both clouds on both sides
        _assert_same(*_on_both(tc.grid_cluster, x, torch.tensor([0.2, 0.2, 0.2])))
        _assert_same(*_on_both(tc.knn, x, x[:200], 4, None, None, True))  # cosine


# --------------------------------------------------------------------------------------------
# torch_geometric 2.8 through torch.ops.pyg (fresh interpreters)


def _run(scenario: str) -> None:
    env = dict(os.environ)
    env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.run([sys.executable, __file__, scenario], capture_output=True, text=True,
                          env=env, timeout=600, cwd=os.path.dirname(os.path.abspath(__file__)))
    if proc.returncode != 0:
        pytest.fail(f"scenario {scenario} failed (rc {proc.returncode}):\n"
                    f"{textwrap.indent(proc.stdout[-4000:] + proc.stderr[-8000:], '  ')}",
                    pytrace=False)
    assert proc.stdout.strip().endswith(f"OK {scenario}"), proc.stdout[-2000:]


@pytest.mark.parametrize("scenario", ["pyg_pool_ops", "pyg_pointnet2", "pyg_dgcnn"])
def test_pyg_scenario(scenario):
    _run(scenario)


def _pyg_models():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "python" / "test_pyg.py"
    spec = importlib.util.spec_from_file_location("pcops_cpu_test_pyg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def scenario_pyg_pool_ops():
    import pcops.pyg as P

    P.register()
    from torch_geometric.nn import pool

    gen = torch.Generator().manual_seed(3)
    x = torch.rand(6000, 3, generator=gen)
    b = _batch([1000, 0, 5000])
    both = lambda fn, *a, **kw: _on_both(fn, *a, **kw)  # noqa: E731
    # Contiguous batch slices: torch's CPU coo-to-csr conversion (PyG's index2ptr) reads a strided
    # index tensor as if it were contiguous and gives PyG wrong offsets on the CPU.
    b7, b5, b40, b3 = (b[::s].contiguous() for s in (7, 5, 40, 3))
    _assert_same(*both(pool.knn, x, x[::7], 6, b, b7))
    _assert_same(*both(pool.knn_graph, x, 6, b))
    _assert_same(*both(pool.knn_graph, x, 6, b, cosine=True))
    _assert_same(*both(pool.radius, x, x[::5], 0.08, b, b5, 24))
    _assert_same(*both(pool.radius_graph, x, 0.08, b, False, 24))
    _assert_same(*both(pool.nearest, x[::40], x[::3], b40, b3))
    _assert_same(*both(pool.voxel_grid, x, 0.1, b))
    torch.manual_seed(0)
    cpu = pool.fps(x, b, 0.25)
    torch.manual_seed(0)
    gpu = pool.fps(x.to(CUDA), b.to(CUDA), 0.25)
    assert gpu.is_cuda
    _assert_same(cpu, gpu)


def _run_model_on(make, pos, batch, device, seed=1):
    torch.manual_seed(seed)  # weights, and the fps random starts (drawn on the CPU generator)
    model = make().to(device)
    pos = pos.to(device).clone().requires_grad_()
    out = model(pos, batch.to(device))
    out.square().sum().backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    return out.detach().cpu(), grads, pos.grad.detach().cpu()


def _compare_models(make, pos, batch):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out_c, g_c, gp_c = _run_model_on(make, pos, batch, torch.device("cpu"))
    out_g, g_g, gp_g = _run_model_on(make, pos, batch, CUDA)
    torch.testing.assert_close(out_g, out_c, rtol=1e-4, atol=1e-5)
    assert g_c.keys() == g_g.keys()
    for k in g_c:
        torch.testing.assert_close(g_g[k], g_c[k], rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(gp_g, gp_c, rtol=1e-3, atol=1e-4)


def scenario_pyg_pointnet2():
    import pcops.pyg as P

    P.register()
    from torch_geometric.nn import fps, radius

    m = _pyg_models()
    pos, batch = m._clouds()
    # The neighbourhoods themselves: identical.
    torch.manual_seed(2)
    idx_c = fps(pos, batch, ratio=0.5)
    torch.manual_seed(2)
    idx_g = fps(pos.to(CUDA), batch.to(CUDA), ratio=0.5)
    _assert_same(idx_c, idx_g)
    _assert_same(radius(pos, pos[idx_c], 0.3, batch, batch[idx_c], max_num_neighbors=32),
                 radius(pos.to(CUDA), pos.to(CUDA)[idx_g], 0.3, batch.to(CUDA), batch.to(CUDA)[idx_g],
                        max_num_neighbors=32))
    _compare_models(lambda: m._pointnet2(fps, radius), pos, batch)


def scenario_pyg_dgcnn():
    import pcops.pyg as P

    P.register()
    from torch_geometric.nn import knn_graph

    m = _pyg_models()
    pos, batch = m._clouds(seed=5)
    _assert_same(knn_graph(pos, 8, batch, loop=True), knn_graph(pos.to(CUDA), 8, batch.to(CUDA), loop=True))
    _compare_models(lambda: m._dgcnn(True), pos, batch)


if __name__ == "__main__":
    name = sys.argv[1]
    globals()[f"scenario_{name}"]()
    print(f"OK {name}")
