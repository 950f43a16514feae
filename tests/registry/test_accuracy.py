"""The accuracy gate: its measures on hand-made logits, its evaluation texts, and the gate run on real models.

The tiny random BERT answers one class for every text, so a check on it would be vacuous. `balanced` rescales and
re-centres its head over the built-in corpus: half the texts go each way, about nine in ten are decisive at the
default margin, and a few are near-ties that any rounding may flip, as with a trained model. A damaged model is
an optimised one with noise added to its weights (`_perturbed`), run through `run_gate` or, for the CLI, through
an extra step appended to the level (`STEPS`), so the command itself has no way to damage a model.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import tomllib
import unicodedata
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from ortserve_devtools.bert_bundle import build_tiny_bundle

from ortserve.prepare.accuracy import (
    BUILTIN_NAME,
    Comparison,
    EvalSet,
    EvalSetError,
    GateSettings,
    agreement_lower_bound,
    builtin_eval_set,
    compare,
    decisive_needed,
    load_eval_set,
    make_batches,
    margins,
    open_session,
    refusals,
    run_gate,
    run_outputs,
)
from ortserve.prepare.optimize import LEVELS, STEPS, GateRefused, optimize_bundle
from ortserve.registry import cli

REPO = Path(__file__).resolve().parents[2]
LABELS = ("negative", "positive")
NO_TIMING = GateSettings(speed_rounds=0)
ONE_ROUND = GateSettings(speed_rounds=1)


def _logits_of(model: str | Path | bytes, bundle: Path, texts: tuple[str, ...]) -> np.ndarray:
    batches = make_batches(bundle / "tokenizer.json", 32, texts, 16)
    return run_outputs(open_session(model, 2), batches, len(texts))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with its head scaled to a logit spread of 4 and centred on the built-in corpus."""
    bundle = tmp_path_factory.mktemp("balanced") / "source"
    build_tiny_bundle(bundle, seed=7)
    model = onnx.load(str(bundle / "model.onnx"))
    inits = {t.name: t for t in model.graph.initializer}
    weight, bias = (numpy_helper.to_array(inits[n]) for n in ("classifier.weight.T", "classifier.bias"))
    raw = _logits_of(bundle / "model.onnx", bundle, builtin_eval_set().texts) - bias
    spread = raw[:, 1] - raw[:, 0]
    scale = 4.0 / spread.std()
    inits["classifier.weight.T"].CopyFrom(numpy_helper.from_array((weight * scale).astype(np.float32),
                                                                  "classifier.weight.T"))
    inits["classifier.bias"].CopyFrom(numpy_helper.from_array(
        np.array([0.0, -scale * np.median(spread)], np.float32), "classifier.bias"))
    onnx.save(model, str(bundle / "model.onnx"))
    return bundle


@pytest.fixture(scope="module")
def optimized(balanced: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """level -> OptimizeResult of the balanced model; read-only by convention."""
    root = tmp_path_factory.mktemp("optimized")
    return {level: optimize_bundle(balanced, root / level, level, gate=ONE_ROUND) for level in LEVELS}


def _perturbed(model: onnx.ModelProto, *, scale: float = 0.2, seed: int = 0) -> onnx.ModelProto:
    """Every weight matrix plus Gaussian noise of `scale` x its own spread (int8 ones rounded and clipped)."""
    rng = np.random.default_rng(seed)
    for tensor in model.graph.initializer:
        if len(tensor.dims) != 2 or min(tensor.dims) < 2:
            continue
        if tensor.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8):
            continue
        values = numpy_helper.to_array(tensor)
        noisy = values + rng.normal(0.0, scale * float(values.astype(np.float64).std()), values.shape)
        if values.dtype == np.int8:
            noisy = np.clip(np.rint(noisy), -127, 127)
        tensor.CopyFrom(numpy_helper.from_array(noisy.astype(values.dtype), tensor.name))
    return model


def _damage(work: Any) -> str:
    """A level step for tests only: what a broken optimiser would hand the gate."""
    _perturbed(work.graph)
    return "damaged the weights (test step)"


# -- the measures, on hand-made logits ------------------------------------------------------------------

# Text 2 is a near-tie that flips; text 3 is decisive (margin 0.46) and flips; texts 0 and 1 agree.
SOURCE = np.array([[2.0, 0.0], [0.0, 2.0], [0.05, 0.0], [0.0, 1.0]], np.float32)
CANDIDATE = np.array([[1.9, 0.0], [0.0, 2.1], [0.0, 0.05], [1.2, 0.0]], np.float32)


def test_compare_counts_agreement_over_all_and_decisive_texts() -> None:
    c = compare(SOURCE, CANDIDATE, min_margin=0.1)
    assert (c.texts, c.agree, c.decisive, c.decisive_agree) == (4, 2, 3, 2)
    assert c.agreement == 0.5 and c.decisive_agreement == pytest.approx(2 / 3)
    assert c.max_abs_delta_logit == pytest.approx(1.2)
    assert c.mean_abs_delta_logit == pytest.approx((0.1 + 0.1 + 0.05 + 0.05 + 1.2 + 1.0) / 8)
    assert c.max_abs_delta_prob == pytest.approx(abs(0.731059 - 0.231475), abs=1e-5)
    assert c.accuracy_before is None and c.accuracy_drop_points is None
    # A wider margin leaves only the confident texts 0 and 1: both agree.
    wide = compare(SOURCE, CANDIDATE, min_margin=0.5)
    assert (wide.decisive, wide.decisive_agree) == (2, 2)


def test_compare_with_labels_reports_accuracy_before_and_after() -> None:
    c = compare(SOURCE, CANDIDATE, min_margin=0.1, labels=[0, 1, 0, 1])
    assert (c.correct_before, c.correct_after) == (4, 2)
    assert c.accuracy_before == 1.0 and c.accuracy_after == 0.5 and c.accuracy_drop_points == 50.0


def test_refusals_say_which_threshold_and_by_how_much() -> None:
    c = compare(SOURCE, CANDIDATE, min_margin=0.1, labels=[0, 1, 0, 1])
    assert refusals(c, min_agreement=0.99, max_accuracy_drop=1.0) == (
        "too few decisive texts to prove --min-agreement 0.99: decisive agreement 0.6667, 2/3 texts with a source "
        "margin >= 0.1, whose one-sided 95% Clopper-Pearson lower bound is at most 0.3684 even with no "
        "disagreement; the eval set needs at least 299 decisive texts, more to tolerate any disagreement",
        "accuracy fell 50.00 points (100.00% -> 50.00%), more than --max-accuracy-drop 1",
    )
    # --min-agreement 0 asks for no agreement; then a drop of exactly the limit passes.
    assert refusals(c, min_agreement=0.0, max_accuracy_drop=50.0) == ()
    # Near-ties only: nothing is decisive, so nothing is proven (agreement is reported as n/a).
    ties = compare(SOURCE[2:3], CANDIDATE[2:3], min_margin=0.1)
    assert ties.decisive == 0 and ties.decisive_agreement is None and ties.agree == 0
    (reason,) = refusals(ties, min_agreement=0.99, max_accuracy_drop=1.0)
    assert reason.startswith("too few decisive texts to prove --min-agreement 0.99: 0/0 texts") and "299" in reason
    assert refusals(ties, min_agreement=0.0, max_accuracy_drop=1.0) == ()


# -- the lower bound: Clopper-Pearson, one-sided ----------------------------------------------------------


@pytest.mark.parametrize(("agree", "texts", "low", "high"), [
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Stat. Med. 17:857, table I,
    # method 5 (exact, Clopper-Pearson), 95% two-sided: each end is a one-sided bound at 97.5%.
    (81, 263, 0.2527, 0.3676),
    (15, 148, 0.0578, 0.1617),
    (0, 20, 0.0, 0.1684),
    (1, 29, 0.0009, 0.1776),
])
def test_the_lower_bound_gives_the_textbook_exact_intervals(agree: int, texts: int, low: float,
                                                             high: float) -> None:
    assert agreement_lower_bound(agree, texts, 0.975) == pytest.approx(low, abs=5e-5)
    assert 1.0 - agreement_lower_bound(texts - agree, texts, 0.975) == pytest.approx(high, abs=5e-5)


def test_the_lower_bound_in_closed_form_and_at_its_edges() -> None:
    # All agree: the p at which n of n has probability 5%, i.e. 0.05 ** (1 / n).
    assert agreement_lower_bound(10, 10) == pytest.approx(0.05 ** 0.1, rel=1e-12)
    assert agreement_lower_bound(309, 309) == pytest.approx(0.990352, abs=1e-6)
    # The rule of three: n of n at 95% leaves about 3 / n for the disagreement rate.
    assert 1.0 - agreement_lower_bound(3000, 3000) == pytest.approx(3.0 / 3000, rel=0.01)
    # One disagreement: 1 - L solves (1 - p) ** n + n p (1 - p) ** (n - 1) = 0.05.
    q = 1.0 - agreement_lower_bound(99, 100)
    assert ((1 - q) ** 100 + 100 * q * (1 - q) ** 99) == pytest.approx(0.05, abs=1e-9)
    assert agreement_lower_bound(0, 50) == 0.0 and agreement_lower_bound(0, 0) == 0.0
    # Below the point estimate, and rising with the evidence.
    bounds = [agreement_lower_bound(n - n // 200, n) for n in (200, 1000, 5000, 20000)]
    assert bounds == sorted(bounds) and all(b < 0.995 for b in bounds) and bounds[-1] > 0.9935
    assert agreement_lower_bound(990, 1000) < agreement_lower_bound(990, 1000, 0.9) < 0.99
    for agree, texts, confidence, pattern in ((5, 4, 0.95, "0 <= agree <= texts"), (-1, 4, 0.95, "agree"),
                                              (1, 4, 1.0, "confidence"), (1, 4, 0.0, "confidence")):
        with pytest.raises(ValueError, match=pattern):
            agreement_lower_bound(agree, texts, confidence)


def test_decisive_needed_is_the_first_count_that_can_pass() -> None:
    # log(0.05) / log(0.99) = 298.07: 298 of 298 prove 0.98999..., 299 of 299 prove 0.99003.
    assert decisive_needed(0.99) == 299
    assert agreement_lower_bound(298, 298) < 0.99 <= agreement_lower_bound(299, 299)
    assert (decisive_needed(0.95), decisive_needed(0.999), decisive_needed(0.99, 0.99)) == (59, 2995, 459)
    assert decisive_needed(0.0) == 0
    with pytest.raises(ValueError, match=r"min_agreement must be in \[0, 1\)"):
        decisive_needed(1.0)


def _decisive(agree: int, texts: int) -> Comparison:
    """Counts alone: `texts` decisive texts of which `agree` keep their label, nothing else wrong."""
    return Comparison(texts=texts, agree=agree, decisive=texts, decisive_agree=agree, min_margin=0.1,
                      max_abs_delta_logit=0.5, mean_abs_delta_logit=0.1, max_abs_delta_prob=0.1,
                      mean_abs_delta_prob=0.02)


def test_the_gate_judges_the_bound_not_the_point_estimate() -> None:
    limits = {"min_agreement": 0.99, "max_accuracy_drop": 1.0}
    # Too few to prove 0.99 even with no disagreement: the line says how many it takes.
    (reason,) = refusals(_decisive(298, 298), **limits)
    assert reason == ("too few decisive texts to prove --min-agreement 0.99: decisive agreement 1.0000, 298/298 "
                      "texts with a source margin >= 0.1, whose one-sided 95% Clopper-Pearson lower bound is at most "
                      "0.9900 even with no disagreement; the eval set needs at least 299 decisive texts, more to "
                      "tolerate any disagreement")
    assert refusals(_decisive(299, 299), **limits) == ()
    # The point estimate passes (0.995), its bound does not (0.9895): refused, both figures named.
    (reason,) = refusals(_decisive(995, 1000), **limits)
    assert reason == ("decisive agreement 0.9950 (995/1000 texts with a source margin >= 0.1): its one-sided 95% "
                      "Clopper-Pearson lower bound 0.9895 is below --min-agreement 0.99")
    # The same rate on twice the texts proves it (bound 0.9915), and so does a perfect 1,000 (0.9970).
    assert refusals(_decisive(1990, 2000), **limits) == ()
    assert refusals(_decisive(1000, 1000), **limits) == ()
    # The confidence is a setting: at 90%, 995 of 1,000 prove 0.99.
    assert refusals(_decisive(995, 1000), **limits, confidence=0.9) == ()


def test_non_finite_logits_are_a_refusal_not_a_nan_report() -> None:
    broken = CANDIDATE.copy()
    broken[1, 0] = np.nan
    c = compare(SOURCE, broken, min_margin=0.1)
    assert c.non_finite == 1 and c.agree == 1 and np.isfinite(c.max_abs_delta_logit)
    assert refusals(c, min_agreement=0.0, max_accuracy_drop=100.0) == (
        "1 of 4 texts got non-finite logits (NaN or infinity)",)


def test_margins_and_shapes() -> None:
    np.testing.assert_allclose(margins(np.array([[0.0, 0.0], [0.0, 100.0]])), [0.0, 1.0])
    np.testing.assert_allclose(margins(np.array([[3.0], [-1.0]])), [1.0, 1.0])  # one label: always certain
    np.testing.assert_allclose(margins(np.array([[1.0, 1.0, -50.0]])), [0.0], atol=1e-12)
    with pytest.raises(ValueError, match="one shape"):
        compare(SOURCE, CANDIDATE[:, :1], min_margin=0.1)
    with pytest.raises(ValueError, match="3 labels for 4 texts"):
        compare(SOURCE, CANDIDATE, min_margin=0.1, labels=[0, 1, 0])


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"min_margin": 1.0}, r"min_margin must be in \[0, 1\)"),
    ({"min_agreement": 1.5}, r"min_agreement must be in \[0, 1\)"),
    ({"min_agreement": 1.0}, "a lower bound on agreement from a finite eval set never reaches 1"),
    ({"confidence": 1.0}, r"confidence must be in \[0.5, 1\)"),
    ({"max_accuracy_drop": -1.0}, "max_accuracy_drop must be >= 0"),
    ({"batch_size": 0}, "batch_size and threads must be >= 1"),
])
def test_bad_settings(kwargs: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        GateSettings(**kwargs)


# -- evaluation texts -----------------------------------------------------------------------------------


def _bundle_with(tmp_path: Path, balanced: Path, files: dict[str, str | bytes]) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(balanced, bundle)
    for name, content in files.items():
        if isinstance(content, bytes):
            (bundle / name).write_bytes(content)
        else:
            (bundle / name).write_text(content, encoding="utf-8")
    return bundle


def test_eval_files_are_read_from_the_bundle(balanced: Path, tmp_path: Path) -> None:
    bundle = _bundle_with(tmp_path, balanced, {"eval.txt": "first text\r\n\n  second text  \n"})
    evals = load_eval_set(bundle, LABELS)
    assert evals.texts == ("first text", "second text") and evals.labels is None and evals.name == "eval.txt"
    (bundle / "eval.txt").unlink()
    rows = [{"text": "bad", "label": "negative"}, {"text": "good", "label": "positive"}]
    (bundle / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    evals = load_eval_set(bundle, LABELS)
    assert evals.texts == ("bad", "good") and evals.labels == (0, 1) and evals.name == "eval.jsonl"
    (bundle / "eval.jsonl").write_text('{"text": "no label"}\n')
    assert load_eval_set(bundle, LABELS).labels is None
    (bundle / "eval.jsonl").unlink()
    assert load_eval_set(bundle, LABELS).name == BUILTIN_NAME


@pytest.mark.parametrize(("files", "pattern"), [
    ({"eval.txt": "\n  \n"}, r"eval.txt: no texts"),
    ({"eval.jsonl": ""}, r"eval.jsonl: no texts"),
    ({"eval.txt": "a", "eval.jsonl": '{"text": "a"}'}, "both eval.jsonl and eval.txt are present"),
    ({"eval.jsonl": '{"text": "a", "label": "negative"}\n{"text": "b", "label": "pos"}'},
     r"eval.jsonl line 2: label 'pos' is not one of the bundle's labels \(negative, positive\)"),
    ({"eval.jsonl": '{"text": "a", "label": "negative"}\n{"text": "b"}'}, "1 of 2 texts have a label; label all"),
    ({"eval.jsonl": "text,label\n"}, "eval.jsonl line 1: not JSON"),
    ({"eval.jsonl": '["a", "b"]'}, r"eval.jsonl line 1: expected \{\"text\""),
    ({"eval.jsonl": '{"text": "  "}'}, "with a non-empty text"),
    ({"eval.txt": b"caf\xe9\n"}, r"eval.txt: not UTF-8 \(byte 3\)"),
])
def test_unusable_eval_files_are_named(balanced: Path, tmp_path: Path, files: dict[str, str | bytes],
                                       pattern: str) -> None:
    bundle = _bundle_with(tmp_path, balanced, files)
    with pytest.raises(EvalSetError, match=pattern):
        load_eval_set(bundle, LABELS)


def test_the_builtin_corpus_ships_with_the_package() -> None:
    corpus = resources.files("ortserve.prepare").joinpath("eval_corpus.txt")
    assert corpus.is_file()
    lines = corpus.read_text(encoding="utf-8").splitlines()
    evals = builtin_eval_set()
    assert evals.texts == tuple(lines) and len(lines) >= 300 and len(set(lines)) == len(lines)
    assert all(line == line.strip() and line for line in lines)
    words = sorted(len(line.split()) for line in lines)
    assert words[0] == 1 and words[-1] >= 100 and sum(w > 60 for w in words) >= 10  # past max_seq_len=128 too
    scripts = {unicodedata.name(ch, "?").split()[0] for line in lines for ch in line if ch.isalpha()}
    assert {"LATIN", "CYRILLIC", "GREEK", "CJK", "HIRAGANA", "HANGUL", "ARABIC", "DEVANAGARI"} <= scripts
    for word in ("ausgezeichnet", "délicieux", "riquísima", "ottimo", "deliciosa", "heerlijk"):
        assert any(word in line for line in lines), word
    # The wheel carries every file under the package directories it lists, so the corpus goes with it.
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]
    assert "ortserve" in wheel["packages"]
    assert not any(fnmatch("ortserve/prepare/eval_corpus.txt", pattern) for pattern in wheel.get("exclude", []))


# -- the gate on real models ----------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_passes_a_meaningful_gate(balanced: Path, optimized: dict[str, Any], level: str) -> None:
    result = optimized[level]
    report = result.gate
    c = report.comparison
    assert report.passed and report.refusals == () and not report.accepted_loss
    # Meaningful: most texts decisive but not all, both classes among them, and the decisive ones kept: all of
    # them by float levels; by int8 within the gate's bound (7-bit weights flip 7 of this random model's 1,573 in
    # batches, 6 alone, on every CPU class alike: the same integer products everywhere; the bound passes up to 9).
    source = _logits_of(balanced / "model.onnx", balanced, builtin_eval_set().texts)
    decisive = margins(source) >= 0.1
    assert 0.8 * c.texts < c.decisive == decisive.sum() < c.texts
    assert set(source[decisive].argmax(axis=1)) == {0, 1}
    assert c.non_finite == 0
    if level == "int8":
        assert c.decisive_lower_bound(0.95) >= GateSettings().min_agreement
    else:
        assert c.decisive_agree == c.decisive
    bound = report.to_dict()["decisive_agreement_bound"]
    assert bound == {"lower": round(c.decisive_lower_bound(0.95), 6), "method": "Clopper-Pearson", "one_sided": True,
                     "confidence": 0.95, "decisive_needed": 299}
    assert report.to_dict()["counts"]["decisive_agree"] == c.decisive_agree
    assert any(line.split()[:4] == ["its", "lower", "bound", "(one-sided"] and "Clopper-Pearson" in line
               for line in report.table())
    assert report.speed is not None and report.speed.rounds == 1 and report.speed.texts == c.texts
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["optimization"]["accuracy"] == report.manifest_entry()
    assert manifest["optimization"]["accuracy"]["decisive"] == c.decisive


@pytest.mark.parametrize("level", LEVELS)
def test_a_damaged_model_is_refused_for_its_decisive_flips(balanced: Path, optimized: dict[str, Any],
                                                           level: str) -> None:
    damaged = _perturbed(onnx.load(str(optimized[level].path / "model.onnx")))
    report = run_gate(balanced / "model.onnx", damaged.SerializeToString(), balanced / "tokenizer.json", 32,
                      builtin_eval_set(), NO_TIMING, level=level)
    c = report.comparison
    assert not report.passed and c.non_finite == 0
    assert c.decisive_agreement is not None and c.decisive_agreement < 0.95
    # Batched, and (int8: its activations scale per batch, so other counts) one text at a time: the same rule.
    pattern = (r"decisive agreement 0\.\d{4} \(\d+/\d+ texts with a source margin >= 0\.1\): its one-sided 95% "
               r"Clopper-Pearson lower bound 0\.\d{4} is below --min-agreement 0\.99")
    reason, *alone = report.refusals
    assert re.fullmatch(pattern, reason), reason
    assert all(re.fullmatch("one text at a time: " + pattern, line) for line in alone), alone
    assert report.table()[-len(report.refusals):] == [f"verdict: refused: {r}" for r in report.refusals]
    # The faithful model of the same level, same texts and settings: no refusal.
    faithful = run_gate(balanced / "model.onnx", (optimized[level].path / "model.onnx").read_bytes(),
                        balanced / "tokenizer.json", 32, builtin_eval_set(), NO_TIMING, level=level)
    assert faithful.passed


def test_labels_add_accuracy_and_its_own_refusal(balanced: Path, optimized: dict[str, Any], tmp_path: Path) -> None:
    texts = builtin_eval_set().texts
    source = _logits_of(balanced / "model.onnx", balanced, texts)
    confident = np.flatnonzero(margins(source) >= 0.3)[:120]
    truth = source[confident].argmax(axis=1)
    truth[:12] = 1 - truth[:12]  # a tenth of the labels disagree with the source: accuracy 90%
    rows = [{"text": texts[i], "label": LABELS[t]} for i, t in zip(confident, truth, strict=True)]
    bundle = _bundle_with(tmp_path, balanced, {"eval.jsonl": "".join(json.dumps(r) + "\n" for r in rows)})
    evals = load_eval_set(bundle, LABELS)
    candidate = (optimized["int8"].path / "model.onnx").read_bytes()
    # 120 decisive texts cannot prove 0.99 whatever the model does (299 can): the gate says so, and how many it takes.
    small = run_gate(bundle / "model.onnx", candidate, bundle / "tokenizer.json", 32, evals, NO_TIMING, level="int8")
    assert small.refusals[0].startswith("too few decisive texts to prove --min-agreement 0.99: ")
    assert small.refusals[0].endswith("the eval set needs at least 299 decisive texts, more to tolerate any "
                                      "disagreement")
    # They can prove 0.9 (29 would), with a few flips to spare: 118 of 120 still bound it at 0.95.
    report = run_gate(bundle / "model.onnx", candidate, bundle / "tokenizer.json", 32, evals,
                      GateSettings(min_agreement=0.9, speed_rounds=0), level="int8")
    assert report.passed and report.comparison.accuracy_before == report.comparison.accuracy_after == 0.9
    assert any(line.split()[:2] == ["accuracy", "(labels)"] and "90.00% -> 90.00%" in line for line in report.table())

    # Agreement not required here, so the accuracy limit alone decides.
    damaged = _perturbed(onnx.load(str(optimized["int8"].path / "model.onnx"))).SerializeToString()
    report = run_gate(bundle / "model.onnx", damaged, bundle / "tokenizer.json", 32, evals,
                      GateSettings(min_agreement=0.0, speed_rounds=0), level="int8")
    (reason,) = report.refusals
    assert re.fullmatch(r"accuracy fell \d+\.\d\d points \(90\.00% -> \d+\.\d\d%\), more than "
                        r"--max-accuracy-drop 1", reason), reason
    entry = report.manifest_entry()
    assert entry["eval"]["labelled"] is True and entry["accuracy_before"] == 0.9 and entry["passed"] is False


def test_optimize_bundle_refuses_a_damaged_model_and_writes_nothing(balanced: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STEPS, "fuse", (*STEPS["fuse"], _damage))
    lines: list[str] = []
    with pytest.raises(GateRefused, match=r"the fuse model failed the accuracy gate: decisive agreement") as caught:
        optimize_bundle(balanced, tmp_path / "out", "fuse", lines.append, gate=NO_TIMING)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []
    assert caught.value.report.comparison.decisive_agreement < 0.95
    assert lines[-1].startswith("verdict: refused: decisive agreement")  # the table was printed before refusing

    accepted = optimize_bundle(balanced, tmp_path / "out", "fuse",
                               gate=GateSettings(accept_accuracy_loss=True, speed_rounds=0))
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["optimization"]["accuracy"]
    assert entry["passed"] is False and entry["accepted_loss"] is True and accepted.gate.accepted_loss


# -- the CLI --------------------------------------------------------------------------------------------


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            tmp_path: Path) -> Any:
    """run_cli(*args) -> (exit code, stdout, stderr): `registry` in this process, scratch space in tmp_path."""
    for name in ("ORTSERVE_REGISTRY", "ORTSERVE_ARTIFACTS"):
        monkeypatch.delenv(name, raising=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where publish --optimize works, and must clean up

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_publish_refuses_a_damaged_model_and_leaves_the_store_as_it_was(
        balanced: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any) -> None:
    store = tmp_path / "store"
    registry = ("--registry", store.as_uri())
    code, _, err = run_cli(*registry, "publish", "--model", "m", "--version", "v1", "--bundle", str(balanced),
                           "--weight", "100")
    assert code == 0, err
    before = _snapshot(store)
    monkeypatch.setitem(STEPS, "int8", (*STEPS["int8"], _damage))

    publish = (*registry, "publish", "--model", "m", "--version", "v2", "--bundle", str(balanced),
               "--optimize", "int8", "--weight", "20")
    code, out, err = run_cli(*publish)
    assert code == 1
    (line,) = err.splitlines()
    assert re.fullmatch(r"registry: error: .*: the int8 model failed the accuracy gate: decisive agreement 0\.\d+ "
                        r".* is below --min-agreement 0\.99; nothing written \(--accept-accuracy-loss writes it "
                        r"anyway\)", line), line
    assert "damaged the weights (test step)" in out and "accuracy gate: int8 against its source" in out
    assert "verdict: refused: decisive agreement" in out  # and one text at a time, below it (int8)
    assert _snapshot(store) == before and not list((tmp_path / "scratch").iterdir())

    code, out, err = run_cli(*publish, "--accept-accuracy-loss", "--json")
    assert code == 0 and "written anyway (--accept-accuracy-loss)" in err
    doc = json.loads(out)
    assert doc["version"] == "v2" and doc["routing"] == {"v1": 80, "v2": 20}
    assert doc["optimize"]["gate"]["passed"] is False and doc["optimize"]["gate"]["accepted_loss"] is True
    code, out, _ = run_cli(*registry, "show", "m", "--json")
    accuracy = json.loads(out)["versions"]["v2"]["optimization"]["accuracy"]
    assert accuracy["accepted_loss"] is True and accuracy["decisive_agreement"] < 0.95


def test_optimize_json_reports_a_refusal_too(balanced: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             run_cli: Any) -> None:
    monkeypatch.setitem(STEPS, "fuse", (*STEPS["fuse"], _damage))
    code, out, err = run_cli("optimize", "--bundle", str(balanced), "--out", str(tmp_path / "o"), "--optimize",
                             "fuse", "--json", "--min-margin", "0.3")
    assert code == 1 and len(err.splitlines()) == 1 and not (tmp_path / "o").exists()
    doc = json.loads(out)
    assert doc["refused"] in err and doc["gate"]["passed"] is False and doc["gate"]["min_margin"] == 0.3
    assert doc["gate"]["refusals"][0].startswith("decisive agreement")
    assert doc["gate"]["speed"]["ratio"] > 0  # timed as usual: the speed is shown for a refused model too


def test_speed_rounds_0_skips_the_timing_and_judges_the_same(balanced: Path, tmp_path: Path, run_cli: Any) -> None:
    """`--speed-rounds 0`: no texts/s row and `speed` null, the same verdict and accuracy entry as a timed run."""
    runs = {}
    for rounds in ("0", "1"):
        code, out, err = run_cli("optimize", "--bundle", str(balanced), "--out", str(tmp_path / rounds), "--optimize",
                                 "int8", "--json", "--speed-rounds", rounds)
        assert code == 0, err
        runs[rounds] = json.loads(out)["gate"]
    untimed, timed = runs["0"], runs["1"]
    assert untimed["speed"] is None and timed["speed"]["rounds"] == 1
    assert {k: v for k, v in untimed.items() if k != "speed"} == {k: v for k, v in timed.items() if k != "speed"}
    code, out, err = run_cli("optimize", "--bundle", str(balanced), "--out", str(tmp_path / "table"), "--optimize",
                             "int8", "--speed-rounds", "0")
    assert code == 0 and "verdict: pass" in out and "texts/s" not in out and "timed both models" not in out, out


@pytest.mark.parametrize(("files", "pattern"), [
    ({"eval.txt": "\n"}, r"evaluation texts: eval.txt: no texts"),
    ({"eval.jsonl": '{"text": "fine", "label": "good"}\n'},
     r"evaluation texts: eval.jsonl line 1: label 'good' is not one of the bundle's labels"),
])
def test_cli_names_a_bad_eval_file(balanced: Path, tmp_path: Path, run_cli: Any, files: dict[str, str],
                                   pattern: str) -> None:
    bundle = _bundle_with(tmp_path, balanced, files)
    for level in LEVELS:
        code, out, err = run_cli("optimize", "--bundle", str(bundle), "--out", str(tmp_path / "o"), "--optimize",
                                 level)
        assert code == 1 and out == "" and re.search(pattern, err) and len(err.splitlines()) == 1, err
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("args", "pattern"), [
    (["publish", "--model", "m", "--version", "v1", "--bundle", "{b}", "--min-margin", "0.2"],
     "--min-margin: the accuracy gate runs only with --optimize LEVEL"),
    (["optimize", "--bundle", "{b}", "--out", "{o}", "--optimize", "int8", "--min-margin", "1"],
     r"min_margin must be in \[0, 1\)"),
    (["optimize", "--bundle", "{b}", "--out", "{o}", "--optimize", "int8", "--min-agreement", "99"],
     "argument --min-agreement: must be 0..1, got 99"),
    (["optimize", "--bundle", "{b}", "--out", "{o}", "--optimize", "int8", "--max-accuracy-drop", "x"],
     "argument --max-accuracy-drop: must be a number of percentage points"),
    (["optimize", "--bundle", "{b}", "--out", "{o}", "--optimize", "int8", "--speed-rounds", "-1"],
     r"argument --speed-rounds: must be >= 0 \(0: no timing\), got -1"),
    (["publish", "--model", "m", "--version", "v1", "--bundle", "{b}", "--speed-rounds", "0"],
     "--speed-rounds: the accuracy gate runs only with --optimize LEVEL"),
])
def test_bad_gate_flags_are_usage_errors(balanced: Path, tmp_path: Path, run_cli: Any, args: list[str],
                                         pattern: str) -> None:
    argv = [a.replace("{b}", str(balanced)).replace("{o}", str(tmp_path / "o")) for a in args]
    code, out, err = run_cli("--registry", (tmp_path / "store").as_uri(), *argv)
    assert code == 2 and out == "" and re.search(pattern, err), err
    assert not (tmp_path / "o").exists() and not (tmp_path / "store").exists()


def test_eval_set_describes_itself() -> None:
    evals = EvalSet(texts=("a", "b"), labels=(0, 1), name="eval.jsonl", sha256="0" * 64)
    assert evals.describe() == "2 texts from eval.jsonl, labelled"
