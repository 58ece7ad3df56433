"""harness/synth_catalog.py: the operator catalog crawled from the installed torch plus the
checked-in rule table; user entries; transformers (a fake package here, since CI has none)."""
import json
import sys
import textwrap

import pytest

from synth_util import catalog
import synth_catalog


def test_crawl_is_deterministic_and_introspected():
    a = catalog()
    b = synth_catalog.crawl(with_transformers=False)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["fingerprint"] == synth_catalog.fingerprint(a["ops"])
    lin = a["ops"]["nn.Linear"]
    # From introspection: the real constructor and its defaults.
    names = [x["name"] for x in lin["constructor_args"]]
    assert names[:2] == ["in_features", "out_features"]
    assert {"name": "bias", "default": True} in lin["constructor_args"]
    assert "in_features" in lin["signature"]
    # From the rule table: what introspection cannot tell.
    assert lin["rule"] == "last" and lin["ranks"] == [2, 3]
    assert a["ops"]["nn.Dropout"]["stochastic"] is True
    assert a["ops"]["F.relu"]["call"] == "F.relu({x})"
    # Whatever torch has and the table does not cover is listed with the reason.
    assert "loss" in a["uncovered"]["nn.MSELoss"]
    assert "container" in a["uncovered"]["nn.Sequential"]
    assert "nn.LSTM" in a["uncovered"] and "nn.LSTM" not in a["ops"]


def test_rule_naming_a_missing_constructor_argument_is_refused():
    with pytest.raises(ValueError, match="init names 'widht'"):
        synth_catalog.validate_entry("nn.Linear", {"kind": "module", "ranks": [2],
                                                   "rule": "same", "init": {"widht": 3}},
                                     [{"name": "in_features"}])
    with pytest.raises(ValueError, match="rule must be one of"):
        synth_catalog.validate_entry("nn.X", {"kind": "module", "ranks": [2], "rule": "magic"})
    with pytest.raises(ValueError, match="ranks"):
        synth_catalog.validate_entry("nn.X", {"kind": "module", "ranks": [], "rule": "same"})


def test_user_entries_extend_the_catalog():
    user = {"torch.erfc": {"kind": "function", "call": "torch.erfc({x})", "ranks": [2, 3],
                           "rule": "same"}}
    cat = synth_catalog.crawl(extra=[user], with_transformers=False)
    assert cat["ops"]["torch.erfc"]["source"] == "user"
    assert cat["fingerprint"] != catalog()["fingerprint"]
    with pytest.raises(ValueError, match="'torch.bad'.*holding \\{x\\}"):
        synth_catalog.crawl(extra=[{"torch.bad": {"kind": "function", "call": "torch.bad()",
                                                  "ranks": [2], "rule": "same"}}],
                            with_transformers=False)


def test_catalog_file_round_trip(tmp_path):
    path = tmp_path / "cat.json"
    path.write_text(json.dumps(catalog()))
    assert synth_catalog.load(str(path))["fingerprint"] == catalog()["fingerprint"]
    path.write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="not a synth catalog"):
        synth_catalog.load(str(path))


def test_transformers_absent_is_a_note_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "transformers.activations", None)
    cat = synth_catalog.crawl()
    assert any(n.startswith("transformers skipped") for n in cat["notes"]), cat["notes"]
    print("transformers path:", cat["notes"])
    assert not any(k.startswith("transformers.") for k in cat["ops"])


def test_transformers_activations_are_crawled_as_single_ops(tmp_path, monkeypatch):
    pkg = tmp_path / "transformers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "activations.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torch.nn import GELU  # re-exported torch class: not crawled


        class FakeGELUActivation(nn.Module):
            def __init__(self, use_tanh=False):
                super().__init__()
                self.use_tanh = use_tanh

            def forward(self, x):
                return 0.5 * x * (1 + torch.tanh(x))


        class NeedsArgs(nn.Module):
            def __init__(self, hidden):
                super().__init__()

            def forward(self, x):
                return x
    """))
    for m in ("transformers", "transformers.activations"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    cat = synth_catalog.crawl()
    e = cat["ops"]["transformers.FakeGELUActivation"]
    assert e["single"] is True and e["module"] == "transformers.activations.FakeGELUActivation"
    assert "use_tanh" in e["signature"]
    assert "transformers.NeedsArgs" not in cat["ops"]
    assert "transformers.GELU" not in cat["ops"]
    for m in ("transformers", "transformers.activations"):
        sys.modules.pop(m, None)
