"""The analyses stand outside the training path (issue 62): the default job, run as ``make train`` runs it, loads no
module of ``QuantumGrav.analyses`` (nor a study module where it stood before), and a run loads one exactly where its
config switches it on; the nine kinds' configs still report their recall per kind."""

import json
import os
import subprocess
import sys

import pytest

import QuantumGrav as QG
from conftest import REPO

# The study modules: the analyses layer, and where its modules stood before it (so that the test fails on that code).
STUDY_MODULES = ("QuantumGrav.analyses", *(
    f"QuantumGrav.evaluation.{name}" for name in ("destroyed_sets", "node_rival", "relation_rival", "dimension_repair",
                                                  "ceiling", "sensitivity")))

# The CLI's train command in this process, twice: the default job as shipped, then the same job with a flip-fraction
# range (the analysis it switches on); the study modules loaded after each.
SCRIPT = """
import json, sys
from QuantumGrav.cli import main

def loaded():
    return sorted(m for m in sys.modules if m.startswith(tuple(json.loads(sys.argv[1]))))

found = []
for extra in ([], ["--set", "data.destroy_fraction=[0.001, 0.1]", "--set", "training.run_name=curves"]):
    assert main(["train", "--config", sys.argv[2], *extra]) == 0
    found.append(loaded())
print("LOADED " + json.dumps(found))
"""


@pytest.mark.timeout(600)
def test_the_default_job_loads_no_analysis_and_a_flip_fraction_range_loads_its_own(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(STUDY_MODULES), str(REPO / "configs" / "train.yaml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "QUANTUMGRAV_SMOKE_TEST": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    default_job, with_range = json.loads(done.stdout.split("LOADED ", 1)[1])
    assert default_job == [], f"the default job loaded study modules: {default_job}"
    assert "QuantumGrav.analyses.destroyed_sets" in with_range
    assert not [m for m in with_range if m.startswith("QuantumGrav.analyses.") and m.rsplit(".", 1)[1] not in (
        "base", "destroyed_sets", "figures")], with_range
    # The default job's summary still shows the GNN beside both baselines (the README's `make train`).
    summary = done.stdout.split("=== QuantumGrav run summary ===", 1)[1]
    assert "simple baseline  accuracy" in summary and "strong baseline  accuracy" in summary


def test_the_nine_kinds_configs_switch_the_kind_breakdown_on():
    for name in ("manifold_like.yaml", "manifold_like_dimensions.yaml", "upstream_gcn.yaml", "upstream_gcn_balanced.yaml",
                 "train_quantumgrav_jl.yaml"):
        types = [entry["type"].__name__ for entry in QG.load_config(REPO / "configs" / name)["callbacks"]]
        assert types == ["KindBreakdown"], name


def test_an_analysis_runs_after_the_rivals_whichever_way_it_was_switched_on(tiny_config):
    """A KindBreakdown given in code and one in the config land in the analyses' place: after the baselines, whose
    predictions they read, and before the writers."""
    from QuantumGrav.analyses.kind_breakdown import KindBreakdown
    from QuantumGrav.callbacks.results import Baselines

    class Extra(QG.Callback):
        pass

    config = tiny_config({"testing.baselines": True, "callbacks": [{"type": KindBreakdown}]})
    trainer = QG.Trainer(config, callbacks=[Extra()])
    names = [type(c).__name__ for c in trainer.callbacks.all]
    trainer.close()
    assert names.index("Extra") < names.index(Baselines.__name__) < names.index("KindBreakdown") < names.index(
        "RunRecords")
