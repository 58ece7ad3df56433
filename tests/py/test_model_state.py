"""harness/model_state.py: a model's plain tensor attributes as built, put back before each
verified forward, whether a forward replaced them or changed them in place."""

from __future__ import annotations

import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "harness"))
import model_state  # noqa: E402


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.hidden = torch.zeros(3)
        self.inner = torch.nn.Module()
        self.inner.count = torch.zeros(1)

    def forward(self, x):
        out = x * self.weight + self.hidden
        self.hidden = out.detach()  # replaced
        self.inner.count += 1  # changed in place
        self.cache = out  # a new attribute
        return out


def test_each_forward_starts_from_the_state_as_built():
    m = Stateful()
    model_state.as_built(m)  # recorded
    x = torch.full((3,), 2.0)
    first = m(x)
    assert m.hidden.tolist() == [2.0, 2.0, 2.0] and m.inner.count.item() == 1
    assert m(x).tolist() == [4.0, 4.0, 4.0]  # without a restore the state carries over
    model_state.as_built(m)
    assert m.hidden.tolist() == [0.0, 0.0, 0.0] and m.inner.count.item() == 0
    assert torch.equal(m(x), first)
    model_state.as_built(m)
    assert m.inner.count.item() == 0
    assert hasattr(m, "cache")  # attributes a forward adds are kept
    # Parameters are not state to restore: what the model was given stays.
    with torch.no_grad():
        m.weight.mul_(3)
    model_state.as_built(m)
    assert m(x).tolist() == [6.0, 6.0, 6.0]


def test_an_unchanged_model_keeps_its_objects():
    m = Stateful()
    model_state.as_built(m)
    before = m.hidden
    model_state.as_built(m)
    assert m.hidden is before


def test_objects_that_are_not_modules_are_left_alone():
    model_state.as_built(lambda x: x)
    model_state.as_built(None)


def test_changed_names_the_state_a_forward_gave_other_values():
    m = Stateful()
    m.moved = torch.zeros(2)
    model_state.as_built(m)
    x = torch.full((3,), 2.0)
    m(x)
    m.moved = m.moved.clone()  # replaced by the same values (as .to(device) does): not state
    assert model_state.changed(m) == ["hidden", "inner.count"]
    model_state.as_built(m)
    assert model_state.changed(m) == []  # restored: nothing changed since


def test_tracked_state_is_read_by_name_from_any_model_of_the_class():
    a, b = Stateful(), Stateful()
    model_state.track(a, ["hidden", "inner.count"])
    assert model_state.tracked(b) == ["hidden", "inner.count"]
    got = model_state.values(b, model_state.tracked(b))
    assert [t.tolist() for t in got] == [[0.0, 0.0, 0.0], [0.0]]
    got[0].add_(5)  # copies: the model's own state is not touched
    assert b.hidden.tolist() == [0.0, 0.0, 0.0]
    del b.inner.count
    with pytest.raises(model_state.MissingState, match="inner.count"):
        model_state.values(b, ["hidden", "inner.count"])
    assert model_state.values(b, []) == []
    model_state.track(a, [])
    assert model_state.tracked(b) == []
