"""Tests of the adversarial set's heavy-tailed values (harness/inputs.py, heavy_tailed_like):
what they keep of the drawn input (shape, dtype, spread, exact zeros), what they change
(tails, signs), that a set drawn again from its seed is the same, and that the work is done
in slices, so that drawing the set of a 6 GiB input no longer takes tens of GiB of float64
temporaries (found on an H100: the evaluator's peak). CPU mode; skipped, with the reason,
without PyTorch."""

from __future__ import annotations

import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "harness"))
import inputs  # noqa: E402
import memplan  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


def heavy_slices(monkeypatch, chunk: int) -> None:
    """heavy_tailed_like's slices made `chunk` elements (a quarter of memplan's slice)."""
    monkeypatch.setattr(memplan, "SLICE_ELEMS", 4 * chunk)
    assert inputs.heavy_slice_elems() == chunk


def draw(x: torch.Tensor, seed: int = 7) -> torch.Tensor:
    return inputs.heavy_tailed_like(x, torch.Generator().manual_seed(seed))


def kurtosis(t: torch.Tensor) -> float:
    d = t.double() - t.double().mean()
    return float((d ** 4).mean() / (d ** 2).mean() ** 2)


@pytest.mark.parametrize("chunk", [inputs.heavy_slice_elems(), 1000])
def test_keeps_shape_dtype_spread_and_zeros(monkeypatch, chunk):
    heavy_slices(monkeypatch, chunk)
    x = torch.randn(64, 250) * 3.0
    x[:, :10] = 0.0  # a structure the task may rely on: kept in every slice
    h = draw(x)
    assert h.shape == x.shape and h.dtype == x.dtype and h.is_contiguous()
    assert bool((h[:, :10] == 0).all())
    assert bool((h[:, 10:] != 0).all())
    assert bool(torch.isfinite(h).all())
    scale = float(x.double().std())
    nz = h[:, 10:]
    # The mixture is normalised over all values (zeros put back after): its spread is x's.
    assert 0.8 * scale < float(draw(torch.randn(64, 250) * 3.0).double().std()) < 1.2 * scale
    assert float(nz.abs().max()) <= 20.0 * scale * (1 + 1e-6)
    # Heavier tails than the normal draw (kurtosis 3): what the set is for.
    assert kurtosis(nz.reshape(-1)) > 6.0


def test_mixes_signs_where_the_draw_had_none():
    h = draw(torch.rand(10000))
    assert bool((h < 0).any()) and bool((h > 0).any())


@pytest.mark.parametrize("chunk", [inputs.heavy_slice_elems(), 999])
def test_the_same_seed_gives_the_same_values(monkeypatch, chunk):
    """A lazy memory plan draws the set again before comparing it: it must be the same."""
    heavy_slices(monkeypatch, chunk)
    x = torch.randn(5000)
    assert torch.equal(draw(x, 3), draw(x, 3))
    assert not torch.equal(draw(x, 3), draw(x, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_dtypes(dtype):
    x = torch.randn(3000).to(dtype)
    h = draw(x)
    assert h.dtype == dtype and h.shape == x.shape and bool(torch.isfinite(h).all())
    assert 0.7 < float(h.double().std()) / float(x.double().std()) < 1.3


def test_degenerate_inputs():
    assert draw(torch.empty(0, 4)).shape == (0, 4)
    one = draw(torch.tensor([2.5]))
    assert one.shape == (1,) and bool(torch.isfinite(one).all()) and float(one.abs()) <= 50.0
    # No spread: the largest finite magnitude is the scale; infinities do not poison it.
    const = draw(torch.full((100,), 4.0))
    assert bool(torch.isfinite(const).all()) and float(const.abs().max()) <= 80.0 * 1.0001
    inf = torch.randn(100)
    inf[3] = float("inf")
    h = draw(inf)
    assert bool(torch.isfinite(h).all()) and float(h.abs().max()) > 0
    zeros = draw(torch.zeros(50))
    assert bool((zeros == 0).all())


class LargestOutput(TorchDispatchMode):
    """The largest tensor any operator produces (bytes), and the largest float64 one."""

    def __init__(self):
        super().__init__()
        self.largest = self.largest64 = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                b = t.numel() * t.element_size()
                self.largest = max(self.largest, b)
                if t.dtype == torch.float64:
                    self.largest64 = max(self.largest64, b)
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_temporaries_stay_within_a_slice(monkeypatch, dtype):
    """Drawn whole, the set took float64 copies of the whole input (x, two random draws, their
    product): about 8 times a float32 input at once. In slices, nothing float64 is larger than
    a slice, and nothing at all larger than a float32 copy of the input."""
    chunk = 4096
    heavy_slices(monkeypatch, chunk)
    x = torch.randn(1 << 16).to(dtype)
    with LargestOutput() as meter:
        h = draw(x)
    assert h.shape == x.shape
    assert meter.largest64 <= chunk * 8, meter.largest64
    assert meter.largest <= x.numel() * 4, meter.largest
